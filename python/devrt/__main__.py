"""python -m devrt info|stats [--ordinal N] [--tag TAG]: JSON on stdout.

info: devrt.info(); stats: {"stats": devrt.stats(tag), "figures": devrt.figures()}, the
process's own runtime (a fresh process: zeros, unless DEVRT_* configured something).
A failure prints {"error": STATUS, "message": ...} and exits 1.
"""
import argparse
import json
import sys

import devrt


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m devrt", description="devrt's runtime as JSON")
    p.add_argument("command", choices=["info", "stats"])
    p.add_argument("--ordinal", type=int, default=0)
    p.add_argument("--tag", default=None, help="stats: one tag's counters (default: overall)")
    a = p.parse_args(argv)
    try:
        if a.command == "info":
            doc = devrt.info(a.ordinal)
        else:
            doc = {"tag": a.tag, "stats": devrt.stats(a.ordinal, a.tag), "figures": devrt.figures(a.ordinal)}
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
