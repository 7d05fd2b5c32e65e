"""A disk cache of analyses, so a second ``analyze`` of an unchanged trace reads its result.

Keyed like the cache of decoded columns (``traceinspect/xplane/cache.py``): the trace
file's absolute path, size and mtime, and the traceinspect version; and, since they change
the result too, the same for the capture sidecars the trace would be read with, and the
size and mtime of traceinspect's own source files (an edited checkout never reads a result
its old code made). Only local files are cached.

An entry is one ``.npz`` file (numpy arrays, no pickles) in the frame cache's directory,
holding the analysis record (:func:`~traceinspect.analysis.result.analysis_record`), written
under a temporary name and renamed. Anything unreadable is a miss: a damaged entry costs
time, never a wrong answer. The most recently used ``MAX_ENTRIES`` entries are kept.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
from dataclasses import replace
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

from traceinspect._version import __version__
from traceinspect.analysis.result import Analysis, analysis_from_record, analysis_record
from traceinspect.sidecar import file_name
from traceinspect.xplane.cache import cache_dir
from traceinspect.xplane.locate import Located

MAX_ENTRIES = 64
_SUFFIX = ".analysis.npz"
_RECORD = "__record__"
_PACKAGE = Path(__file__).resolve().parent


@cache
def _code_identity() -> str:
    """traceinspect's own files by size and mtime: a digest that changes with the code."""
    found = []
    for path in sorted(_PACKAGE.rglob("*")):
        if path.suffix in (".py", ".so", ".pyd"):
            st = path.stat()
            found.append((str(path.relative_to(_PACKAGE)), st.st_size, st.st_mtime_ns))
    return hashlib.sha256(json.dumps(found).encode()).hexdigest()[:16]


def _size_and_mtime(path: Path) -> list[int] | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return [st.st_size, st.st_mtime_ns]


def _result_key(located: Located) -> tuple[str, dict[str, Any]] | None:
    """The entry name and identity of the analysis of ``located``'s run; None when a file
    is not local (or cannot be read)."""
    files = located.run.files
    if not all(isinstance(f.path, Path) for f in files) or not isinstance(located.run.path, Path):
        return None
    hosts = [f.host for f in files]
    sidecars = [located.run.path / name for name in (file_name(hosts[0]), file_name())]
    traces = []
    for f in files:
        assert isinstance(f.path, Path)
        stat = _size_and_mtime(f.path)
        if stat is None:
            return None
        traces.append([str(f.path.resolve()), f.host, *stat])
    ident: dict[str, Any] = {
        "traces": traces,
        "sidecars": [[str(p.resolve()), _size_and_mtime(p)] for p in sidecars],
        "version": __version__,
        "code": _code_identity(),
    }
    digest = hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()[:32]
    return digest, ident


def load(located: Located) -> Analysis | None:
    """The stored analysis of ``located``'s run, or None (not stored, changed since, or
    unreadable). Its ``path`` is the one asked for this time."""
    try:
        key = _result_key(located)
        if key is None:
            return None
        digest, ident = key
        entry = cache_dir() / f"{digest}{_SUFFIX}"
        with np.load(entry, allow_pickle=False) as npz:
            arrays = {name: npz[name] for name in npz.files}
        record = json.loads(arrays.pop(_RECORD).tobytes().decode())
        if record.get("ident") != ident:
            return None
        analysis = analysis_from_record(record, arrays)
        with contextlib.suppress(OSError):
            os.utime(entry)  # recently used entries survive pruning
        return replace(analysis, path=str(located.requested))
    except Exception:
        # Any damage (a truncated file, a record of another shape) is a miss, not an error.
        return None


def store(located: Located, analysis: Analysis) -> None:
    """Keep ``analysis`` of ``located``'s run. Failures (disk full, read-only home, a
    value that has no record) are ignored: the cache is an optimisation."""
    try:
        key = _result_key(located)
        if key is None:
            return
        digest, ident = key
        record, arrays = analysis_record(analysis)
        record["ident"] = ident
        text = json.dumps(record).encode()
        root = cache_dir()
        root.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{digest}.", suffix=".npz", dir=root)
        try:
            named: dict[str, Any] = {_RECORD: np.frombuffer(text, dtype=np.uint8), **arrays}
            with os.fdopen(fd, "wb") as fh:
                np.savez(fh, **named)
            Path(tmp).replace(root / f"{digest}{_SUFFIX}")
        finally:
            with contextlib.suppress(OSError):
                Path(tmp).unlink()
        _prune_results(root)
    except (OSError, TypeError, ValueError):
        return


def _prune_results(root: Path) -> None:
    entries = sorted(root.glob(f"*{_SUFFIX}"), key=lambda p: p.stat().st_mtime_ns)
    for old in entries[:-MAX_ENTRIES]:
        with contextlib.suppress(OSError):
            old.unlink()
