"""python -m devrt info|stats [--device N] [--tag TAG]: JSON on stdout.

info: devrt.info() (package_build: how pip built the package's libdevrt); stats: {"stats":
devrt.stats(tag), "figures": devrt.figures()}, the process's own runtime (a fresh process: zeros,
unless DEVRT_* configured something). A failure prints {"error": STATUS, "message": ...} and
exits 1; a bad option exits 2.
"""
import argparse
import json
import re
import sys

import devrt


def _ordinal(v):
    if not re.fullmatch(r"0|[1-9][0-9]*", v, re.ASCII):
        raise argparse.ArgumentTypeError(f"{v!r} is not a decimal number")
    return int(v)


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m devrt", description="devrt's runtime as JSON")
    p.add_argument("command", choices=["info", "stats"])
    p.add_argument("--device", type=_ordinal, default=0, help="the device's ordinal (default 0)")
    p.add_argument("--tag", default=None, help="stats: one tag's counters (default: overall)")
    a = p.parse_args(argv)
    try:
        if a.command == "info":
            doc = devrt.info(a.device)
        else:
            doc = {"tag": a.tag, "stats": devrt.stats(a.tag, device=a.device),
                   "figures": devrt.figures(a.device)}
    except devrt.DevrtError as e:
        print(json.dumps({"error": e.status_name, "message": e.message}))
        return 1
    except devrt.DevrtLibraryError as e:
        print(json.dumps({"error": "NO_LIBRARY", "message": str(e)}))
        return 1
    print(json.dumps(doc, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
