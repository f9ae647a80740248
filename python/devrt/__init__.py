"""devrt: Python access to devrt's process-wide runtimes over ctypes.

    import devrt
    devrt.configure(budget="60%")   # before the runtime's first use (also 0.6, "8GiB", bytes)
    devrt.info()                    # backend, device, memory, stream pool
    devrt.stats(tag="torch")        # the statistics layer's counters
    devrt.figures()                 # the resource stack's figures
    devrt.torch.use()               # devrt as PyTorch's CUDA allocator (devrt/torch.py)
    devrt.cupy.use()                # devrt as CuPy's allocator (devrt/cupy.py)

Every call takes the device as `device=` (an ordinal, "cuda:N" or a torch.device; default 0),
a tag as `tag=`. libdevrt is DEVRT_LIBRARY when set, else the libdevrt.so in this package
(see _lib.py).
"""
import ctypes
import json
import os
import re
from fractions import Fraction

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
    "reset_peaks",
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


def _size(n):
    """n bytes as "23.5 GiB"."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024


_UNITS = {"B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12,
          "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40}


def _bytes(v):
    """Bytes from an int, or from a string of decimal digits ("1048576") or a number with a unit
    ("8GiB", "512MB", "1.5GiB": KB..TB are powers of 1000, KiB..TiB of 1024); None otherwise."""
    if isinstance(v, int) and not isinstance(v, bool):
        return v
    m = re.fullmatch(r"(0|[1-9][0-9]*)(?:\.([0-9]+))?(B|[KMGT]i?B)?", v, re.ASCII) \
        if isinstance(v, str) else None
    if not m or (m.group(2) and not m.group(3)):
        return None
    return int(Fraction(f"{m.group(1)}.{m.group(2) or 0}") * _UNITS[m.group(3) or "B"])


def _device_memory(cfg):
    """The memory of the device a runtime of cfg would run on (one created for the question)."""
    lib = _lib.load()
    rt, di = ctypes.c_void_p(), _lib.DeviceInfo()
    _lib.check(lib.devrt_runtime_create(ctypes.byref(cfg), ctypes.byref(rt)))
    try:
        _lib.check(lib.devrt_device_info_get(rt, ctypes.byref(di)))
    finally:
        lib.devrt_runtime_destroy(rt)
    return di.total_memory


def _budget(budget, cfg):
    """(budget_bytes, budget_percent) for a budget as configure() takes it."""
    where = f"devrt.configure: budget={budget!r}"
    pct = re.fullmatch(r"(0|[1-9][0-9]*)%", budget, re.ASCII) if isinstance(budget, str) else None
    if pct:
        if not 1 <= int(pct.group(1)) <= 100:
            raise _bad(f"{where}: a percentage of device memory is 1% to 100%")
        return 0, int(pct.group(1))
    if isinstance(budget, float):
        if not 0 < budget <= 1:
            raise _bad(f"{where}: a fraction of device memory is in (0, 1] (bytes are an int)")
        return max(1, int(_device_memory(cfg) * budget)), 0
    n = _bytes(budget)
    if n is None or n <= 0:
        raise _bad(f"{where} is not a budget: give bytes (> 0: an int, \"8GiB\", \"512MB\"), a "
                   "fraction of device memory (0.6) or a percentage (\"60%\")")
    total = _device_memory(cfg)
    if n > total:
        raise _bad(f"{where} ({_size(n)}) is more than device {cfg.ordinal} has: {_size(total)} "
                   f"({total} bytes)")
    return n, 0


def _bad(message):
    return DevrtError("INVALID_ARGUMENT", message)


def configure(*, device=0, budget=None, cache=None, cache_max_class=None, arena=None, log=None,
              log_format=None):
    """Sets the configuration the runtime of `device` is created with: devrt_config_init's
    defaults and DEVRT_* environment, then these overrides (None keeps them):
    budget: bytes (an int, "8GiB", "512MB"), a fraction of device memory (0.6) or "60%"; more
    than the device has is refused; cache: bool (the caching layer); cache_max_class: bytes, as
    budget takes them; larger allocations bypass the cache (0: 64 MiB, the largest class);
    arena: bool (the arena leaf in place of caching over the pool: DEVRT_ARENA);
    log: allocation log file path; log_format: "csv" or "jsonl".
    Must run before the runtime's first use (DevrtError INVALID_STATE after)."""
    lib = _lib.load()
    cfg = _lib.Config()
    _lib.check(lib.devrt_config_init(ctypes.byref(cfg)))
    cfg.ordinal = _lib.ordinal(device)
    if log_format is not None:
        if log_format not in ("csv", "jsonl"):
            raise _bad(f"devrt.configure: log_format={log_format!r} is not csv or jsonl")
        cfg.log_jsonl = log_format == "jsonl"
    if cache is not None:
        cfg.cache = bool(cache)
    if arena is not None:
        cfg.arena = bool(arena)
    if cache_max_class is not None:
        n = _bytes(cache_max_class)
        if n is None or n < 0:
            raise _bad(f"devrt.configure: cache_max_class={cache_max_class!r} is not bytes")
        cfg.cache_max_class = n
    if log is not None:
        b = str(log).encode()
        _kept.append(b)
        cfg.log_path = b
    if budget is not None:
        cfg.budget_bytes, cfg.budget_percent = _budget(budget, cfg)
        if cfg.budget_bytes:
            cfg.budget_percent = 100  # ignored with budget_bytes, kept in range
    _lib.check(lib.devrt_configure(cfg.ordinal, ctypes.byref(cfg)))


def _package_build():
    """What python/_build.py recorded when it built the package's libdevrt; None where the
    library in use is not that copy (DEVRT_LIBRARY, or a cmake --install link)."""
    here = os.path.dirname(os.path.abspath(__file__))
    path = os.path.join(here, "_build_info.json")
    if library_path() != os.path.join(here, "libdevrt.so") or not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)


def info(device=0):
    """Facts about the runtime of `device` (created on first use) and its device; package_build:
    how pip built the package's libdevrt (None for another library)."""
    lib = _lib.load()
    rt = _lib.runtime(device)
    ri, di = _lib.RuntimeInfo(), _lib.DeviceInfo()
    _lib.check(lib.devrt_runtime_info_get(rt, ctypes.byref(ri)))
    _lib.check(lib.devrt_device_info_get(rt, ctypes.byref(di)))
    host = _lib._s(ri.backend_name) == "host"  # like `devrt info --json`: nothing emulated as real
    return {
        "devrt": version(),
        "library": library_path(),
        "built_with_cuda": bool(lib.devrt_built_with_cuda()),
        "package_build": _package_build(),
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


def _statistics_layer(device):
    s = _lib.layer(device, "statistics")
    if s is None:
        raise DevrtError("INVALID_STATE",
                         f"devrt: the runtime stack of device {device} has no statistics layer")
    return s


def stats(tag=None, *, device=0):
    """The runtime stack's statistics layer: {"bytes": {current, peak, total}, "count": {...}},
    overall (tag None) or for one tag ("torch" is PyTorch's); a tag never seen reads as zeros."""
    lib = _lib.load()
    s = _statistics_layer(device)
    out = _lib.MemoryStats()
    _lib.check(lib.devrt_statistics_get(s, None if tag is None else str(tag).encode(),
                                        ctypes.byref(out)))
    return {"bytes": _lib.counter(out.bytes), "count": _lib.counter(out.count)}


def figures(device=0):
    """devrt_resource_figures of the runtime's stack: live/pending/cached/limit/available bytes,
    granularity, reaps, fallbacks, cache hits/misses, log records, and the statistics'
    overall "bytes" and "count" counters."""
    lib = _lib.load()
    f = _lib.Figures()
    _lib.check(lib.devrt_resource_query(_lib.stack(device), ctypes.byref(f)))
    out = {name: getattr(f, name) for name, _ in _lib.Figures._fields_[:-2]}
    out["bytes"], out["count"] = _lib.counter(f.bytes), _lib.counter(f.count)
    return out


def pool(device=0):
    """devrt_pool_stats_get: the device pool under the stack. reserved_high is the most the pool
    has held of the device at once since the runtime was created (or reset_peaks()): devrt's
    peak reserved bytes, the figure torch.cuda.max_memory_reserved() gives for PyTorch's own
    allocators."""
    lib = _lib.load()
    p = _lib.PoolStats()
    _lib.check(lib.devrt_pool_stats_get(_lib.runtime(device), ctypes.byref(p)))
    return {name: getattr(p, name) for name, _ in _lib.PoolStats._fields_}


def reset_peaks(device=0):
    """Peaks back to the current figures: the statistics layer's (every tag) and the device
    pool's high-water marks (devrt_statistics_reset_peaks, devrt_pool_reset_high)."""
    lib = _lib.load()
    _lib.check(lib.devrt_statistics_reset_peaks(_statistics_layer(device)))
    _lib.check(lib.devrt_pool_reset_high(_lib.runtime(device)))


def reap(wait=False, *, device=0):
    """Retires completed stream-ordered frees (wait=True: waits for all); returns bytes retired."""
    lib = _lib.load()
    n = ctypes.c_uint64()
    flags = _lib.DEVRT_REAP_WAIT if wait else 0
    _lib.check(lib.devrt_reap_pending(_lib.runtime(device), flags, ctypes.byref(n)))
    return n.value


def trim(device=0):
    """Gives the stack's cached bytes back; returns bytes released."""
    lib = _lib.load()
    n = ctypes.c_uint64()
    _lib.check(lib.devrt_resource_trim(_lib.stack(device), ctypes.byref(n)))
    return n.value


def release(device=0):
    """Gives back everything the stack holds unused: waits for pending frees, trims the cache,
    waits for the frees that made, then trims the device pool to nothing unused, as
    torch.cuda.empty_cache() does for PyTorch's allocator. Returns the pool's reserved bytes
    released."""
    lib = _lib.load()
    reap(True, device=device)
    trim(device)
    reap(True, device=device)
    before = pool(device)["reserved_current"]
    _lib.check(lib.devrt_pool_trim(_lib.runtime(device), 0))
    return before - pool(device)["reserved_current"]


def comm_id(store, rank, *, device=0, key="devrt_comm_id"):
    """The unique id (128 bytes) every rank of a devrt communicator is created from
    (devrt_comm_create in C), passed through a torch.distributed store (or anything with
    set(key, bytes) and a get(key) that waits for it): rank 0 makes it on the runtime of `device`
    and sets it, the other ranks get it. On the cuda backend it is NCCL's unique id; a host
    backend id serves ranks of one process (ranks in processes of the host backend use
    devrt_comm_create_from_env)."""
    if not isinstance(rank, int) or rank < 0:
        raise _bad(f"devrt.comm_id: rank must be an int >= 0, not {rank!r}")
    if rank != 0:
        got = bytes(store.get(key))
        if len(got) != 128:
            raise _bad(f"devrt.comm_id: the store's {key!r} holds {len(got)} bytes, not 128")
        return got
    out = (ctypes.c_char * 128)()
    _lib.check(_lib.load().devrt_comm_id_create(_lib.runtime(device), ctypes.byref(out)))
    store.set(key, out.raw)
    return out.raw


def last_error():
    """devrt_last_error(): the message of the last devrt call that failed on this thread, "" once
    a later call on it succeeded (the refusal behind a torch.OutOfMemoryError under
    devrt.torch.mem_pool(), for one)."""
    return _lib._s(_lib.load().devrt_last_error()) or ""


from . import cupy, torch  # noqa: E402  (they import CuPy and PyTorch only when called)
