"""test_install_layout.py: `cmake --install` of a build puts the Python package where that
python finds it under the prefix (PYTHONPATH=<prefix>/<DEVRT_PYTHON_DIR> for a prefix outside
its search path), and the installed package loads the installed libdevrt through the link
beside it, with DEVRT_LIBRARY unset. Host backend; no GPU.

    python3 tests/python/test_install_layout.py BUILD_DIR
"""
import json
import os
import subprocess
import sys
import sysconfig
import tempfile
import unittest

BUILD = None


class InstallLayout(unittest.TestCase):
    def test_installed_package_finds_installed_library(self):
        with tempfile.TemporaryDirectory() as prefix:
            p = subprocess.run(["cmake", "--install", BUILD, "--prefix", prefix],
                               capture_output=True, text=True, timeout=600)
            self.assertEqual(p.returncode, 0, p.stderr)
            site = sysconfig.get_path("purelib", "posix_prefix", vars={"base": prefix})
            link = os.path.join(site, "devrt", "libdevrt.so")
            self.assertTrue(os.path.islink(link), f"no {link}")
            libdir = os.path.dirname(os.path.realpath(link))
            self.assertTrue(libdir.startswith(os.path.realpath(prefix)), libdir)
            env = {k: v for k, v in os.environ.items() if k not in ("DEVRT_LIBRARY", "PYTHONPATH")}
            env.update(PYTHONPATH=site, DEVRT_BACKEND="host", PYTHONDONTWRITEBYTECODE="1")
            code = ("import devrt, json; print(json.dumps([devrt.__file__, devrt.library_path(),"
                    " devrt.info()['backend']]))")
            p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                               env=env, cwd=prefix, timeout=300)
            self.assertEqual(p.returncode, 0, p.stderr)
            pkg, lib, backend = json.loads(p.stdout)
            self.assertEqual(os.path.dirname(pkg), os.path.join(site, "devrt"))
            self.assertEqual(lib, link)
            self.assertEqual(backend, "host")


if __name__ == "__main__":
    BUILD = sys.argv.pop(1)
    unittest.main()
