"""capture --attach on real jobs that serve jax's profiler: a JAX + Grain training script of
the scenario family (whose truth sample_traces/scenarios/family/MEASUREMENTS.md measured
without the profiler), and a two-process jax.distributed pod with one slow host. The job is
not disturbed: its exit code and output are those of the same run never attached to."""

from __future__ import annotations

import importlib.util
import socket
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType

import pytest

import traceinspect
from traceinspect.attach import snapshot
from traceinspect.capture.attach import check_reachable

pytestmark = [pytest.mark.slow, pytest.mark.stack]

REPO = Path(__file__).resolve().parents[2]
FAMILY = REPO / "sample_traces" / "scenarios" / "family" / "train_family.py"
MAKE_POD = REPO / "sample_traces" / "pod" / "make_pod.py"
READ_FLOAT_W0 = [
    *("--record", "light", "--read", "float", "--workers", "0", "--read-threads", "0"),
    *("--steps", "500"),
]
# The family's window opens ~60-200 steps in (2-4 s): attach after that.
WARMUP_S = 6.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


def _wait_for_server(address: str, process: subprocess.Popen[str], timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert process.poll() is None, process.communicate()
        try:
            check_reachable(address, timeout_s=1.0)
            return
        except traceinspect.CaptureError:
            time.sleep(0.2)
    raise AssertionError(f"{address}: the job's profiler server never came up")


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


def _make_pod() -> ModuleType:
    spec = importlib.util.spec_from_file_location("make_pod", MAKE_POD)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["make_pod"] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


def test_attach_to_a_two_host_pod_names_the_slow_host(tmp_path: Path) -> None:
    pytest.importorskip("jax")
    make_pod = _make_pod()
    pod = make_pod.Pod(hosts=2, slow_host=1, slow_ms=20.0)
    coordinator = f"127.0.0.1:{make_pod.free_port()}"
    ports = [_free_port(), _free_port()]
    procs = [
        subprocess.Popen(
            [sys.executable, *pod.train_args(i, coordinator, 600), f"--profiler-port={ports[i]}"],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        for i in range(2)
    ]
    try:
        addresses = tuple(f"127.0.0.1:{p}" for p in ports)
        for address, proc in zip(addresses, procs, strict=True):
            _wait_for_server(address, proc)
        time.sleep(WARMUP_S)
        shot = snapshot(addresses, 3.0, logdir=str(tmp_path / "logs"))
        names = sorted(Path(p).name for p in shot.result.trace_paths)
        assert names == [f"127.0.0.1_{ports[0]}.xplane.pb", f"127.0.0.1_{ports[1]}.xplane.pb"]
        pod_result = traceinspect.analyze_run(shot.result.run_dir, jobs=1)
        assert pod_result.straggler is not None, pod_result.summary
        assert pod_result.straggler.host == f"127.0.0.1_{ports[1]}", pod_result.summary
        for proc in procs:
            out, _ = proc.communicate(timeout=300)
            assert proc.returncode == 0, out
    finally:
        make_pod._stop(procs)
