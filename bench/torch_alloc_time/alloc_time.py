"""alloc_time.py ARM WORKLOAD: the time a training step spends inside PyTorch's allocator.

ARM: devrt (devrt.torch.use()'s defaults: the stack over the arena leaf), caching (DEVRT_ARENA=0:
the caching layer over the pool), devrt1m (caching with DEVRT_CACHE_MAX_CLASS=1048576) or floor (floor.c: exact-size free lists over cudaMalloc, a lower bound for any allocator). The
allocator's two entry points are wrapped by shim.c, which times every call; after 6 warm-up steps
and STEPS (15) timed ones, prints one JSON line: step time median, allocator ms a step, calls a
step and ns a call. Build and run (docs/performance.md):

  gcc -O2 -shared -fPIC -o /tmp/shim.so bench/torch_alloc_time/shim.c -ldl
  gcc -O2 -shared -fPIC -I/usr/local/cuda/include bench/torch_alloc_time/floor.c \
      -L/usr/local/cuda/lib64 -lcudart -o /tmp/floor.so
  DEVRT_LIBRARY=build/libdevrt.so python3 bench/torch_alloc_time/alloc_time.py devrt resnet50
"""
import ctypes
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))
import devrt  # noqa: E402
import torch  # noqa: E402
from devrt import _lib  # noqa: E402
from devrt.bench import workloads as W  # noqa: E402

arm, name = sys.argv[1], sys.argv[2]
shim_path = os.environ.get("SHIM", "/tmp/shim.so")
shim = ctypes.CDLL(shim_path, mode=ctypes.RTLD_GLOBAL)
if arm.startswith("devrt") or arm == "caching":
    # read when the runtime is created, on first use; devrt.torch.use() defaults it to 1
    os.environ["DEVRT_ARENA"] = "1" if arm == "devrt" else "0"
    if arm == "devrt1m":
        devrt.configure(cache_max_class=1 << 20)
    target = (_lib.path().encode(), b"devrt_torch_alloc", b"devrt_torch_free")
else:
    target = (os.environ.get("FLOOR", "/tmp/floor.so").encode(), b"floor_alloc", b"floor_free")
assert shim.shim_init(*target) == 0, f"shim_init{target}"
alloc = torch.cuda.memory.CUDAPluggableAllocator(shim_path, "shim_alloc", "shim_free")
torch.cuda.memory.change_current_allocator(alloc)

w = W.Workload(name, dict(W.CONFIGS[name]), 0)
for _ in range(6):
    w.step().item()
torch.cuda.synchronize()
before, after = (ctypes.c_uint64 * 4)(), (ctypes.c_uint64 * 4)()  # alloc ns, allocs, free ns, frees
shim.shim_read(before)
steps, times = int(os.environ.get("STEPS", 15)), []
for _ in range(steps):
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    w.step().item()
    times.append((time.perf_counter() - t0) * 1e3)
shim.shim_read(after)
d = [(after[i] - before[i]) / steps for i in range(4)]
print(json.dumps({"arm": arm, "w": name, "step_ms": round(sorted(times)[steps // 2], 2),
                  "alloc_ms": round((d[0] + d[2]) / 1e6, 3), "allocs": d[1], "frees": d[3],
                  "ns_alloc": round(d[0] / max(d[1], 1)), "ns_free": round(d[2] / max(d[3], 1))}))
