"""gpu_util.py: what the GPU test files share: running code in a fresh python with the package
importable on the cuda backend, and the skip rule (no module or GPU: skip; a missing GPU is a
failure under DEVRT_REQUIRE_GPU=1)."""
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
    """Runs `code` in a fresh python (package importable, DEVRT_BACKEND unset: cuda); returns
    (rc, stdout, stderr)."""
    e = dict(os.environ, **(env or {}))
    e.pop("DEVRT_BACKEND", None)
    e.pop("PYTORCH_CUDA_ALLOC_CONF", None)
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
