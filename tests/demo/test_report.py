"""test_report.py: `devrt demo --report DIR` writes one self-contained page: every inline SVG is
valid XML (python3's xml.etree) with its marks drawn, the page has the run line, the verdict, the
table (a row per tenant) and the three charts, and loads nothing from elsewhere. Where Chromium is
installed, headless Chromium renders the page (its DOM dump has the same elements, and a
screenshot is written); where it is not, that part is skipped and says so. The table's numbers
read as the terminal's; with fewer stamps than launches (--stamps) the timeline is thinned evenly
over the whole run and says so.

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

    def test_numbers_as_on_the_terminal(self):
        # the page's table shows each number as the terminal's does (rates "1.23M", bytes "MiB")
        table = re.search(r'<table id="summary">(.*?)</table>', self.html, re.S).group(1)
        head = re.findall(r"<th>(.*?)</th>", table)
        self.assertEqual(head[4:7], ["rows/s", "GB/s", "p50 alone"])
        rows = [re.findall(r"<td>(.*?)</td>", r) for r in re.findall(r"<tr>(.*?)</tr>", table)[1:]]
        for r in rows:
            self.assertRegex(r[4], r"^[0-9.]+[kMGT]?$")  # never 3.78e+07
            self.assertRegex(r[5], r"^[0-9]+\.[0-9]{2}$")
            self.assertRegex(r[10], r"^[0-9.]+ (B|KiB|MiB|GiB) / [0-9.]+ (B|KiB|MiB|GiB)$")
        self.assertRegex(rows[0][6], r"^[0-9.]+ (us|ms)$")
        self.assertNotIn("e+", table)

    def test_thinned_timeline_spans_the_run(self):
        # a stream with more launches than --stamps is thinned evenly: its row still reaches the
        # end of the run, and the page says which rows show 1 launch in N
        with tempfile.TemporaryDirectory() as d:
            e = dict(os.environ, DEVRT_BACKEND="host")
            p = subprocess.run([DEVRT, "demo", "--scale", "0.01", "--queries", "2", "--alone",
                                "40", "--chunk", "8192", "--quiet", "--stamps", "64", "--report",
                                d], capture_output=True, text=True, env=e, timeout=600)
            self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
            with open(os.path.join(d, "index.html"), encoding="utf-8") as f:
                html = f.read()
        self.assertTrue('<p id="thinned">Each stream stamps 64 launches' in html, "no thinning")
        tl = ET.fromstring(re.search(r'<svg id="timeline".*?</svg>', html, re.S).group(0))
        texts = tl.findall(f"{SVG}text")
        label = {t.text: float(t.get("y")) for t in texts}
        thinned = [t for t in texts if (t.text or "").startswith("1 in ")]
        self.assertTrue(thinned)
        rects = [(float(r.get("y")), float(r.get("x")) + float(r.get("width")))
                 for r in tl.findall(f"{SVG}rect") if r.get("height") == "13"]
        end = max(x for _, x in rects)
        row = label["t0 scan"] - 11
        self.assertIn(label["t0 scan"], {float(t.get("y")) for t in thinned})
        self.assertGreater(max(x for y, x in rects if y == row), 90 + 0.9 * (end - 90))

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
