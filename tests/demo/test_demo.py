"""test_demo.py: `devrt demo` end to end at a small scale: every query checked against the CPU
reference, the figures (--json) consistent with the run asked for, memory within the budgets, no
dependency through the host; the trace well formed (a process per tenant, a track per stream,
launches with device times, waits, memory events); a corrupted chunk fails the run naming its query,
tenant and chunk; partitions of plain streams; `--devices all` over two host devices (tenants
spread, the distributed Q1's all-reduced result checked on each device); `--ranks` in three
processes as torchrun starts them (every rank's figures in rank 0's report); `devrt bench demo
--json`; bad options refused in one line; a demo that cannot run says why and nothing else;
output paths checked (their folders made) before the run; --quiet keeps the verdict.

    python3 test_demo.py PATH/TO/devrt          host backend
    python3 test_demo.py PATH/TO/devrt --gpu    cuda backend: exit 77 without a GPU (a failure
                                                under DEVRT_REQUIRE_GPU=1), a larger scale
"""
import json
import os
import subprocess
import sys
import tempfile
import unittest

DEVRT = None
GPU = False


def size_args():
    """Small on the host (fast under the sanitizers too); a GPU gets 24 chunks a query."""
    if GPU:
        return ["--scale", "1", "--seconds", "1", "--alone", "50", "--chunk", "262144"]
    return ["--scale", "0.01", "--queries", "2", "--alone", "6", "--chunk", "8192"]


def run(args, **env):
    e = dict(os.environ, **env)
    e["DEVRT_BACKEND"] = "cuda" if GPU else "host"
    p = subprocess.run([DEVRT, "demo", *args], capture_output=True, text=True, env=e, timeout=600)
    return p.returncode, p.stdout, p.stderr


class Demo(unittest.TestCase):
    def demo_json(self, extra=(), **env):
        rc, out, err = run([*size_args(), "--quiet", "--json", *extra], **env)
        try:
            doc = json.loads(out)
        except json.JSONDecodeError as e:
            self.fail(f"devrt demo --json is not JSON ({e}); exit {rc}\n{out[:2000]}\n{err}")
        return rc, doc, err

    def check_figures(self, doc, plain, graphs=False):
        self.assertTrue(doc["ok"], doc["error"])
        self.assertEqual(doc["error"], "")
        self.assertEqual(doc["backend"], "cuda" if GPU else "host")
        self.assertEqual(len(doc["tenants"]), 4)
        self.assertEqual(doc["mode"], ("plain streams" if plain else "partitions") +
                         (", graphs" if graphs else ""))
        self.assertTrue(all(t["isolated"] != plain for t in doc["tenants"]))
        t0, batch = doc["tenants"][0], doc["tenants"][1:]
        self.assertEqual(t0["kind"], "interactive")
        alone = 50 if GPU else 6
        self.assertEqual(t0["alone"]["n"], alone - alone // 10)  # the first tenth warms up
        self.assertGreater(t0["alone"]["p99_us"], 0)
        self.assertGreaterEqual(t0["alone"]["p99_us"], t0["alone"]["p50_us"])
        for t in batch:
            self.assertEqual(t["kind"], "batch")
            if not GPU:
                self.assertEqual(t["queries"], 2)  # one Q1 and one join each
            self.assertGreater(t["rows"], 0)
            self.assertGreater(t["bytes_scanned"], t["rows"])
        checks = doc["checks"]
        self.assertEqual(checks["mismatches"], 0)
        self.assertEqual(checks["queries"], sum(t["queries"] for t in doc["tenants"]))
        self.assertGreaterEqual(checks["queries"], (50 if GPU else 6) + 3 * 2)
        mem = doc["memory"]
        self.assertLess(mem["global_budget"], mem["sub_budgets_sum"])
        self.assertLessEqual(mem["peak_held"], mem["global_budget"])
        self.assertGreater(mem["peak_held"], 0)
        for t in doc["tenants"]:
            self.assertLessEqual(t["mem_high"], t["sub_budget"])
            self.assertGreater(t["mem_high"], 0)
        q = doc["queue"]
        self.assertEqual(q["host_hops"], 0)
        self.assertGreater(q["device_waits"], 0)
        self.assertEqual(q["failed"], sum(t["over_budget_retries"] for t in doc["tenants"]))
        self.assertGreater(doc["use_tracking"]["launches"], 0)
        self.assertGreater(doc["phases"]["busy"], 0)
        self.assertLessEqual(doc["phases"]["busy"], 1.0)

    def test_run_json_and_trace(self):
        with tempfile.TemporaryDirectory() as d:
            trace = os.path.join(d, "trace.json")
            rc, doc, err = self.demo_json(["--trace", trace])
            self.assertEqual(rc, 0, err)
            self.check_figures(doc, plain=False)
            with open(trace) as f:
                tr = json.load(f)
        ev = tr["traceEvents"]
        names = {(e["pid"], e.get("tid"), e["args"]["name"]) for e in ev if e["ph"] == "M"
                 and e["name"] in ("process_name", "thread_name")}
        for pid in range(1, 5):
            procs = {n for p, t, n in names if p == pid and t == 0}
            self.assertTrue(any(n.startswith(f"tenant {pid - 1} (") for n in procs), procs)
            for s in ("gen0", "gen1", "scan", "check"):
                self.assertIn(s, {n for p, _, n in names if p == pid})
        launches = [e for e in ev if e["ph"] == "X"]
        stages = {e["name"] for e in launches}
        for s in ("gen_lineitem", "gen_orders", "q1", "build", "probe", "merge", "zero"):
            self.assertIn(s, stages)
        self.assertTrue(all(e["dur"] >= 0 and e["ts"] >= 0 for e in launches))
        flows = [e for e in ev if e["ph"] in "sf"]
        self.assertGreater(len(flows), 0)
        self.assertEqual(sorted(e["id"] for e in flows if e["ph"] == "s"),
                         sorted(e["id"] for e in flows if e["ph"] == "f"))
        cats = {e.get("cat") for e in ev}
        self.assertTrue({"launch", "semaphore", "wait", "memory"} <= cats)
        self.assertTrue(any(e["ph"] == "C" and e["name"] == "live bytes" for e in ev))
        self.assertTrue(any(e["ph"] == "C" and e["name"] == "device bytes" for e in ev))

    def test_plain_streams(self):
        rc, doc, err = self.demo_json(["--plain"])
        self.assertEqual(rc, 0, err)
        self.check_figures(doc, plain=True)

    def test_graphs(self):
        # the interactive tenant's queries as graph replays: every result still checked
        rc, doc, err = self.demo_json(["--graphs"])
        self.assertEqual(rc, 0, err)
        self.check_figures(doc, plain=False, graphs=True)
        self.assertGreater(doc["tenants"][0]["rows"], 0)

    def test_graphs_mismatch_fails_naming_it(self):
        # a replay's result is compared as a host-issued query's is
        rc, doc, err = self.demo_json(["--graphs"], DEVRT_DEMO_CORRUPT="0:3:1")
        self.assertEqual(rc, 1, err)
        self.assertIn("check failed: tenant 0 (interactive), query 3 ", doc["error"])

    def test_table(self):
        rc, out, err = run([*size_args(), "--tenants", "3"])
        self.assertEqual(rc, 0, err)
        self.assertIn("mem high / sub-budget", out)
        self.assertIn("0 host hops", out)
        self.assertIn("OK: every check passed", out)
        self.assertIn("[done", err)  # the progress, plain lines when not on a terminal
        self.assertIn("\ntenant kind ", out)  # one device: no device column, no distributed query
        self.assertNotIn("distributed", out)

    def devices_all(self, extra=()):
        """`--devices all` over two host devices (on a GPU: every GPU), or skips where the
        machine has one GPU or no NCCL (unless DEVRT_REQUIRE_NCCL=1)."""
        rc, doc, err = self.demo_json(["--devices", "all", *extra], DEVRT_HOST_DEVICES="2")
        if GPU and rc == 0 and len(doc["devices"]) < 2:
            self.skipTest("one GPU")
        if GPU and rc and "DEVRT_NCCL_LIBRARY" in doc["error"] and \
                os.environ.get("DEVRT_REQUIRE_NCCL") != "1":
            self.skipTest("no libnccl: " + doc["error"])
        self.assertEqual(rc, 0, doc["error"] + err)
        return doc

    def test_devices_all(self):
        doc = self.devices_all()
        self.assertTrue(doc["ok"], doc["error"])
        devs = doc["devices"]
        n = len(devs)
        if GPU:
            self.assertGreaterEqual(n, 2)
        else:
            self.assertEqual(n, 2)
        self.assertEqual([t["device"] for t in doc["tenants"]], [i % n for i in range(4)])
        self.assertEqual([d["ordinal"] for d in devs], list(range(n)))
        for d in devs:
            self.assertLessEqual(d["peak_held"], d["global_budget"])
        mem = doc["memory"]
        self.assertEqual(mem["global_budget"], sum(d["global_budget"] for d in devs))
        for t in doc["tenants"]:
            self.assertLessEqual(t["mem_high"], t["sub_budget"])
            self.assertGreater(t["queries"], 0)
        dist = doc["distributed"]
        self.assertEqual(dist["queries"], 4)  # every full-table Q1 variant once
        self.assertEqual(dist["joins"], 4)  # every join variant once, shuffled by key
        self.assertGreater(dist["shuffle_bytes"], 0)
        self.assertEqual(dist["device_results_checked"], 8 * n)
        self.assertEqual(dist["rows"], 4 * doc["lineitem_rows"])
        self.assertEqual(doc["checks"]["mismatches"], 0)
        self.assertEqual(doc["queue"]["host_hops"], 0)

    def run_ranks(self, n, extra=()):
        """`devrt demo --ranks` as torchrun starts it: n processes with RANK, WORLD_SIZE,
        LOCAL_RANK and DEVRT_RENDEZVOUS=file:PATH; (exit codes, stdouts, stderrs)."""
        tmp = tempfile.mkdtemp()
        procs = []
        for r in range(n):
            e = dict(os.environ, RANK=str(r), WORLD_SIZE=str(n), LOCAL_RANK=str(r),
                     LOCAL_WORLD_SIZE=str(n), DEVRT_RENDEZVOUS="file:" + os.path.join(tmp, "id"),
                     DEVRT_BACKEND="cuda" if GPU else "host")
            procs.append(subprocess.Popen([DEVRT, "demo", *size_args(), "--ranks", *extra],
                                          stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                          text=True, env=e))
        outs = [p.communicate(timeout=600) for p in procs]
        self.assertEqual(os.listdir(tmp), [])  # rank 0 removed the id once every rank joined
        return [p.returncode for p in procs], [o for o, _ in outs], [e for _, e in outs]

    def test_ranks(self):
        """Three ranks in three processes (host: each its own host device; GPU: one per rank,
        with as many GPUs): the distributed Q1s and hash joins over every rank, rank 0's JSON
        with every rank's figures, the others silent."""
        if GPU:
            self.skipTest("several GPUs needed: bench/README and docs/demo.md give the command")
        rcs, outs, errs = self.run_ranks(3, ["--json"])
        self.assertEqual(rcs, [0, 0, 0], errs)
        self.assertEqual(outs[1:], ["", ""])
        self.assertEqual(errs[1:], ["", ""])
        doc = json.loads(outs[0])
        self.assertTrue(doc["ok"], doc["error"])
        self.assertEqual((doc["rank"], doc["nranks"]), (0, 3))
        ranks = doc["ranks"]
        self.assertEqual([x["rank"] for x in ranks], [0, 1, 2])
        for x in ranks:
            self.assertTrue(x["ok"])
            self.assertEqual(x["mismatches"], 0)
            self.assertGreater(x["checked_queries"], 0)
            self.assertEqual(x["distributed"]["queries"], 4)
            self.assertEqual(x["distributed"]["joins"], 4)
            self.assertGreater(x["distributed"]["shuffle_bytes"], 0)
            self.assertEqual(x["distributed"]["device_results_checked"], 8)
        # the shares cover the table once per query
        self.assertEqual(sum(x["distributed"]["rows"] for x in ranks), 4 * doc["lineitem_rows"])

    def test_ranks_refused(self):
        rc, out, err = run(["--ranks", "--devices", "2"])
        self.assertEqual(rc, 2)
        self.assertIn("--ranks runs one device per rank", err)
        rc, out, err = run([*size_args(), "--ranks"], RANK="1", WORLD_SIZE="2", LOCAL_RANK="0",
                           DEVRT_RENDEZVOUS="")
        self.assertEqual(rc, 1)
        self.assertIn("DEVRT_RENDEZVOUS", err)

    def test_devices_table(self):
        rc, out, err = run([*size_args(), "--devices", "2"], DEVRT_HOST_DEVICES="2")
        if GPU and rc:
            self.skipTest("two GPUs with NCCL needed: " + out[-300:])
        self.assertEqual(rc, 0, out + err)
        self.assertIn("\ntenant dev kind ", out)
        self.assertIn("device 1 (ordinal 1): 2 tenants", out)
        self.assertIn("distributed over 2 devices: 4 Q1s", out)
        self.assertIn("and 4 hash joins", out)
        self.assertIn("16 device results compared with the CPU reference", out)
        self.assertIn("OK: every check passed", out)
        if not GPU:  # more devices than the backend has: a clear refusal
            rc, out, err = run([*size_args(), "--quiet", "--devices", "3"], DEVRT_HOST_DEVICES="2")
            self.assertEqual(rc, 1)
            self.assertIn("--devices 3: the host backend has 2 device(s)", out + err)

    def test_mismatch_fails_naming_it(self):
        # tenant 2's query 0 is a Q1 over the whole table: flip a bit of its chunk 1's slot
        rc, doc, err = self.demo_json(DEVRT_DEMO_CORRUPT="2:0:1")
        self.assertEqual(rc, 1, err)
        self.assertFalse(doc["ok"])
        self.assertIn("check failed: tenant 2 (batch), query 0 Q1(", doc["error"])
        self.assertIn("chunk 1 of ", doc["error"])
        self.assertIn("sum_price", doc["error"])
        self.assertGreaterEqual(doc["checks"]["mismatches"], 1)

    def test_bench_json(self):
        e = dict(os.environ, DEVRT_BACKEND="cuda" if GPU else "host")
        p = subprocess.run([DEVRT, "bench", "demo", "--rounds", "2", *size_args(), "--json"],
                           capture_output=True, text=True, env=e, timeout=600)
        self.assertEqual(p.returncode, 0, p.stderr)
        doc = json.loads(p.stdout)
        self.assertEqual((doc["suite"], doc["rounds"]), ("demo", 2))
        figs = doc["figures"]
        for name in ("scan_gb_per_s", "copy_gb_per_s", "scan_over_copy", "busy", "busy_plain",
                     "isolation", "isolation_plain", "peak_over_budget", "tenant_high_over_sub"):
            f = figs[name]
            self.assertTrue(f["p10"] <= f["median"] <= f["p90"], name)
            self.assertGreater(f["median"], 0, name)
        self.assertLessEqual(figs["peak_over_budget"]["p90"], 1.0)
        self.assertLessEqual(figs["tenant_high_over_sub"]["p90"], 1.0)
        self.assertTrue(set(doc["goals"]) >= {"scan_met", "busy_met", "isolation_met"})
        self.assertNotIn("graphs_p50_alone_us", figs)  # no --graphs: no graph arm

    def test_bench_graphs_json(self):
        e = dict(os.environ, DEVRT_BACKEND="cuda" if GPU else "host")
        p = subprocess.run([DEVRT, "bench", "demo", "--rounds", "1", "--graphs", *size_args(),
                            "--json"], capture_output=True, text=True, env=e, timeout=600)
        self.assertEqual(p.returncode, 0, p.stderr)
        figs = json.loads(p.stdout)["figures"]
        for name in ("interactive_p50_alone_us", "interactive_p99_load_us", "graphs_p50_alone_us",
                     "graphs_p99_alone_us", "graphs_p50_load_us", "graphs_p99_load_us",
                     "isolation_graphs"):
            self.assertGreater(figs[name]["median"], 0, name)
        self.assertGreaterEqual(figs["graphs_p99_alone_us"]["median"],
                                figs["graphs_p50_alone_us"]["median"])

    def test_bad_options(self):
        # every number checked: one line naming the option and the value, exit 2
        for args in (["--tenants", "1"], ["--tenants", "17"], ["--tenants", "0"],
                     ["--chunk", "0"], ["--credits", "0"], ["--queries", "0"], ["--alone", "0"],
                     ["--ordinal", "-1"], ["--stamps", "63"], ["--tenants", "4x"],
                     ["--chunk", "010"], ["--scale", "x"], ["--scale", "0"], ["--scale", "1e2"],
                     ["--scale", "0x1"], ["--seconds", " 1"], ["--seconds", "10001"],
                     ["--devices", "0"], ["--devices", "x"]):
            rc, out, err = run(args)
            self.assertEqual(rc, 2, f"devrt demo {' '.join(args)}: {err}")
            self.assertEqual(err.count("\n"), 1, err)
            self.assertIn(f'{args[0]}', err)
            self.assertIn(f'"{args[1]}" is not a decimal number', err)
        for args, why in ((["--chunk"], "no value after --chunk"),
                          (["--nonsense"], "unknown option '--nonsense'")):
            rc, out, err = run(args)
            self.assertEqual((rc, err.count("\n")), (2, 1), err)
            self.assertIn(why, err)
        e = dict(os.environ, DEVRT_BACKEND="host")
        p = subprocess.run([DEVRT, "bench", "demo", "--rounds", "0"], capture_output=True,
                           text=True, env=e)
        self.assertEqual(p.returncode, 2)
        self.assertIn('--rounds "0" is not a decimal number in [1, 64]', p.stderr)

    def test_cannot_run_says_why_first(self):
        # a demo that cannot run prints the reason alone: no table of zeros, no progress
        if GPU:
            self.skipTest("the host backend's worker count is what this asks too much of")
        for args, env, why in ((["--tenants", "9"], {"DEVRT_HOST_WORKERS": "8"},
                                "9 tenants need 9 partitions of at least 1 SMs; this device has 8"),
                               (["--devices", "2"], {}, "--devices 2: the host backend has 1")):
            rc, out, err = run([*size_args(), *args], **env)
            self.assertEqual(rc, 1, err)
            self.assertEqual(out, "")
            self.assertTrue(err.startswith("devrt demo: cannot run: "), err)
            self.assertEqual(err.count("\n"), 1, err)
            self.assertIn(why, err)

    def test_output_paths_checked_before_the_run(self):
        with tempfile.TemporaryDirectory() as d:
            blocker = os.path.join(d, "file")
            open(blocker, "w").close()
            for opt, path in (("--trace", os.path.join(blocker, "t.json")),
                              ("--report", os.path.join(blocker, "r"))):
                rc, out, err = run([*size_args(), opt, path])
                self.assertEqual(rc, 2, err)
                self.assertEqual(out, "")  # nothing ran
                self.assertIn(f"{opt} {path}: cannot", err)
                self.assertIn("Not a directory", err)
            # the folders are made; the files written
            trace, report = os.path.join(d, "a", "b", "t.json"), os.path.join(d, "c", "d")
            rc, out, err = run([*size_args(), "--quiet", "--trace", trace, "--report", report])
            self.assertEqual(rc, 0, err)
            self.assertTrue(os.path.getsize(trace) > 0)
            self.assertTrue(os.path.getsize(os.path.join(report, "index.html")) > 0)

    def test_quiet_keeps_the_verdict(self):
        rc, out, err = run([*size_args(), "--quiet"])
        self.assertEqual((rc, out, err), (0, "OK: every check passed\n", ""))
        rc, out, err = run([*size_args(), "--quiet"], DEVRT_DEMO_CORRUPT="2:0:1")
        self.assertEqual((rc, out), (1, ""))
        self.assertTrue(err.startswith("FAILED: check failed: tenant 2"), err)
        self.assertEqual(err.count("\n"), 1, err)


def gpu_present():
    e = dict(os.environ, DEVRT_BACKEND="cuda")
    p = subprocess.run([DEVRT, "info", "--json"], capture_output=True, text=True, env=e)
    try:
        return p.returncode == 0 and json.loads(p.stdout)["backend"] == "cuda"
    except (json.JSONDecodeError, KeyError):
        return False


if __name__ == "__main__":
    DEVRT = os.path.abspath(sys.argv[1])
    GPU = "--gpu" in sys.argv[2:]
    if GPU and not gpu_present():
        if os.environ.get("DEVRT_REQUIRE_GPU") == "1":
            print("DEVRT_REQUIRE_GPU=1 but devrt info finds no cuda device", file=sys.stderr)
            sys.exit(1)
        print("skipped: no GPU")
        sys.exit(77)
    unittest.main(argv=[sys.argv[0], "-v"])
