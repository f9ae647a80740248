"""test_python_wheel.py: the package as pip builds it, from an sdist of the tree. The sdist holds
the package and the C sources CMake needs; the wheel python/_build.py builds from it (CMake, the
shared library alone) is tagged py3-none-<platform>, holds libdevrt.so and the build info, and its
RECORD matches its files; pip installs it into a fresh virtual environment with no index, where
`python -m devrt info` works with DEVRT_LIBRARY unset; without cmake the build fails saying so.
One CMake build (under a minute). Skipped (exit 77) where `python3 -m venv` cannot make an
environment with pip. .ci/run installs the checkout itself the same way (`pip install ./python`).

    python3 tests/python/test_python_wheel.py
"""
import base64
import hashlib
import json
import os
import subprocess
import sys
import sysconfig
import tarfile
import tempfile
import unittest
import zipfile

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpu_util import PKG_ROOT, main  # noqa: E402

PLATFORM = sysconfig.get_platform().replace("-", "_").replace(".", "_")
BUILD = "import _build, sys; print(_build.build_wheel(sys.argv[1]))"


class Wheel(unittest.TestCase):
    def test_sdist_wheel_venv(self):
        with tempfile.TemporaryDirectory(prefix="devrt-wheel-") as tmp:
            venv = os.path.join(tmp, "venv")
            if subprocess.run([sys.executable, "-m", "venv", venv], capture_output=True).returncode:
                self.skipTest(f"{sys.executable} -m venv cannot make an environment here")
            p = subprocess.run([sys.executable, "-c", "import _build, sys; "
                                "print(_build.build_sdist(sys.argv[1]))", tmp],
                               capture_output=True, text=True, cwd=PKG_ROOT)
            self.assertEqual(p.returncode, 0, p.stderr)
            with tarfile.open(os.path.join(tmp, p.stdout.strip())) as t:
                names = set(t.getnames())
                t.extractall(os.path.join(tmp, "s"),
                             **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))
            base = "devrt-0.1.0"
            for want in ("pyproject.toml", "_build.py", "PKG-INFO", "devrt/__init__.py",
                         "devrt/bench/workloads.py", "csrc/CMakeLists.txt", "csrc/src/devrt.map",
                         "csrc/include/devrt/devrt.h", "csrc/examples/engine/CMakeLists.txt"):
                self.assertIn(f"{base}/{want}", names)
            self.assertFalse([n for n in names if "/csrc/bench/results/" in n or "/tests/" in n])
            # the wheel, from the unpacked sdist, as pip's build_wheel call makes it
            wheels = os.path.join(tmp, "wheels")
            os.mkdir(wheels)
            src = os.path.join(tmp, "s", base)
            p = subprocess.run([sys.executable, "-c", BUILD, wheels], capture_output=True,
                               text=True, cwd=src, timeout=900)
            self.assertEqual(p.returncode, 0, p.stderr[-4000:])
            name = p.stdout.strip()
            self.assertEqual(name, f"devrt-0.1.0-py3-none-{PLATFORM}.whl")
            with zipfile.ZipFile(os.path.join(wheels, name)) as z:
                files = {n: z.read(n) for n in z.namelist()}
            info = "devrt-0.1.0.dist-info/"
            self.assertIn(f"Tag: py3-none-{PLATFORM}\n", files[info + "WHEEL"].decode())
            self.assertIn("Root-Is-Purelib: false\n", files[info + "WHEEL"].decode())
            for row in files[info + "RECORD"].decode().splitlines():
                arc, digest, size = row.split(",")
                if arc != info + "RECORD":
                    h = base64.urlsafe_b64encode(hashlib.sha256(files[arc]).digest())
                    self.assertEqual(digest, "sha256=" + h.rstrip(b"=").decode(), arc)
                    self.assertEqual(int(size), len(files[arc]), arc)
            self.assertTrue(files["devrt/libdevrt.so"].startswith(b"\x7fELF"))
            built = json.loads(files["devrt/_build_info.json"])
            self.assertIn("host", built["backends"])
            # a fresh environment: pip with no index, then the package's own library
            pip = [os.path.join(venv, "bin", "python"), "-m", "pip"]
            p = subprocess.run([*pip, "install", "--no-index", os.path.join(wheels, name)],
                               capture_output=True, text=True, timeout=300)
            self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
            env = {k: v for k, v in os.environ.items()
                   if k not in ("DEVRT_LIBRARY", "PYTHONPATH")}
            env.update(DEVRT_BACKEND="host", PYTHONDONTWRITEBYTECODE="1")
            p = subprocess.run([os.path.join(venv, "bin", "python"), "-m", "devrt", "info"],
                               capture_output=True, text=True, env=env, cwd=tmp, timeout=300)
            self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
            doc = json.loads(p.stdout)
            self.assertTrue(doc["library"].startswith(venv), doc["library"])
            self.assertEqual(doc["package_build"], built)
            self.assertEqual(doc["built_with_cuda"], "cuda" in built["backends"])
            self.assertEqual(doc["backend"], "host")
            # no cmake: the build fails and says so
            p = subprocess.run([sys.executable, "-c", BUILD, wheels], capture_output=True,
                               text=True, cwd=src, env=dict(os.environ, PATH=""), timeout=300)
            self.assertNotEqual(p.returncode, 0)
            self.assertIn("cmake is not on PATH", p.stderr)


if __name__ == "__main__":
    main()
