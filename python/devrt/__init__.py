"""devrt: Python access to devrt's process-wide runtimes over ctypes.

    import devrt
    devrt.configure(budget="60%")   # before the runtime's first use
    devrt.info()                    # backend, device, memory, stream pool
    devrt.stats(tag="torch")        # the statistics layer's counters
    devrt.figures()                 # the resource stack's figures
    devrt.torch.use()               # devrt as PyTorch's CUDA allocator (devrt/torch.py)
    devrt.cupy.use()                # devrt as CuPy's allocator (devrt/cupy.py)

libdevrt is the libdevrt.so next to this package, else DEVRT_LIBRARY (see _lib.py).
"""
import ctypes
import re

from . import _lib
from ._lib import DevrtError, DevrtLibraryError

__all__ = [
    "DevrtError",
    "DevrtLibraryError",
    "configure",
    "figures",
    "info",
    "last_error",
    "library_path",
    "pool",
    "reap",
    "release",
    "stats",
    "trim",
    "version",
]

# devrt_configure keeps the config's log_path pointer: the strings must live until exit.
_kept = []


def library_path():
    """The path libdevrt was loaded from."""
    return _lib.path()


def version():
    """libdevrt's version string."""
    return _lib._s(_lib.load().devrt_version())


def _budget(budget):
    """(budget_bytes, budget_percent) for bytes (int > 0, or a string of digits) or "N%", as
    DEVRT_BUDGET reads them: ASCII decimal digits without a sign, blank or leading zero."""
    if isinstance(budget, bool):
        pass  # True/False are not budgets
    elif isinstance(budget, int) and 0 < budget < 1 << 64:
        return budget, 0
    elif isinstance(budget, str):
        m = re.fullmatch(r"(0|[1-9][0-9]*)(%?)", budget)
        n = int(m.group(1)) if m else 0
        if m and m.group(2) and n < 1 << 32:
            return 0, n  # devrt_configure checks 1..100 and names the value
        if m and not m.group(2) and 0 < n < 1 << 64:
            return n, 0
    raise DevrtError(
        "INVALID_ARGUMENT",
        f"devrt.configure: budget={budget!r} is neither bytes (> 0) nor a percentage "
        "(\"1%\"..\"100%\"), as DEVRT_BUDGET takes",
    )


def configure(ordinal=0, budget=None, cache=None, log=None, log_format=None,
              cache_max_class=None):
    """Sets the configuration the runtime of `ordinal` is created with: devrt_config_init's
    defaults and DEVRT_* environment, then these overrides (None keeps them):
    budget: bytes (int) or "N%" of device memory; cache: bool (the caching layer);
    cache_max_class: bytes; larger allocations bypass the cache (0: 64 MiB, the largest class);
    log: allocation log file path; log_format: "csv" or "jsonl".
    Must run before the runtime's first use (DevrtError INVALID_STATE after)."""
    lib = _lib.load()
    cfg = _lib.Config()
    _lib.check(lib.devrt_config_init(ctypes.byref(cfg)))
    if budget is not None:
        cfg.budget_bytes, cfg.budget_percent = _budget(budget)
        if cfg.budget_bytes:
            cfg.budget_percent = 100  # ignored with budget_bytes, kept in range
    if cache is not None:
        cfg.cache = bool(cache)
    if cache_max_class is not None:
        cfg.cache_max_class = int(cache_max_class)
    if log is not None:
        b = str(log).encode()
        _kept.append(b)
        cfg.log_path = b
    if log_format is not None:
        if log_format not in ("csv", "jsonl"):
            raise DevrtError(
                "INVALID_ARGUMENT", f"devrt.configure: log_format={log_format!r} is not csv or jsonl"
            )
        cfg.log_jsonl = log_format == "jsonl"
    _lib.check(lib.devrt_configure(int(ordinal), ctypes.byref(cfg)))


def info(ordinal=0):
    """Facts about the runtime of `ordinal` (created on first use) and its device."""
    lib = _lib.load()
    rt = _lib.runtime(ordinal)
    ri, di = _lib.RuntimeInfo(), _lib.DeviceInfo()
    _lib.check(lib.devrt_runtime_info_get(rt, ctypes.byref(ri)))
    _lib.check(lib.devrt_device_info_get(rt, ctypes.byref(di)))
    host = _lib._s(ri.backend_name) == "host"  # like `devrt info --json`: nothing emulated as real
    return {
        "devrt": version(),
        "library": library_path(),
        "built_with_cuda": bool(lib.devrt_built_with_cuda()),
        "ordinal": ri.ordinal,
        "backend": _lib._s(ri.backend_name),
        "backend_reason": _lib._s(ri.backend_reason),
        "stream_pool_size": ri.stream_pool_size,
        "streams_created": ri.streams_created,
        "streams_in_use": ri.streams_in_use,
        "device": {
            "name": _lib._s(di.name),
            "ordinal": di.ordinal,
            "emulated": host,
            "compute_capability": None if host else f"{di.cc_major}.{di.cc_minor}",
            "sm_count": di.sm_count,
            "total_memory": di.total_memory,
            "driver_version": None if host else di.driver_version,
            "memory_pools": di.memory_pools,
            "green_contexts": di.green_contexts,
            "green_ctx_streams": di.green_ctx_streams,
            "structured_split": di.structured_split,
            "min_partition_sms": di.min_partition_sms,
            "sm_alignment": di.sm_alignment,
            "stream_priorities": [di.priority_least, di.priority_greatest],
        },
    }


def _statistics_layer(ordinal):
    s = _lib.layer(ordinal, "statistics")
    if s is None:
        raise DevrtError(
            "INVALID_STATE", f"devrt.stats: the runtime stack of ordinal {ordinal} has no statistics layer"
        )
    return s


def stats(ordinal=0, tag=None):
    """The runtime stack's statistics layer: {"bytes": {current, peak, total}, "count": {...}},
    overall (tag None) or for one tag ("torch" is PyTorch's); a tag never seen reads as zeros."""
    lib = _lib.load()
    s = _statistics_layer(ordinal)
    out = _lib.MemoryStats()
    _lib.check(lib.devrt_statistics_get(s, None if tag is None else str(tag).encode(), ctypes.byref(out)))
    return {"bytes": _lib.counter(out.bytes), "count": _lib.counter(out.count)}


def figures(ordinal=0):
    """devrt_resource_figures of the runtime's stack: live/pending/cached/limit/available bytes,
    granularity, reaps, fallbacks, cache hits/misses, log records, and the statistics'
    overall "bytes" and "count" counters."""
    lib = _lib.load()
    f = _lib.Figures()
    _lib.check(lib.devrt_resource_query(_lib.stack(ordinal), ctypes.byref(f)))
    out = {name: getattr(f, name) for name, _ in _lib.Figures._fields_[:-2]}
    out["bytes"], out["count"] = _lib.counter(f.bytes), _lib.counter(f.count)
    return out


def pool(ordinal=0):
    """devrt_pool_stats_get: the device pool under the stack. reserved_high is the most the pool
    has held of the device at once since the runtime was created: devrt's peak reserved bytes,
    the figure torch.cuda.max_memory_reserved() gives for PyTorch's own allocators."""
    lib = _lib.load()
    p = _lib.PoolStats()
    _lib.check(lib.devrt_pool_stats_get(_lib.runtime(ordinal), ctypes.byref(p)))
    return {name: getattr(p, name) for name, _ in _lib.PoolStats._fields_}


def reap(wait=False, ordinal=0):
    """Retires completed stream-ordered frees (wait=True: waits for all); returns bytes retired."""
    lib = _lib.load()
    n = ctypes.c_uint64()
    flags = _lib.DEVRT_REAP_WAIT if wait else 0
    _lib.check(lib.devrt_reap_pending(_lib.runtime(ordinal), flags, ctypes.byref(n)))
    return n.value


def trim(ordinal=0):
    """Gives the stack's cached bytes back; returns bytes released."""
    lib = _lib.load()
    n = ctypes.c_uint64()
    _lib.check(lib.devrt_resource_trim(_lib.stack(ordinal), ctypes.byref(n)))
    return n.value


def release(ordinal=0):
    """Gives back everything the stack holds unused: waits for pending frees, trims the cache,
    waits for the frees that made, then trims the device pool to nothing unused, as
    torch.cuda.empty_cache() does for PyTorch's allocator. Returns the pool's reserved bytes
    released."""
    lib = _lib.load()
    reap(True, ordinal)
    trim(ordinal)
    reap(True, ordinal)
    before = pool(ordinal)["reserved_current"]
    _lib.check(lib.devrt_pool_trim(_lib.runtime(ordinal), 0))
    return before - pool(ordinal)["reserved_current"]


def last_error():
    """devrt_last_error(): the message of the last devrt call that failed on this thread, "" once
    a later call on it succeeded (the refusal behind a torch.OutOfMemoryError under
    devrt.torch.mem_pool(), for one)."""
    return _lib._s(_lib.load().devrt_last_error()) or ""


from . import cupy, torch  # noqa: E402  (they import CuPy and PyTorch only when called)
