"""_build.py: the package's PEP 517 build backend, standard library only, so that
`pip install ./python` needs nothing from an index (no setuptools or wheel of any version).

It builds one pure-Python wheel of devrt/ (every .py file, and libdevrt.so* when a copy was put
beside them), an sdist of this folder, and an editable install (a .pth file naming this folder).
"""
import base64
import hashlib
import io
import os
import tarfile
import zipfile

NAME, VERSION = "devrt", "0.1.0"
HERE = os.path.dirname(os.path.abspath(__file__))
TAG = "py3-none-any"
METADATA = f"""Metadata-Version: 2.1
Name: {NAME}
Version: {VERSION}
Summary: Python access to devrt, a GPU device runtime: info, configuration, memory statistics, devrt as PyTorch's and CuPy's allocator, and a PyTorch benchmark
Requires-Python: >=3.8

See the devrt repository's README.md (section Python) and docs/python.md.
"""
WHEEL = f"Wheel-Version: 1.0\nGenerator: devrt _build.py\nRoot-Is-Purelib: true\nTag: {TAG}\n"


def _package_files():
    """(path in the wheel, path on disk) of every file the package installs."""
    out = []
    for root, dirs, files in os.walk(os.path.join(HERE, NAME)):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for f in sorted(files):
            if f.endswith(".py") or f.startswith("libdevrt.so"):
                disk = os.path.join(root, f)
                out.append((os.path.relpath(disk, HERE).replace(os.sep, "/"), disk))
    return out


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
    return _write_wheel(wheel_directory, [(arc, _read(disk)) for arc, disk in _package_files()])


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    return _write_wheel(wheel_directory, [(f"{NAME}.pth", (HERE + "\n").encode())])


def build_sdist(sdist_directory, config_settings=None):
    base = f"{NAME}-{VERSION}"
    name = f"{base}.tar.gz"
    with tarfile.open(os.path.join(sdist_directory, name), "w:gz") as t:
        for f in ("pyproject.toml", "_build.py"):
            t.add(os.path.join(HERE, f), f"{base}/{f}")
        for arc, disk in _package_files():
            t.add(disk, f"{base}/{arc}")
        pkg = io.BytesIO(METADATA.encode())
        ti = tarfile.TarInfo(f"{base}/PKG-INFO")
        ti.size = len(pkg.getvalue())
        t.addfile(ti, pkg)
    return name
