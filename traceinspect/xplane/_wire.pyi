"""Types of the compiled XPlane decoder (``_wire.c``); ``pydecode.decode`` returns the same."""

import mmap
from collections.abc import Callable
from typing import TypedDict

import numpy as np

class StatColumns(TypedDict):
    owner: np.ndarray  # int32: the row of the event / plane / metadata the stat belongs to
    stat: np.ndarray  # int32: index into stat_names
    kind: np.ndarray  # int8: schema.STAT_KINDS
    int_value: np.ndarray  # int64
    float_value: np.ndarray  # float64
    str_value: np.ndarray  # int32: index into str_values, -1 for none

class Decoded(TypedDict):
    hostnames: list[str]
    errors: list[str]
    warnings: list[str]
    event_names: list[str]
    stat_names: list[str]
    str_values: list[str]
    plane_names: list[str]
    line_names: list[str]
    line_display_names: list[str]
    metadata_display_names: list[str]
    planes: dict[str, np.ndarray]  # xplane_id
    lines: dict[str, np.ndarray]  # plane_row, line_id, timestamp_ns, duration_ps, ...
    events: dict[str, np.ndarray]  # line_row, name, start_ns, duration_ns
    aggregated: dict[str, np.ndarray]  # line_row, name, occurrences, duration_ps
    metadata: dict[str, np.ndarray]  # plane_row, metadata_id, name
    event_stats: StatColumns
    aggregated_stats: StatColumns
    plane_stats: StatColumns
    metadata_stats: StatColumns

def decode(
    data: bytes | bytearray | memoryview | mmap.mmap,
    progress: Callable[[int], object] | None = None,
    *,
    release_every: int = 0,
    release_gil: bool = False,
    between_passes: Callable[[], object] | None = None,
) -> Decoded:
    """Decode serialized XSpace bytes into columns. ``progress(bytes_done)`` is called about
    every million events. With ``release_every > 0``, ``data`` must be a read-only
    ``mmap.mmap``: every ``release_every`` bytes (and after each plane) the pages already
    decoded leave this process's memory (they stay in the page cache). With
    ``release_gil``, other threads run Python while it decodes (``data`` read-only, no
    ``progress``: it cannot be interrupted then). ``between_passes()`` is called between
    the index and the fill pass (tests change ``data`` there). Raises ``ValueError`` on
    malformed input, on input that changed between the two passes, and when the file of a
    read-only ``mmap.mmap`` shrinks while it is decoded (SIGBUS, caught)."""
