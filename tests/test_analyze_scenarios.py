"""End to end on real CPU captures whose bottleneck was set on purpose and measured.

`sample_traces/scenarios/expected.json` holds each scenario's verdict, verified by timing
the same script with and without the cause (`sample_traces/scenarios/MEASUREMENTS.md`).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import traceinspect
from traceinspect.analysis.analyze import analyze
from traceinspect.errors import AnalysisError

SCENARIOS = Path(__file__).resolve().parents[1] / "sample_traces" / "scenarios"
SAMPLES = SCENARIOS.parent
EXPECTED: dict[str, str] = (
    json.loads((SCENARIOS / "expected.json").read_text())["verdicts"]
    if (SCENARIOS / "expected.json").exists()
    else {}
)


def _trace(name: str) -> Path:
    (path,) = sorted((SCENARIOS / name).glob("*.xplane.pb"))
    return path


@pytest.mark.parametrize(("name", "verdict"), sorted(EXPECTED.items()))
def test_verdict_matches_the_measured_label(name: str, verdict: str) -> None:
    a = analyze(traceinspect.load(_trace(name)))
    assert a.verdict == verdict, a.summary
    assert a.backend == "cpu"
    assert a.steps.source == "StepTraceAnnotation 'train'"
    assert a.steps.count >= 5


def test_sync_bound_numbers() -> None:
    a = analyze(traceinspect.load(_trace("sync_bound")))
    # Input work per step is shorter than the device's work, which is why the idle time
    # after each read is the sync's, not the pipeline's.
    assert a.input_ms_per_step < a.device_busy_ms_per_step
    assert a.cause_fractions["sync"] >= 0.20
    assert a.recommendations[0].kind == "remove_sync"
    assert any("np.asarray" in site or "host_read" in site for site in a.sync_sites)


def test_input_bound_numbers() -> None:
    a = analyze(traceinspect.load(_trace("input_bound")))
    assert a.input_ms_per_step > 2 * a.device_busy_ms_per_step
    assert a.cause_fractions["input"] >= 0.5
    workers = a.recommendations[0]
    assert workers.kind == "grain_worker_count"
    # In-process input (0 workers) taking ~40 ms/batch against ~12 ms of device work needs
    # 5 workers; the capture recorded 2 usable cores, which binds.
    assert (workers.current, workers.value, workers.bounded_by) == (0, 2, "cores")


def test_bounded_sync_is_not_flagged() -> None:
    a = analyze(traceinspect.load(_trace("bounded_sync")))
    assert a.cause_fractions["sync"] < 0.05
    assert "remove_sync" not in [r.kind for r in a.recommendations]


@pytest.mark.parametrize(
    ("name", "backend", "verdict"),
    [
        ("jax_tpu_v6e_4chip_inference.xplane.pb", "tpu", "device-bound"),
        ("jax_rocm_mi300x_gemm.xplane.pb", "gpu", "host-bound"),
        # A benchmark loop calling block_until_ready() after every call (Python tracer on).
        ("jax_rocm_mi300x_8gpu_conv3d.xplane.pb", "gpu", "sync-bound"),
        ("jax_rocm_mi300x_conv3d_legacy.xplane.pb", "gpu", "host-bound"),
        # TensorFlow: no training thread to read, so the idle time stays unexplained.
        ("tf_gpu_v100x8_bert_multiworker.xplane.pb", "gpu", "unknown"),
    ],
)
def test_public_traces(name: str, backend: str, verdict: str) -> None:
    from traces import public_trace

    a = analyze(traceinspect.load(public_trace(name)))
    assert (a.backend, a.verdict) == (backend, verdict)
    # No instant counted twice: causes add up to the idle time, busy + idle to the steps.
    assert sum(a.cause_fractions.values()) == pytest.approx(a.idle_fraction, abs=1e-3)
    assert a.busy_fraction + a.idle_fraction == pytest.approx(1.0)
    gaps = a.gaps
    parts = gaps[["input", "sync", "compile", "host", "unknown"]].sum(axis=1)
    assert (parts == gaps["duration_ns"]).all()


@pytest.mark.parametrize("path", sorted(Path(SCENARIOS.parent).glob("*.xplane.pb")), ids=str)
def test_bundled_samples_analyse(path: Path) -> None:
    trace = traceinspect.load(path)
    if "window_after_compile" in path.name:
        # 8 steps dispatched in 2 ms, the device's work all after them: nothing to judge.
        with pytest.raises(AnalysisError, match="dispatched all 8 traced steps before"):
            analyze(trace)
        return
    a = analyze(trace)
    # 8 traced steps; the first is left out when the device was idle from the trace's start.
    assert a.steps.count + a.steps.dropped == 8
    assert a.steps.count >= 7
    assert a.verdict in {"input-bound", "sync-bound", "host-bound", "device-bound"}


def test_worker_recommendation_lands_at_the_measured_knee() -> None:
    """One capture at 1 Grain worker; a plain sweep of 1-4 workers measured the knee
    (`sample_traces/scenarios/sweep_workers.py`, figures in workers_sweep.json)."""
    sweep = json.loads((SCENARIOS / "workers_sweep.json").read_text())
    a = analyze(traceinspect.load(_trace("one_worker")))
    assert a.verdict == "input-bound"
    workers = a.recommendations[0]
    assert workers.kind == "grain_worker_count"
    assert workers.current == 1
    assert sweep["knee"] <= workers.value <= sweep["knee"] + 1
    assert workers.expected_step_ms is not None
    assert workers.expected_step_ms <= a.steps.median_ms


@pytest.mark.parametrize(
    ("path", "without_read_ms"),
    [
        # The family's loop without the read, measured without the profiler
        # (scenarios/family/measurements.json: read_none_w0) and on the GPU (truth.json).
        ("scenarios/family/read_float_w0", 12.52),
        ("scenarios/family/read_device_get_w0", 12.52),
        ("scenarios/family/read_block_w0", 12.52),
        ("gpu/sync_bound", 8.711),
    ],
)
def test_removing_a_per_step_read_lands_near_the_expected_step(
    path: str, without_read_ms: float
) -> None:
    a = analyze(traceinspect.load(SAMPLES / path))
    assert a.verdict == "sync-bound"
    advice = next(r for r in a.recommendations if r.kind == "remove_sync")
    assert advice.expected_step_ms is not None
    assert advice.expected_step_ms == pytest.approx(without_read_ms, rel=0.20)
