"""test_replay.py: `devrt replay` on the host backend: the kept PyTorch log (bench/replay/) on
every stack, with counts that match the log's rows; an RMM-style log (its own time format,
decimal streams, rows devrt does not write); a log of 5,007 streams, each replayed on one devrt
stream throughout (read back from the replay's own allocation log); and malformed logs (negative
or otherwise malformed sizes among them) refused with a message naming the row.

    python3 tests/python/test_replay.py build/devrt
"""
import csv
import json
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
LOG = os.path.normpath(os.path.join(HERE, "..", "..", "bench", "replay",
                                    "torch_varlen_b2_3steps.csv"))
DEVRT = None


def replay(path, *args, **env):
    e = dict(os.environ, DEVRT_BACKEND="host", **env)
    p = subprocess.run([DEVRT, "replay", path, *args], capture_output=True, text=True, env=e,
                       timeout=600)
    return p.returncode, p.stdout, p.stderr


class Replay(unittest.TestCase):
    def run_json(self, path, *args):
        rc, out, err = replay(path, "--json", *args)
        self.assertEqual(rc, 0, err)
        return json.loads(out)

    def test_kept_log_every_stack(self):
        with open(LOG, newline="") as f:
            rows = list(csv.DictReader(f))
        allocs = sum(r["Action"] == "allocate" for r in rows)
        frees = sum(r["Action"] == "free" for r in rows)
        live, peak = 0, 0
        for r in rows:
            live += int(r["Size"]) * (1 if r["Action"] == "allocate" else -1)
            peak = max(peak, live)
        d = self.run_json(LOG, "--rounds", "1")
        self.assertEqual(d["backend"], "host")
        self.assertEqual((d["allocations"], d["frees"], d["operations"]),
                         (allocs, frees, allocs + frees))
        self.assertEqual(d["peak_live_bytes"], peak)
        self.assertEqual([r["stack"] for r in d["results"]],
                         ["full", "nocache", "async", "simple", "arena"])
        for r in d["results"]:
            self.assertGreater(r["ops_per_s"]["median"], 0)
            self.assertGreaterEqual(r["peak_reserved_bytes"], peak, r)  # never below what was live
            self.assertAlmostEqual(r["reserved_over_live"], r["peak_reserved_bytes"] / peak, 3)
        full = d["results"][0]
        self.assertGreater(full["cache_hits"], 0)  # steps after the first reuse the cache
        # the arena's reserve is its mapped pages (64 KiB on host), counted when mapped: within a
        # page a stream of its peak live plus fragmentation, far under the pool's pending frees
        arena = d["results"][4]
        self.assertLess(arena["reserved_over_live"], d["results"][2]["reserved_over_live"], arena)
        one = self.run_json(LOG, "--stack", "simple", "--rounds", "1")
        self.assertEqual([r["stack"] for r in one["results"]], ["simple"])
        rc, out, err = replay(LOG, "--rounds", "1", "--stack", "async")
        self.assertEqual(rc, 0, err)
        self.assertIn("reserved/live", out)

    def test_rmm_log(self):
        # RMM's logging_resource_adaptor: Thread,Time,Action,Pointer,Size,Stream; "free" rows, a
        # free of a pointer allocated before the log began, a failure row, two streams.
        text = ("Thread,Time,Action,Pointer,Size,Stream\n"
                "140573,12:00:01:000001,allocate,0x7f0000000000,1024,0\n"
                "140573,12:00:01:000002,allocate,0x7f0000100000,4096,0x7f8a38001020\n"
                "140573,12:00:01:000003,free,0x7f0000000000,1024,0\n"
                "140573,12:00:01:000004,free,0x7e0000000000,512,0\n"
                "140573,12:00:01:000005,allocate failure,0x0,1099511627776,0\n"
                "140573,12:00:01:000006,allocate,0x7f0000000000,2048,0\n"
                "140573,12:00:01:000007,free,0x7f0000100000,4096,0x7f8a38001020\n")
        with tempfile.NamedTemporaryFile("w", suffix=".csv", delete=False) as f:
            f.write(text)
        try:
            d = self.run_json(f.name, "--rounds", "2")
        finally:
            os.unlink(f.name)
        self.assertEqual((d["allocations"], d["frees"], d["streams"], d["unfreed"]), (3, 2, 2, 1))
        self.assertEqual(d["skipped"], {"unknown_frees": 1, "allocate_failures": 1,
                                        "other_rows": 0})
        self.assertEqual(d["peak_live_bytes"], 4096 + 2048)

    def test_many_streams(self):
        # 5,007 log streams, decimal and hex, each with two allocations and their frees in rows
        # far apart: counted once each, and every row of one log stream replays on the same
        # devrt stream (the full stack's DEVRT_LOG says which, pass after pass of the log).
        n = 5007
        rows = []
        for rnd in range(2):
            rows += [("allocate", (rnd * n + i + 1) << 12, 256 + i, i) for i in range(n)]
            rows += [("free", (rnd * n + i + 1) << 12, 256 + i, i) for i in range(n)]
        text = "Thread,Time,Action,Pointer,Size,Stream\n" + "".join(
            f"1,0,{a},{p:#x},{size},{st if st % 2 else hex(st)}\n" for a, p, size, st in rows)
        with tempfile.TemporaryDirectory() as d:
            path, out = os.path.join(d, "in.csv"), os.path.join(d, "out.csv")
            with open(path, "w") as f:
                f.write(text)
            rc, so, err = replay(path, "--json", "--stack", "full", "--rounds", "1",
                                 DEVRT_LOG=out, DEVRT_LOG_FORMAT="csv", DEVRT_STREAMS="64")
            self.assertEqual(rc, 0, err)
            with open(out, newline="") as f:
                got = [r["Stream"] for r in csv.DictReader(f)
                       if r["Action"] in ("allocate", "free")]
        doc = json.loads(so)
        self.assertEqual((doc["streams"], doc["operations"]), (n, 4 * n))
        # The sampling, warm-up and timed passes, every row of each in the log.
        self.assertEqual(len(got), 3 * len(rows))
        used = {}
        for i, devrt_stream in enumerate(got):
            used.setdefault(rows[i % len(rows)][3], set()).add(devrt_stream)
        self.assertEqual(len(used), n)
        self.assertEqual([st for st, v in used.items() if len(v) != 1], [])
        self.assertLessEqual(len(set(got)), 64)

    def test_malformed(self):
        cases = {
            "Thread,Time,Action,Pointer,Size\n1,0,allocate,0x10,5\n": "no Stream column",
            "Thread,Time,Action,Pointer,Size,Stream\n1,0,allocate,0xzz,5,0\n": "does not parse",
            "Thread,Time,Action,Pointer,Size,Stream\n1,0,allocate,0x100,5,0\n"
            "1,0,allocate,0x100,7,0\n": "allocated again before its free",
            "Thread,Time,Action,Pointer,Size,Stream\n1,0,allocate,0x100\n": "fields",
            "Thread,Time,Action,Pointer,Size,Stream\n1,0,free,0x100,5,0\n": "no allocation",
            "": "is empty",
        }
        # Numbers are digits only: a negative, signed, blank-padded, hex or zero-padded size (and
        # a pointer or stream that is not a number) names its field and row.
        head = "Thread,Time,Action,Pointer,Size,Stream\n1,0,allocate,0x100,5,0\n"
        for size in ("-5", "-1", "+5", " 5", "5 ", "0x5", "05", "18446744073709551616", ""):
            cases[head + f"1,0,allocate,0x200,{size},0\n"] = f':3: Size "{size}" does not parse'
        for ptr in ("-0x200", "0x-200", " 0x200", "0x0x200"):
            cases[head + f"1,0,allocate,{ptr},5,0\n"] = f':3: Pointer "{ptr}" does not parse'
        for st in ("-1", "+1", "01", "0x", " 1"):
            cases[head + f"1,0,free,0x100,5,{st}\n"] = f':3: Stream "{st}" does not parse'
        cases[head + "1,0,allocate,0x200,4611686018427387905,0\n"] = (
            ":3: an allocation of 4611686018427387905 bytes")  # past DEVRT_MAX_ALLOC_SIZE
        for text, why in cases.items():
            with self.subTest(why=why), tempfile.NamedTemporaryFile("w", suffix=".csv") as f:
                f.write(text)
                f.flush()
                rc, out, err = replay(f.name)
                self.assertEqual(rc, 1, out)
                self.assertIn(why, err)
        rc, out, err = replay("/nonexistent/log.csv")
        self.assertEqual(rc, 1)
        self.assertIn("cannot open", err)
        rc, out, err = replay(LOG, "--stack", "bogus")
        self.assertEqual(rc, 2)
        self.assertIn("unknown stack", err)
        for opt, v in (("--rounds", "2x"), ("--rounds", " 2"), ("--ordinal", "-1"),
                       ("--ordinal", "zero")):
            rc, out, err = replay(LOG, opt, v)
            self.assertEqual(rc, 2)
            self.assertIn(f'{opt} "{v}" is not a decimal number', err)


if __name__ == "__main__":
    DEVRT = sys.argv.pop(1) if len(sys.argv) > 1 else os.path.join("build", "devrt")
    unittest.main()
