"""gpu_util.py: what the GPU test files share: running code in a fresh python with the package
importable on the cuda backend, the skip rule (no module or GPU: skip; a missing GPU is a
failure under DEVRT_REQUIRE_GPU=1), and main(), whose exit status tells ctest a file whose tests
all skipped (77)."""
import json
import os
import subprocess
import sys
import textwrap
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
PKG_ROOT = os.path.normpath(os.path.join(HERE, "..", "..", "python"))
REQUIRE_GPU = os.environ.get("DEVRT_REQUIRE_GPU") == "1"
os.environ["PYTHONDONTWRITEBYTECODE"] = "1"


def py(code, env=None, timeout=900):
    """Runs `code` in a fresh python (package importable, DEVRT_BACKEND unset, so cuda, unless env
    sets it); returns (rc, stdout, stderr)."""
    drop = ("DEVRT_BACKEND", "PYTORCH_CUDA_ALLOC_CONF")
    e = {k: v for k, v in os.environ.items() if k not in drop}
    e.update(env or {})
    e["PYTHONPATH"] = PKG_ROOT + os.pathsep + e.get("PYTHONPATH", "")
    p = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                       text=True, env=e, timeout=timeout)
    return p.returncode, p.stdout, p.stderr


def last_json(test, rc, out, err):
    test.assertEqual(rc, 0, f"exit {rc}\n{out[-3000:]}\n{err[-6000:]}")
    return json.loads(out.strip().splitlines()[-1])


def require(module):
    """A setUpClass helper: skips without the module (importable here) or a GPU; without a GPU
    under DEVRT_REQUIRE_GPU=1, fails instead."""
    rc, out, err = py(f"import {module}", timeout=300)
    if rc != 0:
        raise unittest.SkipTest(f"{module} does not import")
    count = "cupy.cuda.runtime.getDeviceCount()" if module == "cupy" else "torch.cuda.device_count()"
    rc, out, err = py(f"import {module}\ntry:\n    print({count})\nexcept Exception:\n    print(0)",
                      timeout=300)
    if rc == 0 and int(out.strip().splitlines()[-1]) > 0:
        return
    if REQUIRE_GPU:
        raise AssertionError(f"DEVRT_REQUIRE_GPU=1 but {module} sees no GPU: {err[-500:]}")
    raise unittest.SkipTest(f"{module} sees no GPU")


def main():
    """unittest.main(), then the exit status ctest reads: 1 on a failure, 77 (the tests'
    SKIP_RETURN_CODE) when every test was skipped, so that nothing run is not reported as
    passed, else 0."""
    r = unittest.main(exit=False).result
    # whole tests skipped (a class skipped in setUpClass runs none; a skipped subtest's test ran)
    ran = r.testsRun - sum(isinstance(t, unittest.TestCase) and not hasattr(t, "test_case")
                           for t, _ in r.skipped)
    sys.exit(1 if not r.wasSuccessful() else 77 if ran == 0 and r.skipped else 0)
