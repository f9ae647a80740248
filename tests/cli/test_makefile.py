"""test_makefile.py: `make run` (the Makefile over CMake) prints what it builds and what it runs,
not make's "Entering/Leaving directory" lines from the make that cmake --build runs beneath it.
The Makefile drives a one-file CMake project whose `devrt` says what it was asked, in a scratch
folder, as a shell would run it (no outer make).

    python3 tests/cli/test_makefile.py
"""
import os
import shutil
import subprocess
import tempfile
import unittest

MAKEFILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "Makefile")


class Makefile(unittest.TestCase):
    def test_make_run_without_directory_noise(self):
        with tempfile.TemporaryDirectory() as d:
            shutil.copy(MAKEFILE, os.path.join(d, "Makefile"))
            with open(os.path.join(d, "CMakeLists.txt"), "w") as f:
                f.write("cmake_minimum_required(VERSION 3.20)\nproject(t C)\n"
                        "add_executable(devrt main.c)\n")
            with open(os.path.join(d, "main.c"), "w") as f:
                f.write('#include <stdio.h>\nint main(int c, char** v) {\n'
                        '  for (int i = 1; i < c; i++) printf("%s ", v[i]);\n'
                        '  return puts("") < 0;\n}\n')
            env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MAKELEVEL",
                                                                     "MFLAGS")}
            p = subprocess.run(["make", "run"], cwd=d, env=env, capture_output=True, text=True,
                               timeout=300)
            self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
            self.assertIn("demo --report build/report \n", p.stdout)
            self.assertNotIn("Entering directory", p.stdout + p.stderr)
            self.assertNotIn("Leaving directory", p.stdout + p.stderr)


if __name__ == "__main__":
    unittest.main()
