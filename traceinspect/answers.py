"""Keys of stored analyses, and the printed answers kept with them.

A second ``analyze`` of an unchanged trace prints what the first printed. The analysis
itself is kept by :mod:`traceinspect.results` (numpy arrays, read back into an
:class:`~traceinspect.analysis.result.Analysis`); this module keeps, beside it, the exact
text each way of printing it gave (``--json``, ``--json --all-gaps``, the report with its
``--top``), so printing it again needs neither numpy nor pandas: a cached answer costs the
interpreter, Click and a few ``stat`` calls.

Both are keyed by :func:`result_key`: the trace files' absolute paths and identities
(:func:`~traceinspect.xplane.cache.local_identity`: size, mtime, ctime, inode and a digest
of the first and last 64 KiB, so that another trace copied over the path with the same size
and mtime misses), the same for the capture sidecars the trace would be read with, the
traceinspect version, and the size and mtime of traceinspect's own source files (an edited
checkout never reads an answer its old code made). Only local files are kept. An answer
also names the path as the user gave it (the report prints it) and how it was printed.
Standard library only.

An answer is one small JSON file, ``<key>.<variant>.answer.json``, in the frame cache's
directory, written under a temporary name and renamed, with a digest of its text; anything
unreadable, of another shape or identity, or failing its digest is a miss. The most
recently used ``MAX_ANSWERS`` are kept.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import tempfile
from functools import cache
from pathlib import Path
from typing import Any

from traceinspect._version import __version__
from traceinspect.sidecar import file_name
from traceinspect.xplane.cache import cache_dir, local_identity
from traceinspect.xplane.locate import Located

log = logging.getLogger(__name__)

MAX_ANSWERS = 256
_SUFFIX = ".answer.json"
#: The stored analyses' files (:mod:`traceinspect.results`), under the same key.
ANALYSIS_SUFFIX = ".analysis.npz"
_PACKAGE = Path(__file__).resolve().parent


@cache
def _code_identity() -> str:
    """traceinspect's own files by size and mtime: a digest that changes with the code."""
    found = []
    for root, dirs, files in os.walk(_PACKAGE):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for name in sorted(files):
            if name.endswith((".py", ".so", ".pyd")):
                path = Path(root, name)
                st = path.stat()
                found.append((path.relative_to(_PACKAGE).as_posix(), st.st_size, st.st_mtime_ns))
    found.sort()
    return hashlib.sha256(json.dumps(found).encode()).hexdigest()[:16]


def _identity(path: Path) -> dict[str, Any] | None:
    try:
        return local_identity(path)
    except OSError:
        return None


def result_key(located: Located) -> tuple[str, dict[str, Any]] | None:
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
        identity = _identity(f.path)
        if identity is None:
            return None
        traces.append([str(f.path.resolve()), f.host, identity])
    ident: dict[str, Any] = {
        "traces": traces,
        "sidecars": [[str(p.resolve()), _identity(p)] for p in sidecars],
        "version": __version__,
        "code": _code_identity(),
    }
    digest = hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()[:32]
    return digest, ident


def analysis_path(located: Located) -> Path | None:
    """Where the stored analysis of ``located``'s run would be (None: it has no key)."""
    key = result_key(located)
    return None if key is None else analysis_entry(key[0])


def analysis_entry(digest: str) -> Path:
    """The stored analysis of the run whose result key's digest is ``digest``."""
    return cache_dir() / f"{digest}{ANALYSIS_SUFFIX}"


def _entry(located: Located, printed: str) -> tuple[Path, dict[str, Any]] | None:
    key = result_key(located)
    if key is None:
        return None
    digest, ident = key
    ident = {**ident, "requested": str(located.requested), "printed": printed}
    variant = hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()[:12]
    return cache_dir() / f"{digest}.{variant}{_SUFFIX}", ident


def read(located: Located, printed: str) -> str | None:
    """The text printed last time ``located``'s run was analysed and printed as
    ``printed`` (``"json:50"``, ``"text:5"``...), when nothing it depends on changed since;
    else None."""
    try:
        found = _entry(located, printed)
        if found is None:
            return None
        entry, ident = found
        stored = json.loads(entry.read_text(encoding="utf-8"))
        if not isinstance(stored, dict) or stored.get("ident") != ident:
            return None
        text = stored.get("text")
        if not isinstance(text, str) or stored.get("sha256") != _digest(text):
            return None
        with contextlib.suppress(OSError):
            os.utime(entry)  # recently used answers survive pruning
        log.info(
            "printing the answer kept from an earlier analyze of this unchanged trace "
            "(%s); --no-cache analyses it again",
            entry,
        )
        return text
    except (OSError, ValueError, TypeError):
        return None


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogateescape")).hexdigest()


def write(located: Located, printed: str, text: str) -> None:
    """Keep ``text``, the answer printed as ``printed``. Failures are ignored: it is an
    optimisation."""
    try:
        found = _entry(located, printed)
        if found is None:
            return
        entry, ident = found
        entry.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{entry.name}.", dir=entry.parent)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                json.dump({"ident": ident, "text": text, "sha256": _digest(text)}, fh)
            Path(tmp).replace(entry)
        finally:
            with contextlib.suppress(OSError):
                Path(tmp).unlink()
        prune(entry.parent, _SUFFIX, MAX_ANSWERS)
    except (OSError, ValueError, TypeError):
        return


def prune(root: Path, suffix: str, keep: int) -> None:
    """Delete all but the ``keep`` most recently used files named ``*suffix`` in ``root``
    (a read touches its entry's mtime)."""
    entries = sorted(root.glob(f"*{suffix}"), key=lambda p: p.stat().st_mtime_ns)
    for old in entries[:-keep]:
        with contextlib.suppress(OSError):
            old.unlink()
