"""A disk cache of decoded columns, so the second open of a large trace is near-instant.

Keyed by file identity (absolute path, size, mtime; for a file behind a URL: the URL, and
the size, mtime and ETag its listing gave) and the traceinspect version: a file that
changes, or a new release, misses. An entry is a directory of ``.npy`` arrays (opened
memory-mapped) and one JSON manifest; it is written under a temporary name and renamed,
so a reader never sees half an entry. Anything unreadable is treated as a miss and
rewritten: a corrupt cache costs time, never a wrong answer.

Location: ``$TRACEINSPECT_CACHE_DIR``, else ``$XDG_CACHE_HOME/traceinspect``, else
``~/.cache/traceinspect``. Only files of at least ``MIN_BYTES`` whose decoding took at
least ``MIN_DECODE_SECONDS`` are cached; the oldest entries go beyond ``MAX_ENTRIES``.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from traceinspect._version import __version__
from traceinspect.errors import TraceInspectError
from traceinspect.xplane import fs
from traceinspect.xplane.fs import Location
from traceinspect.xplane.locate import HostFile

MIN_BYTES = 8 << 20
# Writing an entry costs about as much as decoding with the C decoder; it pays off only
# for files that took a while to decode (large ones, or the pure-Python decoder).
MIN_DECODE_SECONDS = 0.3
MAX_ENTRIES = 16
# 2: the events' name codes narrowed to int8/int16 (raw.typed); 1 held them as int32.
_FORMAT = 2
_MANIFEST = "manifest.json"


def cache_dir() -> Path:
    env = os.environ.get("TRACEINSPECT_CACHE_DIR")
    if env:
        return Path(env)
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg) if xdg else Path.home() / ".cache"
    return base / "traceinspect"


def _key(file: Location | HostFile) -> tuple[str, dict[str, Any]] | None:
    """The entry name and identity of ``file``; None when nothing would tell a rewritten
    remote object from the old one (neither mtime nor ETag), so it is never cached."""
    path = file.path if isinstance(file, HostFile) else file
    if isinstance(path, Path):
        st = path.stat()
        ident: dict[str, Any] = {
            "path": str(path.resolve()),
            "size": st.st_size,
            "mtime_ns": st.st_mtime_ns,
        }
    else:
        listed = (file.stat if isinstance(file, HostFile) else None) or fs.stat(path)
        if not (listed.mtime_ns or listed.etag):
            return None
        ident = {
            "url": str(path),
            "size": listed.size,
            "mtime_ns": listed.mtime_ns,
            "etag": listed.etag,
        }
    ident.update(version=__version__, format=_FORMAT)
    digest = hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()[:32]
    return digest, ident


def load(file: Location | HostFile) -> dict[str, Any] | None:
    """The cached columns of ``file``, or None on a miss (or an unreadable entry).

    Asks nothing of a remote file beyond its listing: a hit downloads nothing.
    """
    try:
        key = _key(file)
        if key is None:
            return None
        digest, ident = key
        entry = cache_dir() / digest
        manifest = json.loads((entry / _MANIFEST).read_text())
        if manifest.get("ident") != ident:
            return None
        import numpy as np  # here: cache_dir() is needed by commands that import no numpy

        raw: dict[str, Any] = dict(manifest["lists"])
        for group, columns in manifest["arrays"].items():
            raw[group] = {}
            for name, (dtype, length) in columns.items():
                arr = np.load(entry / f"{group}.{name}.npy", mmap_mode="r", allow_pickle=False)
                if arr.dtype != np.dtype(dtype) or arr.shape != (length,):
                    return None
                raw[group][name] = arr
        with contextlib.suppress(OSError):
            os.utime(entry)  # recently used entries survive pruning
        return raw
    except Exception:
        # Any damage (truncated .npy, bad JSON, missing file) is a miss, not an error.
        return None


def store(file: Location | HostFile, raw: dict[str, Any]) -> None:
    """Write the typed columns (see ``raw.typed``) of ``file``.

    Failures (disk full, read-only home, a remote file gone) are ignored: the cache is an
    optimisation.
    """
    try:
        key = _key(file)
        if key is None:
            return
        digest, ident = key
        import numpy as np

        root = cache_dir()
        root.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{digest}.", dir=root))
        try:
            lists = {k: v for k, v in raw.items() if isinstance(v, list)}
            arrays: dict[str, dict[str, tuple[str, int]]] = {}
            for group, columns in raw.items():
                if not isinstance(columns, dict):
                    continue
                arrays[group] = {}
                for name, arr in columns.items():
                    np.save(tmp / f"{group}.{name}.npy", arr, allow_pickle=False)
                    arrays[group][name] = (arr.dtype.str, len(arr))
            manifest = {"ident": ident, "lists": lists, "arrays": arrays}
            (tmp / _MANIFEST).write_text(json.dumps(manifest))
            final = root / digest
            if final.exists():
                shutil.rmtree(final, ignore_errors=True)
            tmp.rename(final)
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)
        _prune(root)
    except (OSError, TraceInspectError):
        return


def _prune(root: Path) -> None:
    entries = [p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")]
    entries.sort(key=lambda p: p.stat().st_mtime_ns)
    for old in entries[:-MAX_ENTRIES]:
        shutil.rmtree(old, ignore_errors=True)
