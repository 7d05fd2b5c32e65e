"""MaxText's own training loop as a real client: default captures, checked against the truth
measured without any profiler in the same test, on this machine.

Needs MaxText and its training path (Python >= 3.12): ``nox -s maxtext`` makes that
environment and runs this file (CI does, with TRACEINSPECT_MAXTEXT=require, so a broken
install fails instead of skipping). Elsewhere it skips: ``pytest -m 'not maxtext'`` leaves it
out by name. The runs and configurations: ``sample_traces/maxtext/maxtext_runs.py``.

- ``tiny``: compute-bound (the step time does not depend on the worker count): a default
  capture at 1 worker is device-bound, its busy share within 10 points of the programs'
  execution spans, and no advice MaxText already follows (its metric logger reads the
  previous step's metrics); at 4 workers the advice is fewer, whose measured step is within
  15% of the best.
- ``heavy``: input-bound at 1 worker (sentencepiece on 500,000-word records): a default
  capture says so, and recommends a count whose measured step (the median of 3 runs) is
  within 15% of the best count's and at most the knee + 2.
- MaxText's own profile (``profiler=xplane``, its defaults: skip 1 step, profile 5) gives a
  verdict, or a refusal that names what to set.
"""

from __future__ import annotations

import importlib.util
import os
import statistics
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

import traceinspect
from traceinspect.analysis.result import Analysis, Recommendation
from traceinspect.errors import AnalysisError

pytestmark = [pytest.mark.slow, pytest.mark.maxtext]

RUNS = Path(__file__).resolve().parents[2] / "sample_traces" / "maxtext" / "maxtext_runs.py"
# Within this of the best measured step, a recommended count is as good as the best.
WITHIN = 0.15
# Truth runs: MaxText's steps from WARMUP on; captures: enough steps for the default window.
PLAIN_STEPS = 40
CAPTURE_STEPS = {"tiny": 80, "heavy": 80}


def _maxtext_or_skip() -> None:
    if importlib.util.find_spec("maxtext") is not None:
        return
    if os.environ.get("TRACEINSPECT_MAXTEXT") == "require":
        pytest.fail("MaxText is not importable in the environment this test must run in")
    pytest.skip("MaxText is not installed here: `nox -s maxtext` runs this test")


@pytest.fixture(scope="module")
def runs() -> Iterator[ModuleType]:
    _maxtext_or_skip()
    spec = importlib.util.spec_from_file_location("maxtext_runs", RUNS)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["maxtext_runs"] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    yield module
    del sys.modules["maxtext_runs"]


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("maxtext-data")


def _capture(runs: ModuleType, name: str, workers: int, data: Path, logdir: Path) -> Analysis:
    config = runs.CONFIGS[name]
    done = runs.capture(config, data, workers, CAPTURE_STEPS[name], logdir)
    assert done.returncode == 0, done.stderr[-3000:]
    (run_dir,) = {p.parent for p in logdir.glob("plugins/profile/*/*.xplane.pb")}
    return traceinspect.analyze(traceinspect.load(run_dir))


def _workers(analysis: Analysis) -> Recommendation:
    (rec,) = [r for r in analysis.recommendations if r.kind == "grain_worker_count"]
    return rec


def _workers_if_any(analysis: Analysis) -> Recommendation | None:
    """The worker count's advice; None where input does not matter and no worker is idle
    (the count is advised only where input holds the step back, or to let idle ones go)."""
    found = [r for r in analysis.recommendations if r.kind == "grain_worker_count"]
    return found[0] if found else None


def _step_at(
    runs: ModuleType, name: str, data: Path, out: Path, truth: dict[int, float], workers: int
) -> float:
    if workers not in truth:
        truth[workers] = runs.run_plain(runs.CONFIGS[name], data, workers, PLAIN_STEPS, out)
    return truth[workers]


# Rounds of truth runs beyond the first 2 where those leave the premise in doubt.
EXTRA_ROUNDS = 2


def _premise_holds(timed: dict[int, list[float]]) -> bool:
    """Whether each count's best run is within WITHIN of the best count's (the step does
    not depend on the worker count)."""
    best = [min(ms) for ms in timed.values()]
    return max(best) <= min(best) * (1 + WITHIN)


def test_tiny_config_is_device_bound_and_gets_no_advice_it_follows(
    runs: ModuleType, data_dir: Path, tmp_path: Path
) -> None:
    config = runs.CONFIGS["tiny"]
    data = runs.data_file(config, data_dir)
    # Best of 2 runs each, interleaved (a run is only ever slowed by others): single runs
    # put 1 worker 22% over 4 (537.0 against 440.5 ms) in one run where they had been within
    # 15% before. Best of 2 still put 4 workers 23% over 1 once in CI (349.4 against 283.0
    # ms; here the same day 292-323 against 285-326 ms, 3 runs each): where the premise
    # fails, up to 2 more rounds, each count's best of all.
    timed = runs.measure(config, data, (1, 4), PLAIN_STEPS, 2, tmp_path / "plain")
    for _ in range(EXTRA_ROUNDS):
        if _premise_holds(timed):
            break
        for w, ms in runs.measure(config, data, (1, 4), PLAIN_STEPS, 1, tmp_path / "plain").items():
            timed[w] += ms
    truth = {w: min(ms) for w, ms in timed.items()}
    # The premise: the step does not depend on the worker count.
    assert _premise_holds(timed), timed

    a = _capture(runs, "tiny", 1, data, tmp_path / "w1")
    spans = runs.execution_busy_share(Path(a.path))
    assert a.verdict == "device-bound", (a.summary, a.notes)
    assert abs(a.busy_fraction - spans) <= 0.10, (a.busy_fraction, spans)
    kinds = [r.kind for r in a.recommendations]
    assert "remove_sync" not in kinds, a.recommendations
    assert not any("previous step" in r.message for r in a.recommendations)
    rec1 = _workers_if_any(a)
    assert rec1 is None or rec1.value in (None, 1), rec1

    # At 4 workers, idle ones: fewer, and the step it expects holds when measured.
    a4 = _capture(runs, "tiny", 4, data, tmp_path / "w4")
    rec = _workers(a4)
    assert rec.value is not None and rec.value < 4, rec
    assert rec.reason is not None and "fewer worker(s) keep up" in rec.reason
    step = _step_at(runs, "tiny", data, tmp_path / "plain", truth, rec.value)
    assert step <= min(truth.values()) * (1 + WITHIN), (rec.value, truth)


def test_heavy_config_is_input_bound_and_gets_a_count_near_the_knee(
    runs: ModuleType, data_dir: Path, tmp_path: Path
) -> None:
    config = runs.CONFIGS["heavy"]
    data = runs.data_file(config, data_dir)
    # 1 worker once: the premise holds by 35-60% (385-569 against 255-356 ms on these days).
    # 2 and 4 workers, equal in expectation (the 2 cores are the limit: from 2 workers on, the
    # process tree keeps 1.96-1.98 cores busy), 3 runs each, interleaved, compared by their
    # median. Not by the best of each: this shared machine's speed varies between runs, not
    # only its load, and the best of a few runs favours the count with the wider spread. On
    # 2026-11-27 single runs at 4 workers spanned 232-281 ms and at 2 workers 255-267, so the
    # best put 4 workers 10% ahead while the medians (272, 264) put 2 ahead by 3%; in CI the
    # best of 3 put 4 workers 18% ahead (251.7 against 297.7 ms) and the best of 2, once, 19%.
    # (`python sample_traces/maxtext/maxtext_runs.py measure --config heavy --workers 2,4
    # --steps 40 --repeats 3` prints both.) An hour later the medians were 269.6 at 2 and
    # 231.5 at 4, and the cap at the cores for CPU-bound workers (2) missed the best by 16%;
    # timed step by step with the process tree's CPU, the two counts run alike and the
    # machine's speed moves single runs (sample_traces/maxtext/MEASUREMENTS.md), hence the
    # second look below.
    plain = tmp_path / "plain"
    timed = runs.measure(config, data, (1,), PLAIN_STEPS, 1, plain)
    timed.update(runs.measure(config, data, (2, 4), PLAIN_STEPS, 3, plain))
    truth = {w: statistics.median(ms) for w, ms in timed.items()}
    knee = runs.knee(truth)
    # The premise: one worker holds the step back.
    assert truth[1] > min(truth.values()) * (1 + WITHIN), timed

    a = _capture(runs, "heavy", 1, data, tmp_path / "w1")
    assert a.verdict == "input-bound", (a.summary, a.notes)
    rec = _workers(a)
    seen = (rec.value, rec.reason, timed, os.cpu_count(), runs.RUNS)
    assert rec.value is not None and rec.value <= knee + 2, seen
    if rec.value not in timed:
        timed.update(runs.measure(config, data, (rec.value,), PLAIN_STEPS, 3, plain))
    truth = {w: statistics.median(ms) for w, ms in timed.items()}
    best = min(truth, key=truth.__getitem__)
    if truth[rec.value] > truth[best] * (1 + WITHIN):
        # The machine's speed drifts over minutes, and two slow runs of one count move its
        # median: on 2026-11-28 the medians put 2 workers 28% behind 4 (302.3 against 236.8
        # ms), and 14% an hour later, where 16 runs sampled from step 10 on had 2 and 4 within
        # 0-9% of each other run by run (236-253 against 234-275 ms; both keep 1.94-1.98
        # cores busy, and the slow runs spend more CPU on the same batch). Two more
        # interleaved rounds of the two counts compared, each by the median of 5.
        more = runs.measure(config, data, (rec.value, best), PLAIN_STEPS, EXTRA_ROUNDS, plain)
        for w, ms in more.items():
            timed[w] += ms
        truth = {w: statistics.median(ms) for w, ms in timed.items()}
    assert truth[rec.value] <= min(truth.values()) * (1 + WITHIN), seen


def test_maxtexts_own_profile_gets_a_verdict_or_says_what_to_set(
    runs: ModuleType, data_dir: Path, tmp_path: Path
) -> None:
    config = runs.CONFIGS["tiny"]
    data = runs.data_file(config, data_dir)
    logdir = runs.run_profile(config, data, 1, 12, tmp_path / "out")
    try:
        a = traceinspect.analyze(traceinspect.load(logdir))
    except AnalysisError as e:
        assert "profiler_steps" in str(e) or "skip_first_n_steps_for_profiler" in str(e)
        return
    assert a.verdict == "device-bound", (a.summary, a.notes)
    assert any("skip_first_n_steps_for_profiler" in n for n in a.notes), a.notes
    rec = _workers_if_any(a)
    assert rec is None or rec.value is None, rec
