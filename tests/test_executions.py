"""Linking each step to the executions it dispatched (``analysis.executions``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import xspace as X
from hypothesis import given
from hypothesis import strategies as st
from xspace import Ev, ms

import traceinspect
from traceinspect.analysis.executions import _offset, others_work_in
from traceinspect.backends.detect import xla_cpu_line_rows
from traceinspect.intervals import Intervals


def _simulate(
    host_gaps: list[float], work: list[float], queued: int, idle_at: int
) -> tuple[np.ndarray, np.ndarray]:
    """A device running one program in dispatch order. ``queued`` executions dispatched
    before the trace are still to run when it begins; the host waits ``idle_at`` so long
    before one dispatch that the device runs dry once."""
    dispatch = np.cumsum(host_gaps)
    n = len(dispatch)
    dispatch[idle_at:] += 1e6  # the host stalls: the device empties its queue
    starts = []
    free = 0.0
    for k in range(queued + n):
        ready = 0.0 if k < queued else dispatch[k - queued]
        start = max(free, ready)
        starts.append(start)
        free = start + work[k % len(work)]
    return dispatch, np.array(starts)


@given(
    host_gaps=st.lists(st.floats(min_value=0.1, max_value=50.0), min_size=5, max_size=40),
    work=st.lists(st.floats(min_value=1.0, max_value=30.0), min_size=1, max_size=5),
    queued=st.integers(min_value=0, max_value=40),
    data=st.data(),
)
def test_the_offset_is_the_queue_at_trace_start_once_the_device_idled(
    host_gaps: list[float], work: list[float], queued: int, data: st.DataObject
) -> None:
    idle_at = data.draw(st.integers(min_value=0, max_value=len(host_gaps) - 1))
    dispatch, starts = _simulate(host_gaps, work, queued, idle_at)
    assert _offset(dispatch, starts) == queued


def test_a_device_that_never_idles_links_causally() -> None:
    # The host dispatches every 1 ms, the device needs 10: no anchor, but no execution is
    # ever linked to a dispatch that came after it started.
    dispatch = np.arange(20, dtype=float)
    starts = 5.0 + 10.0 * np.arange(25)
    q = _offset(dispatch, starts)
    assert q == 0
    assert np.all(starts[q : q + 20] >= dispatch)


def test_no_offset_when_executions_precede_every_dispatch() -> None:
    assert _offset(np.array([100.0, 200.0]), np.array([1.0, 2.0, 3.0])) == 3
    assert _offset(np.array([100.0]), np.array([])) == 0


def _program_op(name: str, module: str, start: float, dur: float, run_id: int) -> Ev:
    return Ev(name, ms(start), ms(dur), {"hlo_op": name, "hlo_module": module, "run_id": run_id})


def test_the_other_programs_work_in_each_span(tmp_path: Path) -> None:
    """Four 10 ms steps of ``jit_step`` (8 ms of ops each); in step 1 an evaluation's two
    forward passes (``jit_eval_step``, 3 ms each, overlapping ops of one execution counted
    once); in step 3 a metrics division (``jit_true_divide``, 0.05 ms). Each span gets the
    work of the executions of the other programs that began in it, the step's own left out."""
    xs = X.space()
    plane = X.add_plane(xs, "/host:CPU")
    host = [Ev("train", ms(10 * i), ms(10), {"step_num": i}) for i in range(4)]
    plane.line("train.py", 0, host)
    ops = []
    for i in range(4):
        ops.append(_program_op("fusion.1", "jit_step", 10 * i + 1, 8.0, i))
    ops += [
        _program_op("dot.1", "jit_eval_step", 19.2, 0.3, 0),
        _program_op("dot.1", "jit_eval_step", 19.3, 3.0, 0),  # overlaps: one 3.1 ms span
        _program_op("dot.1", "jit_eval_step", 22.5, 3.0, 1),
        _program_op("divide.2", "jit_true_divide", 39.0, 0.05, 0),
    ]
    plane.line("tf_XLAEigen/5", 0, sorted(ops, key=lambda e: e.offset_ps))
    trace = traceinspect.load(X.write(xs, tmp_path / "vm.xplane.pb"))
    # Apart, as the occurrences of a stall are (touching spans would merge into one).
    spans = Intervals.union_of(
        np.array([0, 10, 20, 30], np.int64) * 1_000_000 + trace.start_ns,
        np.array([9, 19, 29, 39], np.int64) * 1_000_000 + 900_000 + trace.start_ns,
    )
    work = others_work_in(trace, xla_cpu_line_rows(trace), spans, "jit_step")
    assert work is not None
    # The eval's first execution began at 19.2 ms (step 1), its second at 22.5 (step 2).
    assert work.tolist() == [0.0, 3_100_000.0, 3_000_000.0, 50_000.0]
    # Left out is the program named, whatever its work: the evaluation's, here.
    work = others_work_in(trace, xla_cpu_line_rows(trace), spans, "jit_eval_step")
    assert work is not None
    assert work.tolist() == [8_000_000.0, 8_000_000.0, 8_000_000.0, 8_050_000.0]


def test_no_other_programs_work_without_execution_ids(tmp_path: Path) -> None:
    xs = X.space()
    plane = X.add_plane(xs, "/host:CPU")
    plane.line("train.py", 0, [Ev("train", ms(0), ms(10), {"step_num": 0})])
    trace = traceinspect.load(X.write(xs, tmp_path / "vm.xplane.pb"))
    one = Intervals.union_of(np.array([0], np.int64), np.array([1], np.int64))
    assert others_work_in(trace, np.array([0], np.int64), one, "jit_step") is None
