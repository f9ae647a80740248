"""test_readme.py: the README's Python snippets run as written, each in a fresh python with the
package importable: those of devrt alone on the host backend; those that import PyTorch or CuPy
on the cuda backend (skipped without the framework or a GPU; a failure under DEVRT_REQUIRE_GPU=1
without a GPU).

    DEVRT_LIBRARY=build/libdevrt.so python3 tests/python/test_readme.py
"""
import os
import re
import sys
import unittest

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpu_util import HERE, main, py, require  # noqa: E402

README = os.path.join(HERE, "..", "..", "README.md")


class Readme(unittest.TestCase):
    def test_python_snippets_run(self):
        with open(README, encoding="utf-8") as f:
            snippets = re.findall(r"^```python\n(.*?)^```", f.read(), re.S | re.M)
        self.assertGreaterEqual(len(snippets), 2)
        for i, code in enumerate(snippets):
            with self.subTest(snippet=i, code=code):
                framework = re.search(r"^(?:import|from) (?:[\w.]+, )*(torch|cupy)\b", code, re.M)
                if framework:
                    require(framework.group(1))  # a SkipTest skips this snippet only
                rc, out, err = py(code, env=None if framework else {"DEVRT_BACKEND": "host"})
                self.assertEqual(rc, 0, f"README snippet {i} failed:\n{code}\n{err[-3000:]}")


if __name__ == "__main__":
    main()
