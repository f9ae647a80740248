"""_lib.py: finds and loads libdevrt, and mirrors the C structs devrt's Python API reads.

The library is DEVRT_LIBRARY when that is set, else libdevrt.so in this package (the copy pip
built, or cmake --install's link to the installed one); nothing else is searched. Loading is
lazy: `import devrt` works without the library, and the first call that needs it raises
DevrtLibraryError naming the path tried.
Every C function used here gets argtypes and restype before it is called.
"""
import ctypes
import os
import re
import threading

# ---- errors ----


class DevrtError(RuntimeError):
    """A devrt call failed: .status (int, None for a check made in Python), .status_name
    ("OVER_BUDGET", ...) and .message (devrt_last_error() of the failing call)."""

    def __init__(self, status_name, message, status=None):
        self.status = status
        self.status_name = status_name
        self.message = message
        super().__init__(f"DEVRT_{status_name}: {message}" if message else f"DEVRT_{status_name}")


class DevrtLibraryError(OSError):
    """libdevrt could not be loaded; .tried lists (path, reason) for every path tried."""

    def __init__(self, tried):
        self.tried = list(tried)
        lines = "\n".join(f"  {p}: {why}" for p, why in self.tried)
        hint = (
            "DEVRT_LIBRARY, when set, is the only library tried: unset it to use the package's"
            if os.environ.get("DEVRT_LIBRARY")
            else "`pip install ./python` builds the package with its library; or set DEVRT_LIBRARY "
            "to the path of a libdevrt.so (e.g. build/libdevrt.so)"
        )
        super().__init__(f"devrt: libdevrt could not be loaded; tried:\n{lines}\n{hint}")


# ---- structs (include/devrt/*.h, field for field) ----

c_status = ctypes.c_int  # devrt_status (an enum)
c_stream = ctypes.c_uint64  # devrt_stream


class Config(ctypes.Structure):  # devrt_config, runtime.h
    _fields_ = [
        ("ordinal", ctypes.c_int),
        ("backend", ctypes.c_int),  # devrt_backend_kind
        ("stream_pool_size", ctypes.c_uint),
        ("stream_priority", ctypes.c_int),
        ("pool_release_threshold", ctypes.c_uint64),
        ("host_workers", ctypes.c_uint),
        ("host_devices", ctypes.c_uint),
        ("budget_bytes", ctypes.c_uint64),
        ("budget_percent", ctypes.c_uint),
        ("cache", ctypes.c_bool),
        ("log_path", ctypes.c_char_p),
        ("log_jsonl", ctypes.c_bool),
        ("stats_peak_bound", ctypes.c_bool),
        ("wait_spin_ns", ctypes.c_uint64),
        ("completion", ctypes.c_int),
        ("partition_streams", ctypes.c_uint),
        ("cache_max_class", ctypes.c_uint64),
        ("arena", ctypes.c_bool),
    ]


class RuntimeInfo(ctypes.Structure):  # devrt_runtime_info, runtime.h
    _fields_ = [
        ("ordinal", ctypes.c_int),
        ("backend", ctypes.c_int),
        ("backend_name", ctypes.c_char_p),
        ("backend_reason", ctypes.c_char * 256),
        ("stream_pool_size", ctypes.c_uint),
        ("streams_created", ctypes.c_uint),
        ("streams_in_use", ctypes.c_uint),
    ]


class DeviceInfo(ctypes.Structure):  # devrt_device_info, device.h
    _fields_ = [
        ("name", ctypes.c_char * 256),
        ("ordinal", ctypes.c_int),
        ("cc_major", ctypes.c_int),
        ("cc_minor", ctypes.c_int),
        ("sm_count", ctypes.c_int),
        ("total_memory", ctypes.c_uint64),
        ("driver_version", ctypes.c_int),
        ("memory_pools", ctypes.c_bool),
        ("green_contexts", ctypes.c_bool),
        ("green_ctx_streams", ctypes.c_bool),
        ("structured_split", ctypes.c_bool),
        ("min_partition_sms", ctypes.c_uint),
        ("sm_alignment", ctypes.c_uint),
        ("priority_least", ctypes.c_int),
        ("priority_greatest", ctypes.c_int),
    ]


class MemoryCounter(ctypes.Structure):  # devrt_memory_counter, resource.h
    _fields_ = [("current", ctypes.c_int64), ("peak", ctypes.c_int64), ("total", ctypes.c_int64)]


class MemoryStats(ctypes.Structure):  # devrt_memory_stats, resource.h
    _fields_ = [("bytes", MemoryCounter), ("count", MemoryCounter)]


class PoolStats(ctypes.Structure):  # devrt_pool_stats, memory.h
    _fields_ = [
        ("used_current", ctypes.c_uint64),
        ("used_high", ctypes.c_uint64),
        ("reserved_current", ctypes.c_uint64),
        ("reserved_high", ctypes.c_uint64),
        ("release_threshold", ctypes.c_uint64),
    ]


class Figures(ctypes.Structure):  # devrt_resource_figures, resource.h
    _fields_ = [
        ("live_bytes", ctypes.c_uint64),
        ("pending_bytes", ctypes.c_uint64),
        ("cached_bytes", ctypes.c_uint64),
        ("limit_bytes", ctypes.c_uint64),
        ("available_bytes", ctypes.c_uint64),
        ("granularity", ctypes.c_uint64),
        ("reaped_bytes", ctypes.c_uint64),
        ("fallbacks", ctypes.c_uint64),
        ("cache_hits", ctypes.c_uint64),
        ("cache_misses", ctypes.c_uint64),
        ("log_records", ctypes.c_uint64),
        ("log_dropped", ctypes.c_uint64),
        ("bytes", MemoryCounter),
        ("count", MemoryCounter),
    ]


class TorchStats(ctypes.Structure):  # devrt_torch_stats, torch.h
    _fields_ = [(name, ctypes.c_uint64) for name in (
        "alloc_retries", "ooms", "device_waits", "host_waits", "frees_retried", "frees_failed",
        "graph_allocs", "graph_held_bytes", "graph_released_bytes")]


DEVRT_REAP_WAIT = 1
DEVRT_ACQUIRE_FAIL, DEVRT_ACQUIRE_WAIT, DEVRT_ACQUIRE_SHARE = 0, 1, 2

_P = ctypes.c_void_p  # opaque handles: devrt_runtime*, devrt_resource*
_PP = ctypes.POINTER(ctypes.c_void_p)
_U64P = ctypes.POINTER(ctypes.c_uint64)

# name: (restype, argtypes)
_SIGNATURES = {
    "devrt_status_name": (ctypes.c_char_p, [c_status]),
    "devrt_last_error": (ctypes.c_char_p, []),
    "devrt_version": (ctypes.c_char_p, []),
    "devrt_built_with_cuda": (ctypes.c_int, []),
    "devrt_config_init": (c_status, [ctypes.POINTER(Config)]),
    "devrt_configure": (c_status, [ctypes.c_int, ctypes.POINTER(Config)]),
    "devrt_runtime_get": (c_status, [ctypes.c_int, _PP]),
    "devrt_runtime_create": (c_status, [ctypes.POINTER(Config), _PP]),
    "devrt_runtime_destroy": (c_status, [_P]),
    "devrt_runtime_info_get": (c_status, [_P, ctypes.POINTER(RuntimeInfo)]),
    "devrt_device_info_get": (c_status, [_P, ctypes.POINTER(DeviceInfo)]),
    "devrt_runtime_resource": (c_status, [_P, _PP]),
    "devrt_resource_name": (ctypes.c_char_p, [_P]),
    "devrt_resource_upstream": (_P, [_P]),
    "devrt_resource_query": (c_status, [_P, ctypes.POINTER(Figures)]),
    "devrt_resource_trim": (c_status, [_P, _U64P]),
    "devrt_resource_allocate": (c_status, [_P, ctypes.c_size_t, c_stream, ctypes.c_char_p, _PP]),
    "devrt_resource_deallocate": (c_status, [_P, _P, ctypes.c_size_t, c_stream]),
    "devrt_reap_pending": (c_status, [_P, ctypes.c_uint, _U64P]),
    "devrt_statistics_get": (c_status, [_P, ctypes.c_char_p, ctypes.POINTER(MemoryStats)]),
    "devrt_statistics_reset_peaks": (c_status, [_P]),
    "devrt_stream_acquire": (c_status, [_P, ctypes.c_int, ctypes.POINTER(c_stream)]),
    "devrt_stream_release": (c_status, [_P, c_stream]),
    "devrt_stream_synchronize": (c_status, [_P, c_stream]),
    "devrt_stream_import": (c_status, [_P, _P, ctypes.POINTER(c_stream)]),
    "devrt_stream_forget": (c_status, [_P, c_stream]),
    "devrt_pool_stats_get": (c_status, [_P, ctypes.POINTER(PoolStats)]),
    "devrt_pool_reset_high": (c_status, [_P]),
    "devrt_pool_trim": (c_status, [_P, ctypes.c_size_t]),
    "devrt_torch_stats_get": (c_status, [ctypes.c_int, ctypes.POINTER(TorchStats)]),
    "devrt_torch_graph_release": (c_status, [ctypes.c_int, ctypes.POINTER(ctypes.c_uint64)]),
    "devrt_comm_id_create": (c_status, [_P, ctypes.POINTER(ctypes.c_char * 128)]),
}

_lock = threading.Lock()
_lib = None
_path = None


def candidates():
    """The path load() tries: DEVRT_LIBRARY when set, else the package's copy."""
    env = os.environ.get("DEVRT_LIBRARY")
    return [env or os.path.join(os.path.dirname(os.path.abspath(__file__)), "libdevrt.so")]


def load():
    """The loaded libdevrt (a ctypes.CDLL with every signature set); DevrtLibraryError if none."""
    global _lib, _path
    if _lib is not None:
        return _lib
    with _lock:
        if _lib is not None:
            return _lib
        tried = []
        for p in candidates():
            if os.sep in p and not os.path.exists(p):
                tried.append((p, "no such file"))
                continue
            try:
                lib = ctypes.CDLL(p)
                for name, (res, args) in _SIGNATURES.items():
                    f = getattr(lib, name)
                    f.restype, f.argtypes = res, args
            except (OSError, AttributeError) as e:
                tried.append((p, str(e)))
                continue
            _path, _lib = p, lib
            return lib
        raise DevrtLibraryError(tried)


def path():
    """The path of the loaded libdevrt (what PyTorch's pluggable allocator must open too)."""
    load()
    return _path


def _s(b):
    return b.decode("utf-8", "replace") if b is not None else None


def check(status):
    """Raises DevrtError for a failed status, with devrt_last_error() of this thread."""
    if status != 0:
        lib = load()
        raise DevrtError(_s(lib.devrt_status_name(status)), _s(lib.devrt_last_error()), status)


def ordinal(device):
    """A device as devrt's ordinal: an int, "cuda", "cuda:N", or a CUDA torch.device (index None:
    0). DevrtError INVALID_ARGUMENT for anything else; devrt checks the ordinal's range."""
    if isinstance(device, int) and not isinstance(device, bool):
        return device
    if isinstance(device, str):
        m = re.fullmatch(r"cuda(?::(0|[1-9][0-9]*))?", device, re.ASCII)
        if m:
            return int(m.group(1) or 0)
    elif getattr(device, "type", None) == "cuda":
        return device.index or 0
    raise DevrtError("INVALID_ARGUMENT", f"device={device!r} is not a device: give an ordinal "
                     "(0, 1, ...), \"cuda:N\" or a CUDA torch.device")


def runtime(device):
    """The process-wide devrt_runtime* of `device` (created on first use)."""
    lib = load()
    rt = ctypes.c_void_p()
    check(lib.devrt_runtime_get(ordinal(device), ctypes.byref(rt)))
    return rt


def stack(device):
    """The runtime's resource stack (its top layer)."""
    lib = load()
    r = ctypes.c_void_p()
    check(lib.devrt_runtime_resource(runtime(device), ctypes.byref(r)))
    return r


def layer(device, name):
    """The first layer of the runtime's stack whose devrt_resource_name is `name`, else None."""
    lib = load()
    r = stack(device).value
    while r:
        if _s(lib.devrt_resource_name(r)) == name:
            return ctypes.c_void_p(r)
        r = lib.devrt_resource_upstream(r)
    return None


def counter(c):
    return {"current": c.current, "peak": c.peak, "total": c.total}
