"""torch_bench.py: `python -m devrt.bench torch`: devrt against PyTorch's own allocators on real
training workloads (devrt/bench/workloads.py), each run in a process of its own per allocator:

  devrt       devrt.torch.use() with its defaults: the stack over the arena leaf (address ranges
              grown page by page, blocks split and merged), under the tag "torch"
  caching     devrt.torch.use() with DEVRT_ARENA=0: the stack's caching layer over the pool
  native      PyTorch's caching allocator
  expandable  PyTorch's caching allocator with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
              (segments grown in place by mapping more memory: what a user short of memory picks)
  async       PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync

For each workload, --procs rounds each run one process per allocator, the allocators' order
rotating from round to round; a process trains --warmup steps, then times --steps steps. Reported:
step time median and p90 over all timed steps of all rounds, peak reserved bytes (the largest of
the rounds: devrt's pool high-water mark, torch.cuda.max_memory_reserved() for the others), their
ratios to native, the goals of issue 26 (step time <= 1.02x native; peak reserved <= the smaller of
native and async), and the losses of the first round (same seed: they should agree). The
workload "empty" times torch.empty(n) + release per size (ns per allocation, median of rounds).

--record-log DIR runs each workload once with devrt only, with devrt's allocation log on
(DIR/<workload>.csv, for `devrt replay`); its timings are not a benchmark.
The library is found as devrt's package finds it (DEVRT_LIBRARY when set, else its own copy).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

from .workloads import CONFIGS, run

ALLOCATORS = ("devrt", "caching", "native", "expandable", "async")
# Each allocator's PYTORCH_CUDA_ALLOC_CONF (the parent's own is dropped: it would change them all).
ALLOC_CONF = {"expandable": "expandable_segments:True", "async": "backend:cudaMallocAsync"}
WORKLOADS = ("gpt", "resnet50", "varlen", "empty")
PKG_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def worker(spec, timeout=1200):
    """Runs one spec in a fresh process (its allocator's environment); returns its dict, or
    {"error": ...} with the process's stderr tail."""
    env = dict(os.environ)
    env.pop("PYTORCH_CUDA_ALLOC_CONF", None)
    env.pop("DEVRT_BACKEND", None)  # devrt under PyTorch is the cuda backend
    env.pop("DEVRT_ARENA", None)
    if spec["allocator"] in ALLOC_CONF:
        env["PYTORCH_CUDA_ALLOC_CONF"] = ALLOC_CONF[spec["allocator"]]
    if spec["allocator"] == "caching":
        env["DEVRT_ARENA"] = "0"
    env["PYTHONPATH"] = PKG_ROOT + os.pathsep + env.get("PYTHONPATH", "")
    p = subprocess.run([sys.executable, "-m", "devrt.bench", "_worker", json.dumps(spec)],
                       capture_output=True, text=True, env=env, timeout=timeout)
    lines = p.stdout.strip().splitlines()
    if p.returncode != 0 or not lines:
        return {"error": f"exit {p.returncode}", "stderr": p.stderr[-4000:], "spec": spec}
    return json.loads(lines[-1])


def _pct(v, q):
    v = sorted(v)
    return v[min(len(v) - 1, int(q * len(v)))]


def summarize(name, runs):
    """runs: allocator -> list of worker dicts. The workload's rows, ratios and goals."""
    out = {"workload": name, "allocators": {}}
    for a, docs in runs.items():
        bad = [d for d in docs if "error" in d]
        if bad:
            out["allocators"][a] = {"error": bad[0]["error"], "stderr": bad[0].get("stderr", "")}
            continue
        if name == "empty":
            sizes = docs[0]["ns_per_alloc"]
            out["allocators"][a] = {"ns_per_alloc": {
                n: statistics.median(d["ns_per_alloc"][n]["median"] for d in docs) for n in sizes}}
            continue
        steps = [t for d in docs for t in d["step_ms"]]
        out["allocators"][a] = {
            "step_ms_median": statistics.median(steps), "step_ms_p90": _pct(steps, 0.9),
            "proc_medians": [statistics.median(d["step_ms"]) for d in docs],
            "peak_reserved": max(d["peak_reserved"] for d in docs),
            "losses": docs[0]["losses"], "finite": all(d["finite"] for d in docs),
            "model": docs[0].get("model"), "device": docs[0]["device"], "torch": docs[0]["torch"]}
    rows = out["allocators"]
    ok = {a: r for a, r in rows.items() if "error" not in r}
    if name == "empty":
        if "devrt" in ok and "native" in ok:
            out["devrt_over_native"] = {n: ok["devrt"]["ns_per_alloc"][n] / v
                                        for n, v in ok["native"]["ns_per_alloc"].items()}
            out["goal_alloc_cost_met"] = all(r <= 1.0 for r in out["devrt_over_native"].values())
        return out
    if "native" in ok:
        base = ok["native"]
        for a, r in ok.items():
            r["time_vs_native"] = r["step_ms_median"] / base["step_ms_median"]
            r["reserved_vs_native"] = r["peak_reserved"] / base["peak_reserved"]
            n = min(len(r["losses"]), len(base["losses"]))
            pairs = zip(r["losses"][:n], base["losses"][:n])
            r["loss_max_rel_diff_vs_native"] = max(abs(x - y) / max(abs(y), 1e-12)
                                                   for x, y in pairs)
    if {"devrt", "native", "async"} <= set(ok):
        d = ok["devrt"]
        out["goal_time_met"] = d["time_vs_native"] <= 1.02
        out["goal_reserved_met"] = d["peak_reserved"] <= min(ok["native"]["peak_reserved"],
                                                             ok["async"]["peak_reserved"])
    if {"devrt", "expandable"} <= set(ok):  # the lowest reserved of PyTorch's own choices
        out["goal_reserved_vs_expandable_met"] = (ok["devrt"]["peak_reserved"] <=
                                                  ok["expandable"]["peak_reserved"])
    return out


def table(results):
    lines = []
    mib = 1 << 20
    for w in results:
        lines.append(f"{w['workload']}")
        for a, r in w["allocators"].items():
            if "error" in r:
                lines.append(f"  {a:10s} FAILED: {r['error']}: {r['stderr'].strip()[-300:]}")
            elif w["workload"] == "empty":
                cells = "  ".join(f"{int(n):>10d} B {v:8.0f} ns"
                                  for n, v in r["ns_per_alloc"].items())
                lines.append(f"  {a:10s} {cells}")
            else:
                lines.append(
                    f"  {a:10s} step {r['step_ms_median']:8.2f} ms median"
                    f" {r['step_ms_p90']:8.2f} p90"
                    f"  x{r.get('time_vs_native', float('nan')):.3f}"
                    f"  peak reserved {r['peak_reserved'] / mib:8.0f} MiB"
                    f"  x{r.get('reserved_vs_native', float('nan')):.3f}"
                    f"  last loss {r['losses'][-1]:.4f}"
                    f"  loss diff vs native"
                    f" {r.get('loss_max_rel_diff_vs_native', float('nan')):.2e}")
        for g in ("goal_time_met", "goal_reserved_met", "goal_reserved_vs_expandable_met",
                  "goal_alloc_cost_met"):
            if g in w:
                lines.append(f"  {g}: {'yes' if w[g] else 'NO'}")
    return "\n".join(lines)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["_worker"]:  # one measured process (spawned by the parent)
        print(json.dumps(run(json.loads(argv[1]))))
        return 0
    p = argparse.ArgumentParser(prog="python -m devrt.bench",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("suite", choices=["torch"])
    p.add_argument("--workloads", default=",".join(WORKLOADS),
                   help=f"comma-separated, of {', '.join(WORKLOADS)} (default: all)")
    p.add_argument("--allocators", default=",".join(ALLOCATORS))
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--procs", type=int, default=2, help="processes per allocator and workload")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", action="store_true", help="one JSON document instead of the table")
    p.add_argument("--record-log", metavar="DIR",
                   help="record devrt's allocation log of each workload to DIR/<workload>.csv")
    a = p.parse_args(argv)
    workloads = [w for w in a.workloads.split(",") if w]
    allocators = [x for x in a.allocators.split(",") if x]
    for w in workloads:
        if w not in CONFIGS:
            p.error(f"unknown workload {w!r}")
    for x in allocators:
        if x not in ALLOCATORS:
            p.error(f"unknown allocator {x!r}")
    base = {"steps": a.steps, "warmup": a.warmup, "seed": a.seed}
    if a.record_log:
        os.makedirs(a.record_log, exist_ok=True)
        out = []
        for w in workloads:
            if w == "empty":
                continue
            path = os.path.abspath(os.path.join(a.record_log, f"{w}.csv"))
            d = worker(dict(base, workload=w, allocator="devrt", log=path))
            out.append({"workload": w, "log": path, "error": d.get("error"),
                        "stderr": d.get("stderr", "")[-2000:] if "error" in d else None})
            text = f"{w}: FAILED {d['error']}\n{d['stderr']}" if "error" in d else f"{w}: {path}"
            print(json.dumps(out[-1]) if a.json else text, flush=True)
        return 1 if any(o["error"] for o in out) else 0
    results = []
    for w in workloads:
        runs = {x: [] for x in allocators}
        for r in range(a.procs):
            order = allocators[r % len(allocators):] + allocators[:r % len(allocators)]
            for x in order:
                runs[x].append(worker(dict(base, workload=w, allocator=x)))
        results.append(summarize(w, runs))
        if not a.json:
            print(table(results[-1:]), flush=True)
    if a.json:
        print(json.dumps({"steps": a.steps, "warmup": a.warmup, "procs": a.procs,
                          "results": results}, indent=1))
    failed = any("error" in r for w in results for r in w["allocators"].values())
    return 1 if failed else 0
