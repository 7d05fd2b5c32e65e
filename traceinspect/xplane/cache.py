"""A disk cache of decoded columns, so the second open of a large trace is near-instant.

Keyed by file identity (:func:`local_identity`: absolute path, size, mtime, ctime, inode and
a digest of the first and last 64 KiB; for a file behind a URL: the URL, and the size, mtime
and ETag its listing gave) and the traceinspect version: a file that changes, even to
another of the same size and mtime (``cp -p``, ``rsync -t``), or a new release, misses. An
entry is a directory of ``.npy`` arrays (opened memory-mapped, each checked against the
CRC-32 its manifest records) and one JSON manifest; it is written under a temporary name and
renamed, so a reader never sees half an entry. Anything unreadable, of another shape or
failing its checksum is treated as a miss and rewritten: a corrupt cache costs time, never
a wrong answer.

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
import zlib
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
# 3: each array's CRC-32 in the manifest; the key holds ctime, inode and a content digest.
_FORMAT = 3
#: How much of each end of a file its identity reads (:func:`local_identity`).
EDGE_BYTES = 64 << 10
_MANIFEST = "manifest.json"


def cache_dir() -> Path:
    env = os.environ.get("TRACEINSPECT_CACHE_DIR")
    if env:
        return Path(env)
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg) if xdg else Path.home() / ".cache"
    return base / "traceinspect"


def local_identity(path: Path) -> dict[str, Any]:
    """What tells a local file from another one at the same path, cheaply: its size and
    mtime, its ctime and inode (a copy over it, even one that keeps the mtime, changes the
    ctime; a rename onto it, the inode), and a digest of its first and last
    ``EDGE_BYTES`` (the content, where a file system keeps neither: two traces differ in
    their timestamps). One ``stat`` and at most 128 KiB read. Raises OSError."""
    with path.open("rb") as fh:
        st = os.fstat(fh.fileno())
        digest = hashlib.sha256(fh.read(EDGE_BYTES))
        if st.st_size > EDGE_BYTES:
            fh.seek(max(EDGE_BYTES, st.st_size - EDGE_BYTES))
            digest.update(fh.read(EDGE_BYTES))
    return {
        "size": st.st_size,
        "mtime_ns": st.st_mtime_ns,
        "ctime_ns": st.st_ctime_ns,
        "inode": st.st_ino,
        "edges": digest.hexdigest()[:32],
    }


def _key(file: Location | HostFile) -> tuple[str, dict[str, Any]] | None:
    """The entry name and identity of ``file``; None when nothing would tell a rewritten
    remote object from the old one (neither mtime nor ETag), so it is never cached."""
    path = file.path if isinstance(file, HostFile) else file
    if isinstance(path, Path):
        ident: dict[str, Any] = {"path": str(path.resolve()), **local_identity(path)}
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
        if not isinstance(manifest, dict) or manifest.get("ident") != ident:
            return None
        import numpy as np  # here: cache_dir() is needed by commands that import no numpy

        raw: dict[str, Any] = dict(manifest["lists"])
        for group, columns in manifest["arrays"].items():
            raw[group] = {}
            for name, (dtype, length, crc) in columns.items():
                arr = np.load(entry / f"{group}.{name}.npy", mmap_mode="r", allow_pickle=False)
                if arr.dtype != np.dtype(dtype) or arr.shape != (length,):
                    return None
                # Right length, wrong values (a disk error, an edit) would be used as is:
                # CRC-32 runs at ~4 GB/s, 0.03 s for the 89 MB capture's columns.
                if zlib.crc32(memoryview(arr)) != crc:
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
            arrays: dict[str, dict[str, tuple[str, int, int]]] = {}
            for group, columns in raw.items():
                if not isinstance(columns, dict):
                    continue
                arrays[group] = {}
                for name, arr in columns.items():
                    np.save(tmp / f"{group}.{name}.npy", arr, allow_pickle=False)
                    crc = zlib.crc32(np.ascontiguousarray(arr).data)
                    arrays[group][name] = (arr.dtype.str, len(arr), crc)
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
