"""devrt.torch: devrt as PyTorch's CUDA allocator, and its figures under PyTorch's names.

    import devrt.torch
    devrt.torch.use()              # before the first CUDA tensor
    x = torch.empty(1 << 20, device="cuda")
    devrt.torch.memory_stats()     # {"allocated_bytes.all.current": ..., ...}

PyTorch is imported only by use(); memory_stats() reads devrt alone. Allocations PyTorch makes
through devrt carry the tag "torch" (include/devrt/torch.h).
"""
from . import _lib

TAG = "torch"
_allocator = None


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
    try:
        torch.cuda.memory.change_current_allocator(alloc)
    except RuntimeError as e:  # "Can't swap an already initialized allocator"
        raise _lib.DevrtError(
            "INVALID_STATE", f"devrt.torch.use: PyTorch refused the allocator: {e}"
        ) from e
    _allocator = alloc
    return alloc


def memory_stats(device=0):
    """devrt's figures for PyTorch's allocations on `device`, keyed like torch.cuda.memory_stats()
    where the meaning is the same: allocated_bytes.all.{current,peak,allocated,freed} and
    allocation.all.{current,peak,allocated,freed} from the "torch" tag's statistics;
    reserved_bytes.all.current = the whole stack's live + pending + cached bytes (every tag).
    devrt's own figures follow as "devrt.<name>" (limit_bytes 0: no budget)."""
    from . import figures, stats

    ordinal = _ordinal(device) or 0
    s = stats(ordinal, TAG)
    f = figures(ordinal)
    out = {}
    for key, c in (("allocated_bytes", s["bytes"]), ("allocation", s["count"])):
        out[f"{key}.all.current"] = c["current"]
        out[f"{key}.all.peak"] = c["peak"]
        out[f"{key}.all.allocated"] = c["total"]
        out[f"{key}.all.freed"] = c["total"] - c["current"]
    out["reserved_bytes.all.current"] = f["live_bytes"] + f["pending_bytes"] + f["cached_bytes"]
    for name in ("live_bytes", "pending_bytes", "cached_bytes", "limit_bytes", "available_bytes",
                 "cache_hits", "cache_misses"):
        out[f"devrt.{name}"] = f[name]
    return out
