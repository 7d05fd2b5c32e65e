"""XLA's CPU backend as each jaxlib lays it out: which host threads run the device's work.

jaxlib 0.10 runs programs on ``tf_XLAPjRtCpuClient/<id>`` and ``tf_XLAEigen/<id>``; 0.12 on
``tf_XLAExecute/<id>`` and ``tf_XLAEigen/<id>``, with the main thread named after the module
run (``train.py``). A thread of a name no jaxlib used yet still counts when it runs a
program's ops and dispatches nothing (../shared/FIELD-NOTES.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import xspace as X
from xspace import Ev, ms

import traceinspect
from traceinspect.analysis.analyze import analyze
from traceinspect.backends.activity import device_activity
from traceinspect.backends.detect import detect_backend, xla_cpu_line_rows


def _op(name: str, start: float, dur: float, run_id: int) -> Ev:
    return Ev(
        name, ms(start), ms(dur), {"hlo_op": name, "hlo_module": "jit_step", "run_id": run_id}
    )


def _loop(program_lines: dict[str, list[Ev]], main: str = "train.py") -> Any:
    """4 steps of 10 ms: the main thread fetches (1 ms) and dispatches (0.5 ms); the
    program runs 1.6-9.6 ms of each step, as an execute call on ``program_lines``'s first
    line (with its wait-for-completion twin carrying the run id) and ops on the others."""
    xs = X.space()
    host = [Ev("train", ms(10 * i), ms(10), {"step_num": i}) for i in range(4)]
    for i in range(4):
        host += [
            Ev("PrefetchDatasetIterator.__next__", ms(10 * i), ms(1)),
            Ev("PjitFunction(step)", ms(10 * i + 1), ms(0.5)),
        ]
    plane = X.add_plane(xs, "/host:CPU")
    plane.line(main, 0, host)
    for name, events in program_lines.items():
        plane.line(name, 0, events)
    return xs


def _execute_line() -> list[Ev]:
    out = []
    for i in range(4):
        t = 10 * i + 1.6
        out += [
            Ev("ThunkExecutor::Execute", ms(t), ms(0.2)),
            Ev("ThreadpoolListener::StartRegion", ms(t), 0),
            Ev("ThunkExecutor::Execute (wait for completion)", ms(t + 0.2), ms(7.8), {"run_id": i}),
        ]
    return out


def _ops() -> list[Ev]:
    out = []
    for i in range(4):
        t = 10 * i + 1.6
        out += [_op("dot.1", t + 0.2, 3.0, i), Ev("end: dot.1", ms(t + 3.2), 0)]
        out += [_op("fusion.2", t + 3.3, 4.7, i)]
    return out


def _load(tmp_path: Path, xs: Any) -> traceinspect.Trace:
    return traceinspect.load(X.write(xs, tmp_path / "vm.xplane.pb"))


def _line_names(trace: traceinspect.Trace, rows: np.ndarray) -> list[str]:
    return [str(trace.lines.loc[int(r), "line"]) for r in rows]


def test_jaxlib_0_12_runs_programs_on_xla_execute_threads(tmp_path: Path) -> None:
    xs = _loop({"tf_XLAExecute/77": _execute_line(), "tf_XLAEigen/5": _ops()})
    trace = _load(tmp_path, xs)
    backend = detect_backend(trace)
    assert backend.kind == "cpu" and not backend.inline
    assert _line_names(trace, xla_cpu_line_rows(trace)) == ["tf_XLAExecute/77", "tf_XLAEigen/5"]
    busy = device_activity(trace).busy["cpu"]
    # 1.6-9.6 ms of each step: the execute call and its wait span it all.
    assert busy.total == 4 * 8_000_000
    result = analyze(trace)
    # 4 steps of 10 ms, each idle 2 ms, 1 ms of it while the loop fetches its batch.
    assert result.busy_fraction == 0.8
    assert result.verdict == "input-bound"
    assert result.idle_by_cause_ms["input"] == 4.0


def test_the_layout_jaxlib_0_10_wrote_still_reads(tmp_path: Path) -> None:
    xs = _loop({"tf_XLAPjRtCpuClient/3": _execute_line(), "tf_XLAEigen/5": _ops()}, "python")
    trace = _load(tmp_path, xs)
    assert _line_names(trace, xla_cpu_line_rows(trace)) == [
        "tf_XLAPjRtCpuClient/3",
        "tf_XLAEigen/5",
    ]
    assert device_activity(trace).busy["cpu"].total == 4 * 8_000_000


def test_a_thread_of_a_new_name_that_runs_ops_is_the_device(tmp_path: Path) -> None:
    # The next jaxlib renames its threads again: ops carrying hlo_module tell.
    xs = _loop({"tf_XLAWhatever/9": _ops()})
    trace = _load(tmp_path, xs)
    assert detect_backend(trace).kind == "cpu"
    assert _line_names(trace, xla_cpu_line_rows(trace)) == ["tf_XLAWhatever/9"]
    assert device_activity(trace).busy["cpu"].total == 4 * (3_000_000 + 4_700_000)


def test_the_thread_that_dispatches_is_never_the_device(tmp_path: Path) -> None:
    # Tiny programs run inline on the thread that calls them, their ops beside the dispatch:
    # that thread is the host's, whatever its name.
    inline = [Ev("PjitFunction(add)", ms(44.8), ms(0.4)), _op("add.1", 44.9, 0.1, 99)]
    xs = _loop({"tf_XLAEigen/5": _ops(), "tf_Other/1": inline})
    trace = _load(tmp_path, xs)
    assert _line_names(trace, xla_cpu_line_rows(trace)) == ["tf_XLAEigen/5"]
