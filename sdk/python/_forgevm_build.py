"""A PEP 517 build backend in the standard library alone, so that ``pip install ./sdk/python``
works on a machine with no package index (pip's isolated build then needs nothing to download).
It builds the pure-Python wheel (and sdist) of the ``forgevm`` package."""

from __future__ import annotations

import base64
import hashlib
import io
import os
import tarfile
import zipfile

NAME = "forgevm"
HERE = os.path.dirname(os.path.abspath(__file__))


def _version() -> str:
    with open(os.path.join(HERE, NAME, "__init__.py"), encoding="utf-8") as f:
        for line in f:
            if line.startswith("__version__"):
                return line.split("=")[1].strip().strip("\"'")
    raise RuntimeError("no __version__ in forgevm/__init__.py")


def _metadata(version: str) -> str:
    with open(os.path.join(HERE, "README.md"), encoding="utf-8") as f:
        readme = f.read()
    return (
        "Metadata-Version: 2.1\n"
        f"Name: {NAME}\nVersion: {version}\n"
        "Summary: Python client for ForgeVM: disposable, isolated microVMs for AI agents (standard library only)\n"
        "License: Apache-2.0\nRequires-Python: >=3.9\n"
        "Description-Content-Type: text/markdown\n\n" + readme
    )


def _package_files():
    for root, dirs, files in os.walk(os.path.join(HERE, NAME)):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        for f in sorted(files):
            if f.endswith((".py", "py.typed")):
                full = os.path.join(root, f)
                yield full, os.path.relpath(full, HERE).replace(os.sep, "/")


def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    version = _version()
    dist_info = f"{NAME}-{version}.dist-info"
    name = f"{NAME}-{version}-py3-none-any.whl"
    record = []

    def add(zf: zipfile.ZipFile, arc: str, data: bytes) -> None:
        zf.writestr(zipfile.ZipInfo(arc, date_time=(2020, 1, 1, 0, 0, 0)), data, compress_type=zipfile.ZIP_DEFLATED)
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{arc},sha256={digest},{len(data)}")

    with zipfile.ZipFile(os.path.join(wheel_directory, name), "w") as zf:
        for full, arc in _package_files():
            with open(full, "rb") as f:
                add(zf, arc, f.read())
        add(zf, f"{dist_info}/METADATA", _metadata(version).encode())
        add(zf, f"{dist_info}/WHEEL", b"Wheel-Version: 1.0\nGenerator: _forgevm_build\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        record.append(f"{dist_info}/RECORD,,")
        zf.writestr(zipfile.ZipInfo(f"{dist_info}/RECORD", date_time=(2020, 1, 1, 0, 0, 0)), "\n".join(record) + "\n")
    return name


def build_sdist(sdist_directory, config_settings=None):
    version = _version()
    base = f"{NAME}-{version}"
    name = f"{base}.tar.gz"
    with tarfile.open(os.path.join(sdist_directory, name), "w:gz") as tf:
        for rel in ["pyproject.toml", "README.md", "_forgevm_build.py"]:
            tf.add(os.path.join(HERE, rel), f"{base}/{rel}")
        for full, arc in _package_files():
            tf.add(full, f"{base}/{arc}")
        info = tarfile.TarInfo(f"{base}/PKG-INFO")
        data = _metadata(version).encode()
        info.size = len(data)
        tf.addfile(info, io.BytesIO(data))
    return name
