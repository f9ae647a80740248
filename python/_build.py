"""_build.py: the package's PEP 517 build backend, standard library only, so that
`pip install ./python` needs nothing from an index (no setuptools or wheel of any version).

A wheel holds devrt/ (every .py file) and the libdevrt.so this backend builds with CMake from
devrt's C sources (python/.. in a checkout, csrc/ in an sdist): configure, then the shared
library's target alone, Release, in a scratch folder. The cuda backend is built where CMake finds
the CUDA toolkit (nvcc and cuda.h), the host backend always; devrt/_build_info.json records which,
and `python -m devrt info` shows it. The wheel is tagged py3-none-<platform> (Python 3 of any
version and ABI: the package uses ctypes; one platform: it holds a shared library). Without CMake
or a C compiler the build fails, saying which. The sdist holds this folder and the C sources;
an editable install builds the library into devrt/ and points a .pth file at this folder.
"""
import base64
import ctypes
import hashlib
import io
import json
import os
import shutil
import subprocess
import sysconfig
import tarfile
import tempfile
import zipfile

NAME, VERSION = "devrt", "0.1.0"
HERE = os.path.dirname(os.path.abspath(__file__))
TAG = "py3-none-" + sysconfig.get_platform().replace("-", "_").replace(".", "_")
METADATA = f"""Metadata-Version: 2.1
Name: {NAME}
Version: {VERSION}
Summary: Python access to devrt, a GPU device runtime: info, configuration, memory statistics, devrt as PyTorch's and CuPy's allocator, and a PyTorch benchmark
Requires-Python: >=3.8

See the devrt repository's README.md (section Python) and docs/python.md.
"""
WHEEL = f"Wheel-Version: 1.0\nGenerator: devrt _build.py\nRoot-Is-Purelib: false\nTag: {TAG}\n"
# What CMake needs of the C tree (an sdist holds it under csrc/): the library, the CLI and the
# demo it also configures, their headers and build files.
C_TREE = ("CMakeLists.txt", "cmake", "include", "src", "kernels", "tools", "bench", "examples")
C_FILES = (".c", ".h", ".cu", ".S", ".txt", ".in", ".map")


def _package_files():
    """(path in the wheel, path on disk) of every Python file of the package."""
    out = []
    for root, dirs, files in os.walk(os.path.join(HERE, NAME)):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for f in sorted(files):
            if f.endswith(".py"):
                disk = os.path.join(root, f)
                out.append((os.path.relpath(disk, HERE).replace(os.sep, "/"), disk))
    return out


def _c_tree():
    """The folder holding devrt's C sources: csrc/ in an sdist, else the checkout above."""
    for d in (os.path.join(HERE, "csrc"), os.path.dirname(HERE)):
        if os.path.isfile(os.path.join(d, "include", "devrt", "devrt.h")):
            return d
    raise RuntimeError(f"devrt: no C sources to build libdevrt from: neither {HERE}/csrc nor "
                       f"{os.path.dirname(HERE)} holds include/devrt/devrt.h")


def _c_files():
    """(path under the C tree, path on disk) of what C_TREE names; bench/ without its
    subfolders (results and logs)."""
    root, out = _c_tree(), []
    for top in C_TREE:
        path = os.path.join(root, top)
        if os.path.isfile(path):
            out.append((top, path))
            continue
        for d, dirs, files in os.walk(path):
            dirs[:] = [] if top == "bench" else sorted(dirs)
            out += [(os.path.relpath(os.path.join(d, f), root).replace(os.sep, "/"),
                     os.path.join(d, f)) for f in sorted(files) if f.endswith(C_FILES)]
    return out


def _build_library():
    """Builds libdevrt.so with CMake; returns (its bytes, the build info to record)."""
    cmake = shutil.which("cmake")
    if not cmake:
        raise RuntimeError("devrt: building the package builds libdevrt, which needs CMake 3.20+ "
                           "and a C compiler: cmake is not on PATH")
    with tempfile.TemporaryDirectory(prefix="devrt-build-") as b:
        for cmd in ([cmake, "-S", _c_tree(), "-B", b, "-DCMAKE_BUILD_TYPE=Release",
                     "-DDEVRT_BUILD_TESTS=OFF"],
                    [cmake, "--build", b, "--target", "devrt", "--parallel", str(os.cpu_count() or 2)]):
            p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            if p.returncode:
                raise RuntimeError(f"devrt: building libdevrt failed: {' '.join(cmd)} exited "
                                   f"{p.returncode}:\n{p.stdout[-6000:]}")
        lib = os.path.realpath(os.path.join(b, "libdevrt.so"))
        cuda = bool(ctypes.CDLL(lib).devrt_built_with_cuda())
        info = {"backends": ["cuda", "host"] if cuda else ["host"], "build_type": "Release",
                "wheel_tag": TAG}
        return _read(lib), info


def _write_wheel(directory, entries):
    """Writes a wheel of entries [(arcname, bytes)] plus its dist-info; returns its file name."""
    info = f"{NAME}-{VERSION}.dist-info"
    entries = entries + [(f"{info}/METADATA", METADATA.encode()), (f"{info}/WHEEL", WHEEL.encode())]
    record = []
    for arc, data in entries:
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{arc},sha256={digest},{len(data)}")
    record.append(f"{info}/RECORD,,")
    entries.append((f"{info}/RECORD", ("\n".join(record) + "\n").encode()))
    name = f"{NAME}-{VERSION}-{TAG}.whl"
    with zipfile.ZipFile(os.path.join(directory, name), "w", zipfile.ZIP_DEFLATED) as z:
        for arc, data in entries:
            z.writestr(arc, data)
    return name


def _read(path):
    with open(path, "rb") as f:
        return f.read()


def get_requires_for_build_wheel(config_settings=None):
    return []


get_requires_for_build_sdist = get_requires_for_build_editable = get_requires_for_build_wheel


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    lib, info = _build_library()
    return _write_wheel(wheel_directory, [(arc, _read(disk)) for arc, disk in _package_files()]
                        + [(f"{NAME}/libdevrt.so", lib),
                           (f"{NAME}/_build_info.json", json.dumps(info).encode())])


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    lib, info = _build_library()
    for name, data in (("libdevrt.so", lib), ("_build_info.json", json.dumps(info).encode())):
        with open(os.path.join(HERE, NAME, name), "wb") as f:
            f.write(data)
    return _write_wheel(wheel_directory, [(f"{NAME}.pth", (HERE + "\n").encode())])


def build_sdist(sdist_directory, config_settings=None):
    base = f"{NAME}-{VERSION}"
    name = f"{base}.tar.gz"
    with tarfile.open(os.path.join(sdist_directory, name), "w:gz") as t:
        for f in ("pyproject.toml", "_build.py"):
            t.add(os.path.join(HERE, f), f"{base}/{f}")
        for arc, disk in _package_files():
            t.add(disk, f"{base}/{arc}")
        for arc, disk in _c_files():
            t.add(disk, f"{base}/csrc/{arc}")
        pkg = io.BytesIO(METADATA.encode())
        ti = tarfile.TarInfo(f"{base}/PKG-INFO")
        ti.size = len(pkg.getvalue())
        t.addfile(ti, pkg)
    return name
