"""capture --attach on real jobs that serve jax's profiler: a JAX + Grain training script of
the scenario family (whose truth sample_traces/scenarios/family/MEASUREMENTS.md measured
without the profiler), and a two-process jax.distributed pod with one slow host. The job is
not disturbed: its exit code and output are those of the same run never attached to."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

import traceinspect
from traceinspect.attach import snapshot
from traceinspect.capture.attach import wait_for_server

pytestmark = [pytest.mark.slow, pytest.mark.stack]

REPO = Path(__file__).resolve().parents[2]
FAMILY = REPO / "sample_traces" / "scenarios" / "family" / "train_family.py"
READ_FLOAT_W0 = [
    *("--record", "light", "--read", "float", "--workers", "0", "--read-threads", "0"),
    *("--steps", "1500"),
]
# The family's window opens ~60-200 steps in (2-4 s): attach after that.
WARMUP_S = 6.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


def _wait_for_server(address: str, process: subprocess.Popen[str]) -> None:
    wait_for_server(address, 60.0, running=lambda: process.poll() is None)


def _family(args: list[str], port: int | None) -> subprocess.Popen[str]:
    command = [sys.executable, str(FAMILY), *args]
    if port is not None:
        command += ["--profiler-port", str(port)]
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.mark.parametrize(
    ("args", "verdict"),
    [
        # One worker making batches of slow records: ~44 ms a step against ~10 ms of work.
        (["--record", "io", "--workers", "1", "--steps", "300"], "input-bound"),
        # Input on the main thread, and the loss read every step: the batch is made after
        # the step instead of during it.
        (
            READ_FLOAT_W0,
            "sync-bound",
        ),
    ],
    ids=["io_w1", "read_float_w0"],
)
def test_attach_to_a_training_job(tmp_path: Path, args: list[str], verdict: str) -> None:
    plain = _family(args, None)
    port = _free_port()
    served = _family(args, port)
    address = f"127.0.0.1:{port}"
    _wait_for_server(address, served)
    time.sleep(WARMUP_S)
    shot = snapshot((address,), logdir=str(tmp_path / "logs"))
    assert shot.result.trace_paths == (
        str(Path(shot.result.run_dir) / f"127.0.0.1_{port}.xplane.pb"),
    )
    assert shot.steps is not None and shot.steps >= 10
    analysis = traceinspect.analyze(traceinspect.load(shot.result.run_dir, use_cache=False))
    assert analysis.verdict == verdict, analysis.summary
    # No sidecar: the worker count is not known, and the advice says how to measure it.
    rec = next(r for r in analysis.recommendations if r.kind == "grain_worker_count")
    if verdict == "sync-bound":
        assert rec.value is None
    # The job went on undisturbed.
    out_served, _ = served.communicate(timeout=300)
    out_plain, _ = plain.communicate(timeout=300)
    assert (served.returncode, out_served) == (plain.returncode, out_plain) == (0, out_plain)
