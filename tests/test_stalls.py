"""Stalls that recur every N steps, found over the whole run (analysis/stalls.py)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from traceinspect.analysis import stalls
from traceinspect.analysis.advice_causes import with_stall_advice
from traceinspect.analysis.result import GRAIN_WORKER_COUNT, Recommendation
from traceinspect.analysis.stalls import recurring_stall
from traceinspect.sidecar import HostStep

MS = 1_000_000


def _run(
    step_ms: list[float], *, completions: bool = True, start_ns: int = 10**18
) -> tuple[HostStep, ...]:
    """Steps whose device work finished ``step_ms[i]`` after the step before's."""
    done = start_ns + np.cumsum(np.array(step_ms) * MS).astype(np.int64)
    return tuple(
        HostStep(
            index=i,
            step_num=None,
            start_unix_ns=int(done[i] - 5 * MS),
            wall_ms=step_ms[i],
            traced=False,
            done_unix_ns=int(done[i]) if completions else None,
        )
        for i in range(len(step_ms))
    )


def _checkpointing(steps: int, period: int, step_ms: float, stall_ms: float) -> list[float]:
    return [step_ms + (stall_ms if i % period == period - 1 else 0.0) for i in range(steps)]


def test_a_checkpoint_every_25_steps() -> None:
    run = _run(_checkpointing(400, 25, 8.0, 250.0))
    stall = recurring_stall(run)
    assert stall is not None
    assert stall.period == 25
    assert stall.indices[:3] == (24, 49, 74)
    assert len(stall.indices) == 16
    assert abs(stall.cost_ns / MS - 250.0) < 1e-6
    # 250 ms once every 25 steps: 10 ms a step, however many of the run's steps carry a
    # completion stamp.
    assert abs(stall.per_step_ns / MS - 250.0 / 25) < 1e-6
    # 150 steps without a stamp (the stalls among them unseen): the same.
    sparse = tuple(replace(s, done_unix_ns=None) if 150 <= s.index < 300 else s for s in run)
    thin = recurring_stall(sparse)
    assert thin is not None and thin.period == 25
    assert abs(thin.per_step_ns / MS - 10.0) < 1e-6
    assert abs(stall.expected_ns / MS - 8.0) < 1e-6
    assert 0.5 < stall.share < 0.6


def test_a_period_longer_than_any_window() -> None:
    stall = recurring_stall(_run(_checkpointing(600, 150, 10.0, 400.0)))
    assert stall is not None
    assert (stall.period, stall.indices) == (150, (149, 299, 449, 599))


def test_no_stall_in_a_steady_or_noisy_run() -> None:
    rng = np.random.default_rng(0)
    assert recurring_stall(_run([10.0] * 300)) is None
    assert recurring_stall(_run(list(rng.uniform(5.0, 20.0, 300)))) is None


def test_slow_steps_at_random_are_not_recurring() -> None:
    rng = np.random.default_rng(1)
    times = [10.0] * 400
    for i in rng.choice(400, 12, replace=False):
        times[int(i)] = 200.0
    assert recurring_stall(_run(times)) is None


def test_the_bursts_of_workers_that_cannot_keep_up_are_not_a_recurring_stall(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Two waiting workers behind the device (the family's io_w2): after 30 steady steps,
    every other step waits ~36 ms for the next batch, and about half of those waits pass
    the stall bar. Many lattices of such a run hold most of their steps by chance; the
    steps off them stall as often (io_w2: every 26 steps, 9 of 11, read as a recurring
    wait for input)."""

    def bursts(seed: int) -> list[float]:
        rng = np.random.default_rng(seed)
        return [
            float(rng.uniform(7.0, 14.0) if i < 30 or i % 2 == 0 else rng.uniform(29.0, 44.0))
            for i in range(300)
        ]

    runs = [_run(bursts(seed)) for seed in range(12)]
    assert all(recurring_stall(run) is None for run in runs)
    # Without the bar on the steps off the lattice, most of these runs had one.
    monkeypatch.setattr(stalls, "STRAY_SHARE", 1.0)
    assert sum(recurring_stall(run) is not None for run in runs) >= 4


def test_the_hosts_step_times_alone_are_not_searched() -> None:
    """A loop that runs ahead waits at its periodic read for the whole queue, then bursts:
    its host step times recur like a stall that costs nothing (family/read_every10_w0)."""
    times = _checkpointing(400, 10, 1.0, 47.0)
    assert recurring_stall(_run(times, completions=False)) is None


@settings(max_examples=60, deadline=None)
@given(
    period=st.integers(min_value=5, max_value=80),
    phase=st.integers(min_value=0, max_value=79),
    stall_ms=st.floats(min_value=60.0, max_value=2000.0),
    noise=st.lists(st.integers(min_value=3, max_value=599), max_size=15),
)
def test_the_lattice_is_found_among_other_slow_steps(
    period: int, phase: int, stall_ms: float, noise: list[int]
) -> None:
    """Other slow steps (the profiler writing, a busy machine) fall off the lattice."""
    phase %= period
    times = [10.0] * 600
    on = [i for i in range(3, 600) if i % period == phase]
    for i in on:
        times[i] += stall_ms
    for i in noise:
        if i % period != phase:
            times[i] += 40.0
    stall = recurring_stall(_run(times))
    if len(on) < 4:
        assert stall is None or stall.period != period
        return
    assert stall is not None
    assert stall.period == period
    assert set(stall.indices) == set(on)
    assert abs(stall.cost_ns / MS - stall_ms) < 1e-3


def test_a_stall_that_is_not_the_verdict_comes_after_the_verdicts_advice() -> None:
    workers = Recommendation(GRAIN_WORKER_COUNT, "Set the worker count to 5", value=5)
    host = Recommendation("reduce_host_overhead", "Reduce the host's work")
    own = Recommendation("recurring_stall", "Prefetch deeper")
    # An input-bound run whose stall costs 7% of its step: the worker count first.
    later = with_stall_advice((workers, host), own, is_verdict=False)
    assert [r.kind for r in later] == [GRAIN_WORKER_COUNT, "recurring_stall"]
    # The stall is the verdict (a synchronous checkpoint): its advice first.
    first = with_stall_advice((workers, host), own, is_verdict=True)
    assert [r.kind for r in first] == ["recurring_stall", GRAIN_WORKER_COUNT]
    assert with_stall_advice((host,), own, is_verdict=False) == (own,)


def test_a_stall_spread_over_two_steps_is_one_occurrence() -> None:
    # A new iterator every 40 steps: its workers start while the step before still waits
    # for its completion stamp, so both steps are slow (1.0 s and 1.5 s), besides a few slow
    # steps at random. The pair is one occurrence: the steps beside the lattice are not
    # strays, and the occurrence costs both.
    ms = [10.0] * 400
    for first in range(40, 400, 40):
        ms[first - 1] += 1000.0
        ms[first] += 1500.0
    for k in (56, 106, 193, 251, 333):
        ms[k] += 60.0
    stall = recurring_stall(_run(ms))
    assert stall is not None
    assert stall.period == 40 and stall.indices[0] == 40
    assert abs(stall.cost_ns / MS - 2500.0) < 1e-6
    assert abs(stall.per_step_ns / MS - 2500.0 / 40) < 1e-6


def test_slow_steps_far_smaller_than_the_stall_are_no_strays() -> None:
    # A 2.5 s restart every 40 steps on a loaded machine: 14 steps of 40-110 ms besides
    # (6% of the steps off the lattice) do not hide it; 14 steps as slow as the restart do.
    def run(stray_ms: float) -> list[float]:
        ms = [12.0] * 240
        for first in range(40, 240, 40):
            ms[first] += 2500.0
        # At irregular steps, as a busy machine slows them.
        at = (7, 19, 23, 50, 58, 66, 91, 97, 133, 147, 150, 178, 187, 223)
        for k, extra in zip(at, np.linspace(40.0, 110.0, 14), strict=True):
            ms[k] += stray_ms or float(extra)
        return ms

    found = recurring_stall(_run(run(0.0)))
    assert found is not None and found.period == 40
    assert recurring_stall(_run(run(2500.0))) is None


def test_steps_the_profiler_slowed_are_no_strays() -> None:
    # A checkpoint every 10 steps; capture's early trace (steps 2-81) slowed 25 steps off the
    # lattice to 5x the median. Counted as strays they hid the checkpoint (a Flax NNX +
    # Orbax loop); as profiled steps they do not.
    ms = [40.0] * 300
    for k in range(9, 300, 10):
        ms[k] += 160.0
    slowed = [k for k in range(40, 90) if k % 10 not in (8, 9, 0)][:25]
    for k in slowed:
        ms[k] += 160.0
    run = _run(ms)
    assert recurring_stall(run) is None
    found = recurring_stall(run, frozenset(range(2, 82)))
    assert found is not None and found.period == 10


def test_the_windows_steps_slowed_by_the_profiler_are_measured_against_the_rest() -> None:
    """A checkpoint every 10 steps; the early trace (steps 2-90) and the window (100-119)
    ran 4x slower (120 ms against 30: XLA's CPU backend under a long trace, the Flax NNX +
    Orbax loop's 4.0-4.5x). The slowdown is the window's median against the unprofiled
    steps' (the early trace's steps count on neither side), stalls and their neighbours
    left out."""
    slow = set(range(2, 91)) | set(range(100, 120))
    step_ms = [(120.0 if i in slow else 30.0) + (300.0 if i % 10 == 9 else 0.0) for i in range(300)]
    window = frozenset(range(100, 120))
    stall = recurring_stall(_run(step_ms), frozenset(slow), window)
    assert stall is not None and stall.period == 10
    assert stall.traced_slowdown == pytest.approx(4.0)
    assert stall.to_dict()["traced_slowdown"] == 4.0
    # No window, or a window no slower than the rest: 1.0.
    unwindowed = recurring_stall(_run(step_ms), frozenset(slow))
    assert unwindowed is not None and unwindowed.traced_slowdown == 1.0
    even = [30.0 + (300.0 if i % 10 == 9 else 0.0) for i in range(300)]
    steady = recurring_stall(_run(even), window, window)
    assert steady is not None and steady.traced_slowdown == 1.0


def test_the_windows_floors_in_the_runs_pace() -> None:
    from traceinspect.analysis.counterfactual import expected_without, run_floors

    floors = {"device": 120e6, "input": 8e6, "stall": 30e6}
    scaled = run_floors(floors, 4.0)
    # The device's and the input's work over the slowdown; the stall's time is the run's.
    assert scaled == {"device": 30e6, "input": 2e6, "stall": 30e6}
    assert run_floors(floors, 1.0) == floors and run_floors(floors, 0.5) == floors
    # The run's step without its checkpoints (27 ms from the step log) is then bounded by
    # the device's 30 ms in the run's pace, not 120.
    assert expected_without("stall", 27e6, scaled) == pytest.approx(30e6)


def _recorded(name: str) -> tuple[tuple[HostStep, ...], frozenset[int], frozenset[int]]:
    """A recorded capture's steps (``tests/data/gc_every12_bunched.json``), its profiled
    steps and its window's."""
    data = json.loads((Path(__file__).parent / "data" / "gc_every12_bunched.json").read_text())
    run = data["runs"][name]
    steps = tuple(
        HostStep(
            index=i,
            step_num=None,
            start_unix_ns=None if start is None else 10**18 + start,
            wall_ms=wall,
            traced=i in run["window"],
            done_unix_ns=None if done is None else 10**18 + done,
        )
        for i, start, wall, done in zip(
            run["index"], run["start_ns"], run["wall_ms"], run["done_ns"], strict=True
        )
    )
    return steps, frozenset(run["profiled"]), frozenset(run["window"])


@pytest.mark.parametrize("name", ["gc2", "gc10"])
def test_collections_every_12_steps_stamped_in_bunches_are_found_every_12(name: str) -> None:
    """Two default captures of the family's ``--gc-every 12`` on 3.12 + jax 0.12: 41-44% of
    the completions were stamped within microseconds of the one before (the collection held
    the GIL). Read from those stamps, the collections recurred every 24 and 36 steps; the
    host's step times hold them exactly, one every 12 steps from step 11."""
    steps, profiled, window = _recorded(name)
    assert stalls.step_series(steps)[2]
    found = recurring_stall(steps, profiled, window)
    assert found is not None
    assert found.period == 12
    assert all(i % 12 == 11 for i in found.indices)
    assert len(found.indices) >= 18
    # One collection cost 110-190 ms above the median step (the host's step times).
    assert 110 * MS <= found.cost_ns <= 190 * MS


def test_a_median_of_the_stamps_would_not_see_the_bunches(monkeypatch: pytest.MonkeyPatch) -> None:
    """The recorded captures sit on either side of "most stamps bunched": a median test
    read the stamps of one of them as the device's pace."""
    steps, profiled, window = _recorded("gc2")
    monkeypatch.setattr(stalls, "BUNCHED_SHARE", 0.5)
    assert not stalls.step_series(steps)[2]
    found = recurring_stall(steps, profiled, window)
    assert found is None or found.period != 12
