"""devrt.bench: benchmarks run from Python: `python -m devrt.bench torch` (torch_bench.py).

The training workloads it times live in devrt/bench/workloads.py, which the GPU tests use too.
"""
