"""The pipeline checks (analysis/findings.py) on precisely built inputs; the bundled captures
that fire each check, and those that must stay silent, are in sample_traces/manifest.json."""

from __future__ import annotations

from typing import Any

import pytest

from traceinspect.analysis.findings import Dispatches, findings
from traceinspect.analysis.result import GRAIN_WORKER_COUNT, Finding, Recommendation
from traceinspect.analysis.workers import WorkerMeasurement
from traceinspect.sidecar import parse

MIB = 1 << 20
GIB = 1 << 30
NO_DISPATCH = Dispatches(calls=10, steps=10, wall_ns=100_000_000, device_ns=90_000_000)
QUIET = {"input": 0.0, "sync": 0.0, "compile": 0.0, "host": 0.0, "unknown": 0.0}


def _side(grain: dict[str, Any], cores: int = 8, available: int = 16 * GIB) -> Any:
    return parse(
        {"grain": grain, "host": {"cpus_available": cores, "memory_available_bytes": available}}
    )


def _measured(cpu_share: float, busy_share: float, rss: int | None = None) -> WorkerMeasurement:
    return WorkerMeasurement(
        workers=4,
        batch_ms=10.0,
        cpu_share=cpu_share,
        busy_share=busy_share,
        rss_bytes=rss,
        host_cpu_ms_per_step=None,
    )


def _run(**kw: Any) -> tuple[Finding, ...]:
    args: dict[str, Any] = {
        "verdict": "device-bound",
        "fractions": QUIET,
        "recommendations": (),
        "sidecar": None,
        "measured": None,
        "step_ms": 10.0,
        "dispatches": NO_DISPATCH,
        "steps_one_call_each": False,
    }
    return findings(**{**args, **kw})


def test_buffer_memory_above_half_of_ram() -> None:
    # A real report: 12 workers x 32 batches x ~10 MB buffered, on a host with 4 GiB free.
    grain = {"worker_count": 12, "per_worker_buffer_size": 32, "bytes_per_batch": 10 * MIB}
    (f,) = _run(sidecar=_side(grain, available=4 * GIB), step_ms=250.0)
    assert f.rule == "buffer_memory" and f.severity == "warning"
    assert f.message.startswith(
        "Worker buffers hold 12 workers x 32 batches x 10 MiB = 3,840 MiB, 94% of the "
        "4,096 MiB of memory available at capture"
    )
    # Two steps of batches across 12 workers: one each.
    assert f.fix.startswith("Set MultiprocessingOptions(per_worker_buffer_size=1)")
    assert "(120 MiB buffered)" in f.fix
    # With each worker's measured memory on top; and silent when it all fits in half.
    measured = {**grain, "workers_measured": _probe(100 * MIB, 5)}
    (with_rss,) = _run(sidecar=_side(measured, available=4 * GIB))
    assert "+ 12 x 100 MiB worker memory" in with_rss.message
    assert _run(sidecar=_side(grain, available=8 * GIB)) == ()


def _probe(rss: int, elements: int) -> dict[str, Any]:
    """Capture's probe of two workers over a 47 ms window, each ``elements`` made in it."""
    worker = {"wall_s": 0.05, "elements": elements, "produce_s": 0.05, "blocked_s": 0.0}
    workers = [{**worker, "index": i, "cpu_s": 0.04, "rss_bytes": rss - i * MIB} for i in (0, 1)]
    return {"window_s": 0.047, "batches": 10, "elements": 2 * elements, "workers": workers}


def test_buffer_memory_counts_workers_that_made_nothing_in_the_window() -> None:
    # The capture test's pipeline under load (1 run in 5): its 10 traced steps took 47 ms of
    # batches buffered before the window, neither worker made one in it, so there is no
    # WorkerMeasurement; each still held ~340 MB, which puts the buffers over half.
    grain = {"worker_count": 2, "per_worker_buffer_size": 8, "bytes_per_batch": 40 * MIB}
    side = _side({**grain, "workers_measured": _probe(340 * MIB, 0)}, available=2 * GIB)
    (f,) = _run(sidecar=side, measured=None)
    assert f.message.startswith(
        "Worker buffers hold 2 workers x 8 batches x 40 MiB = 640 MiB + 2 x 340 MiB worker "
        "memory, 64% of the 2,048 MiB of memory available at capture"
    )
    assert _run(sidecar=_side(grain, available=2 * GIB)) == ()


def test_buffer_memory_in_a_container() -> None:
    grain = {"worker_count": 2, "per_worker_buffer_size": 8, "bytes_per_batch": 40 * MIB}
    side = parse(
        {
            "grain": grain,
            "host": {
                "memory_available_bytes": 1 * GIB,
                "memory_limit_bytes": 3 * GIB // 2,
                "memory_limit_source": "cgroup v1 /sys/fs/cgroup/memory/job/memory.limit_in_bytes",
            },
        }
    )
    (f,) = _run(sidecar=side, step_ms=40.0)
    assert f.message == (
        "Worker buffers hold 2 workers x 8 batches x 40 MiB = 640 MiB, 62% of the 1,024 MiB "
        "of memory available at capture (of the 1.5 GiB your container may use): past its "
        "limit the kernel kills a process of the container (out of memory)."
    )
    assert f.fix.startswith("Set MultiprocessingOptions(per_worker_buffer_size=1)")


def test_cpu_bound_workers_beyond_the_cores() -> None:
    grain = {"worker_count": 8}
    (f,) = _run(sidecar=_side(grain, cores=4), measured=_measured(0.9, 0.9))
    assert f.rule == "workers_vs_cores" and f.severity == "warning"
    assert f.message == (
        "8 CPU-bound workers on 4 usable cores: each is on a core 90% of the time it makes "
        "batches, so they queue for one another and slow the training process."
    )
    assert f.fix.startswith("Use at most 4 workers: more only queue for the same cores.")
    # Workers that wait on reads leave their core free; workers mostly blocked on a full
    # buffer say nothing about their CPU share.
    assert _run(sidecar=_side(grain, cores=4), measured=_measured(0.3, 0.9)) == ()
    assert _run(sidecar=_side(grain, cores=4), measured=_measured(0.9, 0.2)) == ()


def test_workers_waiting_for_a_core_are_cpu_bound() -> None:
    # Two CPU-bound workers on the one core taskset left: each is on the CPU only half the
    # time it works, and waits for the core the other half.
    side = parse(
        {
            "grain": {"worker_count": 2},
            "host": {"cpu_count": 2, "cpus_available": 1},
        }
    )
    m = WorkerMeasurement(2, 80.0, 0.48, 0.99, None, cpu_wait_share=0.49)
    (f,) = _run(sidecar=side, measured=m)
    assert f.message == (
        "2 CPU-bound workers on 1 usable core (its CPU affinity allows 1 of this machine's 2: "
        "taskset, or a container's cpuset): making batches, each was on a core 48% of the time "
        "and waited for one 49%: it computes 94% of the time it does not wait for a core, so "
        "they queue for one another and slow the training process."
    )
    assert f.fix.startswith("Use at most 1 worker: more only queue for the same core.")
    # Without the wait, the same CPU share reads as workers waiting on reads: silent.
    assert _run(sidecar=side, measured=WorkerMeasurement(2, 80.0, 0.48, 0.99, None)) == ()


def test_full_cores_only_matter_when_input_bound() -> None:
    grain = {"worker_count": 2}
    m = WorkerMeasurement(2, 10.0, 0.4, 0.9, None, host_cpu_ms_per_step=19.0)
    # 19 ms of CPU per step on 2 cores: 9.5 ms at best, within 10% of the 10 ms step.
    (f,) = _run(verdict="input-bound", sidecar=_side(grain, cores=2), measured=m)
    assert f.rule == "workers_vs_cores"
    assert f.message == (
        "The 2 cores the process may use are full: the training process and 2 workers use "
        "19.0 ms of CPU per step, so a step takes at least 9.5 ms; steps took 10.0 ms."
    )
    assert _run(verdict="device-bound", sidecar=_side(grain, cores=2), measured=m) == ()
    light = WorkerMeasurement(2, 10.0, 0.4, 0.9, None, host_cpu_ms_per_step=16.0)
    assert _run(verdict="input-bound", sidecar=_side(grain, cores=2), measured=light) == ()


def test_fewer_workers_than_recommended_is_information() -> None:
    rec = Recommendation(
        GRAIN_WORKER_COUNT, "Set grain_worker_count to 4 (now 1): ...", value=4, current=1
    )
    (f,) = _run(recommendations=(rec,))
    assert (f.rule, f.severity, f.fix) == ("workers_vs_cores", "info", rec.message)
    keep = Recommendation(GRAIN_WORKER_COUNT, "Keep", value=1, current=1)
    assert _run(recommendations=(keep,)) == ()


@pytest.mark.parametrize(
    ("grain", "fires"),
    [
        ({"worker_count": 0, "read_threads": 0}, True),
        ({"worker_count": 0, "read_threads": 4, "read_prefetch_buffer_size": 0}, True),
        ({"worker_count": 0, "read_threads": 4, "read_prefetch_buffer_size": 500}, False),
        ({"worker_count": 2, "read_threads": 0}, False),
    ],
)
def test_no_read_ahead(grain: dict[str, Any], fires: bool) -> None:
    out = _run(verdict="input-bound", sidecar=_side(grain))
    assert [f.rule for f in out] == (["no_read_ahead"] if fires else [])
    assert _run(verdict="device-bound", sidecar=_side(grain)) == ()


def test_sync_in_loop_mirrors_the_recommendation() -> None:
    rec = Recommendation("remove_sync", "Stop reading ...", where=("train.py:57 __float__",))
    (f,) = _run(verdict="sync-bound", recommendations=(rec,))
    assert f.rule == "sync_in_loop" and f.severity == "warning" and f.fix == rec.message
    assert "at train.py:57 __float__" in f.message
    (occasional,) = _run(verdict="device-bound", recommendations=(rec,))
    assert occasional.severity == "info"


def test_op_by_op() -> None:
    host = {**QUIET, "host": 0.6}
    # 26 calls a step, 0.008 ms of device work each against 0.031 ms of host time per call.
    many = Dispatches(calls=2600, steps=100, wall_ns=80_600_000, device_ns=20_800_000)
    (f,) = _run(fractions=host, dispatches=many)
    assert f.rule == "op_by_op"
    assert f.message == (
        "The device waits for dispatches: each step is 26 separate jitted calls, each with "
        "0.008 ms of device work against 0.031 ms of host time per call."
    )
    # The host's own work must idle the device; one call a step is a jitted step already,
    # unless the steps themselves are single calls (no step markers).
    assert _run(fractions=QUIET, dispatches=many) == ()
    one = Dispatches(calls=100, steps=100, wall_ns=31_000_000, device_ns=800_000)
    assert _run(fractions=host, dispatches=one) == ()
    (single,) = _run(fractions=host, dispatches=one, steps_one_call_each=True)
    assert "each step found is one call of a small jitted function" in single.message
    # Device work as long as the host's own time per call: the device keeps up.
    busy = Dispatches(calls=2600, steps=100, wall_ns=80_600_000, device_ns=41_000_000)
    assert _run(fractions=host, dispatches=busy) == ()


def test_warnings_come_first() -> None:
    rec = Recommendation(GRAIN_WORKER_COUNT, "Set ...", value=4, current=1)
    sync = Recommendation("remove_sync", "Stop ...")
    out = _run(
        verdict="input-bound",
        recommendations=(rec, sync),
        sidecar=_side({"worker_count": 0, "read_threads": 0}),
    )
    assert [(f.rule, f.severity) for f in out] == [
        ("no_read_ahead", "warning"),
        ("sync_in_loop", "info"),
        ("workers_vs_cores", "info"),
    ]
    assert out[0].to_dict().keys() == {"rule", "severity", "message", "fix"}


def test_batch_vs_devices() -> None:
    def side(batch: int, devices: int) -> Any:
        return parse(
            {
                "grain": {"batch_size": batch},
                "process_index": 1,
                "backend": {
                    "devices": [
                        {"id": i, "process_index": i // devices} for i in range(2 * devices)
                    ]
                },
            }
        )

    assert side(30, 4).local_devices == 4
    (f,) = _run(sidecar=side(30, 4))
    assert f.rule == "batch_vs_devices" and "batch of 30 does not divide over its 4" in f.message
    assert _run(sidecar=side(32, 4)) == ()
    assert _run(sidecar=side(31, 1)) == ()


def _global(local: int, rows: int, host: int, processes: int = 2) -> Any:
    record = {
        "api": "jax.device_put",
        "local_rows": local,
        "global_rows": rows,
        "host_rows": host,
        "processes": processes,
    }
    return parse({"global_arrays": [record]})


def test_batch_vs_global() -> None:
    # Each of 2 hosts draws the whole global batch of 128 and keeps its 64 rows.
    (f,) = _run(sidecar=_global(128, 128, 64))
    assert f.rule == "batch_vs_global" and f.severity == "warning"
    assert f.message == (
        "Each host's pipeline makes the whole global batch: this host's batch has 128 rows, "
        "but of the global array of 128 rows built from it (jax.device_put, over 2 "
        "processes) only 64 are on this host's devices. The host loads 2x the rows it "
        "trains on; jax drops the rest."
    )
    assert f.fix.startswith("Batch 64 rows per host (global batch // jax.process_count()")
    # Twice its share of a larger global batch, on 4 hosts.
    (twice,) = _run(sidecar=_global(64, 128, 32, processes=4))
    assert twice.message.startswith("this host's batch has 64 rows") and "loads 2x" in twice.message
    # Its own share (make_array_from_process_local_data), or a batch every host needs
    # whole (replicated over processes): silent.
    assert _run(sidecar=_global(64, 128, 64)) == ()
    assert _run(sidecar=_global(128, 128, 128)) == ()
    assert _run(sidecar=parse({"global_arrays": []})) == ()


def _files(workers: int, files: int | None, shards: int | None) -> Any:
    return parse({"grain": {"worker_count": workers, "files": files, "file_shards": shards}})


def test_workers_vs_files() -> None:
    # 4 files split over 2 hosts, 3 workers each: one worker per host has no file.
    (f,) = _run(sidecar=_files(3, 4, 2))
    assert f.rule == "workers_vs_files" and f.severity == "warning"
    assert f.message == (
        "3 mp_prefetch workers share 2 file(s) on this host (4 files listed, 4 // 2 = 2 per "
        "host). mp_prefetch gives worker i the interleaved files [i::workers]: 1 worker(s) "
        "get no file, or (from a repeated list) only files other workers read too. A worker "
        "given no file ends the pipeline with IndexError: list index out of range (Grain "
        "0.2.18); MaxText refuses this configuration."
    )
    assert f.fix.startswith("Use at most 2 worker(s) (grain.MultiprocessingOptions(num_workers=2))")
    assert "at least 6 files (3 per host)" in f.fix
    assert _run(sidecar=_files(2, 4, 2)) == ()
    # MaxText's count: files // hosts, at least one (5 files on 2 hosts: 2 per host).
    assert _run(sidecar=_files(3, 5, 2)) != ()
    (few,) = _run(sidecar=_files(2, 1, 4))
    assert "share 1 file(s)" in few.message
    # A list this host sliced itself (no slice seen): all of it is this host's.
    assert _run(sidecar=_files(3, 3, 1)) == ()
    (own,) = _run(sidecar=_files(4, 3, None))
    assert "(3 file(s) listed)" in own.message
    # No interleave (records read by index), or no workers: nothing to check.
    assert _run(sidecar=_files(8, None, None)) == ()
    assert _run(sidecar=_files(0, 1, 1)) == ()
