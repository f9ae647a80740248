"""test_cli_json.py: every CLI command that takes --json prints one document that a real JSON
parser accepts, on the host backend: info (also when the cuda backend was tried and refused, whose
reason quotes a library name), stats, an error, and each bench with few rounds (bench scale also
with its sizes capped); numeric options refused unless decimal digits, in one line; --help on
every command and subcommand, --version; and devrt info says what
the host backend emulates, and why a layout fails. devrt stats with DEVRT_LOG leaves every record
it counted in the file at exit, and its failures name their cause (as text and as JSON).

    python3 test_cli_json.py PATH/TO/devrt
"""
import json
import math
import os
import re
import subprocess
import sys
import tempfile
import unittest

DEVRT = None


def run(args, backend="host", as_json=True, **env):
    e = dict(os.environ, **env)
    e.pop("DEVRT_BACKEND", None)
    if backend:
        e["DEVRT_BACKEND"] = backend
    argv = [DEVRT, *args] + (["--json"] if as_json else [])
    p = subprocess.run(argv, capture_output=True, text=True, env=e, timeout=300)
    return p.returncode, p.stdout, p.stderr


def finite(doc):
    """Every number in doc is finite (non-finite ones must be written as null)."""
    if isinstance(doc, float):
        return math.isfinite(doc)
    if isinstance(doc, dict):
        return all(finite(v) for v in doc.values())
    if isinstance(doc, list):
        return all(finite(v) for v in doc)
    return True


class CliJson(unittest.TestCase):
    def parse(self, args, backend="host", want_rc=0, **env):
        rc, out, err = run(args, backend, **env)
        self.assertEqual(rc, want_rc, f"devrt {' '.join(args)}: exit {rc}\n{err}")
        try:
            doc = json.loads(out)
        except json.JSONDecodeError as e:
            self.fail(f"devrt {' '.join(args)} --json is not JSON ({e}):\n{out[:2000]}")
        self.assertTrue(finite(doc), f"devrt {' '.join(args)}: a number is not finite")
        return doc

    def test_info(self):
        doc = self.parse(["info"])
        self.assertEqual(doc["backend"], "host")
        # the host backend says what it emulates, and its example layouts fit it
        self.assertTrue(doc["device"]["emulated"])
        self.assertIsNone(doc["device"]["compute_capability"])
        self.assertEqual([x["status"] for x in doc["layouts"]], ["OK"] * len(doc["layouts"]))
        e = dict(os.environ, DEVRT_BACKEND="host")
        text = subprocess.run([DEVRT, "info"], capture_output=True, text=True, env=e).stdout
        self.assertIn("emulated by CPU threads", text)
        self.assertNotIn("compute capability 0.0", text)
        self.assertNotIn("INVALID_ARGUMENT", text)

    def test_info_failure_messages(self):
        # a layout the device cannot give comes with its cause, not the status alone
        doc = self.parse(["info"], DEVRT_HOST_WORKERS="1")
        bad = [x for x in doc["layouts"] if x["status"] != "OK"]
        self.assertTrue(bad)
        for x in bad:
            self.assertIn("the device has 1", x.get("message", ""))

    def test_info_after_refused_cuda(self):
        # auto: the cuda backend is tried first; its refusal names dlopen("...") in quotes
        doc = self.parse(["info"], backend=None, DEVRT_CUDA_LIBRARY="/nonexistent/libcuda.so.1")
        self.assertEqual(doc["backend"], "host")
        if doc["built_with_cuda"]:
            self.assertIn('"/nonexistent/libcuda.so.1"', doc["backend_reason"])

    def test_error(self):
        doc = self.parse(["info", "--ordinal", "7"], want_rc=1)
        self.assertIn("error", doc)
        self.assertTrue(doc["message"])

    def test_bad_numbers(self):
        # options take decimal digits only (no sign, blank, prefix, suffix or leading zero), in
        # range; anything else is refused (exit 2) naming the option and the value
        for args in (["info", "--ordinal", "x"], ["info", "--ordinal", "-1"],
                     ["info", "--ordinal", "64"], ["stats", "--ordinal", " 0"],
                     ["bench", "alloc", "--rounds", "3x"], ["bench", "alloc", "--rounds", "0"],
                     ["bench", "alloc", "--rounds", "+3"], ["bench", "alloc", "--rounds", "03"],
                     ["bench", "scale", "--max", "0x100"], ["bench", "scale", "--rounds", "-3"],
                     ["bench", "scale", "--rounds", "abc"], ["bench", "scale", "--rounds", "0"],
                     ["bench", "alloc", "--rounds", "99999999999999999999"]):
            with self.subTest(args=args):
                rc, out, err = run(args)
                self.assertEqual(rc, 2, err)
                self.assertIn(f'{args[-2]} "{args[-1]}" is not a decimal number', err)
                self.assertEqual(err.count("\n"), 1, err)  # one line, not the usage

    def test_help_and_version(self):
        # --help on every command and subcommand: its usage on stdout, exit 0; --version
        for cmd in (["info"], ["stats"], ["replay"], ["demo"], ["bench"], ["bench", "demo"],
                    *[["bench", s] for s in ("device", "alloc", "launch", "sem", "partition",
                                             "scale", "multi", "graph")]):
            for flag in ("--help", "-h"):
                with self.subTest(cmd=cmd, flag=flag):
                    rc, out, err = run([*cmd, flag], as_json=False)
                    self.assertEqual((rc, err), (0, ""))
                    self.assertTrue(out.startswith("usage: devrt "), out)
                    self.assertIn(" ".join(cmd), out)
        rc, out, err = run(["--help"], as_json=False)
        self.assertEqual(rc, 0)
        for cmd in ("info", "stats", "replay LOG", "demo", "bench demo", "bench scale"):
            self.assertIn(f"\n  {cmd} ", out)
        rc, out, err = run(["--version"], as_json=False)
        self.assertEqual(rc, 0)
        self.assertRegex(out, r"^devrt [0-9]+\.[0-9]+\.[0-9]+ \(backends: (cuda, )?host\)\n$")
        # unknown options, suites and missing values: one line, exit 2
        for args in (["info", "--rounds", "3"], ["info", "--ordinal"], ["bench", "nope"],
                     ["nope"], ["replay", "--nope"], ["demo", "--nope"]):
            rc, out, err = run(args, as_json=False)
            self.assertEqual((rc, err.count("\n")), (2, 1), f"{args}: {err}")

    def test_stats(self):
        doc = self.parse(["stats"])
        self.assertIn("block_stats", doc)

    def test_stats_log(self):
        # the process-wide runtime is never destroyed: its log is written out at exit
        with tempfile.TemporaryDirectory() as d:
            for fmt, header in [("csv", 1), ("jsonl", 0)]:
                path = os.path.join(d, "log." + fmt)
                doc = self.parse(["stats"], DEVRT_LOG=path, DEVRT_LOG_FORMAT=fmt)
                with open(path) as f:
                    rows = len(f.readlines()) - header
                r = doc["resource"]
                self.assertGreater(r["log_records"], 0)
                self.assertEqual((rows, r["log_dropped"]), (r["log_records"], 0), fmt)

    def test_stats_error_messages(self):
        # the message after the status names the cause, though cleanup ran devrt calls after it
        for env, cause in [({"DEVRT_BUDGET": "1"}, "limit 1"),
                           ({"DEVRT_LOG": "/nonexistent/x.csv"}, '"/nonexistent/x.csv"')]:
            with self.subTest(env=env):
                doc = self.parse(["stats"], want_rc=1, **env)
                self.assertIn(cause, doc["message"])
                rc, _, err = run(["stats"], as_json=False, **env)
                self.assertEqual(rc, 1)
                m = re.fullmatch(r"devrt stats: block_alloc: [A-Z_]+: (.*)\n", err)
                self.assertTrue(m, err)
                self.assertIn(cause, m.group(1))

    def test_benches(self):
        for suite in ["device", "alloc", "launch", "sem", "partition", "graph"]:
            with self.subTest(suite=suite):
                doc = self.parse(["bench", suite, "--rounds", "3"])
                self.assertEqual(doc["suite"], suite)
                self.assertTrue(doc["results"])

    def test_bench_scale(self):
        # few rounds, sizes capped for CI: every curve reports every size and a ratio against
        # its goal (curves over the goal are reported, not failed)
        doc = self.parse(["bench", "scale", "--rounds", "3", "--max", "256"])
        self.assertEqual(doc["suite"], "scale")
        self.assertFalse(doc["error"])
        self.assertTrue(doc["results"])
        for c in doc["results"]:
            self.assertTrue(c["name"] and c["unit"])
            self.assertEqual(len(c["sizes"]), len(c["ns"]))
            self.assertGreaterEqual(len(c["sizes"]), 2, c["name"])
            self.assertLessEqual(max(c["sizes"]), 256)
            self.assertEqual(c["goal"], 1.5)
            self.assertEqual(c["met"], c["ratio"] is not None and c["ratio"] <= c["goal"])


if __name__ == "__main__":
    DEVRT = sys.argv.pop(1)
    unittest.main()
