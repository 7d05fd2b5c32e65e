"""What a recurring stall is (analysis/stall_kinds.py): garbage collection and epoch restarts
from capture's run events, remote logging from the sampler's sites; and a pipeline slow on
every batch is the input's, never a recurring stall (analysis/detectors.py)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, cast

import numpy as np
import pytest

from traceinspect.analysis import detectors
from traceinspect.analysis.stall_kinds import (
    StallNature,
    _programs_work,
    is_logging,
    network_share,
    occurrence_spans,
    run_kind,
)
from traceinspect.analysis.stalls import RecurringStall, recurring_stall
from traceinspect.intervals import Intervals
from traceinspect.sidecar import HostStep, RunEvents

MS = 1_000_000
START = 10**18


def _run(step_ms: list[float], lead_ms: float = 5.0) -> tuple[HostStep, ...]:
    """Steps whose device work finished ``step_ms[i]`` after the step before's; each began
    on the host ``lead_ms`` before its completion."""
    done = START + np.cumsum(np.array(step_ms) * MS).astype(np.int64)
    return tuple(
        HostStep(
            index=i,
            step_num=None,
            start_unix_ns=int(done[i] - lead_ms * MS),
            wall_ms=step_ms[i],
            traced=False,
            done_unix_ns=int(done[i]),
        )
        for i in range(len(step_ms))
    )


def _stalling(steps: int, period: int, stall_ms: float, step_ms: float = 8.0) -> list[float]:
    return [step_ms + (stall_ms if i % period == period - 1 else 0.0) for i in range(steps)]


def _found(run: tuple[HostStep, ...]) -> RecurringStall:
    stall = recurring_stall(run)
    assert stall is not None
    return stall


def _collections(run: tuple[HostStep, ...], at: list[int], ms: float) -> RunEvents:
    """A collection of ``ms`` starting when each step of ``at`` began on the host."""
    starts = [run[i].start_unix_ns for i in at]
    return RunEvents(
        gc_start_unix_ns=tuple(cast(list[int], starts)), gc_ns=(int(ms * MS),) * len(at)
    )


def test_collections_that_take_the_stall_name_it_garbage_collection() -> None:
    run = _run(_stalling(240, 12, 200.0))
    stall = _found(run)
    assert stall.period == 12
    # The collection ran while the step before the late completion was on the host.
    events = _collections(run, [i - 1 for i in stall.indices], 190.0)
    assert run_kind(stall, run, events) == "gc"
    # Young collections of a few ms in the same steps are no part of it.
    assert run_kind(stall, run, _collections(run, list(stall.indices), 5.0)) is None
    # Long collections elsewhere (more than half a period before the stall) neither.
    assert run_kind(stall, run, _collections(run, [i - 9 for i in stall.indices], 190.0)) is None
    # Half of the occurrences with one is not enough (PERIOD_AGREEMENT, 75%).
    half = _collections(run, [i - 1 for i in stall.indices[::2]], 190.0)
    assert run_kind(stall, run, half) is None
    assert run_kind(stall, run, None) is None


def test_a_new_iterator_at_each_stall_is_an_epoch_restart() -> None:
    # Each epoch's first step drew from a new iterator: the stall is that step's (its
    # completion came late).
    firsts = list(range(0, 320, 40))
    run = _run([8.0 + (1300.0 if i in firsts[1:] else 0.0) for i in range(320)])
    stall = _found(run)
    assert stall.period == 40 and stall.indices[0] == 40
    starts = tuple(cast(int, run[i].start_unix_ns) + MS for i in firsts)
    events = RunEvents(iterator_start_unix_ns=starts)
    late = stall.indices
    assert all(any(lo <= s < hi for s in starts) for lo, hi in occurrence_spans(stall, run)), late
    assert run_kind(stall, run, events) == "epoch"
    # One iterator for the whole run: no epoch restart.
    assert run_kind(stall, run, RunEvents(iterator_start_unix_ns=starts[:1])) is None


def test_occurrence_spans_reach_half_a_period_back() -> None:
    run = _run(_stalling(240, 12, 200.0))
    stall = _found(run)
    spans = occurrence_spans(stall, run)
    assert len(spans) == len(stall.indices)
    first = stall.indices[0]
    assert spans[0] == (run[first - 6].start_unix_ns, run[first].done_unix_ns)


def test_network_libraries_in_the_sampled_sites_are_remote_logging() -> None:
    posting = [
        ("train.py:88 train (in socket readinto)", 9),
        ("train.py:88 train (in client _read_status)", 2),
        ("train.py:87 train", 3),
    ]
    assert network_share(posting) == pytest.approx(11 / 14)
    assert is_logging(posting)
    writing = [("train.py:60 checkpoint (in _npyio_impl save)", 10), ("train.py:61 x", 2)]
    assert network_share(writing) == 0.0 and not is_logging(writing)
    assert network_share([]) == 0.0


@pytest.mark.parametrize(
    ("kind", "words"),
    [
        ("gc", "garbage collection"),
        ("logging", "remote logging"),
        ("epoch", "Grain starts its 2 worker process(es) again"),
    ],
)
def test_each_kind_says_what_it_is(kind: str, words: str) -> None:
    assert words in StallNature(kind, workers=2).what()


def test_an_evaluation_that_scores_on_the_host_is_host_bound() -> None:
    busy = StallNature("evaluation", programs=(("eval_step", 5),), host_share=0.2)
    scored = StallNature("evaluation", programs=(("eval_step", 5),), host_share=0.8)
    assert busy.device_busy and not scored.device_busy
    assert "scored on the host" in scored.what() and "scored" not in busy.what()


def _measured(stages: Any) -> Any:
    return SimpleNamespace(stages=stages)


def test_a_pipeline_slow_on_every_batch_is_no_recurring_stall() -> None:
    # One worker that takes 36 ms a batch, a step of 8 ms without the "stall" on most odd
    # steps: the pipeline's pace, not a stall.
    stall = _found(_run([8.0 + (64.0 if i % 2 and i % 20 != 1 else 0.0) for i in range(200)]))
    assert stall.period == 2
    slow = SimpleNamespace(workers=1, worker_batch_ms=36.0)
    assert detectors._pipeline_pace(_measured(slow), stall, 1)
    # Untimed, a wait every other step at one worker is the pipeline's turn too.
    assert detectors._pipeline_pace(_measured(None), stall, 1)
    # A shard switch every 50 steps, the workers keeping up between: a stall.
    switch = _found(_run(_stalling(400, 50, 300.0)))
    fast = SimpleNamespace(workers=2, worker_batch_ms=6.0)
    assert not detectors._pipeline_pace(_measured(fast), switch, 2)
    assert not detectors._pipeline_pace(_measured(None), switch, 2)


@pytest.mark.parametrize(
    ("work_ms", "evaluation_size"),
    [
        # The family's evaluation of 5 batches scored on the host: 12-16 ms of forward passes
        # in each 54-60 ms occurrence.
        ([12.3, 13.2, 11.9, 11.7], True),
        # Flax NNX's metrics.compute() beside every Orbax save: 12 element-wise programs run
        # inline on the calling thread, nothing on the device's lines.
        ([0.0, 0.0, 0.0, 0.0, 0.0], False),
        # Work in one occurrence of four is not most of them.
        ([20.0, 0.0, 0.0, 0.0], False),
        # Just over and under a twentieth of the 54 ms an occurrence costs.
        ([2.8, 2.8, 2.8], True),
        ([2.6, 2.6, 2.6], False),
        # A trace without execution ids (GPU kernels) cannot say: the calls decide.
        (None, True),
    ],
)
def test_an_evaluation_does_device_work_of_its_size(
    work_ms: list[float] | None, evaluation_size: bool
) -> None:
    # A stall of 54 ms every 20 steps of 8 ms: 54 ms above the median step.
    stall = _found(_run(_stalling(200, 20, 54.0)))
    assert stall.cost_ns == pytest.approx(54 * MS, rel=0.01)
    spans = Intervals.union_of(np.array([0], np.int64), np.array([1], np.int64))
    work = None if work_ms is None else np.array(work_ms) * MS
    asked: list[str] = []

    def others_work(_: Intervals, step_program: str) -> np.ndarray | None:
        asked.append(step_program)
        return work

    assert _programs_work(stall, spans, "train_step", others_work) is evaluation_size
    # The step program it leaves out is the one the calls named.
    assert asked == ["jit_train_step"]
    assert _programs_work(stall, spans, "train_step", None) is True
    assert _programs_work(stall, spans, None, others_work) is True
