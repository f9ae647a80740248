"""devrt.cupy: devrt as CuPy's memory allocator, on CuPy's current stream.

    import cupy, devrt.cupy
    devrt.cupy.use()               # cupy.cuda.set_allocator(devrt.cupy.malloc)
    x = cupy.arange(1 << 20)       # memory from devrt's stack, tag "cupy"
    devrt.stats(tag="cupy")

Each allocation goes through the runtime stack of CuPy's current device (budget, logging,
statistics, caching, async) on CuPy's current stream, imported once per stream handle with
devrt_stream_import. The stream object is kept alive with its import for the life of the process
(devrt must never see a stream handle it imported destroyed), so a program that creates streams
without end uses up devrt's import slots (DEVRT_PARTITION_STREAMS); forget() gives one back.
The memory is freed, stream-ordered on the stream it was allocated on, when CuPy drops its last
reference, as CuPy's own pool does. CuPy is imported only by malloc(), use() and forget().
"""
import ctypes
import threading
import warnings

from . import _lib

TAG = b"cupy"  # devrt keeps the pointer for the runtime's life: this module-level bytes lives on
_streams = {}  # (device, stream handle) -> (devrt stream id, the CuPy stream object)
_stacks = {}  # device -> its runtime's stack
_lock = threading.Lock()  # guards _streams and _stacks
_oom_class = None
free_failures = 0  # frees devrt refused (each also warned about); 0 in a correct program


def _out_of_memory(message, size):
    """cupy.cuda.memory.OutOfMemoryError carrying devrt's message (its own __init__ formats
    CuPy's figures, which do not describe devrt's budget)."""
    global _oom_class
    if _oom_class is None:
        import cupy

        class OutOfMemoryError(cupy.cuda.memory.OutOfMemoryError):
            def __init__(self, message, size):
                MemoryError.__init__(self, message)
                self.size = size

        _oom_class = OutOfMemoryError
    return _oom_class(message, size)


def _stream_id(device, stream):
    """devrt's id for a CuPy stream of `device` (imported on first use)."""
    key = (device, stream.ptr)
    entry = _streams.get(key)
    if entry is not None:
        return entry[0]
    with _lock:
        entry = _streams.get(key)
        if entry is None:
            lib = _lib.load()
            sid = _lib.c_stream()
            _lib.check(lib.devrt_stream_import(_lib.runtime(device), stream.ptr or None,
                                               ctypes.byref(sid)))
            entry = _streams[key] = (sid.value, stream)
    return entry[0]


def _stack(device):
    s = _stacks.get(device)
    if s is None:
        with _lock:
            s = _stacks.setdefault(device, _lib.stack(device).value)
    return s


class _Block:
    """The owner CuPy keeps alive with the memory: frees it through devrt when CuPy drops it."""

    __slots__ = ("stack", "ptr", "size", "stream")

    def __init__(self, stack, ptr, size, stream):
        self.stack, self.ptr, self.size, self.stream = stack, ptr, size, stream

    def __del__(self):
        global free_failures
        lib = _lib.load()
        s = lib.devrt_resource_deallocate(self.stack, self.ptr, self.size, self.stream)
        if s != 0:
            free_failures += 1
            warnings.warn(f"devrt.cupy: freeing {self.size} bytes at {self.ptr:#x} failed: "
                          f"DEVRT_{_lib._s(lib.devrt_status_name(s))}: "
                          f"{_lib._s(lib.devrt_last_error())}", RuntimeWarning)


def malloc(size):
    """CuPy's allocator interface: a cupy.cuda.MemoryPointer to `size` bytes from devrt, usable by
    work on CuPy's current stream queued after the call. A refusal (devrt's budget, the device's
    memory) raises cupy.cuda.memory.OutOfMemoryError with devrt's message; other failures raise
    devrt.DevrtError (e.g. UNSUPPORTED for CuPy's per-thread default stream, which devrt
    refuses to import)."""
    import cupy

    device = cupy.cuda.runtime.getDevice()
    if size == 0:  # devrt refuses 0 bytes; CuPy asks for them for empty arrays
        return cupy.cuda.MemoryPointer(cupy.cuda.UnownedMemory(0, 0, None, device), 0)
    sid = _stream_id(device, cupy.cuda.get_current_stream())
    stack = _stack(device)
    lib = _lib.load()
    ptr = ctypes.c_void_p()
    s = lib.devrt_resource_allocate(stack, size, sid, TAG, ctypes.byref(ptr))
    if s != 0:
        name, msg = _lib._s(lib.devrt_status_name(s)), _lib._s(lib.devrt_last_error())
        if name in ("OVER_BUDGET", "DEVICE_ALLOC_FAILED"):
            raise _out_of_memory(f"devrt: DEVRT_{name}: {msg}", size)
        raise _lib.DevrtError(name, msg, s)
    owner = _Block(stack, ptr.value, size, sid)
    return cupy.cuda.MemoryPointer(cupy.cuda.UnownedMemory(ptr.value, size, owner, device), 0)


def use():
    """Makes devrt CuPy's allocator (cupy.cuda.set_allocator(malloc)) in this process. Memory
    CuPy's previous allocator handed out stays valid and goes back to it. Returns malloc."""
    import cupy

    cupy.cuda.set_allocator(malloc)
    return malloc


def forget(stream, device=None):
    """Drops devrt's import of a CuPy stream (and the reference that kept it alive), once no
    memory allocated on it is still held: devrt refuses later frees on a forgotten stream.
    Returns False when the stream was never imported."""
    import cupy

    device = cupy.cuda.runtime.getDevice() if device is None else int(device)
    with _lock:
        entry = _streams.pop((device, stream.ptr), None)
    if entry is None:
        return False
    _lib.check(_lib.load().devrt_stream_forget(_lib.runtime(device), entry[0]))
    return True
