"""test_check_layers.py: tools/check_layers.py passes on the tree, and fails on a tree of its own
with an include of a higher layer, a folder that is no layer, or docs listing another order.

    python3 test_check_layers.py
"""
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "..", "..", "tools", "check_layers.py")
sys.path.insert(0, os.path.dirname(SCRIPT))
import check_layers  # noqa: E402


def check(root=None):
    env = dict(os.environ)
    env.pop("DEVRT_LAYERS_ROOT", None)
    if root:
        env["DEVRT_LAYERS_ROOT"] = root
    p = subprocess.run([sys.executable, SCRIPT], capture_output=True, text=True, env=env)
    return p.returncode, p.stdout


class Layers(unittest.TestCase):
    def test_tree_passes(self):
        rc, out = check()
        self.assertEqual(rc, 0, out)

    def tree(self, d, includes, order=None, extra=()):
        """A tree with one file per layer; includes: {layer: [layer it includes]}."""
        for name in check_layers.LAYERS + list(extra):
            os.makedirs(os.path.join(d, "src", name))
            with open(os.path.join(d, "src", name, f"{name}.h"), "w") as f:
                f.writelines(f'#include "../{to}/{to}.h"\n' for to in includes.get(name, []))
        os.makedirs(os.path.join(d, "docs"))
        with open(os.path.join(d, "docs", "architecture.md"), "w") as f:
            f.write(f"Layers, bottom first: {', '.join(order or check_layers.LAYERS)}.\n")

    def test_offences_fail(self):
        cases = {
            "higher": ({"block": ["timeline"], "timeline": ["memory"]}, None, (),
                       "src/timeline/timeline.h:1: includes src/memory/"),
            "no layer": ({}, None, ("extra",), "src/extra/: a folder that is no layer"),
            "docs": ({}, list(reversed(check_layers.LAYERS)), (), "docs/architecture.md"),
        }
        for what, (inc, order, extra, want) in cases.items():
            with self.subTest(what), tempfile.TemporaryDirectory() as d:
                self.tree(d, inc, order, extra)
                rc, out = check(d)
                self.assertEqual(rc, 1, out)
                self.assertIn(want, out)
        with tempfile.TemporaryDirectory() as d:  # the same tree, downward only: it passes
            self.tree(d, {"block": ["timeline"], "runtime": ["core", "multi"]})
            self.assertEqual(check(d)[0], 0)


if __name__ == "__main__":
    unittest.main()
