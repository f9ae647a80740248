#!/usr/bin/env python3
"""bench/ab.py: compares two builds of devrt on one `devrt bench` suite, as alternating processes.

    python3 bench/ab.py --arm A=build-old/devrt --arm B=build/devrt --runs 5 --suite launch [--out DIR]

Each round runs every arm once (the order rotates by round), each run `devrt bench SUITE --json`
in a process of its own. Name the same binary twice for an A/A pair: the spread between two arms
of one binary is the noise that a difference between builds must exceed. Prints, per row, each
arm's median ratio over its runs with the runs' range, and each arm's median against the first
arm's; writes every run's JSON to DIR when given.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys


def run(binary, suite, extra):
    out = subprocess.run([binary, "bench", suite, "--json", *extra], check=True, capture_output=True, text=True)
    return json.loads(out.stdout)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--arm", action="append", required=True, help="NAME=path/to/devrt (two or more)")
    ap.add_argument("--suite", required=True)
    ap.add_argument("--runs", type=int, default=5, help="processes per arm")
    ap.add_argument("--out", help="folder for each run's JSON")
    ap.add_argument("extra", nargs="*", help="more arguments for devrt bench (after --)")
    a = ap.parse_args()
    arms = [tuple(x.split("=", 1)) for x in a.arm]
    ratios = {name: {} for name, _ in arms}  # arm -> row -> [ratio per run]
    for i in range(a.runs):
        for k in range(len(arms)):
            name, binary = arms[(i + k) % len(arms)]
            doc = run(binary, a.suite, a.extra)
            if a.out:
                os.makedirs(a.out, exist_ok=True)
                with open(os.path.join(a.out, f"{a.suite}-{name}-{i}.json"), "w") as f:
                    json.dump(doc, f)
            for row in doc["results"]:
                ratios[name].setdefault(row["op"], []).append(row["ratio"])
        print(f"round {i + 1}/{a.runs} done", file=sys.stderr, flush=True)
    first = arms[0][0]
    names = [n for n, _ in arms]
    print(f"devrt bench {a.suite}: median ratio over {a.runs} processes per arm [min, max]; "
          f"last columns: each arm's median / {first}'s")
    print(f"{'row':<26}" + "".join(f"{n:>26}" for n in names) + "".join(f"{n + '/' + first:>12}" for n in names[1:]))
    for row in ratios[first]:
        med = {n: statistics.median(ratios[n][row]) for n in names if row in ratios[n]}
        cells = "".join(f"{med[n]:>9.4g} [{min(ratios[n][row]):.4g}, {max(ratios[n][row]):.4g}]" for n in names if n in med)
        rel = "".join(f"{med[n] / med[first]:>12.3f}" for n in names[1:] if n in med)
        print(f"{row:<26}{cells}{rel}")


if __name__ == "__main__":
    main()
