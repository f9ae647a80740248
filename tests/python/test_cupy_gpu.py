"""test_cupy_gpu.py: devrt as CuPy's allocator (devrt.cupy) on a GPU, in processes of its own:
FFTs, matrix products and elementwise work over varied sizes, on the null stream and a stream
of CuPy's, give the same results as under CuPy's default pool (bitwise; cumulative sums, whose
CUB scan differs run to run by ~2e-7 under CuPy's own pool too, within 1e-5 of the largest), and
devrt's statistics show the traffic; a budget refusal is CuPy's OutOfMemoryError naming devrt's
budget, and the process goes on. Skips without CuPy or a GPU (exit 77 when every test skipped; a
failure under DEVRT_REQUIRE_GPU=1 without a GPU). Under a minute on an H100:

    DEVRT_LIBRARY=build/libdevrt.so python3 tests/python/test_cupy_gpu.py -v
"""
import os
import sys
import unittest

sys.dont_write_bytecode = True  # leave no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpu_util import last_json, main, py, require  # noqa: E402

WORK = """
    import json, gc
    import numpy as np
    import cupy, devrt, devrt.cupy

    def work(seed):  # (exact?, result) pairs
        rs = cupy.random.RandomState(seed)
        out = []
        for n in (1, 7, 256, 1000, 4096, 1 << 16, 1 << 20, 3 << 20):
            a = rs.standard_normal(n, dtype=cupy.float32)
            out.append((True, cupy.fft.fft(a)))
            out.append((True, cupy.sin(a) * 2 + a ** 2))
            out.append((False, cupy.cumsum(a)))  # CUB's scan: not bitwise run to run
        for m in (1, 33, 128, 1000, 2048):
            x = rs.standard_normal((m, m), dtype=cupy.float32)
            out.append((True, x @ x.T))
            out.append((True, cupy.fft.fft2(x.astype(cupy.complex64))))
        return [(e, cupy.asnumpy(o)) for e, o in out]

    def both(seed):  # on the null stream and on a stream of CuPy's
        r = work(seed)
        s = cupy.cuda.Stream(non_blocking=True)
        with s:
            r += work(seed + 1)
        s.synchronize()
        return r

    ref = both(3)  # CuPy's default pool
    devrt.cupy.use()
    s0 = devrt.stats(tag="cupy")
    got = both(3)
    cupy.fft.config.get_plan_cache().clear()  # cuFFT plans hold work areas
    gc.collect()
    cupy.cuda.Device().synchronize()
    s1 = devrt.stats(tag="cupy")
    def same(e, a, b):
        if a.shape != b.shape:
            return False
        if e:
            return np.array_equal(a, b)
        return float(np.max(np.abs(a - b))) <= 1e-5 * max(float(np.max(np.abs(a))), 1e-30)
    diff = [i for i, ((e, a), (_, b)) in enumerate(zip(ref, got)) if not same(e, a, b)]
    rel = [float(np.max(np.abs(ref[i][1] - got[i][1])) / max(float(np.max(np.abs(ref[i][1]))), 1e-30))
           for i in diff]
    print(json.dumps({"diff": diff, "rel": rel, "n": len(got), "before": s0, "after": s1,
                      "free_failures": devrt.cupy.free_failures,
                      "figures": devrt.figures()}))
"""


class Cupy(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        require("cupy")

    def test_results_match_default_pool(self):
        d = last_json(self, *py(WORK))
        self.assertEqual(d["diff"], [], f"outputs differing from CuPy's default pool (max relative error {d['rel']})")
        self.assertEqual(d["n"], 2 * (8 * 3 + 5 * 2))
        self.assertEqual(d["before"]["count"]["total"], 0)
        self.assertGreater(d["after"]["count"]["total"], 100)  # every array went through devrt
        self.assertGreater(d["after"]["bytes"]["peak"], 3 << 22)
        self.assertEqual(d["after"]["bytes"]["current"], 0, d["after"])  # all freed
        self.assertEqual(d["free_failures"], 0)

    def test_budget_refusal(self):
        d = last_json(self, *py("""
            import json, cupy, devrt, devrt.cupy
            devrt.configure(budget=256 << 20)
            devrt.cupy.use()
            out = {}
            try:
                cupy.empty(512 << 20, dtype=cupy.uint8)
            except cupy.cuda.memory.OutOfMemoryError as e:
                out["oom"] = str(e)
            x = cupy.arange(1 << 20, dtype=cupy.int64)  # the process goes on, same budget
            out["sum"] = int(x.sum())
            print(json.dumps(out))
        """))
        self.assertIn("OVER_BUDGET", d["oom"])
        self.assertIn(str(256 << 20), d["oom"])
        self.assertEqual(d["sum"], sum(range(1 << 20)))

    def test_per_thread_default_stream_is_refused(self):
        d = last_json(self, *py("""
            import json, cupy, devrt, devrt.cupy
            devrt.cupy.use()
            try:
                with cupy.cuda.Stream.ptds:
                    cupy.arange(10)
                print(json.dumps({"status": None}))
            except devrt.DevrtError as e:
                print(json.dumps({"status": e.status_name, "message": e.message}))
        """))
        self.assertEqual(d["status"], "UNSUPPORTED", d)


if __name__ == "__main__":
    main()
