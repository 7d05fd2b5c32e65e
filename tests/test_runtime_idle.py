"""Idle time with the device's next program already dispatched is the runtime's, and a read
of the previous step's value is no per-step sync (MaxText's metric logger on jax 0.12).

Loops in miniature on XLA's CPU layout, where every execution carries a run id: the
execution's ops (``hlo_module``) on an Eigen thread and the client's wait for completion."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import xspace as X
from xspace import Ev, ms

import traceinspect
from traceinspect.analysis.analyze import analyze
from traceinspect.analysis.executions import step_work
from traceinspect.analysis.reads import reads_behind
from traceinspect.analysis.steps import find_steps
from traceinspect.analysis.training_thread import training_thread_activity
from traceinspect.backends.activity import device_activity

STEPS = 6


def _execution(run_id: int, start: float, end: float) -> tuple[Ev, list[Ev]]:
    """The client's wait for one execution, and its two ops."""
    mid = (start + end) / 2
    stats = {"hlo_module": "jit_step", "run_id": run_id}
    ops = [
        Ev("dot.1", ms(start), ms(mid - start), {"hlo_op": "dot.1", **stats}),
        Ev("fusion.2", ms(mid), ms(end - mid), {"hlo_op": "fusion.2", **stats}),
    ]
    wait = Ev("ThunkExecutor::Execute (wait for completion)", ms(start), ms(end - start),
              {"run_id": run_id})  # fmt: skip
    return wait, ops


def _trace(tmp_path: Path, host: list[Ev], executions: list[tuple[float, float]]) -> Any:
    xs = X.space()
    steps = [Ev("train", ms(10 * i), ms(10), {"step_num": i}) for i in range(STEPS)]
    waits, ops = [], []
    for run_id, (start, end) in enumerate(executions):
        wait, op = _execution(run_id, start, end)
        waits.append(wait)
        ops += op
    plane = X.add_plane(xs, "/host:CPU")
    plane.line("train.py", 0, steps + host)
    plane.line("tf_XLAExecute/1", 0, waits)
    plane.line("tf_XLAEigen/2", 0, ops)
    return traceinspect.load(X.write(xs, tmp_path / "vm.xplane.pb"))


def _read_behind_loop(tmp_path: Path) -> Any:
    """The host dispatches step i at 10i + 0.1 ms, then reads step i-1's loss until that
    step's program ends; the program of step i runs 2-10 ms into step i+1, after 2 ms of the
    runtime's latency with it already dispatched (one step queued, as MaxText runs). The
    trace opens on the program of the step before the first, which tells the link."""
    host = []
    for i in range(STEPS):
        host.append(Ev("PjitFunction(step)", ms(10 * i + 0.1), ms(0.2)))
        if i:
            host.append(Ev("np.asarray(jax.Array)", ms(10 * i + 0.5), ms(9.55)))
    executions = [(10 * (i + 1) + 2.0, 10 * (i + 1) + 10.0) for i in range(STEPS - 1)]
    return _trace(tmp_path, host, [(0.0, 10.0), *executions])


def _sync_loop(tmp_path: Path) -> Any:
    """The host fetches (3 ms), dispatches step i and reads its own loss: the device starts
    0.1 ms after the dispatch and idles while the next batch is fetched."""
    host = []
    executions = []
    for i in range(STEPS):
        t = 10 * i
        host += [
            Ev("PrefetchDatasetIterator.__next__", ms(t), ms(3)),
            Ev("PjitFunction(step)", ms(t + 3.0), ms(0.2)),
            Ev("np.asarray(jax.Array)", ms(t + 3.4), ms(6.2)),
        ]
        executions.append((t + 3.3, t + 9.5))
    return _trace(tmp_path, host, executions)


def test_idle_with_the_next_program_dispatched_is_the_runtimes(tmp_path: Path) -> None:
    a = analyze(_read_behind_loop(tmp_path))
    # Steps 1-5 open with 2 ms of it each; step 0 with the device busy.
    assert a.steps.count == STEPS
    assert a.idle_by_cause_ms["runtime"] == pytest.approx(2.0 * (STEPS - 1))
    assert a.idle_by_cause_ms["sync"] == 0.0
    assert a.verdict == "device-bound"
    assert "between programs the host had already dispatched" in a.summary
    kinds = [r.kind for r in a.recommendations]
    assert "remove_sync" not in kinds and "runtime_latency" in kinds
    (note,) = [n for n in a.notes if "after dispatching the next step" in n]
    assert "wait 9.55 ms a step (median) for the step before to finish" in note


def test_a_read_of_the_steps_own_value_stays_a_sync(tmp_path: Path) -> None:
    a = analyze(_sync_loop(tmp_path))
    assert a.verdict == "sync-bound"
    # Between steps the device idles from 9.5 to 13.3 ms: 0.1 ms of it (dispatch end to
    # start) the runtime's, 3.7 ms the read's; 0.5 ms after the last read; and step 0 opens
    # with its first batch (3 ms of input, 0.2 of dispatch, 0.1 of the runtime's).
    assert a.steps.count == STEPS
    assert a.idle_by_cause_ms["runtime"] == pytest.approx(0.1 * STEPS)
    assert a.idle_by_cause_ms["sync"] == pytest.approx(3.7 * (STEPS - 1) + 0.5)
    assert a.idle_by_cause_ms["input"] == pytest.approx(3.0)
    assert not any("after dispatching the next step" in n for n in a.notes)


def test_reads_behind_counts_only_reads_of_an_earlier_program(tmp_path: Path) -> None:
    # The behind loop's last read ends after the last step: 4 reads inside the steps.
    for make, reads, behind in ((_read_behind_loop, 4, 4), (_sync_loop, STEPS, 0)):
        trace = make(tmp_path)
        steps = find_steps(trace)
        rows = np.array(device_activity(trace).work_line_rows)
        work = step_work(trace, steps, rows)
        assert work is not None
        host = training_thread_activity(trace, steps)
        found = reads_behind(host.sync_events, work, steps)
        assert (found.reads, found.behind) == (reads, behind)


def test_an_execution_is_its_span_not_its_ops(tmp_path: Path) -> None:
    # Ops cover 2 of the execution's 8 ms (the rest ran on threads the profiler does not
    # trace): its device work is the span of its wait for completion.
    host = [Ev("PjitFunction(step)", ms(10 * i), ms(0.2)) for i in range(STEPS)]
    xs = X.space()
    steps = [Ev("train", ms(10 * i), ms(10), {"step_num": i}) for i in range(STEPS)]
    waits, ops = [], []
    for i in range(STEPS):
        wait, _ = _execution(i, 10 * i + 1, 10 * i + 9)
        waits.append(wait)
        stats = {"hlo_module": "jit_step", "run_id": i, "hlo_op": "dot.1"}
        ops.append(Ev("dot.1", ms(10 * i + 1), ms(2), stats))
    plane = X.add_plane(xs, "/host:CPU")
    plane.line("train.py", 0, steps + host)
    plane.line("tf_XLAExecute/1", 0, waits)
    plane.line("tf_XLAEigen/2", 0, ops)
    a = analyze(traceinspect.load(X.write(xs, tmp_path / "vm.xplane.pb")))
    assert a.device_busy_ms_per_step == 8.0
