"""The pipeline checks (analysis/findings.py) on real small scripts: ``traceinspect capture``
(real JAX on CPU, real Grain with mp_prefetch worker processes), then ``analyze``. Each check
fires on a script that has the problem and stays silent on one that does not.

The script is tests/capture/scripts/pipeline.py. Windows are fixed (``--skip-steps``): the
steady-state rule needs more steps than a test can afford on a loaded 2-core machine. The
scripts are confined as a job would be: to one core (CPU affinity, as ``taskset``), or in a
memory cgroup with a limit (as a container), which needs root and a cgroup file system the
test can write (else the test skips).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

import traceinspect
from traceinspect import sidecar as SC
from traceinspect.analysis.result import Finding

# A real capture analysed: run on every stack of the support matrix (noxfile.py).
pytestmark = [pytest.mark.slow, pytest.mark.stack]

REPO = Path(__file__).resolve().parents[1]
PIPELINE = REPO / "tests" / "capture" / "scripts" / "pipeline.py"


def _capture(
    logdir: Path,
    script_args: Sequence[str],
    *,
    skip_steps: int,
    steps: int,
    preexec_fn: Callable[[], None] | None = None,
    env: dict[str, str] | None = None,
) -> Path:
    """Capture pipeline.py as a user would (``traceinspect capture``, its own process, which
    ``preexec_fn`` may confine), and return the run directory."""
    command = [
        sys.executable,
        "-m",
        "traceinspect",
        "capture",
        "-q",
        "--logdir",
        str(logdir),
        "--skip-steps",
        str(skip_steps),
        "--steps",
        str(steps),
        "--",
        sys.executable,
        str(PIPELINE),
        *script_args,
    ]
    done = subprocess.run(
        command,
        check=False,
        env={**os.environ, **(env or {}), "PYTHONPATH": str(REPO)},
        preexec_fn=preexec_fn,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    (run_dir,) = (logdir / "plugins" / "profile").iterdir()
    return run_dir


def _analyze(run_dir: Path) -> tuple[list[Finding], dict[str, Any]]:
    analysis = traceinspect.analyze(traceinspect.load(run_dir))
    text = (run_dir / SC.FILE_NAME).read_text(encoding="utf-8")
    sidecar: dict[str, Any] = json.loads(text)
    return list(analysis.findings), sidecar


def _by_rule(findings: list[Finding], rule: str) -> list[Finding]:
    return [f for f in findings if f.rule == rule]


# -- batch_vs_devices ------------------------------------------------------------------------


@pytest.mark.parametrize(("records", "fires"), [(6, True), (8, False)])
def test_a_batch_against_the_hosts_devices(tmp_path: Path, records: int, fires: bool) -> None:
    # XLA's CPU client made to show 4 devices, as a host with 4 accelerators: a batch of 6
    # records does not divide over them, one of 8 does. The worker waits 5 ms a batch, so the
    # input paces the loop: unpaced, the host once dispatched all 10 traced steps before the
    # device started on them (jax queues steps ahead on the CPU backend), and the trace
    # could not be analysed (1 run in 3 of the whole suite, here).
    run_dir = _capture(
        tmp_path,
        ["--steps", "30", "--workers", "1", "--records", str(records), "--wait-ms", "5"],
        skip_steps=10,
        steps=10,
        env={"XLA_FLAGS": "--xla_force_host_platform_device_count=4"},
    )
    findings, sidecar = _analyze(run_dir)

    record = SC.parse(sidecar)
    assert record is not None and record.grain is not None
    assert record.local_devices == 4
    assert record.grain.batch_size == records
    found = _by_rule(findings, "batch_vs_devices")
    if not fires:
        assert found == []
        return
    (f,) = found
    assert f.severity == "warning"
    assert f.message.startswith("This host's batch of 6 does not divide over its 4 devices")
    assert f.fix.startswith("Use a per-host batch that is a multiple of 4")


# -- workers_vs_cores ------------------------------------------------------------------------


def _one_core() -> Callable[[], None]:
    """A preexec_fn that confines the capture (and so the script and its workers) to one
    core, as ``taskset -c N`` would."""
    if not hasattr(os, "sched_setaffinity"):
        pytest.skip("no os.sched_setaffinity on this platform")
    core = min(os.sched_getaffinity(0))
    return lambda: os.sched_setaffinity(0, {core})


def test_cpu_bound_workers_beyond_the_usable_cores(tmp_path: Path) -> None:
    # 2 workers, each batch 40 ms of CPU, on the one core the process may use; the device's
    # step is tiny, so the workers produce all the time (the first 16 steps drain the
    # batches made while step 0 compiled).
    run_dir = _capture(
        tmp_path,
        ["--steps", "44", "--workers", "2", "--cpu-ms", "40"],
        skip_steps=16,
        steps=24,
        preexec_fn=_one_core(),
    )
    findings, sidecar = _analyze(run_dir)

    assert sidecar["host"]["cpus_available"] == 1
    workers = sidecar["grain"]["workers_measured"]["workers"]
    assert len(workers) == 2 and all(w["cpu_wait_s"] is not None for w in workers)
    (f,) = _by_rule(findings, "workers_vs_cores")
    assert f.severity == "warning", f
    assert f.message.startswith("2 CPU-bound workers on 1 usable core"), f
    if (os.cpu_count() or 1) > 1:
        assert f"allows 1 of this machine's {os.cpu_count()}: taskset" in f.message, f
    # They queue for the core: each computes most of the time it does not wait for it.
    assert "waited for one" in f.message, f
    assert "so they queue for one another and slow the training process" in f.message, f
    assert f.fix.startswith("Use at most 1 worker: more only queue for the same core."), f


def test_io_bound_workers_that_keep_up_on_one_core_are_silent(tmp_path: Path) -> None:
    # The same pipeline on the same one core, but its 2 workers wait 20 ms for each batch
    # (a read) instead of computing it, and keep up with a ~15 ms device step. The host
    # runs ahead of the device until the CPU client's queue of dispatches is full: the
    # window starts after 40 steps.
    run_dir = _capture(
        tmp_path,
        ["--steps", "70", "--workers", "2", "--wait-ms", "20", "--device-ms", "15"],
        skip_steps=40,
        steps=24,
        preexec_fn=_one_core(),
    )
    findings, sidecar = _analyze(run_dir)

    assert sidecar["host"]["cpus_available"] == 1
    assert sidecar["grain"]["workers_measured"] is not None
    assert _by_rule(findings, "workers_vs_cores") == [], findings


# -- buffer_memory ---------------------------------------------------------------------------

GIB = 1 << 30
CONTAINER_LIMIT = 2 * GIB


class _MemoryCgroup:
    """A memory cgroup of our own, as a container's: a limit, and a preexec_fn that puts a
    process (and so everything it starts) into it."""

    def __init__(self, path: Path, version: int) -> None:
        self.path, self.version = path, version

    @property
    def limit_file(self) -> Path:
        return self.path / ("memory.max" if self.version == 2 else "memory.limit_in_bytes")

    def peak_bytes(self) -> int | None:
        name = "memory.peak" if self.version == 2 else "memory.max_usage_in_bytes"
        with contextlib.suppress(OSError, ValueError):
            return int((self.path / name).read_text())
        return None

    def enter(self) -> None:
        (self.path / "cgroup.procs").write_text(str(os.getpid()))

    def remove(self) -> None:
        """Remove it once the processes we put there have ended (Grain's workers may outlive
        the capture by a moment); any still there after 10 s are ours: end them."""
        deadline = time.monotonic() + 10
        while True:
            try:
                self.path.rmdir()
                return
            except FileNotFoundError:
                return
            except OSError:
                if time.monotonic() > deadline:
                    for pid in (self.path / "cgroup.procs").read_text().split():
                        with contextlib.suppress(ProcessLookupError):
                            os.kill(int(pid), signal.SIGKILL)
                    deadline = time.monotonic() + 10
                time.sleep(0.1)


def _new_memory_cgroup(name: str) -> _MemoryCgroup:
    """A child cgroup under the v1 memory hierarchy, or the v2 root where it delegates the
    memory controller; pytest.skip (with the reason) where neither can be made."""
    v1 = Path("/sys/fs/cgroup/memory")
    v2 = Path("/sys/fs/cgroup")
    if (v1 / "memory.limit_in_bytes").is_file():
        parent, version = v1, 1
    elif "memory" in _read(v2 / "cgroup.subtree_control").split():
        parent, version = v2, 2
    else:
        pytest.skip("no cgroup memory controller to make a limited cgroup under")
    if os.geteuid() != 0:
        pytest.skip("making a memory cgroup needs root")
    try:
        (parent / name).mkdir()
    except OSError as exc:
        pytest.skip(f"cannot make a memory cgroup under {parent}: {exc}")
    return _MemoryCgroup(parent / name, version)


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


@pytest.fixture
def container() -> Iterator[_MemoryCgroup]:
    """A memory cgroup limited to CONTAINER_LIMIT, removed afterwards."""
    cgroup = _new_memory_cgroup(f"traceinspect-test-{os.getpid()}")
    try:
        try:
            cgroup.limit_file.write_text(str(CONTAINER_LIMIT))
        except OSError as exc:
            pytest.skip(f"cannot limit the memory of {cgroup.path}: {exc}")
        yield cgroup
    finally:
        cgroup.remove()


def _assert_limit_recorded(sidecar: dict[str, Any], cgroup: _MemoryCgroup) -> None:
    host = sidecar["host"]
    assert host["memory_limit_bytes"] == CONTAINER_LIMIT
    assert host["memory_limit_source"] == f"cgroup v{cgroup.version} {cgroup.limit_file}"
    # Read when the script started: nearly all of the limit was left.
    assert 0.9 * CONTAINER_LIMIT < host["memory_available_bytes"] <= CONTAINER_LIMIT


def test_buffers_above_half_of_the_containers_memory(
    tmp_path: Path, container: _MemoryCgroup
) -> None:
    # 2 workers x 8 batches of 40 MB buffered (640 MB) plus the workers' own memory (~340 MB
    # each: Python, jax, a batch or two in flight): above half of the 2 GiB the container may
    # use, though the run fits in it (it peaked at ~1.5 GiB). The first 24 steps drain the
    # 16 batches buffered while step 0 compiled (traced, the host runs ahead of the device).
    # Each step is 3 ms of device work, so the device still works through the window: with
    # none, the host once dispatched all 10 traced steps in 3 ms of buffered batches while
    # the device waited, and the trace could not be analysed (1 run in 8 on a loaded
    # machine).
    run_dir = _capture(
        tmp_path,
        [
            "--steps",
            "36",
            "--workers",
            "2",
            "--buffer",
            "8",
            "--batch-mb",
            "40",
            "--device-ms",
            "3",
        ],
        skip_steps=24,
        steps=10,
        preexec_fn=container.enter,
    )
    findings, sidecar = _analyze(run_dir)

    (f,) = _by_rule(findings, "buffer_memory")
    assert f.severity == "warning"
    assert f.message.startswith(
        "Worker buffers hold 2 workers x 8 batches x 38 MiB = 610 MiB + 2 x "
    )
    assert "of memory available at capture (of the 2.0 GiB your container may use)" in f.message
    assert f.fix.startswith("Set MultiprocessingOptions(per_worker_buffer_size=1)")
    _assert_limit_recorded(sidecar, container)
    peak = container.peak_bytes()
    assert peak is None or peak < CONTAINER_LIMIT


def test_small_buffers_in_the_same_container_are_silent(
    tmp_path: Path, container: _MemoryCgroup
) -> None:
    # The same pipeline buffering one batch per worker: 80 MB plus the workers' memory
    # (~350 MB each), 37-40% of what the limit left.
    run_dir = _capture(
        tmp_path,
        ["--steps", "24", "--workers", "2", "--buffer", "1", "--batch-mb", "40"],
        skip_steps=8,
        steps=12,
        preexec_fn=container.enter,
    )
    findings, sidecar = _analyze(run_dir)

    assert _by_rule(findings, "buffer_memory") == [], findings
    _assert_limit_recorded(sidecar, container)
    assert sidecar["grain"]["per_worker_buffer_size"] == 1
    assert sidecar["grain"]["workers_measured"] is not None
