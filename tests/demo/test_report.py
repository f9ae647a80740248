"""test_report.py: `devrt demo --report DIR` writes one self-contained page: every inline SVG is
valid XML (python3's xml.etree) with its marks drawn, the page has the run line, the verdict, the
table (a row per tenant) and the three charts, and loads nothing from elsewhere. Where Chromium is
installed, headless Chromium renders the page (its DOM dump has the same elements, and a
screenshot is written); where it is not, that part is skipped and says so.

    python3 test_report.py PATH/TO/devrt
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest
import xml.etree.ElementTree as ET

DEVRT = None
SVG = "{http://www.w3.org/2000/svg}"


def chromium():
    for name in ("chromium", "chromium-browser", "google-chrome", "chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


class Report(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="devrt-report-")
        e = dict(os.environ, DEVRT_BACKEND="host")
        p = subprocess.run([DEVRT, "demo", "--scale", "0.01", "--queries", "2", "--alone", "8",
                            "--chunk", "8192", "--quiet", "--report", cls.dir],
                           capture_output=True, text=True, env=e, timeout=600)
        assert p.returncode == 0, p.stdout + p.stderr
        cls.path = os.path.join(cls.dir, "index.html")
        with open(cls.path, encoding="utf-8") as f:
            cls.html = f.read()

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.dir, ignore_errors=True)

    def svgs(self):
        return {ET.fromstring(m).get("id"): ET.fromstring(m)
                for m in re.findall(r"<svg\b.*?</svg>", self.html, re.S)}

    def test_svgs_are_xml_with_marks(self):
        svgs = self.svgs()
        self.assertEqual(set(svgs), {"memory", "timeline", "latency"})
        mem, tl, lat = svgs["memory"], svgs["timeline"], svgs["latency"]
        # memory: a layer per tenant, pending and cached, and the budget line
        self.assertEqual(len(mem.findall(f"{SVG}polygon")), 4 + 2)
        self.assertTrue(any(l.get("stroke") == "#c00" for l in mem.findall(f"{SVG}line")))
        # timeline: launches drawn on each tenant's three stamped streams
        labels = {t.text for t in tl.findall(f"{SVG}text")}
        for i in range(4):
            for s in ("gen0", "gen1", "scan"):
                self.assertIn(f"t{i} {s}", labels)
        self.assertGreater(len(tl.findall(f"{SVG}rect")), 20)
        # latency: bars of both phases
        fills = {r.get("fill") for r in lat.findall(f"{SVG}rect") if float(r.get("height", 0)) > 0}
        self.assertTrue({"#4e79a7", "#e15759"} <= fills)

    def test_page(self):
        self.assertTrue(self.html.startswith("<!DOCTYPE html>"))
        self.assertIn('id="run"', self.html)
        self.assertIn('id="verdict">every check passed<', self.html)
        table = re.search(r'<table id="summary">(.*?)</table>', self.html, re.S)
        self.assertIsNotNone(table)
        self.assertEqual(len(re.findall(r"<tr>", table.group(1))), 1 + 4)
        # self-contained: no script, no external reference
        self.assertNotIn("<script", self.html)
        self.assertIsNone(re.search(r'(src|href)="(https?:)?//', self.html))

    def test_chromium_renders(self):
        exe = chromium()
        if not exe:
            self.skipTest("no chromium installed: the rendering check is skipped")
        url = "file://" + self.path
        flags = ["--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars"]
        p = subprocess.run([exe, *flags, "--dump-dom", url], capture_output=True, text=True,
                           timeout=120)
        self.assertEqual(p.returncode, 0, p.stderr[-2000:])
        dom = p.stdout
        for want in ('id="memory"', 'id="timeline"', 'id="latency"', 'id="summary"',
                     'every check passed'):
            self.assertIn(want, dom)
        self.assertEqual(len(re.findall(r"<svg\b", dom)), 3)
        png = os.path.join(self.dir, "report.png")
        p = subprocess.run([exe, *flags, "--window-size=1000,1600", f"--screenshot={png}", url],
                           capture_output=True, text=True, timeout=120)
        self.assertEqual(p.returncode, 0, p.stderr[-2000:])
        with open(png, "rb") as f:
            self.assertEqual(f.read(8), b"\x89PNG\r\n\x1a\n")


if __name__ == "__main__":
    DEVRT = os.path.abspath(sys.argv[1])
    unittest.main(argv=[sys.argv[0], "-v"])
