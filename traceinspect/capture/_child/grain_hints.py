"""What capture adds to an error raised in a Grain pipeline: more workers than files, a
method called on the wrong kind of dataset."""

from __future__ import annotations

import contextlib
import os
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .window import _Capture


def workers_vs_files_hint(exc: BaseException, cap: _Capture) -> str | None:
    """For the ``IndexError`` a Grain pipeline raises when an ``mp_prefetch`` worker was given
    no file of an ``InterleaveIterDataset`` (more workers than files on this host): the
    numbers and the fix. None otherwise.

    Measured with Grain 0.2.18: 2 files, 3 workers: ``IndexError: list index out of range``
    after 2 batches (after 1 with 1 file and 2 workers); as many workers as files run
    through. The count of files per host is MaxText's, as in
    ``traceinspect.analysis.findings`` (the analysis' ``workers_vs_files``)."""
    if not isinstance(exc, IndexError) or not _raised_in_grain(exc):
        return None
    workers = cap._grain_setting("mp_prefetch", "num_workers")
    files = cap._grain_setting("interleave", "files")
    shards = max(1, cap._grain_setting("interleave", "file_shards") or 1)
    if not workers or not files:
        return None
    per_host = max(files // shards, 1)
    if workers <= per_host:
        return None
    sliced = f", {files} // {shards} per host" if shards > 1 else ""
    return (
        f"{workers} mp_prefetch workers share {per_host} file(s) on this host ({files} "
        f"listed under the InterleaveIterDataset{sliced}): a worker given no file ends "
        f"Grain's pipeline with this IndexError. Use at most {per_host} worker(s) (MaxText "
        f"refuses more workers than files per host), or split the data into at least "
        f"{workers * shards} files."
    )


def _raised_in_grain(exc: BaseException) -> bool:
    """Whether the exception's traceback passes through Grain's own code."""
    tb = exc.__traceback__
    while tb is not None:
        if f"{os.sep}grain{os.sep}" in tb.tb_frame.f_code.co_filename:
            return True
        tb = tb.tb_next
    return False


def grain_method_hint(exc: BaseException) -> str | None:
    """For an ``AttributeError`` raised on a Grain dataset (``'BatchMapDataset' object has no
    attribute 'mp_prefetch'``): which of Grain's dataset kinds has that method in the
    installed Grain, and how to get there from the object the script had. None otherwise.

    Looked up, not remembered: the classes and their methods are those of the Grain the
    script imported.
    """
    obj = getattr(exc, "obj", None)
    name = getattr(exc, "name", None)
    if not isinstance(exc, AttributeError) or obj is None or not isinstance(name, str):
        return None
    if not type(obj).__module__.startswith("grain."):
        return None
    dataset_mod = sys.modules.get("grain._src.python.dataset.dataset")
    if dataset_mod is None:
        return None
    kinds = [
        cls
        for cls in (getattr(dataset_mod, n, None) for n in ("MapDataset", "IterDataset"))
        if isinstance(cls, type)
    ]
    mine = next((k for k in kinds if isinstance(obj, k)), None)
    having = [k for k in kinds if k is not mine and hasattr(k, name)]
    version = "?"
    with contextlib.suppress(Exception):
        from importlib import metadata

        version = metadata.version("grain")
    what = f"'{type(obj).__name__}'" + (f" (a {mine.__name__})" if mine else "")
    if not having:
        return f"{what} has no '{name}' in grain {version}, nor has any Grain dataset kind."
    target = having[0].__name__
    converters = [
        m
        for m in sorted(dir(type(obj)))
        if m.startswith("to_") and target.lower().startswith(m[3:].replace("_", ""))
    ]
    how = (
        f": call .{converters[0]}(...) first, then .{name}(...)"
        if converters
        else f"; build the pipeline so that .{name}(...) is called on a {target}"
    )
    return f"{what} has no '{name}' in grain {version}; {target} has it{how}."
