"""Where a Trace comes from: how its run was read (LoadInfo, the progress callback while
files are decoded) and the run's capture sidecar."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass

from traceinspect.sidecar import Sidecar, file_name, parse
from traceinspect.xplane import fs
from traceinspect.xplane.locate import Located

#: ``progress(done_bytes, total_bytes)``, called while files are decoded.
ProgressCallback = Callable[[int, int], object]


@dataclass(frozen=True)
class LoadInfo:
    """How a trace was read: for ``info --json`` and benchmarks."""

    decoder: str
    seconds: float
    bytes_read: int
    cached_files: int


def read_sidecar(located: Located) -> Sidecar | None:
    """The capture sidecar of the run, if any; an unreadable one is ignored (it only adds
    facts the trace lacks, such as per-step host times and Grain settings), and so is one of a
    newer schema than this traceinspect reads.

    Hosts that share a run directory (``capture --run-name``) each write
    ``<host>.traceinspect.capture.json``: a host's own comes first, then the run's.
    """
    hosts = [f.host for f in located.run.files]
    names = [file_name(hosts[0]), file_name()]
    if len(hosts) > 1:
        names.reverse()  # several hosts merged: the run's own sidecar, else the first host's
    for name in names:
        try:
            data = json.loads(fs.read_text(located.run.path / name))
        except (OSError, ValueError):
            continue
        if isinstance(data, dict):
            return parse(data)
    return None
