"""The grain_worker_count rule from measured worker processes (capture's probe), with exact
numbers: cost per batch, the core cap by CPU share, fewer workers when they idle."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from traceinspect import schema as S
from traceinspect.analysis.counterfactual import read_floor_ns as _read_floor_ns
from traceinspect.analysis.result import Recommendation
from traceinspect.analysis.workers import (
    TracedOnly,
    WorkerMeasurement,
    recommend_workers,
    worker_inputs,
)
from traceinspect.analysis.workers_bounds import _never_slower
from traceinspect.sidecar import WorkersMeasured, parse

GIB = 1 << 30


def _sidecar(
    workers: int,
    produce_s: float,
    cpu_s: float,
    *,
    elements: int = 20,
    batches: int = 20,
    wall_s: float = 1.0,
    cpus: int = 2,
    rss: int = 200 << 20,
) -> dict[str, Any]:
    per = [
        {
            "index": i,
            "pid": 100 + i,
            "wall_s": wall_s,
            "elements": elements // workers,
            "produce_s": produce_s / workers,
            "blocked_s": wall_s - produce_s / workers,
            "cpu_s": cpu_s / workers,
            "rss_bytes": rss,
            "timed_elements": True,
        }
        for i in range(workers)
    ]
    return {
        "host": {"cpus_available": cpus, "memory_available_bytes": 16 * GIB},
        "grain": {
            "worker_count": workers,
            "per_worker_buffer_size": 1,
            "bytes_per_batch": 4 << 20,
            "workers_measured": {"window_s": wall_s, "batches": batches, "workers": per},
        },
    }


def _measured(side: dict[str, Any]) -> WorkersMeasured | None:
    record = parse(side)
    assert record is not None and record.grain is not None
    return record.grain.measured


def _rec(verdict: str, device_ms: float, step_ms: float, sidecar: dict[str, Any]) -> Recommendation:
    return recommend_workers(
        worker_inputs(
            verdict, step_ms, device_ms, input_wait_ms=step_ms - device_ms, sidecar=parse(sidecar)
        )
    )


def test_workers_that_wait_on_reads_may_outnumber_cores() -> None:
    # One worker, 45 ms per batch of which 10% on CPU; the device needs 10 ms per step.
    rec = _rec("input-bound", 10.0, 45.0, _sidecar(1, produce_s=0.9, cpu_s=0.09))
    assert rec.measured is not None
    assert rec.measured["batch_ms"] == 45.0
    assert rec.measured["cpu_share"] == 0.1
    assert rec.value == 6  # ceil(45 * 1.25 / 10); 2 cores allow floor(2 / 0.1) = 20
    assert rec.bounded_by is None
    assert rec.expected_step_ms == 10.0
    assert rec.reason is not None
    assert "workers wait on reads (10% of their time on CPU)" in rec.reason
    assert "may outnumber the cores" in rec.reason


def test_cpu_bound_workers_are_capped_by_cores() -> None:
    rec = _rec("input-bound", 10.0, 28.0, _sidecar(1, produce_s=0.5, cpu_s=0.49))
    assert rec.measured is not None
    assert rec.measured["batch_ms"] == 25.0
    assert rec.value == 2  # needs ceil(25 * 1.25 / 10) = 4; floor(2 / 0.98) = 2 cores
    assert rec.bounded_by == "cores"
    assert rec.reason is not None
    assert "CPU-bound in preprocessing (98% of their time on CPU)" in rec.reason
    assert "make preprocessing cheaper or move it offline, or add hosts" in rec.reason
    # Two workers of 25 ms each, and 24.5 ms of CPU per batch on 2 cores.
    assert rec.expected_step_ms == 12.5


def test_workers_waiting_for_a_core_count_as_cpu_bound() -> None:
    # Two workers on one usable core: each on the CPU 48% of its producing time and ready to
    # run, waiting for the core, 49% (the probe's schedstat run delay).
    side = _sidecar(2, produce_s=2.0, cpu_s=0.96, cpus=1)
    for w in side["grain"]["workers_measured"]["workers"]:
        w["cpu_wait_s"] = 0.49
    measured = WorkerMeasurement.from_sidecar(_measured(side))
    assert measured is not None
    assert (measured.cpu_share, measured.cpu_wait_share) == (0.48, 0.49)
    # On a core of its own: 0.48 of the 0.51 it did not wait for one.
    assert measured.core_share == pytest.approx(0.48 / 0.51)
    rec = _rec("input-bound", 1.0, 50.0, side)
    assert rec.reason is not None
    assert (
        "CPU-bound in preprocessing (48% of their time on CPU, 49% waiting for a core)"
        in rec.reason
    )
    assert "the 1 usable core(s) run at most 1 such worker(s)" in rec.reason  # floor(1 / 0.94)
    # One worker at the 100 ms a batch measured would be slower than the 50 ms step: the
    # count in use stays.
    assert rec.value == 2 and rec.bounded_by == "measurement"
    assert "at 1 worker(s) the step would be about 100.00 ms" in rec.reason
    # Read without the wait (a sidecar from before it was recorded): they seem to wait on reads.
    for w in side["grain"]["workers_measured"]["workers"]:
        del w["cpu_wait_s"]
    rec = _rec("input-bound", 1.0, 50.0, side)
    assert rec.value == 2 and rec.reason is not None and "wait on reads" in rec.reason


def test_a_worker_that_waits_on_reads_and_for_a_core() -> None:
    # One worker on 2 cores shared with XLA's threads: 30% of its producing time on the CPU,
    # 40% waiting for a core, the rest waiting on reads: 50% on a core of its own, so the
    # cores hold 4 such workers (counting the wait as CPU would allow only 2).
    side = _sidecar(1, produce_s=1.0, cpu_s=0.3)
    side["grain"]["workers_measured"]["workers"][0]["cpu_wait_s"] = 0.4
    measured = WorkerMeasurement.from_sidecar(_measured(side))
    assert measured is not None and measured.core_share == pytest.approx(0.5)
    rec = _rec("input-bound", 5.0, 50.0, side)
    assert rec.value == 4 and rec.bounded_by == "cores"
    assert rec.reason is not None
    assert "(30% of their time on CPU, 40% waiting for a core)" in rec.reason


def test_idle_workers_are_told_how_many_fewer_keep_up() -> None:
    # 8 workers busy 25% of the time, 20 ms per batch each, the device needs 10 ms.
    side = _sidecar(8, produce_s=8 * 0.25, cpu_s=0.4, elements=100, batches=100)
    rec = _rec("device-bound", 10.0, 10.0, side)
    assert rec.measured is not None
    assert rec.measured["batch_ms"] == 20.0
    assert rec.measured["busy_share"] == 0.25
    assert rec.value == 3  # ceil(20 * 1.25 / 10)
    # 5 fewer, each its 200 MiB plus one 4 MiB batch buffered.
    assert rec.reason is not None
    assert "5 fewer worker(s) keep up and free about 1,020 MiB of RAM" in rec.reason


def test_elements_per_batch_come_from_the_parent_batches() -> None:
    # Batching after mp_prefetch: workers produce records, 8 per batch.
    side = _sidecar(2, produce_s=0.8, cpu_s=0.1, elements=160, batches=20)
    m = WorkerMeasurement.from_sidecar(_measured(side))
    assert m is not None
    assert m.batch_ms == 40.0  # 5 ms per record x 8 records


def test_workers_that_read_ahead_while_blocked_do_not_halve_the_cost() -> None:
    # isolate's loader phase on two waiting workers (the family's io records), as the probe
    # counted them: worker 0 busy all the window at 43.5 ms an element; worker 1 made as many
    # on its read-ahead thread while its main thread waited in the put (blocked 97.6%). Grain
    # takes one element from each in turn, so both deliver at worker 0's pace.
    side = _sidecar(2, produce_s=1.0, cpu_s=0.16, elements=46, batches=46)
    w0, w1 = side["grain"]["workers_measured"]["workers"]
    w0.update(wall_s=1.0018, elements=23, produce_s=1.0008, blocked_s=0.001, cpu_s=0.0807)
    w1.update(wall_s=1.0001, elements=23, produce_s=0.0244, blocked_s=0.9757, cpu_s=0.0808)
    m = WorkerMeasurement.from_sidecar(_measured(side))
    assert m is not None and m.workers == 2
    assert m.batch_ms == pytest.approx(1.0008 / 23 * 1000)  # not (1.0008 + 0.0244) / 46
    assert m.busy_share == pytest.approx(1.0008 / 1.0018)
    assert m.cpu_share == pytest.approx(0.0807 / 1.0008)
    # Every worker's CPU, over every element.
    assert m.cpu_ms_per_batch == pytest.approx((0.0807 + 0.0808) / 46 * 1000)
    # Input-bound at a 21 ms step against a 9 ms device: 2 workers do not keep up.
    rec = _rec("input-bound", 9.0, 21.0, side)
    assert rec.value == 7, rec.reason  # ceil(43.5 * 1.25 / 9); before: 2, "already deliver"
    # Workers all mostly blocked (a device-bound run) keep the mean over every worker.
    w0.update(produce_s=0.2, blocked_s=0.8)
    m = WorkerMeasurement.from_sidecar(_measured(side))
    assert m is not None and m.batch_ms == pytest.approx((0.2 + 0.0244) / 46 * 1000)


def test_no_measurement_without_timed_workers() -> None:
    side = _sidecar(1, produce_s=0.9, cpu_s=0.09)
    for w in side["grain"]["workers_measured"]["workers"]:
        w["timed_elements"] = False
    assert WorkerMeasurement.from_sidecar(_measured(side)) is None
    assert WorkerMeasurement.from_sidecar(None) is None


def test_sync_bound_keeps_its_count_even_when_measured() -> None:
    rec = _rec("sync-bound", 10.0, 16.0, _sidecar(2, produce_s=0.4, cpu_s=0.05))
    assert rec.value == 2 and rec.bounded_by == "measurement"
    assert rec.reason is not None
    assert "remove the per-step sync first" in rec.reason


def _rec_with_stages(
    device_ms: float, sidecar: dict[str, Any], stage_batch_ms: float, read_threads: int
) -> Recommendation:
    sidecar["grain"]["read_threads"] = read_threads
    return recommend_workers(
        worker_inputs(
            "device-bound",
            device_ms,
            device_ms,
            input_wait_ms=0.0,
            sidecar=parse(sidecar),
            stage_batch_ms=stage_batch_ms,
        )
    )


def test_idle_workers_are_costed_by_their_stages_not_their_hand_over() -> None:
    """The io scenario at 4 workers (a capture of 2026-11-24): the workers were busy 3% of
    the window and their main thread took 2.05 ms per batch, handing over batches their read
    thread had made ahead; the stage timers saw 47.7 ms of reads and parsing per batch. 4
    workers deliver one every 11.9 ms against a 14.65 ms device step: keep 4 (1 would make
    a step take ~48 ms)."""
    # 20 batches in a 1 s window, 41 ms of producing in all: 2.05 ms per batch, busy ~1%.
    side = _sidecar(4, produce_s=0.041, cpu_s=0.041)
    rec = _rec_with_stages(14.65, side, stage_batch_ms=47.7, read_threads=1)
    assert rec.measured is not None
    assert rec.measured["handover_ms"] == 2.05 and rec.measured["batch_ms"] == 47.7
    assert rec.value == 4
    assert rec.reason is not None
    assert "47.70 ms (their pipeline stages' time, over 1 read thread(s) each" in rec.reason
    # Two read threads per worker halve a batch's wall cost: 23.85 ms, so ceil(23.85 * 1.25
    # / 14.65) = 3 workers, one fewer.
    assert _rec_with_stages(14.65, side, 47.7, read_threads=2).value == 3


def test_busy_workers_keep_their_probe_time() -> None:
    # Busy the whole window: the main thread waited for every batch; its time is the cost
    # (the stage timers' thread time may add overlap: MaxText's heavy run read 519 against
    # 487 ms).
    side = _sidecar(1, produce_s=0.974, cpu_s=0.95)
    rec = _rec_with_stages(300.0, side, stage_batch_ms=60.0, read_threads=1)
    assert rec.measured is not None and rec.measured["batch_ms"] == 48.7


def test_fewer_workers_only_where_they_keep_up_with_the_measured_step() -> None:
    """io at 4 workers: a batch costs a worker 47.7 ms and the run steps every 14 ms, but the
    CPU floor read 21 ms (a 2-core machine shared with 4 workers): the floor alone would say
    3 workers (ceil(47.7 * 1.25 / 21)); 3 deliver a batch every 15.9 ms, slower than the
    step measured, so 4 stay."""
    side = _sidecar(4, produce_s=0.041, cpu_s=0.041)
    # (0.8 s + the workers' 0.041 s of CPU) / 20 batches, on 2 cores: 21.0 ms a step.
    side["grain"]["workers_measured"]["main_process_cpu_s"] = 0.8
    side["grain"]["read_threads"] = 1
    rec = recommend_workers(
        worker_inputs("device-bound", 14.0, 8.0, 0.0, parse(side), stage_batch_ms=47.7)
    )
    assert rec.measured is not None and rec.measured["host_cpu_floor_ms"] == 21.025
    assert rec.value == 4


def _in_process(
    stage_batch_ms: float | None, read_floor_ms: float | None, stall_ms: float | None = None
) -> Recommendation:
    """No workers, 8.9 ms of device work, a 26.5 ms step whose loop waits 17.7 ms for each
    batch (the family's slow records on one read thread, under a per-step read), 8 cores."""
    inputs = worker_inputs(
        "input-bound",
        step_ms=26.5,
        device_busy_ms=8.9,
        input_wait_ms=17.7,
        sidecar=parse({"grain": {"worker_count": 0}, "host": {"cpu_count": 8}}),
        stage_batch_ms=stage_batch_ms,
    )
    return recommend_workers(inputs, read_floor_ms=read_floor_ms, stall_ms=stall_ms)


def test_batches_made_on_read_threads_cost_their_stages_not_the_wait() -> None:
    # The read thread made each batch in 24 ms, 6.3 of them during the step: the wait shows
    # 17.7. Sized by the wait, 3 workers; by the batch, ceil(24 x 1.25 / 8.9) = 4 (the
    # family measured 14.0 ms a step at 2 workers, 10.1 at 3, 9.1 at 4).
    assert _in_process(None, None).value == 3
    rec = _in_process(24.0, None)
    assert rec.value == 4 and rec.expected_step_ms == 8.9
    assert rec.reason is not None
    assert "the pipeline's stages take 24.00 ms a batch" in rec.reason


def test_a_loop_that_reads_every_step_runs_no_faster_than_its_read_allows() -> None:
    # It needs a batch every 13.5 ms, not every 8.9: ceil(24 x 1.25 / 13.5) = 3 workers.
    rec = _in_process(24.0, 13.5)
    assert rec.value == 3 and rec.expected_step_ms == 13.5
    assert rec.reason is not None
    assert (
        "so its steps run one after another (the device's 8.90 ms of work among them) and "
        "need one every 13.50 ms, so 3 worker(s)" in rec.reason
    )
    assert rec.message.endswith(
        "expected step time 13.50 ms, where the read of a device value every step then limits "
        "it (remove it next)."
    )
    assert _in_process(24.0, 5.0).expected_step_ms == 8.9  # below the device: no word


def _on_read_threads(stage_ms: float, device_ms: float, share: float | None) -> Recommendation:
    """No workers, 2 cores: the family's records on one read thread of the training process
    (under a per-step read), whose stages ran on a CPU ``share`` of their time."""
    inputs = worker_inputs(
        "input-bound",
        step_ms=26.5,
        device_busy_ms=device_ms,
        input_wait_ms=15.9,
        sidecar=parse({"grain": {"worker_count": 0}, "host": {"cpu_count": 2}}),
        stage_batch_ms=stage_ms,
        stage_cpu_share=share,
    )
    return recommend_workers(inputs)


def test_read_threads_that_wait_on_reads_may_be_outnumbered_by_workers() -> None:
    # Slow records, a 3 ms wait each (26.15 ms a batch, 5% of it on a CPU): 4 workers on 2
    # cores, the sweep's knee (14.0 ms a step at 2 workers, 10.1 at 3, 9.1 at 4).
    rec = _on_read_threads(26.15, 9.15, 0.047)
    assert rec.value == 4 and rec.bounded_by is None
    assert rec.reason is not None and "the stages ran on a CPU 5% of their time" in rec.reason
    assert "they mostly wait on reads" in rec.reason
    # Unmeasured, the cores cap it as before.
    rec = _on_read_threads(26.15, 9.15, None)
    assert rec.value == 2 and rec.bounded_by == "cores"


def test_read_threads_that_compute_are_capped_by_the_cores() -> None:
    # CPU-bound records (3 ms of CPU each): 99% on a CPU; 3 needed, 2 cores.
    rec = _on_read_threads(27.67, 14.25, 0.989)
    assert rec.value == 2 and rec.bounded_by == "cores"
    assert rec.reason is not None and "the process may use only 2 core(s)" in rec.reason


def test_read_threads_that_half_wait_are_capped_by_their_cpu_share() -> None:
    # 2.5 ms of waiting and 1.5 of CPU a record: 40% on a CPU, so 2 cores run 5 such
    # workers at most; 5 are needed for 35.97 ms a batch against 10.03 ms of device work.
    assert _on_read_threads(35.97, 10.03, 0.4).value == 5
    rec = _on_read_threads(35.97, 10.03, 0.6)
    assert rec.value == 3 and rec.bounded_by == "cores"
    assert rec.reason is not None
    assert "the 2 usable core(s) run at most 3 such worker(s)" in rec.reason


def test_the_read_floor_is_the_low_tail_of_the_steps_less_their_wait() -> None:
    # Ten steps of a starved loop that reads every step, 40 ms each, most of it waiting for
    # input; its serial part (the step less the wait) swells from step to step with the
    # starved pipeline and the machine's noise (the family's 2-core captures: 9.4-16.4 ms
    # within one, medians 0-40% above the step with enough workers). The 10th percentile
    # stands (10 ms), not the median (13.5); never below the device's work at that quantile.
    rest = np.array([10, 10, 11, 12, 13, 14, 15, 16, 16, 16]) * 1e6
    wall = np.full(10, 40e6)
    per_step = {S.WALL_NS: wall, S.INPUT_WORK_NS: wall - rest, S.DEVICE_WORK_NS: np.full(10, 8e6)}
    assert _read_floor_ns(per_step) == pytest.approx(10e6)
    per_step[S.DEVICE_WORK_NS] = np.full(10, 11e6)
    assert _read_floor_ns(per_step) == pytest.approx(11e6)


def test_the_read_floor_leaves_out_steps_without_device_work() -> None:
    # A window of five steps whose first is a 0.9 ms sliver before the device's first work
    # (the kept GPU captures hold one): it would set the 10th percentile by itself.
    wall = np.array([0.9, 12.0, 11.0, 11.5, 12.5]) * 1e6
    device = np.array([0.0, 8.0, 8.0, 8.0, 8.0]) * 1e6
    per_step = {S.WALL_NS: wall, S.INPUT_WORK_NS: np.zeros(5), S.DEVICE_WORK_NS: device}
    # The 10th percentile of 11.0, 11.5, 12.0, 12.5 ms: 11.15 (with the sliver: 4.94).
    assert _read_floor_ns(per_step) == pytest.approx(11.15e6)
    # No step with device work: every step counts, as before.
    per_step[S.DEVICE_WORK_NS] = np.zeros(5)
    assert _read_floor_ns(per_step) == pytest.approx(np.quantile(wall, 0.1))


def test_a_count_its_own_workers_make_slower_than_the_measured_step_is_not_advised() -> None:
    """Busy workers at 100 ms a batch (33.3 ms at 3), a 37.3 ms step on a device that needs
    a batch every 20 ms: 2 workers, the most the 2 cores hold by the CPU share alone, would
    deliver one every 50 ms, slower than the step measured and than the same model's 33.3
    ms at the 3 in use (the CPU floor of 3 read-waiting workers is their CPU over the cores,
    35 ms). The count in use stays, at the step measured."""
    side = _sidecar(3, produce_s=3.0, cpu_s=2.1, elements=30, batches=30)
    rec = recommend_workers(worker_inputs("input-bound", 37.3, 20.0, 17.0, parse(side)))
    assert rec.value == 3 and rec.expected_step_ms == 37.3
    assert rec.bounded_by == "measurement"
    assert rec.reason is not None
    assert "about 50.00 ms, slower than the 37.30 ms measured at 3, so keep 3" in rec.reason


def test_a_floor_above_the_measured_step_bounds_every_count_alike() -> None:
    """Idle workers (0.2 ms a batch), but the CPU floor (20.1 ms) lies above the 14 ms step
    measured: it would bound 4 workers as it bounds 1, so it says nothing about the change.
    1 worker is advised, its expected step the one measured (MaxText's tiny config at 4 idle
    workers was told to keep 4 in 1 of 4 CI captures, its device's mean work per step a
    touch above the window's typical step)."""
    side = _sidecar(4, produce_s=0.004, cpu_s=0.004)
    side["grain"]["workers_measured"]["main_process_cpu_s"] = 0.8
    rec = recommend_workers(worker_inputs("device-bound", 14.0, 8.0, 0.0, parse(side)))
    assert rec.value == 1 and rec.expected_step_ms == 14.0
    assert rec.reason is not None and "3 fewer worker(s) keep up" in rec.reason
    assert "so keep" not in rec.reason
    # The device's work above the typical step, input not limiting: the same.
    rec = recommend_workers(worker_inputs("device-bound", 399.0, 401.0, 0.0, parse(side)))
    assert rec.value == 1 and rec.expected_step_ms == 399.0


def test_a_recurring_stall_stays_in_the_worker_counts_expected_step() -> None:
    """The slow pipeline on one read thread with a checkpoint every 40 steps: the count is
    sized on the step without the stall, and the stall's 6 ms a step is added back (the
    family's "3 workers: expected 12.61 ms" was measured at 19.1)."""
    plain, stalled = _in_process(24.0, None), _in_process(24.0, None, stall_ms=6.0)
    assert plain.value == stalled.value == 4
    assert plain.expected_step_ms == 8.9 and stalled.expected_step_ms == 14.9


def _count(value: int, current: int, expected: float) -> dict[str, Any]:
    return {"value": value, "current": current, "expected_step_ms": expected, "bounded_by": None}


def test_more_workers_must_gain_what_matters() -> None:
    """Records that compute on 4 read threads beside a slow device step, no workers (2
    cores, 2026-11-30): the host's CPU floor at 2 workers came 2% under the measured step in
    one capture (33.56 ms mean, 32.90 expected) and 0.6% over it in the next (31.60, 31.79):
    "2 workers" and "keep 0" in turn, and 2 workers timed 23-33% slower than expected. More
    workers are advised only for a gain of MATTERS (5%); fewer, for any step no slower."""
    kept = _count(2, 0, 32.90)
    clause = _never_slower(kept, 33.56)
    assert (kept["value"], kept["expected_step_ms"], kept["bounded_by"]) == (
        0,
        33.56,
        "measurement",
    )
    assert "about 32.90 ms, no faster by 5% than the 33.56 ms measured at 0, so keep 0" in clause
    # A real gain stands.
    gains = _count(2, 0, 31.80)
    assert _never_slower(gains, 33.56) == "" and gains["value"] == 2
    # Fewer workers at the same step stand (they free cores and memory).
    fewer = _count(1, 4, 14.0)
    assert _never_slower(fewer, 14.0) == "" and fewer["value"] == 1
    # Slower than measured: kept, and said so.
    slower = _count(2, 3, 50.0)
    assert "slower than the 37.30 ms measured at 3" in _never_slower(slower, 37.3)


def _sync_bound_w0(
    step_ms: float,
    device_ms: float,
    batch_ms: float,
    untraced_ms: float | None = None,
    traced_only: TracedOnly | None = None,
) -> Recommendation:
    side = {
        "host": {"cpus_available": 2, "memory_available_bytes": 16 * GIB},
        "grain": {"worker_count": 0, "read_threads": 2},
    }
    return recommend_workers(
        worker_inputs(
            "sync-bound", step_ms, device_ms, input_wait_ms=batch_ms, sidecar=parse(side)
        ),
        untraced_ms=untraced_ms,
        traced_only=traced_only,
    )


def test_a_worker_after_the_read_must_gain_what_matters() -> None:
    """A `.block_until_ready()` every step over records from memory, no workers (the
    family's block_keepup, 2 cores, 2026-11-30): the training process made each batch in
    0.07-0.09 ms after the read, and "1 worker" promised 6.70-7.50 ms against 7.01-7.91
    traced; 1 worker timed 7.4-8.1 ms, 0 workers 5.9-6.3 (no capture). A worker is advised
    after a read only where it gains MATTERS (5%), as more workers are anywhere else."""
    kept = _sync_bound_w0(7.01, 6.33, 0.07)
    assert (kept.value, kept.current, kept.expected_step_ms) == (0, 0, 7.01)
    assert kept.reason is not None
    assert "after the read (0.07 ms a step); at 1 worker(s) the step would be about 6.94 ms" in (
        kept.reason
    )
    assert "no faster by 5% than the 7.01 ms measured at 0, so keep 0" in kept.reason
    # The family's float(loss) every step at 0 workers: a batch of 6 ms after the read.
    gains = _sync_bound_w0(18.3, 7.2, 6.0)
    assert (gains.value, gains.expected_step_ms) == (1, 12.3)
    assert gains.reason is not None and "one Grain worker makes it during the read" in gains.reason


def test_a_kept_count_expects_the_run_s_untraced_step() -> None:
    """The same loop run 900 steps (2026-11-30): the window 7.45-7.99 ms a step traced,
    capture's untraced block after it 6.31-6.57, the loop timed without capture 6.06-6.40.
    A count kept leaves the step the run's, so its expected step is the untraced one where
    capture timed it; a count changed still expects the counterfactual's."""
    kept = _sync_bound_w0(7.43, 6.33, 0.07, untraced_ms=6.1454)
    assert (kept.value, kept.expected_step_ms) == (0, 6.145)
    assert kept.message.endswith(
        "expected step time 6.14 ms, as capture timed the run without the profiler."
    )
    changed = _sync_bound_w0(18.3, 7.2, 6.0, untraced_ms=17.9)
    assert (changed.value, changed.expected_step_ms) == (1, 12.3)
    assert "without the profiler" not in changed.message


def test_a_kept_count_from_the_traced_step_alone_says_so() -> None:
    """The same loop run 300 steps: the window (at least 1 s) ended with the script, capture
    timed no untraced step, and "keep 0" expected the traced 7.4-7.8 ms against 6.1-6.5
    timed without capture (-16 to -22%). The figure is the traced step, and it says so."""
    kept = _sync_bound_w0(7.43, 6.33, 0.07, traced_only="ended")
    assert (kept.value, kept.expected_step_ms) == (0, 7.43)
    assert kept.message.endswith(
        "expected step time 7.43 ms, the traced step with the profiler's cost in it (the "
        "script ended before capture could time steps without it: run more steps for the "
        "run's own)."
    )
    # A count changed, or one timed untraced, says nothing of it.
    changed = _sync_bound_w0(18.3, 7.2, 6.0, traced_only="ended")
    assert (changed.value, changed.expected_step_ms) == (1, 12.3)
    assert "profiler" not in changed.message
    timed = _sync_bound_w0(7.43, 6.33, 0.07, untraced_ms=6.1454, traced_only="ended")
    assert "profiler's cost" not in timed.message
    # Stopped by capture --stop-after, which then timed no untraced step on purpose.
    stopped = _sync_bound_w0(7.43, 6.33, 0.07, traced_only="stopped")
    assert stopped.message.endswith(
        "expected step time 7.43 ms, the traced step with the profiler's cost in it (capture "
        "stopped the script after the window: without --stop-after it times the run's own)."
    )


def test_the_memory_cap_counts_workers_that_made_nothing_in_the_window() -> None:
    # A window of batches buffered before it: neither worker made one in it, so there is no
    # WorkerMeasurement, but the probe saw each hold 1.5 GiB. 4 GiB available x 0.8 over
    # (1.5 GiB + one 4 MiB batch) allows 2 workers, where 256 MiB a worker would allow 12.
    side = _sidecar(2, produce_s=0.0, cpu_s=0.0, elements=0, rss=3 * GIB // 2, cpus=16)
    side["host"]["memory_available_bytes"] = 4 * GIB
    rec = _rec("input-bound", 10.0, 45.0, side)
    assert rec.measured is None
    assert (rec.value, rec.bounded_by) == (2, "memory")
    assert rec.expected_step_ms == 45.0  # the 2 workers it runs now
    # Workers of 200 MiB leave the count to the pace: 12 (ceil(90 * 1.25 / 10)).
    light = _sidecar(2, produce_s=0.0, cpu_s=0.0, elements=0, rss=200 << 20, cpus=16)
    light["host"]["memory_available_bytes"] = 4 * GIB
    assert (_rec("input-bound", 10.0, 45.0, light).value, rec.current) == (12, 2)


def test_analyze_says_which_step_a_kept_count_expects(monkeypatch: pytest.MonkeyPatch) -> None:
    """The wiring: a capture whose window has no untraced steps after it gives the worker
    count ``traced_only`` (why: ``--stop-after``, or the script's end); one that timed them
    gives their mean instead."""
    import traceinspect
    from traceinspect.analysis import advice
    from traceinspect.analysis.analyze import analyze

    seen: list[dict[str, Any]] = []
    real = recommend_workers

    def spy(*args: Any, **kwargs: Any) -> Recommendation:
        seen.append(kwargs)
        return real(*args, **kwargs)

    monkeypatch.setattr(advice, "recommend_workers", spy)
    root = Path(__file__).resolve().parents[1] / "sample_traces" / "scenarios"
    analyze(traceinspect.load(root / "sync_bound"))  # --stop-after: none timed after it
    analyze(traceinspect.load(root / "stages" / "read_w2"))  # an older capture, none after it
    analyze(traceinspect.load(root / "family" / "read_float_w0"))  # 19.26 ms after it
    assert [(k["traced_only"], k["untraced_ms"]) for k in seen] == [
        ("stopped", None),
        ("ended", None),
        (None, pytest.approx(19.2639)),
    ]
