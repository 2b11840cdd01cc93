"""An in-tree PEP 517 build backend, standard library only.

setuptools' backend needs the `wheel` package to build a wheel on setuptools
older than 70.1 (the setuptools that ships with pip 23 is 65.5), and without a
package index neither can be fetched: `pip install ./sdk/python` would fail
offline. This backend needs nothing: it zips the `trellis` package with the
metadata of pyproject.toml into a wheel (PEP 427), and makes sdists and
editable wheels (PEP 660: a .pth file naming this directory) the same way.
"""

from __future__ import annotations

import base64
import hashlib
import io
import os
import re
import tarfile
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = "trellis"


def _project() -> dict:
    """name, version, description and requires-python of pyproject.toml's
    [project] table (simple `key = "value"` lines: tomllib is 3.11+)."""
    with open(os.path.join(ROOT, "pyproject.toml"), encoding="utf-8") as f:
        text = f.read()
    table = text.split("[project]", 1)[1].split("\n[", 1)[0]
    return dict(re.findall(r'^([a-z-]+)\s*=\s*"([^"]*)"', table, re.M))


def _dist(p: dict) -> str:
    return re.sub(r"[-_.]+", "_", p["name"]).lower()


def _metadata(p: dict) -> str:
    lines = ["Metadata-Version: 2.1", f"Name: {p['name']}", f"Version: {p['version']}",
             f"Summary: {p.get('description', '')}", f"Requires-Python: {p.get('requires-python', '>=3.10')}"]
    readme = os.path.join(ROOT, "README.md")
    if os.path.exists(readme):
        lines.append("Description-Content-Type: text/markdown")
        with open(readme, encoding="utf-8") as f:
            return "\n".join(lines) + "\n\n" + f.read()
    return "\n".join(lines) + "\n"


def _sources():
    pkg = os.path.join(ROOT, PACKAGE)
    for dirpath, dirnames, filenames in os.walk(pkg):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        for fn in sorted(filenames):
            if fn.endswith(".py") or fn == "py.typed":
                full = os.path.join(dirpath, fn)
                yield full, os.path.relpath(full, ROOT).replace(os.sep, "/")


def _write_wheel(wheel_directory: str, files: list) -> str:
    p = _project()
    dist, ver = _dist(p), p["version"]
    info = f"{dist}-{ver}.dist-info"
    name = f"{dist}-{ver}-py3-none-any.whl"
    files = files + [
        (f"{info}/METADATA", _metadata(p).encode()),
        (f"{info}/WHEEL", b"Wheel-Version: 1.0\nGenerator: trellis_build\nRoot-Is-Purelib: true\nTag: py3-none-any\n"),
    ]
    record = []
    with zipfile.ZipFile(os.path.join(wheel_directory, name), "w", zipfile.ZIP_DEFLATED) as z:
        for arc, data in files:
            z.writestr(arc, data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            record.append(f"{arc},sha256={digest},{len(data)}")
        record.append(f"{info}/RECORD,,")
        z.writestr(f"{info}/RECORD", "\n".join(record) + "\n")
    return name


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    files = []
    for full, arc in _sources():
        with open(full, "rb") as f:
            files.append((arc, f.read()))
    return _write_wheel(wheel_directory, files)


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    return _write_wheel(wheel_directory, [(f"__editable__.{_dist(_project())}.pth", (ROOT + "\n").encode())])


def build_sdist(sdist_directory, config_settings=None):
    p = _project()
    base = f"{_dist(p)}-{p['version']}"
    name = base + ".tar.gz"
    with tarfile.open(os.path.join(sdist_directory, name), "w:gz") as t:
        for rel in ["pyproject.toml", "README.md", "_build/trellis_build.py"]:
            full = os.path.join(ROOT, rel)
            if os.path.exists(full):
                t.add(full, f"{base}/{rel}")
        for full, arc in _sources():
            t.add(full, f"{base}/{arc}")
        data = _metadata(p).encode()
        ti = tarfile.TarInfo(f"{base}/PKG-INFO")
        ti.size = len(data)
        t.addfile(ti, io.BytesIO(data))
    return name


def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def get_requires_for_build_editable(config_settings=None):
    return []
