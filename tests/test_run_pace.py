"""Every expected step in the run's pace: the window's floors over how much slower the
profiler ran its steps, on the backends whose programs it slows (``counterfactual.run_floors``,
``advice_causes.window_floors`` and ``slowdown_of``)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

import traceinspect
from traceinspect.analysis.advice_causes import (
    callback_advice,
    slowdown_of,
    window_floors,
)
from traceinspect.analysis.analyze import analyze
from traceinspect.analysis.counterfactual import ahead_without, run_floors
from traceinspect.analysis.detectors import detect
from traceinspect.analysis.measure import Measured, measure
from traceinspect.intervals import Intervals

SAMPLES = Path(__file__).resolve().parents[1] / "sample_traces"


def _measured(path: str) -> Measured:
    return measure(traceinspect.load(SAMPLES / path))


def test_a_cpu_window_the_profiler_slowed_gives_the_runs_expected_step() -> None:
    # The family's per-step jax.device_get: traced at 19.4521 ms a step, 17.9346 untraced after.
    m = _measured("scenarios/family/read_device_get_w0")
    assert m.activity.backend.kind == "cpu"
    slowdown = slowdown_of(m, None)
    assert slowdown == pytest.approx(19.4521 / 17.9346)
    window = window_floors(m, None)
    a = analyze(traceinspect.load(SAMPLES / "scenarios/family/read_device_get_w0"))
    advice = next(r for r in a.recommendations if r.kind == "remove_sync")
    in_window = ahead_without("sync", window) / 1e6
    assert advice.expected_step_ms == pytest.approx(in_window / slowdown, abs=1e-4)
    # 12.73 ms from the window's floors; the loop measured 11.62 with the read one step late
    # and 12.52 without it (scenarios/family/measurements.json: read_prev_w0, read_none_w0).
    assert in_window == pytest.approx(12.73, abs=0.01)
    assert advice.expected_step_ms == pytest.approx(11.74, abs=0.01)
    assert any("8.5% slower under the profiler" in n for n in a.notes)


def test_an_accelerators_programs_keep_the_windows_floors() -> None:
    # Traced 17.30 ms a step, 16.62 untraced: the host's side slowed, not the GPU's programs.
    m = _measured("gpu/sync_bound")
    assert m.traced_slowdown == pytest.approx(17.3015 / 16.62)
    assert slowdown_of(m, None) == 1.0
    window = window_floors(m, None)
    assert run_floors(window, slowdown_of(m, None)) == window
    a = analyze(traceinspect.load(SAMPLES / "gpu/sync_bound"))
    assert not any("under the profiler" in n for n in a.notes)


def test_a_window_no_slower_than_the_run_keeps_its_floors() -> None:
    # Traced 18.26 ms a step, 19.26 untraced: the window is no slower, nothing is scaled up.
    m = _measured("scenarios/family/read_float_w0")
    assert m.traced_slowdown == 1.0
    assert slowdown_of(m, None) == 1.0


def test_without_untraced_steps_the_window_is_the_pace() -> None:
    m = _measured("scenarios/sync_bound")
    assert (m.window or {}).get("after_mean_ms") is None
    assert slowdown_of(m, None) == 1.0


@pytest.mark.parametrize("slowdown", [1.0, 1.25, 2.0])
def test_the_callbacks_expected_step_is_in_the_same_pace_as_its_floors(slowdown: float) -> None:
    # Every part of the step without the callback (the device's work left, the step less the
    # callback, the floors) comes from the window: all of it over the slowdown.
    m = _measured("habits/callback_cpu")
    callbacks = detect(m)["callback"].detail
    window = window_floors(m, None)
    at_window = callback_advice(m, callbacks, run_floors(window, 1.0), 1.0).expected_step_ms
    scaled = callback_advice(m, callbacks, run_floors(window, slowdown), slowdown)
    assert at_window is not None and scaled.expected_step_ms is not None
    assert scaled.expected_step_ms == pytest.approx(at_window / slowdown, abs=1e-3)


def test_the_callbacks_step_keeps_the_cores_floor_less_the_callbacks_part() -> None:
    # On XLA's CPU backend the host's work between programs takes a core with the callback
    # or without it: the step without the callback stays above the cores floor, less the
    # callback's time that the ledger counted busy and no other op covered (as the
    # device's work is).
    m = _measured("habits/callback_cpu")
    callbacks = detect(m)["callback"].detail
    lo, hi = m.span
    freed_ms = callbacks.alone.clip(lo, hi).intersect(m.busy).total / len(m.steps) / 1e6
    # This capture's callback ran mostly off the ledger's busy time: 14 of its 104 ms alone.
    assert 0 < freed_ms < callbacks.alone_ms_per_step / 2
    window = window_floors(m, None)
    low = callback_advice(m, callbacks, window, 1.0).expected_step_ms
    assert low is not None
    cores_ms = low + freed_ms + 2.0
    high = callback_advice(m, callbacks, {**window, "cores": cores_ms * 1e6}, 1.0)
    assert high.expected_step_ms == pytest.approx(cores_ms - freed_ms, abs=1e-3)
    assert high.expected_step_ms == pytest.approx(low + 2.0, abs=1e-3)


def test_the_callbacks_step_keeps_the_ops_that_ran_beside_it() -> None:
    # Where the device's work ran beside the callback all along (none of it alone), the
    # step without the callback keeps the whole of it: those ops still run.
    m = _measured("habits/callback_cpu")
    callbacks = detect(m)["callback"].detail
    beside = replace(callbacks, alone=Intervals.empty())
    # A device floor that binds (30 ms a step, above the step less the callback).
    floors = {**window_floors(m, None), "device": 30e6, "cores": None}
    assert callback_advice(m, beside, floors, 1.0).expected_step_ms == pytest.approx(30.0)
    # With the callback alone part of the time, that part leaves it.
    lo, hi = m.span
    freed_ms = callbacks.alone.clip(lo, hi).intersect(m.busy).total / len(m.steps) / 1e6
    got = callback_advice(m, callbacks, floors, 1.0).expected_step_ms
    assert got == pytest.approx(30.0 - freed_ms, abs=1e-3)
