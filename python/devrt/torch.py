"""devrt.torch: devrt as PyTorch's CUDA allocator, and its figures under PyTorch's names.

    import devrt.torch
    devrt.torch.use()              # before the first CUDA tensor
    x = torch.empty(1 << 20, device="cuda")
    devrt.torch.memory_stats()     # {"allocated_bytes.all.current": ..., ...}

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
"""
import contextlib
import ctypes

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


def _ordinal(device):
    if device is None:
        return None
    if isinstance(device, int):
        return device
    if isinstance(device, str):  # "cuda" or "cuda:N"
        return int(device.split(":", 1)[1]) if ":" in device else 0
    index = getattr(device, "index", None)  # a torch.device; index None: the current one, 0 here
    return 0 if index is None else int(index)


def use(device=None):
    """Installs devrt as PyTorch's CUDA allocator (CUDAPluggableAllocator over libdevrt's
    devrt_torch_alloc / devrt_torch_free, then change_current_allocator). PyTorch takes it for
    every device; `device` (an ordinal, "cuda:N" or a torch.device), when given, has devrt's
    runtime of that device created now, so a configuration or device error is raised here
    rather than by the first allocation. Must run before PyTorch initialises CUDA: DevrtError
    (INVALID_STATE) after. Calling it again once installed returns the same allocator."""
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
    ordinal = _ordinal(device)
    if ordinal is not None:
        _lib.runtime(ordinal)
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

    _lib.runtime(torch.cuda.current_device() if device is None else _ordinal(device))
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

    index = torch.cuda.current_device() if device is None else _ordinal(device)
    pool = mem_pool(index)
    torch._C._cuda_beginAllocateToPool(index, pool.id)
    try:
        yield pool
    finally:
        torch._C._cuda_endAllocateToPool(index, pool.id)
        torch._C._cuda_releasePool(index, pool.id)


def memory_stats(device=0):
    """devrt's figures for PyTorch's allocations on `device`, keyed like torch.cuda.memory_stats()
    where the meaning is the same: allocated_bytes.all.{current,peak,allocated,freed} and
    allocation.all.{current,peak,allocated,freed} from the "torch" tag's statistics;
    reserved_bytes.all.{current,peak} = what devrt's device pool holds of the device now and at
    most (devrt.pool(): every tag's memory, CuPy's too). devrt's own figures follow as
    "devrt.<name>" (limit_bytes 0: no budget)."""
    from . import figures, pool, stats

    ordinal = _ordinal(device) or 0
    s = stats(ordinal, TAG)
    f = figures(ordinal)
    out = {}
    for key, c in (("allocated_bytes", s["bytes"]), ("allocation", s["count"])):
        out[f"{key}.all.current"] = c["current"]
        out[f"{key}.all.peak"] = c["peak"]
        out[f"{key}.all.allocated"] = c["total"]
        out[f"{key}.all.freed"] = c["total"] - c["current"]
    p = pool(ordinal)
    out["reserved_bytes.all.current"] = p["reserved_current"]
    out["reserved_bytes.all.peak"] = p["reserved_high"]
    for name in ("live_bytes", "pending_bytes", "cached_bytes", "limit_bytes", "available_bytes",
                 "cache_hits", "cache_misses"):
        out[f"devrt.{name}"] = f[name]
    return out
