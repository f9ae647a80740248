#!/usr/bin/env python3
"""tools/check_layers.py: src/'s folders are layers, and each may use only itself and those below.

    python3 tools/check_layers.py [--objects DIR] [--svg FILE]

Reads every #include "..." of src/ and fails (exit 1, one line per offence) on an include of a
higher folder, a folder missing from LAYERS, or docs/architecture.md listing another order.
--objects DIR also reads the symbols of the library's compiled objects under DIR (nm): a call or
a variable defined in a higher folder fails too, which a declaration placed below its definition
would hide from the includes. --svg FILE writes the picture of the layers that
docs/architecture.md shows, from LAYERS.
"""
import argparse
import os
import re
import subprocess
import sys

# The layers, bottom first: the one place the order is written (docs/architecture.md repeats it,
# and this check fails when the two differ).
LAYERS = ["core", "driver", "backend", "timeline", "memory", "partition", "block", "launch",
          "sync", "multi", "runtime"]

ROOT = os.environ.get("DEVRT_LAYERS_ROOT") or os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))  # the tree to check (its test points it at a tree of its own)
SRC = os.path.join(ROOT, "src")


def folder_of(path):
    rel = os.path.relpath(path, SRC)
    return None if rel.startswith("..") else rel.split(os.sep)[0]


def includes():
    """(file, line, included folder) for every quoted include of src/ that names a src/ file."""
    for d, _, files in os.walk(SRC):
        for f in sorted(files):
            if not f.endswith((".c", ".h")):
                continue
            path = os.path.join(d, f)
            with open(path) as fh:
                for n, line in enumerate(fh, 1):
                    m = re.match(r'\s*#\s*include\s+"([^"]+)"', line)
                    if m:
                        target = os.path.normpath(os.path.join(d, m.group(1)))
                        if os.path.exists(target) and folder_of(target):
                            yield path, n, folder_of(target)


def symbols(objdir):
    """(folder, symbol, defining folder) for every symbol an object of src/ uses from another."""
    defs, uses = {}, []
    for d, _, files in os.walk(objdir):
        for f in files:
            m = re.search(r"src/([^/]+)/([^/]+\.c)\.o$", os.path.join(d, f))
            if not m or not os.path.exists(os.path.join(SRC, m.group(1), m.group(2))):
                continue  # not the library's, or left by a source since moved
            out = subprocess.run(["nm", os.path.join(d, f)], capture_output=True, text=True,
                                 check=True).stdout
            for line in out.splitlines():
                p = line.split()
                if len(p) == 3 and p[1] in "TDBRCV":
                    defs[p[2]] = m.group(1)
                elif len(p) == 2 and p[0] == "U":
                    uses.append((m.group(1), p[1]))
    return [(f, s, defs[s]) for f, s in uses if s in defs and defs[s] != f]


def docs_order():
    """The order docs/architecture.md gives, bottom first (its line "Layers, bottom first: ...")."""
    with open(os.path.join(ROOT, "docs", "architecture.md")) as fh:
        for line in fh:
            m = re.match(r"Layers, bottom first: (.*)\.$", line.strip())
            if m:
                return [x.strip(" `") for x in m.group(1).split(",")]
    return None


def svg(path):
    """Boxes, one per layer, the top layer first: what may call what reads downwards."""
    w, h, gap = 420, 34, 10
    rows = list(reversed(LAYERS))
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w + 40}" '
           f'height="{len(rows) * (h + gap) + 30}" font-family="sans-serif" font-size="15">']
    for i, name in enumerate(rows):
        y = 15 + i * (h + gap)
        out.append(f'<rect x="20" y="{y}" width="{w}" height="{h}" rx="6" fill="#eef3fb" '
                   f'stroke="#4a6fa5"/><text x="{20 + w / 2}" y="{y + 22}" '
                   f'text-anchor="middle">src/{name}/</text>')
    out.append("</svg>")
    with open(path, "w") as fh:
        fh.write("\n".join(out) + "\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--objects", help="a build folder holding the library's objects")
    ap.add_argument("--svg", help="write the picture of the layers here")
    a = ap.parse_args()
    rank = {name: i for i, name in enumerate(LAYERS)}
    bad = []
    present = sorted(x for x in os.listdir(SRC) if os.path.isdir(os.path.join(SRC, x)))
    bad += [f"src/{x}/: a folder that is no layer (add it to LAYERS)" for x in present
            if x not in rank]
    for path, n, to in includes():
        fr = folder_of(path)
        if fr in rank and to in rank and rank[to] > rank[fr]:
            bad.append(f"{os.path.relpath(path, ROOT)}:{n}: includes src/{to}/, a higher layer "
                       f"than src/{fr}/")
    if a.objects:
        edges = symbols(a.objects)
        if not edges:
            bad.append(f"--objects {a.objects}: no objects of src/ found there")
        for fr, sym, to in sorted(set(edges)):
            if fr in rank and to in rank and rank[to] > rank[fr]:
                bad.append(f"src/{fr}/ uses {sym}, defined in src/{to}/, a higher layer")
    if docs_order() != LAYERS:
        bad.append("docs/architecture.md: its line \"Layers, bottom first: ...\" does not list "
                   "LAYERS in order")
    if a.svg:
        svg(a.svg)
    for line in bad:
        print(line)
    print(f"layers: {len(LAYERS)} folders, {'ok' if not bad else f'{len(bad)} offences'}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
