"""A disk cache of analyses, so a second ``analyze`` of an unchanged trace reads its result.

Keyed by :func:`traceinspect.answers.result_key` (the trace files, their sidecars, the
traceinspect version and its code, by size and mtime); the printed answers kept beside
these entries are :mod:`traceinspect.answers`'. Only local files are cached.

An entry is one ``.npz`` file (numpy arrays, no pickles) in the frame cache's directory,
holding the analysis record (:func:`~traceinspect.analysis.result_record.analysis_record`), written
under a temporary name and renamed. Anything unreadable is a miss: a damaged entry costs
time, never a wrong answer. The most recently used ``MAX_ENTRIES`` entries are kept.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from traceinspect.analysis.result import Analysis
from traceinspect.analysis.result_record import analysis_from_record, analysis_record
from traceinspect.answers import ANALYSIS_SUFFIX as _SUFFIX
from traceinspect.answers import analysis_entry, prune, result_key
from traceinspect.xplane.cache import cache_dir
from traceinspect.xplane.locate import Located

MAX_ENTRIES = 64
_RECORD = "__record__"


log = logging.getLogger(__name__)


def load(located: Located) -> Analysis | None:
    """The stored analysis of ``located``'s run, or None (not stored, changed since, or
    unreadable). Its ``path`` is the one asked for this time."""
    try:
        key = result_key(located)
        if key is None:
            return None
        digest, ident = key
        entry = analysis_entry(digest)
        with np.load(entry, allow_pickle=False) as npz:
            arrays = {name: npz[name] for name in npz.files}
        # The .npz is a zip: a damaged member fails its CRC-32 as it is read (a miss below).
        record = json.loads(arrays.pop(_RECORD).tobytes().decode())
        if not isinstance(record, dict) or record.get("ident") != ident:
            return None
        analysis = analysis_from_record(record, arrays)
        with contextlib.suppress(OSError):
            os.utime(entry)  # recently used entries survive pruning
        log.info("using the analysis kept from an earlier run (%s); --no-cache redoes it", entry)
        return replace(analysis, path=str(located.requested))
    except Exception:
        # Any damage (a truncated file, a record of another shape) is a miss, not an error.
        return None


def store(located: Located, analysis: Analysis) -> None:
    """Keep ``analysis`` of ``located``'s run. Failures (disk full, read-only home, a
    value that has no record) are ignored: the cache is an optimisation."""
    try:
        key = result_key(located)
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
            Path(tmp).replace(analysis_entry(digest))
        finally:
            with contextlib.suppress(OSError):
                Path(tmp).unlink()
        prune(root, _SUFFIX, MAX_ENTRIES)
    except (OSError, TypeError, ValueError):
        return
