"""The loop's own CPU work on XLA's CPU backend (``analysis/loop_cpu.py``): the CPU share of
the loop's own code from the sampler's CPU clock, on precisely built samples."""

from __future__ import annotations

from itertools import pairwise

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from traceinspect.analysis.loop_cpu import LoopCpu, loop_cpu
from traceinspect.analysis.training_thread import LoopCode, SampledStack
from traceinspect.intervals import Intervals

MS = 1_000_000
STEP = 14 * MS
STEPS = 30


def _code(own_share: float, rest_share: float, interval_ms: float = 20.0) -> LoopCode:
    """30 steps of 14 ms, each with 10 ms of the loop's own code (2-12 ms), and samples
    every ``interval_ms`` whose CPU clock advances ``own_share`` of the own code's time and
    ``rest_share`` of the rest."""
    starts = np.arange(STEPS, dtype=np.int64) * STEP + 2 * MS
    spans = Intervals.union_of(starts, starts + 10 * MS)
    t = np.arange(0, STEPS * STEP, int(interval_ms * MS), dtype=np.int64)
    own = np.array([spans.clip(0, int(x)).total for x in t], dtype=np.float64)
    cpu = (own_share * own + rest_share * (t - own)).astype(np.int64)
    samples = SampledStack(t, np.zeros(len(t), dtype=np.int64), ("train.py:88 train",), cpu)
    return LoopCode(spans, np.array([], dtype=np.int64), [], samples)


def test_cpu_work_in_the_loop_s_own_code_costs_the_program_a_core_s_share() -> None:
    # 10 ms of CPU a step in the loop's own code, the rest of the thread's time 10% on CPU
    # (dispatch, the hand-over of a batch): on 2 cores the program loses 5 ms a step.
    found = loop_cpu(_code(1.0, 0.1), (0, STEPS * STEP), STEPS, cores=2)
    assert isinstance(found, LoopCpu)
    assert found.own_cpu_share == pytest.approx(1.0, abs=0.01)
    assert found.cpu_ms_per_step == pytest.approx(10.0, abs=0.1)
    assert found.cost_ms_per_step == pytest.approx(5.0, abs=0.05)
    assert found.own_ms_per_step == pytest.approx(10.0, abs=0.01)
    assert found.site == "train.py:88 train"


def test_waiting_in_the_loop_s_own_code_costs_no_core() -> None:
    found = loop_cpu(_code(0.0, 0.3), (0, STEPS * STEP), STEPS, cores=2)
    assert found is not None and found.cpu_ms_per_step == pytest.approx(0.0, abs=0.1)


@settings(max_examples=60, deadline=None)
@given(
    own=st.floats(0.0, 1.0),
    rest=st.floats(0.0, 1.0),
    interval=st.floats(3.0, 40.0),
)
def test_the_shares_are_recovered_whatever_the_sampling(
    own: float, rest: float, interval: float
) -> None:
    code = _code(own, rest, interval)
    found = loop_cpu(code, (0, STEPS * STEP), STEPS, cores=4)
    assert code.samples is not None
    t = code.samples.t_ns
    shares = [code.spans.clip(int(a), int(b)).total / (b - a) for a, b in pairwise(t)]
    if max(shares) - min(shares) < 0.1:
        # In step with the loop: no estimate rather than a guess.
        assert found is None
        return
    assert found is not None
    # The clock is whole ns: the fit recovers the share to well under 1%.
    assert found.own_cpu_share == pytest.approx(own, abs=0.01)


def test_a_sampler_in_step_with_the_loop_says_nothing() -> None:
    # 7 ms looks on a 14 ms step: every interval holds 5 ms of own code and 2 of the rest,
    # and 2 ms of CPU fits 0.4 of the one as well as all of the other.
    assert loop_cpu(_code(0.0, 1.0, 7.0), (0, STEPS * STEP), STEPS, cores=2) is None


def test_no_clock_no_estimate() -> None:
    code = _code(1.0, 0.1)
    assert code.samples is not None
    bare = LoopCode(
        code.spans,
        code.marks_end,
        code.marks_kind,
        SampledStack(code.samples.t_ns, code.samples.site, code.samples.sites),
    )
    assert loop_cpu(bare, (0, STEPS * STEP), STEPS, cores=2) is None
    assert loop_cpu(code, (0, STEPS * STEP), STEPS, cores=None) is None
    assert loop_cpu(None, (0, STEPS * STEP), STEPS, cores=2) is None
    # Too few looks inside the window.
    assert loop_cpu(code, (0, 5 * STEP), 5, cores=2) is None


def _split_code(beside_share: float, apart_share: float, rest_share: float) -> LoopCode:
    """As :func:`_code`, the own code in two halves: 2-7 ms of each step beside the running
    program (the device busy 0-7 ms), 7-12 ms apart from it (the device idle), each half on
    CPU its own share of the time."""
    starts = np.arange(STEPS, dtype=np.int64) * STEP
    spans = Intervals.union_of(starts + 2 * MS, starts + 12 * MS)
    first = Intervals.union_of(starts + 2 * MS, starts + 7 * MS)
    t = np.arange(0, STEPS * STEP, 20 * MS, dtype=np.int64)
    own = np.array([spans.clip(0, int(x)).total for x in t], dtype=np.float64)
    early = np.array([first.clip(0, int(x)).total for x in t], dtype=np.float64)
    cpu = beside_share * early + apart_share * (own - early) + rest_share * (t - own)
    samples = SampledStack(
        t, np.zeros(len(t), dtype=np.int64), ("train.py:90 train",), cpu.astype(np.int64)
    )
    return LoopCode(spans, np.array([], dtype=np.int64), [], samples)


DEVICE = Intervals.union_of(
    np.arange(STEPS, dtype=np.int64) * STEP, np.arange(STEPS, dtype=np.int64) * STEP + 7 * MS
)


@pytest.mark.parametrize(
    ("beside", "apart", "beside_cpu_ms", "cost_ms"),
    [
        # An Orbax asynchronous save: a wait for the arrays beside the running program (no
        # CPU), then their copy to the host after it (CPU): none of its CPU competes.
        (0.0, 1.0, 0.0, 0.0),
        # The loop's CPU work while the program runs: a core's share of it is the stretch.
        (1.0, 0.0, 5.0, 2.5),
    ],
)
def test_only_the_cpu_beside_the_program_stretches_it(
    beside: float, apart: float, beside_cpu_ms: float, cost_ms: float
) -> None:
    found = loop_cpu(_split_code(beside, apart, 0.1), (0, STEPS * STEP), STEPS, 2, DEVICE)
    assert found is not None
    assert found.cpu_ms_per_step == pytest.approx(5.0, abs=0.1)
    assert found.own_cpu_share == pytest.approx(0.5, abs=0.01)
    assert found.beside_cpu_ms_per_step == pytest.approx(beside_cpu_ms, abs=0.1)
    assert found.cost_ms_per_step == pytest.approx(cost_ms, abs=0.05)


def test_without_the_device_s_busy_time_all_the_cpu_is_charged() -> None:
    blind = loop_cpu(_split_code(0.0, 1.0, 0.1), (0, STEPS * STEP), STEPS, 2)
    assert blind is not None and blind.cost_ms_per_step == pytest.approx(2.5, abs=0.1)


def test_own_code_all_beside_the_program_costs_as_before() -> None:
    # The device busy all the time: the split changes nothing.
    whole = Intervals.union_of(np.array([0]), np.array([STEPS * STEP]))
    found = loop_cpu(_code(1.0, 0.1), (0, STEPS * STEP), STEPS, 2, whole)
    assert found is not None and found.cost_ms_per_step == pytest.approx(5.0, abs=0.05)
