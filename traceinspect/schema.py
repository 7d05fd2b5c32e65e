"""Column names (with their units), dtypes and invariants of every frame traceinspect makes.

Code elsewhere refers to columns through these constants, never through bare strings, so
a rename happens here and type checkers and tests catch every use.

Time columns are integers. Event times are nanoseconds on the trace's own clock: XPlane
stores picoseconds relative to each line's ``timestamp_ns``, and jax.profiler writes line
timestamps relative to the start of the profiling session, so ``start_ns`` counts from about
when tracing began (a first event at some us to ms), not from the Unix epoch. Compare times
within one trace, or subtract ``Trace.start_ns`` (the first event). Both ends of an event are
floored to whole nanoseconds when decoded (``duration_ns = floor(end) - floor(start)``),
so an event that nests inside another in the trace still nests exactly in the frame.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    import pandas as pd

# --- shared -------------------------------------------------------------------------------
HOST: Final = "host"
PLANE: Final = "plane"
LINE: Final = "line"
NAME: Final = "name"
PLANE_ROW: Final = "plane_row"
LINE_ROW: Final = "line_row"

# --- planes -------------------------------------------------------------------------------
XPLANE_ID: Final = "xplane_id"
LINE_COUNT: Final = "line_count"
EVENT_COUNT: Final = "event_count"

# --- lines --------------------------------------------------------------------------------
LINE_ID: Final = "line_id"
DISPLAY_ID: Final = "display_id"
DISPLAY_NAME: Final = "display_name"
TIMESTAMP_NS: Final = "timestamp_ns"
LINE_DURATION_PS: Final = "duration_ps"
FIRST_START_NS: Final = "first_start_ns"
LAST_END_NS: Final = "last_end_ns"

# --- events -------------------------------------------------------------------------------
START_NS: Final = "start_ns"
DURATION_NS: Final = "duration_ns"
END_NS: Final = "end_ns"  # derived on demand: start_ns + duration_ns

# --- aggregated events (XEvent.num_occurrences instead of offset_ps: no start time) --------
OCCURRENCES: Final = "occurrences"
TOTAL_DURATION_PS: Final = "duration_ps"

# --- stats (events, aggregated events, planes, event metadata) ----------------------------
EVENT_ROW: Final = "event_row"
AGGREGATED_ROW: Final = "aggregated_row"
METADATA_ROW: Final = "metadata_row"
STAT: Final = "stat"
KIND: Final = "kind"
INT_VALUE: Final = "int_value"
FLOAT_VALUE: Final = "float_value"
STR_VALUE: Final = "str_value"

# --- event metadata -----------------------------------------------------------------------
METADATA_ID: Final = "metadata_id"

# Stat value kinds, in the decoder's numbering (XStat's value oneof).
#   int_value:   int64 and uint64 values (uint64 above 2**63-1 wraps; kind says which),
#                and for "ref" the id of the referenced XStatMetadata
#   float_value: double values (NaN otherwise)
#   str_value:   str, bytes and ref values as text; bytes are decoded with
#                surrogateescape, so ``s.encode("utf-8", "surrogateescape")`` gives them back
#                (``Trace.with_stats`` shows them as names are: bytes not UTF-8 as \xNN)
STAT_KINDS: Final[tuple[str, ...]] = ("none", "double", "uint64", "int64", "str", "bytes", "ref")
INTEGER_KINDS: Final = frozenset({"uint64", "int64"})
STRING_KINDS: Final = frozenset({"str", "bytes", "ref"})

# --- analysis results ---------------------------------------------------------------------
# Analysis.per_step: one row per analysed step (also the pod's per-host step tables).
STEP: Final = "step"  # the step's number (step_num where the trace has one)
STEP_INDEX: Final = "step_index"  # its position among the analysed steps, from 0
WALL_NS: Final = "wall_ns"  # start of the step to the start of the next
BUSY_NS: Final = "busy_ns"  # device busy time inside the step's host window
IDLE_NS: Final = "idle_ns"  # WALL_NS - BUSY_NS
COLLECTIVE_NS: Final = "collective_ns"  # of BUSY_NS, time inside collectives
INPUT_WORK_NS: Final = "input_work_ns"  # the training thread fetching or waiting for batches
DEVICE_WORK_NS: Final = "device_work_ns"  # work of the executions the step dispatched


def idle_cause_ns(cause: str) -> str:
    """The per-step column of idle time given to ``cause`` (``idle_input_ns``, ...)."""
    return f"idle_{cause}_ns"


# Analysis.gaps: one row per piece of an idle period inside one step, with STEP, STEP_INDEX,
# START_NS, END_NS, DURATION_NS, one column per cause (ns) and:
PERIOD_START_NS: Final = "period_start_ns"  # start of the idle period the piece belongs to
AFTER_SYNC: Final = "after_sync"  # the period opened when a blocking read ended
CAUSE: Final = "cause"  # the cause with the most time in the piece
# Why the piece got CAUSE where another cause's evidence takes more of it (a read's wait that
# precedes a longer input wait: sync, by the sync rule), else None.
CAUSE_REASON: Final = "cause_reason"
EVIDENCE: Final = "evidence"  # sentences: the host events behind the piece
SYNC_SITE: Final = "sync_site"  # where the read that opened the period was made, or None
START_MS: Final = "start_ms"  # ms from the trace's first event (as printed)
# HostActivity.events: the training thread's events, with:
CATEGORY: Final = "category"  # input | sync | compile | host

# --- pod tables ---------------------------------------------------------------------------
# The frames of a multi-host analysis (analysis/straggler.py, PodAnalysis). "Input idle" is
# the device's idle time caused by input (idle_cause_ns("input")); the training thread's
# time fetching batches is "input work" (INPUT_WORK_NS; the sweep's input_wait_ms).
# PodAnalysis.steps: one row per (step, host) for the step numbers every host traced, with
# HOST, STEP, WALL_NS, BUSY_NS, COLLECTIVE_NS, IDLE_NS and idle_cause_ns(cause) per cause.
# .hosts and .per_step are also analyze --json's "hosts_table" and "steps", keyed by these
# names but for the two input idle columns, whose keys keep their historical spelling
# (input_wait_ms_per_step, starved_input_wait_ms: PodAnalysis.to_dict).
# PodAnalysis.hosts: one row per host (index HOST).
FILE_MB: Final = "file_mb"  # size of the host's trace file
VERDICT: Final = "verdict"  # the host's own verdict, or "error"
STEP_COUNT: Final = "steps"  # steps in the host's own analysis
MEDIAN_STEP_MS: Final = "median_step_ms"  # the host's own step times (its analysis)
P90_STEP_MS: Final = "p90_step_ms"
BUSY_MS_PER_STEP: Final = "busy_ms_per_step"  # device busy per step (median)
COLLECTIVE_MS_PER_STEP: Final = "collective_ms_per_step"  # of it, inside collectives
INPUT_WORK_MS_PER_STEP: Final = "input_work_ms_per_step"  # training thread on input
INPUT_IDLE_MS_PER_STEP: Final = "input_idle_ms_per_step"  # input idle, aligned steps' median
IDLE_FRACTION: Final = "idle_fraction"  # the device's idle share of step time
GRAIN_WORKERS: Final = "grain_workers"  # the host's recommended grain_worker_count
ERROR: Final = "error"  # why the host could not be analysed (None otherwise)
ROLE: Final = "role"  # "straggler", "waits for HOST" or ""
# PodAnalysis.per_step: one row per aligned step, with STEP and:
SLOWEST_HOST: Final = "slowest_host"  # the host with the longest step
SLOWEST_MS: Final = "slowest_ms"  # its step time
FASTEST_MS: Final = "fastest_ms"  # the shortest step time among the hosts
STARVED_HOST: Final = "starved_host"  # the longest input idle when it matters, or None
STARVED_INPUT_IDLE_MS: Final = "starved_input_idle_ms"  # that host's input idle time

PLANES_COLUMNS: Final = (HOST, PLANE, XPLANE_ID, LINE_COUNT, EVENT_COUNT)
LINES_COLUMNS: Final = (
    HOST,
    PLANE,
    PLANE_ROW,
    LINE,
    LINE_ID,
    DISPLAY_ID,
    DISPLAY_NAME,
    TIMESTAMP_NS,
    LINE_DURATION_PS,
    EVENT_COUNT,
    FIRST_START_NS,
    LAST_END_NS,
)
EVENTS_COLUMNS: Final = (HOST, PLANE, LINE, LINE_ROW, NAME, START_NS, DURATION_NS)
AGGREGATED_COLUMNS: Final = (HOST, PLANE, LINE, LINE_ROW, NAME, OCCURRENCES, TOTAL_DURATION_PS)
STATS_VALUE_COLUMNS: Final = (STAT, KIND, INT_VALUE, FLOAT_VALUE, STR_VALUE)
METADATA_COLUMNS: Final = (HOST, PLANE, PLANE_ROW, METADATA_ID, NAME, DISPLAY_NAME)


def check_events(events: pd.DataFrame) -> None:
    """Raise ``AssertionError`` unless ``events`` has the events schema (for tests)."""
    import pandas as pd

    assert tuple(events.columns) == EVENTS_COLUMNS, tuple(events.columns)
    for col in (HOST, PLANE, LINE, NAME):
        assert isinstance(events[col].dtype, pd.CategoricalDtype), col
    for col in (START_NS, DURATION_NS):
        assert events[col].dtype == "int64", col
    assert events[LINE_ROW].dtype == "int32"
