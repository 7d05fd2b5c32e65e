"""The input pipeline's stage table (analysis/input_stages.py) on precisely built sidecars."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from traceinspect import schema as S
from traceinspect.analysis.input_stages import (
    InputStages,
    input_stages,
    stage_advice,
    transfer_ns_per_step,
)
from traceinspect.analysis.result import Analysis
from traceinspect.analysis.steps import Steps
from traceinspect.analysis.training_thread import ThreadEvents
from traceinspect.sidecar import Sidecar, parse
from traceinspect.trace import Trace
from traceinspect.vocabulary import STAGES

MS = 1_000_000
SAMPLE = Path(__file__).resolve().parents[1] / "sample_traces" / "cpu_mlp_fast_input.xplane.pb"


@pytest.fixture(scope="module")
def sample() -> tuple[Trace, Analysis]:
    import traceinspect

    trace = traceinspect.load(SAMPLE)
    return trace, traceinspect.analyze(trace)


def _sidecar(workers: int, batches: int, seconds: dict[str, dict[str, float]]) -> Sidecar:
    data: dict[str, Any] = {
        "grain": {
            "worker_count": workers,
            "stages": {"window_s": 1.0, "batches": batches, "seconds": seconds, "calls": {}},
        }
    }
    record = parse(data)
    assert record is not None
    return record


def test_worker_stages_are_shared_by_the_workers() -> None:
    # 2 workers over 100 batches: read 4, preprocessing 12, batch 1 ms per batch; the
    # training thread waits 7 ms per step, less than the 8.5 ms the pipeline needs per
    # batch with both workers at it: a stage, not the hand-over, holds the step up.
    side = _sidecar(2, 100, {"workers": {"read": 0.4, "preprocessing": 1.2, "batch": 0.1}})
    st = input_stages(
        side,
        input_wait_ns_per_step=7 * MS,
        transfer_ns_per_step=0.5 * MS,
        device_ns_per_step=3 * MS,
    )
    assert st is not None
    assert st.ms_per_batch == {
        "read": 4.0,
        "preprocessing": 12.0,
        "batch": 1.0,
        "prefetch": 7.0,
        "transfer": 0.5,
    }
    assert st.effective_ms["preprocessing"] == 6.0 and st.effective_ms["read"] == 2.0
    assert st.dominant == "preprocessing"
    assert st.where == {
        "read": "workers",
        "preprocessing": "workers",
        "batch": "workers",
        "prefetch": "main",
        "transfer": "main",
    }
    assert st.budget_ms == 3.0 and st.workers == 2 and st.batches == 100
    assert st.to_dict() == {
        "dominant": "preprocessing",
        "ms_per_batch": st.ms_per_batch,
        "ms_per_step": st.effective_ms,
        "where": st.where,
        "parallel": {"read": 2, "preprocessing": 2, "batch": 2, "prefetch": 1, "transfer": 1},
    }
    assert "preprocessing (12.00 ms per batch in each of 2 worker(s))" in stage_advice(st)


def test_read_threads_run_at_once_and_the_stages_per_step_add_up_to_the_step() -> None:
    # The run: one worker with 16 read threads, a slow map: 51.7 ms of thread time
    # a batch (the threads' GIL waits included), 4.04 ms steps, 1.88 ms of device work.
    # Per step the map costs 51.7 / 16 = 3.23 ms, not 51.7: the pipeline makes a batch
    # every 3.23 ms, within the 4.04 ms step.
    batches = 250
    side = parse(
        {
            "grain": {
                "worker_count": 1,
                "read_threads": 16,
                "stages": {
                    "window_s": batches * 4.04e-3,
                    "batches": batches,
                    "seconds": {"workers": {"preprocessing": 51.7e-3 * batches}},
                    "calls": {},
                },
            }
        }
    )
    assert side is not None
    st = input_stages(
        side, input_wait_ns_per_step=0.5 * MS, transfer_ns_per_step=0, device_ns_per_step=1.88 * MS
    )
    assert st is not None and st.parallel is not None
    assert st.ms_per_batch["preprocessing"] == 51.7
    assert st.effective_ms["preprocessing"] == pytest.approx(51.7 / 16, abs=1e-3)
    assert st.parallel["preprocessing"] == 16
    assert st.pipeline_ms_per_step() == pytest.approx(3.23, abs=0.01)


def test_threads_the_settings_do_not_show_are_read_off_the_measurement() -> None:
    # No ReadOptions seen (Grain's default, 16 threads): 12 threads' worth of thread time
    # over the window's wall time in the training process says 12 ran at once.
    side = parse(
        {
            "grain": {
                "worker_count": 0,
                "stages": {
                    "window_s": 1.0,
                    "batches": 100,
                    "seconds": {"threads": {"read": 12.0}},
                    "calls": {},
                },
            }
        }
    )
    assert side is not None
    st = input_stages(
        side, input_wait_ns_per_step=0, transfer_ns_per_step=0, device_ns_per_step=10 * MS
    )
    assert st is not None and st.parallel is not None
    assert st.ms_per_batch["read"] == 120.0 and st.parallel["read"] == pytest.approx(12.0)
    assert st.effective_ms["read"] == pytest.approx(10.0)


@pytest.mark.parametrize(("wait_ms", "dominant"), [(10.0, "preprocessing"), (11.0, "prefetch")])
def test_a_wait_well_beyond_the_pipeline_is_the_buffers(wait_ms: float, dominant: str) -> None:
    # The pipeline's share of a step is 8.5 ms: a 10 ms wait (1.18x) is within what a
    # saturated pipeline shows, 11 ms (1.29x) exceeds it by more than HANDOVER_MARGIN.
    side = _sidecar(2, 100, {"workers": {"read": 0.4, "preprocessing": 1.2, "batch": 0.1}})
    st = input_stages(
        side,
        input_wait_ns_per_step=wait_ms * MS,
        transfer_ns_per_step=0,
        device_ns_per_step=3 * MS,
    )
    assert st is not None and st.dominant == dominant
    if dominant == "prefetch":
        assert "per_worker_buffer_size" in stage_advice(st)


def test_worker_stages_are_per_element_the_workers_made() -> None:
    # The loop drew 100 batches while the workers made 80 (their buffers drained): the
    # workers' 1.2 s of preprocessing went into 80 batches, 15 ms each.
    data: dict[str, Any] = {
        "grain": {
            "worker_count": 2,
            "stages": {
                "batches": 100,
                "worker_elements": 80,
                "seconds": {"workers": {"preprocessing": 1.2}, "main": {"read": 0.1}},
            },
        }
    }
    st = input_stages(
        parse(data), input_wait_ns_per_step=0, transfer_ns_per_step=0, device_ns_per_step=MS
    )
    assert st is not None
    assert st.ms_per_batch["preprocessing"] == 15.0 and st.ms_per_batch["read"] == 1.0


def test_stages_on_the_training_thread_are_not_waiting() -> None:
    # No workers: the training thread reads (10 ms) and maps (4 ms) each batch itself;
    # of its 15 ms of input time per step, 1 ms is left for the prefetch iterator.
    side = _sidecar(0, 50, {"main": {"read": 0.5, "preprocessing": 0.2}})
    st = input_stages(
        side, input_wait_ns_per_step=15 * MS, transfer_ns_per_step=0, device_ns_per_step=2 * MS
    )
    assert st is not None
    assert st.ms_per_batch["read"] == 10.0 and st.ms_per_batch["preprocessing"] == 4.0
    assert st.ms_per_batch["prefetch"] == pytest.approx(1.0)
    assert st.dominant == "read" and st.where["read"] == "main"
    # A stage that took no time is placed where the pipeline ran.
    assert st.where["batch"] == "main"
    assert "ReadOptions(" in stage_advice(st)


def test_threads_and_transfer() -> None:
    side = _sidecar(0, 10, {"threads": {"read": 0.01, "preprocessing": 0.02}})
    st = input_stages(
        side, input_wait_ns_per_step=0, transfer_ns_per_step=9 * MS, device_ns_per_step=2 * MS
    )
    assert st is not None and st.dominant == "transfer"
    assert st.where["preprocessing"] == "threads"
    assert "prefetch to device" in stage_advice(st)


@pytest.mark.parametrize(
    "sidecar",
    [
        None,
        parse({}),
        parse({"grain": {"worker_count": 2}}),
        _sidecar(2, 0, {"workers": {"read": 1.0}}),
        _sidecar(2, 10, {"workers": {"read": 0.0}}),
    ],
)
def test_no_measurement_no_table(sidecar: Sidecar | None) -> None:
    assert (
        input_stages(
            sidecar, input_wait_ns_per_step=MS, transfer_ns_per_step=0, device_ns_per_step=MS
        )
        is None
    )


def test_transfer_per_step_counts_device_put_inside_the_steps() -> None:
    events = pd.DataFrame(
        {
            S.NAME: pd.Categorical(["DevicePut", "DevicePut", "PjitFunction(f)", "DevicePut"]),
            S.START_NS: np.array([5, 40, 50, 95], dtype=np.int64) * MS,
            S.DURATION_NS: np.array([2, 3, 30, 10], dtype=np.int64) * MS,
        }
    )
    steps = Steps(
        "test",
        np.array([0, 50], dtype=np.int64) * MS,
        np.array([50, 100], dtype=np.int64) * MS,
        np.array([0, 1], dtype=np.int64),
        main_line_row=None,
        dropped=0,
    )
    # 2 + 3 + the 5 ms of the last one inside the window, over 2 steps.
    assert transfer_ns_per_step(ThreadEvents.from_frame(events), steps) == 5 * MS


def _measured_stages() -> InputStages:
    side = _sidecar(2, 100, {"workers": {"read": 0.4, "preprocessing": 1.2, "batch": 0.1}})
    st = input_stages(
        side, input_wait_ns_per_step=7 * MS, transfer_ns_per_step=MS // 2, device_ns_per_step=3 * MS
    )
    assert st is not None
    return st


def test_plot_stacks_the_effective_stage_times_against_the_step() -> None:
    from matplotlib.patches import Rectangle

    from traceinspect.report.input_plots import plot_input_stages

    st = _measured_stages()
    ax = plot_input_stages(st)
    bars = {
        str(p.get_gid()).rsplit(":", 1)[1]: p
        for p in ax.patches
        if isinstance(p, Rectangle) and p.get_gid()
    }
    assert set(bars) == set(STAGES)
    assert {s: bars[s].get_width() for s in STAGES} == pytest.approx(st.effective_ms)
    # Stacked in stage order: each starts where the previous one ended.
    lefts = [bars[s].get_x() for s in STAGES]
    assert lefts == pytest.approx(np.cumsum([0, *[st.effective_ms[s] for s in STAGES[:-1]]]))
    (budget,) = [ln for ln in ax.lines if ln.get_gid() == "budget:this run"]
    assert np.asarray(budget.get_xdata()).tolist() == [3.0, 3.0]
    runs = plot_input_stages({"1 worker": st, "2 workers": st})
    assert len([p for p in runs.patches if p.get_gid()]) == 10


def test_text_and_html_name_the_stages(sample: tuple[Trace, Analysis]) -> None:
    from traceinspect.report.analyze import render_analysis
    from traceinspect.report.html import figure_alts, render_html

    trace, plain = sample
    a = replace(plain, input_stages=_measured_stages())
    text = render_analysis(a)
    assert (
        "Input     per step: read 2.00 ms (4.00 ms a batch, 2 at once; workers), "
        "preprocessing 6.00 ms (12.00 ms a batch, 2 at once; workers), "
        "batch 0.50 ms (1.00 ms a batch, 2 at once; workers), prefetch wait 7.00 ms, "
        "transfer 0.50 ms; 2 worker process(es): the stages make a batch every 8.50 ms; "
        f"the step takes {a.steps.typical_ms:,.2f} ms, the device's work 3.00 ms; the largest "
        "is preprocessing"
    ) in text
    assert a.to_dict()["input_stages"]["dominant"] == "preprocessing"
    page = render_html(trace, a, figures={})
    assert "<h2>Input pipeline by stage</h2>" in page and "<b>preprocessing</b>" in page
    # The stages' plot, to a reader who cannot see it: the bars it draws, per step.
    assert figure_alts(a)["input_stages"] == (
        "Per input-pipeline stage, ms per step: read 2.00, preprocessing 6.00, batch 0.50, "
        "prefetch 7.00, transfer 0.50; the device's work 3.00 ms per step; largest: "
        "preprocessing."
    )


@pytest.mark.parametrize(
    ("cpu_s", "delay_s", "share"),
    [
        (0.1, 0.0, 0.05),  # a map that waits on storage
        (0.99, 1.0, 0.99),  # one that computes, half the time waiting for a core
        (1.5, 0.8, 1.0),  # more CPU than its running time (Grain's own work around it)
        (None, None, None),  # not measured: an older sidecar, or no schedstat
    ],
)
def test_the_read_threads_cpu_share(
    cpu_s: float | None, delay_s: float | None, share: float | None
) -> None:
    stages: dict[str, Any] = {
        "window_s": 3.0,
        "batches": 100,
        "seconds": {"threads": {"read": 0.1, "preprocessing": 1.9}},
        "calls": {},
    }
    if cpu_s is not None:
        stages["thread_cpu_s"] = {"threads": cpu_s}
        stages["thread_run_delay_s"] = {"threads": delay_s}
    side = parse({"grain": {"worker_count": 0, "read_threads": 1, "stages": stages}})
    st = input_stages(
        side, input_wait_ns_per_step=10 * MS, transfer_ns_per_step=0, device_ns_per_step=9 * MS
    )
    assert st is not None
    assert st.threads_cpu_share == (None if share is None else pytest.approx(share))
    assert ("threads_cpu_share" in st.to_dict()) == (share is not None)
    assert InputStages.from_record(st.to_record()) == st


@pytest.mark.parametrize(
    ("threads", "cpu_s", "compute", "cores"),
    [
        # Grain's 16 default read threads running a Python map: each on a CPU ~6% of its
        # time, about one core together: they take turns with the GIL, and compute.
        (16, 1.9 * 0.064, 1.0, 0.97),
        # 16 threads waiting on storage: little CPU together, they wait on reads.
        (16, 0.02, 0.02 / 1.9, 0.16),
        # One thread that computes half its time.
        (1, 0.95, 0.5, 0.5),
    ],
)
def test_read_threads_that_hold_the_gil_together_compute(
    threads: int, cpu_s: float, compute: float, cores: float
) -> None:
    stages: dict[str, Any] = {
        "window_s": 2.0 / threads,
        "batches": 100,
        "seconds": {"threads": {"read": 0.1, "preprocessing": 1.8}},
        "calls": {},
        "thread_cpu_s": {"threads": cpu_s},
        "thread_run_delay_s": {"threads": 0.0},
    }
    side = parse({"grain": {"worker_count": 0, "read_threads": threads, "stages": stages}})
    st = input_stages(
        side, input_wait_ns_per_step=10 * MS, transfer_ns_per_step=0, device_ns_per_step=9 * MS
    )
    assert st is not None and st.threads_cores is not None
    assert st.threads_cores == pytest.approx(cores, abs=0.01)
    assert st.threads_compute_share == pytest.approx(compute)
