"""test_package.py: the devrt Python package (python/devrt) over the built libdevrt, on the host
backend unless a test says otherwise: info, configure (and its refusals), stats and figures after
allocations made through the C API with ctypes, `python -m devrt`, the library search and its
error, and devrt.torch (skipped without PyTorch or a GPU; under DEVRT_REQUIRE_GPU=1 a missing GPU
is a failure).

    DEVRT_LIBRARY=build/libdevrt.so python3 tests/python/test_package.py
"""
import ctypes
import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
PKG_ROOT = os.path.normpath(os.path.join(HERE, "..", "..", "python"))
sys.path.insert(0, PKG_ROOT)
sys.dont_write_bytecode = True  # leave no __pycache__ in the source tree
os.environ["PYTHONDONTWRITEBYTECODE"] = "1"  # nor from the subprocesses
os.environ.setdefault("DEVRT_BACKEND", "host")  # before this process's runtime is created

import devrt  # noqa: E402
from devrt import _lib  # noqa: E402

# devrt keeps a tag's pointer for the life of the runtime: these bytes live as long as the module.
TAG_PYTEST = b"pytest"
TAG_TORCH = b"torch"


def py(code, env=None, drop=(), timeout=300):
    """Runs `code` in a fresh python with the package importable; returns (rc, stdout, stderr)."""
    e = dict(os.environ, **(env or {}))
    for k in drop:
        e.pop(k, None)
    e["PYTHONPATH"] = PKG_ROOT + os.pathsep + e.get("PYTHONPATH", "")
    p = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                       text=True, env=e, timeout=timeout)
    return p.returncode, p.stdout, p.stderr


def py_module(args, env=None, drop=()):
    e = dict(os.environ, **(env or {}))
    for k in drop:
        e.pop(k, None)
    e["PYTHONPATH"] = PKG_ROOT + os.pathsep + e.get("PYTHONPATH", "")
    p = subprocess.run([sys.executable, "-m", "devrt", *args], capture_output=True, text=True,
                       env=e, timeout=300)
    return p.returncode, p.stdout, p.stderr


class Allocation:
    """size bytes from the runtime stack of ordinal 0 through the C API, on a pool stream."""

    def __init__(self, size, tag):
        self.lib = _lib.load()
        self.rt = _lib.runtime(0)
        self.stack = _lib.stack(0)
        self.size = size
        self.stream = _lib.c_stream()
        _lib.check(self.lib.devrt_stream_acquire(self.rt, _lib.DEVRT_ACQUIRE_WAIT,
                                                 ctypes.byref(self.stream)))
        self.ptr = ctypes.c_void_p()
        _lib.check(self.lib.devrt_resource_allocate(self.stack, size, self.stream, tag,
                                                    ctypes.byref(self.ptr)))

    def free(self):
        _lib.check(self.lib.devrt_resource_deallocate(self.stack, self.ptr, self.size, self.stream))
        _lib.check(self.lib.devrt_stream_synchronize(self.rt, self.stream))
        _lib.check(self.lib.devrt_stream_release(self.rt, self.stream))


class Package(unittest.TestCase):
    def test_info(self):
        i = devrt.info()
        self.assertIn(i["backend"], ("host", "cuda"))
        self.assertEqual(i["backend"], os.environ["DEVRT_BACKEND"])
        self.assertTrue(i["backend_reason"])
        self.assertEqual(i["ordinal"], 0)
        self.assertTrue(1 <= i["stream_pool_size"] <= 4095)
        self.assertLessEqual(i["streams_in_use"], i["streams_created"])
        d = i["device"]
        self.assertTrue(d["name"])
        self.assertEqual(d["ordinal"], 0)
        self.assertGreater(d["total_memory"], 0)
        self.assertGreater(d["sm_count"], 0)
        self.assertEqual(d["emulated"], i["backend"] == "host")
        self.assertEqual(i["devrt"], devrt.version())
        self.assertTrue(os.path.exists(i["library"]))
        json.dumps(i)  # JSON-ready

    def test_config_layout(self):
        # devrt_config_init's defaults read back through the ctypes mirror: a field out of place
        # in _lib.Config shows as a wrong value here (the other structs: test_info, the stats tests).
        code = """
            import ctypes, json
            from devrt import _lib
            c = _lib.Config()
            _lib.check(_lib.load().devrt_config_init(ctypes.byref(c)))
            print(json.dumps({n: (getattr(c, n) if n != "log_path" else None) for n, _ in c._fields_}))
        """
        keep = ("DEVRT_LIBRARY", "DEVRT_BACKEND")
        rc, out, err = py(code, drop=[k for k in os.environ if k.startswith("DEVRT_") and k not in keep])
        self.assertEqual(rc, 0, err)
        c = json.loads(out)
        backend = {"auto": 0, "cuda": 1, "host": 2}[os.environ["DEVRT_BACKEND"]]
        want = {"ordinal": 0, "backend": backend, "stream_pool_size": 16, "stream_priority": 0,
                "pool_release_threshold": (1 << 64) - 1, "host_workers": 8, "host_devices": 1,
                "budget_bytes": 0, "budget_percent": 100, "cache": True, "log_jsonl": False,
                "stats_peak_bound": False, "wait_spin_ns": 20000, "completion": 0,
                "partition_streams": 64}
        self.assertEqual({k: c[k] for k in want}, want)

    def test_configure_bad_budget(self):
        # one line naming the value and what a budget is; more than the device has names its size
        total = devrt.info()["device"]["total_memory"]
        for bad, named in (("lots", "is not a budget"), (0, "is not a budget"),
                           (-5, "is not a budget"), ("-3%", "is not a budget"),
                           ("150%", "1% to 100%"), ("0%", "1% to 100%"), (True, "True"),
                           ("4294967397%", "1% to 100%"), (" 50%", "' 50%'"), ("50 %", "'50 %'"),
                           ("050%", "'050%'"), ("+5", "'+5'"), ("0x10", "'0x10'"),
                           ("\u0665", "'\u0665'"), ("5\n", "'5\\n'"), ("1.5", "'1.5'"),
                           ("8 GiB", "'8 GiB'"), ("8gib", "'8gib'"), (1.5, "(0, 1]"),
                           (0.0, "(0, 1]"), (float("nan"), "(0, 1]"),
                           (1 << 64, f"more than device 0 has: {devrt._size(total)}"),
                           (total + 1, f"({total} bytes)"), (f"{total}000B", f"({total} bytes)")):
            with self.subTest(budget=bad):
                with self.assertRaises(devrt.DevrtError) as cm:
                    devrt.configure(budget=bad)
                self.assertEqual(cm.exception.status_name, "INVALID_ARGUMENT")
                self.assertIn("DEVRT_INVALID_ARGUMENT", str(cm.exception))
                self.assertIn(f"budget={bad!r}", str(cm.exception))
                self.assertIn(named, str(cm.exception))
                self.assertNotIn("\n", str(cm.exception))
                self.assertLess(len(str(cm.exception)), 200)
        with self.assertRaises(devrt.DevrtError):
            devrt.configure(log_format="xml")

    def test_configure_budget_forms(self):
        # PyTorch's fraction, bytes, "N%" and sizes with units, each read back as the limit
        total = devrt.info()["device"]["total_memory"]
        for budget, want in ((0.6, int(total * 0.6)), (1.0, total), ("50%", total // 100 * 50),
                             ("8MiB", 8 << 20), ("512MB", 512 * 10**6), ("1.5GiB", 3 << 29),
                             ("1048576", 1 << 20), (1 << 20, 1 << 20), (total, total)):
            with self.subTest(budget=budget):
                rc, out, err = py(f"import devrt; devrt.configure(budget={budget!r}); "
                                  "print(devrt.figures()['limit_bytes'])")
                self.assertEqual(rc, 0, err)
                self.assertEqual(int(out), want)

    def test_one_argument_style(self):
        # the device is device= everywhere (an ordinal, "cuda" or "cuda:N"), the tag tag=; the
        # first positional argument of stats() is the tag, of reap() wait
        self.assertEqual(devrt.stats("never seen"), devrt.stats(tag="never seen", device=0))
        self.assertEqual(devrt.stats(tag="never seen", device="cuda:0")["bytes"]["total"], 0)
        self.assertEqual(devrt.info(device="cuda")["ordinal"], 0)
        for call in (lambda: devrt.figures(device=0), lambda: devrt.pool(device=0),
                     lambda: devrt.trim(device=0), lambda: devrt.reap(True, device=0),
                     lambda: devrt.release(device=0), lambda: devrt.reset_peaks(device=0),
                     lambda: devrt.torch.memory_stats(device=0)):
            call()
        with self.assertRaises(TypeError):
            devrt.configure(0, budget="50%")  # keyword arguments only
        with self.assertRaises(TypeError):
            devrt.stats("torch", 0)
        for bad in ("gpu", "cuda:x", "cuda:01", 1.0, True, None):
            with self.subTest(device=bad):
                with self.assertRaises(devrt.DevrtError) as cm:
                    devrt.stats(device=bad)
                self.assertIn(f"device={bad!r} is not a device", str(cm.exception))
        with self.assertRaises(devrt.DevrtError) as cm:
            devrt.info(device=63)
        self.assertIn("63", str(cm.exception))

    def test_configure_arena(self):
        # the stack's leaf is the arena; freed space of one size serves another, no new pages
        rc, out, err = py("""
            import ctypes, json, devrt
            from devrt import _lib
            devrt.configure(arena=True)
            lib, rt, stack = _lib.load(), _lib.runtime(0), _lib.stack(0)
            s = _lib.c_stream()
            _lib.check(lib.devrt_stream_acquire(rt, _lib.DEVRT_ACQUIRE_WAIT, ctypes.byref(s)))
            held = []
            for n in (3 << 20, 3 << 19, 2 << 20):  # all above 1 MiB: one range
                p = ctypes.c_void_p()
                _lib.check(lib.devrt_resource_allocate(stack, n, s, b"t", ctypes.byref(p)))
                _lib.check(lib.devrt_resource_deallocate(stack, p, n, s))
                f = devrt.figures()
                held.append(f["live_bytes"] + f["cached_bytes"])
            print(json.dumps({"held": held, "reserved": devrt.pool()["reserved_high"]}))
        """, env={"DEVRT_BACKEND": "host"})
        self.assertEqual(rc, 0, err)
        d = json.loads(out.strip().splitlines()[-1])
        self.assertEqual(d["held"], [3 << 20] * 3, d)
        self.assertGreaterEqual(d["reserved"], 3 << 20, d)

    def test_configure_cache_max_class(self):
        with self.assertRaises(devrt.DevrtError) as cm:
            devrt.configure(cache_max_class=(64 << 20) + 1)
        self.assertEqual(cm.exception.status_name, "INVALID_ARGUMENT")
        self.assertIn("cache_max_class", cm.exception.message)
        rc, out, err = py("""
            import ctypes, json, devrt
            from devrt import _lib
            devrt.configure(cache_max_class="1MiB")
            lib, rt, stack = _lib.load(), _lib.runtime(0), _lib.stack(0)
            s = _lib.c_stream()
            _lib.check(lib.devrt_stream_acquire(rt, _lib.DEVRT_ACQUIRE_WAIT, ctypes.byref(s)))
            cached = []
            for n in (2 << 20, 1 << 20):  # past the bound: straight through; at it: cached
                p = ctypes.c_void_p()
                _lib.check(lib.devrt_resource_allocate(stack, n, s, b"t", ctypes.byref(p)))
                _lib.check(lib.devrt_resource_deallocate(stack, p, n, s))
                cached.append(devrt.figures()["cached_bytes"])
            print(json.dumps(cached))
        """)
        self.assertEqual(rc, 0, err)
        self.assertEqual(json.loads(out), [0, 1 << 20])

    def test_configure_after_first_use(self):
        devrt.info()
        with self.assertRaises(devrt.DevrtError) as cm:
            devrt.configure(budget="50%")
        self.assertEqual(cm.exception.status_name, "INVALID_STATE")
        self.assertIn("already exists", cm.exception.message)

    def test_last_error(self):
        devrt.info()
        with self.assertRaises(devrt.DevrtError):
            devrt.configure(budget="50%")  # refused by the C library: the runtime exists
        self.assertIn("already exists", devrt.last_error())
        devrt.figures()  # a call that succeeds leaves no message behind
        self.assertEqual(devrt.last_error(), "")

    def test_configure_applies(self):
        with tempfile.TemporaryDirectory() as d:
            log = os.path.join(d, "alloc.jsonl")
            rc, out, err = py(f"""
                import ctypes, json, devrt
                from devrt import _lib
                devrt.configure(budget=1 << 20, cache=False, log={log!r}, log_format="jsonl")
                lib, tag = _lib.load(), b"cfg"
                rt, stack = _lib.runtime(0), _lib.stack(0)
                s, p = _lib.c_stream(), ctypes.c_void_p()
                _lib.check(lib.devrt_stream_acquire(rt, _lib.DEVRT_ACQUIRE_WAIT, ctypes.byref(s)))
                _lib.check(lib.devrt_resource_allocate(stack, 4096, s, tag, ctypes.byref(p)))
                try:
                    _lib.check(lib.devrt_resource_allocate(stack, 2 << 20, s, tag, ctypes.byref(ctypes.c_void_p())))
                    over = None
                except devrt.DevrtError as e:
                    over = e.status_name
                _lib.check(lib.devrt_resource_deallocate(stack, p, 4096, s))
                _lib.check(lib.devrt_stream_synchronize(rt, s))
                devrt.reap(wait=True)
                print(json.dumps({{"figures": devrt.figures(), "over": over}}))
            """)
            self.assertEqual(rc, 0, err)
            doc = json.loads(out)
            f = doc["figures"]
            self.assertEqual(f["limit_bytes"], 1 << 20)
            self.assertEqual(doc["over"], "OVER_BUDGET")
            self.assertEqual(f["cache_hits"] + f["cache_misses"], 0)  # no caching layer
            self.assertEqual(f["cached_bytes"], 0)
            self.assertGreaterEqual(f["log_records"], 2)
        rc, out, err = py("""
            import json, devrt
            devrt.configure(budget="50%")
            print(json.dumps([devrt.figures()["limit_bytes"], devrt.info()["device"]["total_memory"]]))
        """)
        self.assertEqual(rc, 0, err)
        limit, total = json.loads(out)
        self.assertEqual(limit, total // 100 * 50)

    def test_stats_and_figures_show_traffic(self):
        s0, f0 = devrt.stats(tag="pytest"), devrt.figures()
        all0 = devrt.stats()
        a = Allocation(4096, TAG_PYTEST)
        s1, f1 = devrt.stats(tag="pytest"), devrt.figures()
        self.assertEqual(s1["bytes"]["current"], s0["bytes"]["current"] + 4096)
        self.assertEqual(s1["bytes"]["total"], s0["bytes"]["total"] + 4096)
        self.assertGreaterEqual(s1["bytes"]["peak"], 4096)
        self.assertEqual(s1["count"]["current"], s0["count"]["current"] + 1)
        self.assertEqual(s1["count"]["total"], s0["count"]["total"] + 1)
        self.assertGreaterEqual(f1["live_bytes"], f0["live_bytes"] + 4096)
        self.assertEqual(f1["bytes"]["total"], all0["bytes"]["total"] + 4096)  # overall counters
        self.assertEqual(devrt.stats(tag="never seen")["bytes"],
                         {"current": 0, "peak": 0, "total": 0})
        a.free()
        s2 = devrt.stats(tag="pytest")
        self.assertEqual(s2["bytes"]["current"], s0["bytes"]["current"])
        self.assertEqual(s2["bytes"]["total"], s0["bytes"]["total"] + 4096)
        self.assertGreaterEqual(s2["bytes"]["peak"], s0["bytes"]["current"] + 4096)
        self.assertIsInstance(devrt.reap(wait=True), int)
        self.assertEqual(devrt.figures()["pending_bytes"], 0)
        self.assertIsInstance(devrt.trim(), int)
        self.assertEqual(devrt.figures()["cached_bytes"], 0)
        self.assertEqual(devrt.figures()["live_bytes"], f0["live_bytes"])

    def test_pool_and_release(self):
        p0 = devrt.pool()
        self.assertEqual(set(p0), {"used_current", "used_high", "reserved_current",
                                   "reserved_high", "release_threshold"})
        a = Allocation(1 << 20, TAG_PYTEST)
        p1 = devrt.pool()
        self.assertGreaterEqual(p1["reserved_high"], p1["reserved_current"])
        self.assertGreaterEqual(p1["reserved_current"], 1 << 20)
        a.free()
        self.assertIsInstance(devrt.release(), int)
        f = devrt.figures()
        self.assertEqual((f["pending_bytes"], f["cached_bytes"]), (0, 0))
        m = devrt.torch.memory_stats()
        self.assertEqual(m["reserved_bytes.all.peak"], devrt.pool()["reserved_high"])

    def test_optional_modules_import_without_their_frameworks(self):
        # devrt.cupy and devrt.bench import CuPy and PyTorch only when used.
        rc, out, err = py("import devrt.cupy, devrt.bench.torch_bench, sys; "
                          "print('cupy' in sys.modules, 'torch' in sys.modules)")
        self.assertEqual(rc, 0, err)
        self.assertEqual(out.split(), ["False", "False"])

    def test_torch_memory_stats_names(self):
        # memory_stats() reads devrt alone (no PyTorch): the "torch" tag's traffic under
        # torch.cuda.memory_stats()'s names.
        m0 = devrt.torch.memory_stats()
        a = Allocation(8192, TAG_TORCH)
        m1 = devrt.torch.memory_stats()
        self.assertEqual(m1["allocated_bytes.all.current"], m0["allocated_bytes.all.current"] + 8192)
        self.assertEqual(m1["allocated_bytes.all.allocated"], m0["allocated_bytes.all.allocated"] + 8192)
        self.assertGreaterEqual(m1["allocated_bytes.all.peak"], m1["allocated_bytes.all.current"])
        self.assertEqual(m1["allocation.all.current"], m0["allocation.all.current"] + 1)
        self.assertGreaterEqual(m1["reserved_bytes.all.current"], m1["allocated_bytes.all.current"])
        a.free()
        m2 = devrt.torch.memory_stats()
        self.assertEqual(m2["allocated_bytes.all.current"], m0["allocated_bytes.all.current"])
        self.assertEqual(m2["allocated_bytes.all.freed"], m0["allocated_bytes.all.freed"] + 8192)
        self.assertEqual(m2["allocation.all.freed"], m0["allocation.all.freed"] + 1)

    def test_torch_memory_stats_ooms(self):
        # An allocation no budget holds: tried once more after the pending frees and the cache,
        # then refused: num_alloc_retries and num_ooms, as PyTorch counts them.
        alloc = devrt._lib.load().devrt_torch_alloc
        alloc.restype, alloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p]
        m0 = devrt.torch.memory_stats()
        self.assertIsNone(alloc(1 << 50, 0, None))
        m1 = devrt.torch.memory_stats()
        self.assertEqual(m1["num_alloc_retries"], m0["num_alloc_retries"] + 1)
        self.assertEqual(m1["num_ooms"], m0["num_ooms"] + 1)

    def test_torch_release_graph_memory(self):
        # nothing held for graphs on the host (no stream of PyTorch's captures here): 0 bytes;
        # the C side is test_torch_edges's case_capture; a bad device is refused
        self.assertEqual(devrt.torch.release_graph_memory(0), 0)
        self.assertEqual(devrt.torch.memory_stats(0)["devrt.graph_held_bytes"], 0)
        with self.assertRaises(devrt.DevrtError):
            devrt.torch.release_graph_memory(-1)

    def test_torch_memory_stats_keys_peaks_summary(self):
        m = devrt.torch.memory_stats()
        self.assertEqual(list(m), sorted(m))  # sorted by key, as PyTorch's
        torch_keys = {k for k in m if not k.startswith("devrt.")}
        self.assertFalse(torch_keys & set(devrt.torch.NOT_KNOWN))
        for stat in ("allocation", "active", "allocated_bytes", "active_bytes", "requested_bytes"):
            for metric in ("current", "peak", "allocated", "freed"):
                self.assertIn(f"{stat}.all.{metric}", m)
        a = Allocation(3 << 20, TAG_TORCH)
        a.free()
        m = devrt.torch.memory_stats()
        self.assertGreaterEqual(m["active_bytes.all.peak"], 3 << 20)
        self.assertEqual(m["active_bytes.all.peak"], m["allocated_bytes.all.peak"])
        self.assertEqual(m["requested_bytes.all.freed"], m["allocated_bytes.all.freed"])
        devrt.torch.reset_peak_memory_stats()
        m = devrt.torch.memory_stats()
        for stat in ("allocation", "allocated_bytes", "reserved_bytes"):
            self.assertEqual(m[f"{stat}.all.peak"], m[f"{stat}.all.current"], stat)
        self.assertEqual(devrt.pool()["reserved_high"], devrt.pool()["reserved_current"])
        text = devrt.torch.memory_summary()
        lines = text.splitlines()
        self.assertEqual({len(x) for x in lines}, {77})
        self.assertIn("| Allocated memory      |", text)
        self.assertIn("| Allocations           |", text)
        self.assertIn("devrt: budget", text)

    def test_module_prints_json(self):
        rc, out, err = py_module(["info"])
        self.assertEqual(rc, 0, err)
        doc = json.loads(out)
        self.assertEqual(doc["backend"], os.environ["DEVRT_BACKEND"])
        rc, out, err = py_module(["stats", "--tag", "torch"])
        self.assertEqual(rc, 0, err)
        doc = json.loads(out)
        self.assertEqual(set(doc), {"tag", "stats", "figures"})
        self.assertEqual(doc["stats"]["bytes"]["current"], 0)
        rc, out, err = py_module(["stats", "--device", "0"])
        self.assertEqual(rc, 0, err)
        for bad in ("x", "-1", " 0", "01"):
            rc, out, err = py_module(["info", "--device", bad])
            self.assertEqual(rc, 2, err)
            self.assertIn("is not a decimal number", err)
        rc, out, err = py_module(["info"], env={"DEVRT_BUDGET": "nonsense"})
        self.assertEqual(rc, 1)
        doc = json.loads(out)
        self.assertEqual(doc["error"], "INVALID_ARGUMENT")
        self.assertIn("DEVRT_BUDGET", doc["message"])

    def test_gpu_files_report_skips(self):
        # a test file whose tests all skip (no GPU seen) exits 77, ctest's "skipped", not 0
        for name in ("test_torch_gpu.py", "test_cupy_gpu.py"):
            e = dict(os.environ, CUDA_VISIBLE_DEVICES="")
            e.pop("DEVRT_REQUIRE_GPU", None)
            p = subprocess.run([sys.executable, os.path.join(HERE, name)], capture_output=True,
                               text=True, env=e, timeout=600)
            self.assertEqual(p.returncode, 77, p.stdout + p.stderr)
            self.assertIn("skipped", p.stderr)

    def test_comm_id_through_a_store(self):
        """Rank 0's id reaches rank 1 through a store (a dict behind torch.distributed's
        set/get); a bad rank is refused before anything runs."""
        class Store:
            def __init__(self):
                self.kv = {}

            def set(self, k, v):
                self.kv[k] = v

            def get(self, k):
                return self.kv[k]

        store = Store()
        a = devrt.comm_id(store, 0)
        self.assertEqual(len(a), 128)
        if os.environ["DEVRT_BACKEND"] == "host":
            self.assertTrue(a.startswith(b"devrt-host"))
        self.assertEqual(devrt.comm_id(store, 1), a)
        self.assertNotEqual(devrt.comm_id(Store(), 0), a)  # a new id each time
        with self.assertRaises(devrt.DevrtError):
            devrt.comm_id(store, -1)
        store.kv["devrt_comm_id"] = b"short"
        with self.assertRaises(devrt.DevrtError):
            devrt.comm_id(store, 2)

    def test_library_not_found(self):
        bogus = os.path.join(tempfile.gettempdir(), "devrt-no-such-dir", "libdevrt.so")
        rc, out, err = py("import devrt; devrt.info()", env={"DEVRT_LIBRARY": bogus})
        self.assertNotEqual(rc, 0)
        self.assertIn("DevrtLibraryError", err)
        self.assertIn(bogus, err)
        rc, out, err = py_module(["info"], env={"DEVRT_LIBRARY": bogus})
        self.assertEqual(rc, 1)
        self.assertIn(bogus, json.loads(out)["message"])
        with tempfile.NamedTemporaryFile(suffix=".so") as junk:  # exists, but is no library
            rc, out, err = py("import devrt; devrt.info()", env={"DEVRT_LIBRARY": junk.name})
            self.assertNotEqual(rc, 0)
            self.assertIn(junk.name, err)
        # Without DEVRT_LIBRARY: the package's own copy, named when missing, used when present.
        with tempfile.TemporaryDirectory() as d:
            shutil.copytree(os.path.join(PKG_ROOT, "devrt"), os.path.join(d, "devrt"),
                            ignore=shutil.ignore_patterns("__pycache__", "*.so*"))
            beside = os.path.join(d, "devrt", "libdevrt.so")
            code = "import devrt, json; print(json.dumps(devrt.info()))"
            e = dict(os.environ)
            e.pop("DEVRT_LIBRARY", None)
            e["PYTHONPATH"] = d
            p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                               env=e, timeout=300, cwd=d)
            self.assertNotEqual(p.returncode, 0)
            self.assertIn(beside, p.stderr)
            self.assertIn("pip install ./python", p.stderr)
            shutil.copy(_lib.path(), beside)
            p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                               env=e, timeout=300, cwd=d)
            self.assertEqual(p.returncode, 0, p.stderr)
            self.assertEqual(json.loads(p.stdout)["library"], beside)
            self.assertIsNone(json.loads(p.stdout)["package_build"])
            with open(os.path.join(d, "devrt", "_build_info.json"), "w") as f:
                json.dump({"backends": ["host"]}, f)
            p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                               env=e, timeout=300, cwd=d)
            self.assertEqual(json.loads(p.stdout)["package_build"], {"backends": ["host"]})
            # DEVRT_LIBRARY, when set, is the library: never the copy beside in its place
            p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                               env=dict(e, DEVRT_LIBRARY=bogus), timeout=300, cwd=d)
            self.assertNotEqual(p.returncode, 0)
            self.assertIn(bogus, p.stderr)
            self.assertNotIn(beside, p.stderr)


def _torch_present():
    try:
        import torch  # noqa: F401
    except Exception:
        return False
    return True


def _gpu_present():
    rc, out, err = py("import torch; print(torch.cuda.is_available())")
    return rc == 0 and out.strip() == "True"


HAVE_TORCH = _torch_present()
HAVE_GPU = HAVE_TORCH and _gpu_present()
REQUIRE_GPU = os.environ.get("DEVRT_REQUIRE_GPU") == "1"


@unittest.skipUnless(HAVE_TORCH, "PyTorch is not importable")
class Torch(unittest.TestCase):
    """devrt.torch.use() on a GPU, each in a process of its own (the allocator is process-wide),
    on the cuda backend."""

    def setUp(self):
        if not HAVE_GPU:
            if REQUIRE_GPU:
                self.fail("DEVRT_REQUIRE_GPU=1 but torch.cuda.is_available() is False")
            self.skipTest("no GPU")

    def run_torch(self, code):
        rc, out, err = py(code, drop=("DEVRT_BACKEND",))
        self.assertEqual(rc, 0, f"{out}\n{err}")
        return json.loads(out.strip().splitlines()[-1])

    def test_use_allocates_through_devrt(self):
        doc = self.run_torch("""
            import json, torch, devrt, devrt.torch
            devrt.torch.use(0)
            assert devrt.torch.use() is devrt.torch.use()  # installed once
            m0 = devrt.torch.memory_stats(0)
            x = torch.empty(1 << 20, dtype=torch.float32, device="cuda")
            x.fill_(1.0)
            ok = bool(x.sum().item() == float(1 << 20))
            m1 = devrt.torch.memory_stats(0)
            del x
            torch.cuda.synchronize()
            m2 = devrt.torch.memory_stats(0)
            print(json.dumps({"ok": ok, "m0": m0, "m1": m1, "m2": m2, "backend": devrt.info()["backend"]}))
        """)
        self.assertTrue(doc["ok"])
        self.assertEqual(doc["backend"], "cuda")
        m0, m1, m2 = doc["m0"], doc["m1"], doc["m2"]
        self.assertGreaterEqual(m1["allocated_bytes.all.current"] - m0["allocated_bytes.all.current"], 4 << 20)
        self.assertGreaterEqual(m1["allocation.all.allocated"], m0["allocation.all.allocated"] + 1)
        self.assertGreaterEqual(m1["reserved_bytes.all.current"], m1["allocated_bytes.all.current"])
        self.assertLessEqual(m2["allocated_bytes.all.current"], m1["allocated_bytes.all.current"] - (4 << 20))

    def test_use_after_cuda_init_is_refused(self):
        doc = self.run_torch("""
            import json, torch, devrt, devrt.torch
            torch.zeros(1, device="cuda")
            try:
                devrt.torch.use()
                print(json.dumps({"refused": None}))
            except devrt.DevrtError as e:
                print(json.dumps({"refused": e.status_name, "message": str(e)}))
        """)
        self.assertEqual(doc["refused"], "INVALID_STATE", doc)


if __name__ == "__main__":
    unittest.main()
