"""devrt.torch: devrt as PyTorch's CUDA allocator, and its figures under PyTorch's names.

    import devrt.torch
    devrt.torch.use()              # before the first CUDA tensor
    x = torch.empty(1 << 20, device="cuda")
    devrt.torch.memory_stats()     # {"allocated_bytes.all.current": ..., ...}
    print(devrt.torch.memory_summary())

PyTorch is imported only by use(), mem_pool() and segments(); memory_stats() reads devrt alone.
Allocations PyTorch makes through devrt carry the tag "torch" (include/devrt/torch.h).
torch.cuda.empty_cache() gives devrt's unused memory back (devrt.release() on the current device).

PyTorch 2.11's pluggable-allocator interface cannot raise torch.OutOfMemoryError for a refused
allocation: it takes the NULL that devrt_torch_alloc returns as the tensor's data pointer without
a check, and the first kernel that touches it faults the CUDA context. Keep devrt's budget above
what the program needs, or use segments(): PyTorch's own allocator over segments from devrt,
where a refusal is a torch.OutOfMemoryError (docs/python.md). Tensor.record_stream(s) reaches
devrt through devrt_torch_record_stream: the tensor's free makes its own stream wait for s's work
first.
torch.cuda.graph works under use(): memory for the capture is held until
release_graph_memory() (include/devrt/torch.h, docs/graphs.md).
"""
import contextlib
import ctypes
import os
import sys

from . import _lib

TAG = "torch"
_allocator = None
_keep = []  # ctypes callbacks handed to PyTorch: they must live as long as the allocator
empty_cache_errors = []  # exceptions raised inside the empty_cache callback (it cannot raise)


def record_stream_supported():
    """Whether Tensor.record_stream reaches devrt: libdevrt exports devrt_torch_record_stream."""
    return hasattr(_lib.load(), "devrt_torch_record_stream")


def _empty_cache():
    """PyTorch's reset hook, called by torch.cuda.empty_cache(): devrt.release() on the current
    device."""
    try:
        import torch

        from . import release

        release(torch.cuda.current_device())
    except Exception as e:  # an exception cannot cross back into PyTorch's C++
        empty_cache_errors.append(e)


def _device(device):
    """devrt's ordinal for a device argument; None: PyTorch's current device once PyTorch has
    initialised CUDA, else 0 (PyTorch is never imported here)."""
    if device is None:
        torch = sys.modules.get("torch")
        return torch.cuda.current_device() if torch and torch.cuda.is_initialized() else 0
    return _lib.ordinal(device)


def use(device=None):
    """Installs devrt as PyTorch's CUDA allocator (CUDAPluggableAllocator over libdevrt's
    devrt_torch_alloc / devrt_torch_free, then change_current_allocator). PyTorch takes it for
    every device; `device` (an ordinal, "cuda:N" or a torch.device), when given, has devrt's
    runtime of that device created now, so a configuration or device error is raised here
    rather than by the first allocation. Must run before PyTorch initialises CUDA: DevrtError
    (INVALID_STATE) after. Calling it again once installed returns the same allocator.
    Runtimes created from then on default to the arena leaf (DEVRT_ARENA=1: address ranges grown
    page by page, blocks split and merged, as expandable segments), which reserves less than
    caching over the pool on training workloads (docs/performance.md); DEVRT_ARENA=0 in the
    environment, or devrt.configure(arena=False) before, keeps caching over the pool."""
    global _allocator
    if _allocator is not None:
        return _allocator
    import torch  # only here: devrt works without PyTorch

    path = _lib.path()
    if torch.cuda.is_initialized():
        raise _lib.DevrtError(
            "INVALID_STATE",
            "devrt.torch.use: PyTorch has already initialised CUDA and its allocator; call "
            "devrt.torch.use() before the first CUDA tensor or torch.cuda call",
        )
    os.environ.setdefault("DEVRT_ARENA", "1")  # read when a runtime is created
    if device is not None:
        _lib.runtime(device)
    alloc = torch.cuda.memory.CUDAPluggableAllocator(path, "devrt_torch_alloc", "devrt_torch_free")
    hooks = alloc.allocator()
    reset = ctypes.CFUNCTYPE(None)(_empty_cache)
    hooks.set_reset_fn(ctypes.cast(reset, ctypes.c_void_p).value)
    _keep.append(reset)
    if record_stream_supported():
        fn = _lib.load().devrt_torch_record_stream
        hooks.set_record_stream_fn(ctypes.cast(fn, ctypes.c_void_p).value)
    try:
        torch.cuda.memory.change_current_allocator(alloc)
    except RuntimeError as e:  # "Can't swap an already initialized allocator"
        raise _lib.DevrtError(
            "INVALID_STATE", f"devrt.torch.use: PyTorch refused the allocator: {e}"
        ) from e
    _allocator = alloc
    return alloc


def mem_pool(device=None):
    """A torch.cuda.MemPool whose segments devrt allocates, for torch.cuda.use_mem_pool(pool):
    PyTorch's own caching allocator stays installed and carves tensors out of segments that come
    from devrt's stack (tag "torch", on the stream current at the segment's allocation). devrt
    then sees segments, not tensors (its budget bounds PyTorch's reserved bytes; its statistics
    and log count segments), and a segment devrt refuses goes through PyTorch's own out-of-memory
    path: PyTorch releases its cached segments, retries, then raises torch.OutOfMemoryError, and
    the process goes on. The refusal's cause (devrt's budget, with its figures) is
    devrt.last_error() on the allocating thread. The choice beside use(), which makes devrt the
    allocator of every tensor but cannot raise torch.OutOfMemoryError. `device`: an ordinal,
    "cuda:N" or a torch.device; None: PyTorch's current device. Its runtime is created now."""
    import torch

    _lib.runtime(torch.cuda.current_device() if device is None else device)
    alloc = torch.cuda.memory.CUDAPluggableAllocator(_lib.path(), "devrt_torch_alloc",
                                                      "devrt_torch_free")
    _keep.append(alloc)
    return torch.cuda.MemPool(alloc.allocator())


@contextlib.contextmanager
def segments(device=None):
    """with devrt.torch.segments(): every allocation PyTorch makes on the device inside the block,
    from any thread and on any stream (autograd's backward threads included, which
    torch.cuda.use_mem_pool leaves out), comes from a mem_pool(): refusals raise
    torch.OutOfMemoryError. Yields the MemPool. Routes through PyTorch's private
    torch._C._cuda_beginAllocateToPool / _cuda_endAllocateToPool / _cuda_releasePool, the
    bindings torch.cuda.use_mem_pool is built on."""
    import torch

    index = torch.cuda.current_device() if device is None else _lib.ordinal(device)
    pool = mem_pool(index)
    torch._C._cuda_beginAllocateToPool(index, pool.id)
    try:
        yield pool
    finally:
        torch._C._cuda_endAllocateToPool(index, pool.id)
        torch._C._cuda_releasePool(index, pool.id)


# torch.cuda.memory_stats() keys memory_stats() leaves out: devrt keeps no figure of that meaning
# (docs/python.md says why for each). The GPU test checks that these and memory_stats()'s own
# keys are PyTorch's key set.
_METRICS = ("current", "peak", "allocated", "freed")


def _keys(stats, pools):
    return [f"{k}.{p}.{m}" for k in stats for p in pools for m in _METRICS]


NOT_KNOWN = sorted(
    _keys(("allocation", "active", "allocated_bytes", "active_bytes", "requested_bytes",
           "reserved_bytes"), ("small_pool", "large_pool"))
    + _keys(("segment", "inactive_split", "inactive_split_bytes"), ("all", "small_pool",
                                                                    "large_pool"))
    + ["reserved_bytes.all.allocated", "reserved_bytes.all.freed"]
    + [f"oversize_{k}.{m}" for k in ("allocations", "segments") for m in _METRICS]
    + ["max_split_size", "num_device_alloc", "num_device_free", "num_sync_all_streams"])


def memory_stats(device=None):
    """devrt's figures for PyTorch's allocations on `device` (None: PyTorch's current one) under
    torch.cuda.memory_stats()'s keys, where devrt has a figure of the same meaning (NOT_KNOWN
    lists the others), sorted by key as PyTorch's are:
    allocation, allocated_bytes, requested_bytes .all.{current,peak,allocated,freed}: the "torch"
    tag's statistics (devrt counts the sizes asked for, so allocated_bytes = requested_bytes);
    active, active_bytes: the same figures (devrt enqueues every free at once, stream-ordered
    after the streams recorded for it, so no freed block stays active);
    reserved_bytes.all.{current,peak}: what devrt's device pool holds of the device now and at
    most (every tag's memory, CuPy's too); num_alloc_retries, num_ooms: allocations refused once
    and tried again after the pending frees and the cache, and those refused after that too
    (devrt_torch_stats). devrt's own figures follow as "devrt.<name>" (limit_bytes 0: no
    budget)."""
    import ctypes

    from . import _lib, figures, pool, stats

    d = _device(device)
    t = _lib.TorchStats()
    _lib.check(_lib.load().devrt_torch_stats_get(d, ctypes.byref(t)))
    s, f, p = stats(TAG, device=d), figures(d), pool(d)
    out = {}
    for key, c in (("allocation", s["count"]), ("active", s["count"]),
                   ("allocated_bytes", s["bytes"]), ("active_bytes", s["bytes"]),
                   ("requested_bytes", s["bytes"])):
        for m, v in zip(_METRICS, (c["current"], c["peak"], c["total"], c["total"] - c["current"])):
            out[f"{key}.all.{m}"] = v
    out["reserved_bytes.all.current"] = p["reserved_current"]
    out["reserved_bytes.all.peak"] = p["reserved_high"]
    out["num_alloc_retries"], out["num_ooms"] = t.alloc_retries, t.ooms
    for name in ("live_bytes", "pending_bytes", "cached_bytes", "limit_bytes", "available_bytes",
                 "cache_hits", "cache_misses"):
        out[f"devrt.{name}"] = f[name]
    out["devrt.graph_held_bytes"] = t.graph_held_bytes
    return dict(sorted(out.items()))


def release_graph_memory(device=None):
    """Gives back what devrt holds for CUDA graphs on `device` (None: PyTorch's current one):
    under use(), an allocation PyTorch makes while torch.cuda.graph captures, and any tensor
    freed on a capturing stream, is held when PyTorch frees it, since a replay may still use it.
    Call this once the graphs are deleted; it waits for all work on the device. Returns the bytes
    given back (devrt_torch_graph_release)."""
    import ctypes

    got = ctypes.c_uint64(0)
    _lib.check(_lib.load().devrt_torch_graph_release(_device(device), ctypes.byref(got)))
    return got.value


def reset_peak_memory_stats(device=None):
    """torch.cuda.reset_peak_memory_stats() for devrt: every ".peak" of memory_stats(device)
    back to its current figure (devrt.reset_peaks(): the statistics of every tag and the device
    pool's high-water marks)."""
    from . import reset_peaks

    reset_peaks(_device(device))


def _size(n):
    """torch.cuda.memory_summary()'s sizes: a whole number and a unit, e.g. "  4096 KiB"."""
    unit = "B  "
    for u in ("KiB", "MiB", "GiB", "TiB"):
        if n < 768 * 1024:
            break
        unit, n = u, n // 1024
    return f"{n:6d} {unit}"


def memory_summary(device=None, abbreviated=False):
    """memory_stats(device) as text in torch.cuda.memory_summary()'s layout (a row per figure:
    current, peak, total allocated, total freed; "-" where devrt has no figure), then devrt's
    budget and cache. abbreviated is taken as PyTorch takes it: devrt's summary has no per-pool
    rows to leave out either way."""
    m, d = memory_stats(device), _device(device)
    rows = (("Allocated memory", "allocated_bytes", _size),
            ("Active memory", "active_bytes", _size),
            ("Requested memory", "requested_bytes", _size),
            ("GPU reserved memory", "reserved_bytes", _size), ("Allocations", "allocation", str),
            ("Active allocs", "active", str))
    rule = "|" + "-" * 75 + "|"
    title = f"devrt memory summary, device {d}: tag torch (reserved: the device pool)"
    lines = ["|" + "=" * 75 + "|", f"|{title:^75}|",
             rule, f"| {'Metric':<21} | Cur Usage  | Peak Usage | Tot Alloc  | Tot Freed  |", rule]
    for title, key, fmt in rows:
        cells = [fmt(m[k]) if k in m else "-" for k in (f"{key}.all.{x}" for x in _METRICS)]
        lines.append(f"| {title:<21} | " + " | ".join(f"{c:>10}" for c in cells) + " |")
    size = {k: _size(m[f"devrt.{k}_bytes"]).strip() for k in ("limit", "cached", "pending")}
    notes = (f"devrt: budget {size['limit'] if m['devrt.limit_bytes'] else 'none'}, cached "
             f"{size['cached']}, pending {size['pending']}",
             f"devrt: cache hits {m['devrt.cache_hits']}, misses {m['devrt.cache_misses']}")
    lines += [rule, *(f"| {x:<73} |" for x in notes), "|" + "=" * 75 + "|"]
    return "\n".join(lines) + "\n"
