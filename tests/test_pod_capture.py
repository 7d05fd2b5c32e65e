"""A real two-host pod on this machine, captured by ``make_pod.py``: one run, one trace per host.

Two processes of ``sample_traces/pod/train_pod.py`` joined by jax.distributed (gloo CPU
collectives), each under ``traceinspect capture --run-name --host-name``; host1 sleeps 20 ms
per batch, so host0 waits for it in the gradient all-reduce. The sharding checks run on the
same pod set up wrong and right: every host batching the whole global batch, and Parquet files
read in more ``mp_prefetch`` workers than each host has files.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

import traceinspect

# A real capture analysed: run on every stack of the support matrix (noxfile.py).
pytestmark = [pytest.mark.slow, pytest.mark.stack]

MAKE_POD = Path(__file__).resolve().parents[1] / "sample_traces" / "pod" / "make_pod.py"


def _gloo_available() -> bool:
    try:
        import jax
        from jax._src.lib import _jax  # type: ignore[attr-defined]
    except ImportError:
        return False
    return (
        hasattr(jax, "distributed")
        and "jax_cpu_collectives_implementation" in jax.config.values
        and hasattr(_jax, "make_gloo_tcp_collectives")
    )


@pytest.fixture(scope="module")
def make_pod() -> ModuleType:
    if not _gloo_available():
        pytest.skip("this jax has no jax.distributed with gloo CPU collectives")
    spec = importlib.util.spec_from_file_location("make_pod", MAKE_POD)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["make_pod"] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


def test_two_host_pod_with_a_slow_host(tmp_path: Path, make_pod: ModuleType) -> None:
    pod = make_pod.Pod(hosts=2, slow_host=1, slow_ms=20.0)
    # 60 steps skipped: host0's loop runs ~33 steps ahead of its device before the CPU
    # client's in-flight limit holds it to the pod's pace, which it reached between steps
    # 36 and 43 in trial runs; traced earlier, its steps are bursts of dispatch.
    run_dir = make_pod.capture_pod(
        tmp_path, "pod", pod, skip_steps=60, steps=8, after_steps=2, timeout_s=120
    )

    assert [p.name for p in (tmp_path / "plugins" / "profile").iterdir()] == ["pod"]
    names = sorted(p.name for p in run_dir.iterdir())
    assert [n for n in names if n.endswith(".xplane.pb")] == ["host0.xplane.pb", "host1.xplane.pb"]
    assert [n for n in names if n.endswith(".json")] == [
        "host0.traceinspect.capture.json",
        "host1.traceinspect.capture.json",
    ]

    analyses = {}
    for i, host in enumerate(("host0", "host1")):
        sidecar = json.loads((run_dir / f"{host}.traceinspect.capture.json").read_text())
        assert sidecar["host_name"] == host and sidecar["run_name"] == "pod"
        assert (sidecar["process_index"], sidecar["process_count"]) == (i, 2)
        assert sidecar["step_source"] == "annotation" and sidecar["window"]["complete"]
        assert not sidecar["partial"]
        analyses[host] = traceinspect.analyze(traceinspect.load(run_dir / f"{host}.xplane.pb"))

    fast, slow = analyses["host0"], analyses["host1"]
    numbers = {
        h: (a.verdict, a.input_ms_per_step, a.collective_ms_per_step) for h, a in analyses.items()
    }
    assert slow.verdict == "input-bound", numbers
    # The slow host waits ~20 ms per step for its batch; the other waits for it in the
    # all-reduce instead of for its own input.
    assert slow.input_ms_per_step > 10, numbers
    assert slow.input_ms_per_step > 3 * fast.input_ms_per_step, numbers
    assert fast.collective_ms_per_step > 5, numbers
    assert fast.collective_ms_per_step > slow.collective_ms_per_step, numbers
    # Each host reads its own shard: their first batches differ.
    pod_result = traceinspect.analyze_run(run_dir, jobs=1)
    assert [f.rule for f in pod_result.findings] == []


def test_hosts_reading_the_same_data(tmp_path: Path, make_pod: ModuleType) -> None:
    pod = make_pod.Pod(hosts=2, shard=False)
    run_dir = make_pod.capture_pod(
        tmp_path, "same", pod, skip_steps=60, steps=8, after_steps=2, timeout_s=120
    )
    result = traceinspect.analyze_run(run_dir, jobs=1)
    (finding,) = result.findings
    assert finding.rule == "same_data_on_hosts" and finding.severity == "warning"
    assert "host0, host1 drew identical first batches" in finding.message
    assert "ShardOptions(shard_index=jax.process_index()" in finding.fix
    assert result.to_dict()["findings"][0]["rule"] == "same_data_on_hosts"


def _host_findings(run_dir: Path, pod_rules: Sequence[str] = ()) -> dict[str, list[Any]]:
    """Each host's findings: its analysis's, or for a host whose trace the analysis refused
    (a short fixed window on a loaded machine), those of its sidecar alone."""
    pod = traceinspect.analyze_run(run_dir, jobs=1)
    assert [f.rule for f in pod.findings if f.rule == "same_data_on_hosts"] == list(pod_rules)
    return {
        r.host: list(r.analysis.findings if r.analysis is not None else r.findings)
        for r in pod.results
    }


def _capture(make_pod: ModuleType, tmp_path: Path, name: str, **pod: Any) -> Path:
    run_dir: Path = make_pod.capture_pod(
        tmp_path, name, make_pod.Pod(hosts=2, **pod), skip_steps=60, steps=8, after_steps=2,
        timeout_s=120,
    )  # fmt: skip
    return run_dir


SHARDING_RULES = ("batch_vs_devices", "batch_vs_global", "workers_vs_files")


def _sharding_rules(found: list[Any]) -> list[str]:
    return [f.rule for f in found if f.rule in SHARDING_RULES]


def test_every_host_loading_the_whole_global_batch(tmp_path: Path, make_pod: ModuleType) -> None:
    """Every host reads all records, batches the whole global batch of 128 and device_puts
    it with the batch sharding: jax keeps 64 rows on each host."""
    run_dir = _capture(make_pod, tmp_path, "whole", shard=False, whole_batch_per_host=True)
    found = _host_findings(run_dir, ["same_data_on_hosts"])
    for host in ("host0", "host1"):
        assert _sharding_rules(found[host]) == ["batch_vs_global"], found
        (f,) = (f for f in found[host] if f.rule == "batch_vs_global")
        assert f.message.startswith(
            "Each host's pipeline makes the whole global batch: this host's batch has 128 "
            "rows, but of the global array of 128 rows built from it (jax.device_put, over 2 "
            "processes) only 64 are on this host's devices."
        )
        assert f.fix.startswith("Batch 64 rows per host")


@pytest.mark.parametrize(
    "api",
    ["jax.make_array_from_process_local_data", "multihost_utils.host_local_array_to_global_array"],
)
def test_per_host_batches_of_their_share_are_not_flagged(
    tmp_path: Path, make_pod: ModuleType, api: str
) -> None:
    """The pod as bundled: 64 rows per host, made global by either API."""
    run_dir = _capture(make_pod, tmp_path, "share", host_local=api.startswith("multihost"))
    sidecar = json.loads((run_dir / "host0.traceinspect.capture.json").read_text())
    assert sidecar["grain"]["batch_rows"] == 64
    assert sidecar["global_arrays"][0] == {
        "api": api,
        "local_rows": 64,
        "global_rows": 128,
        "host_rows": 64,
        "processes": 2,
    }
    found = _host_findings(run_dir)
    assert {h: _sharding_rules(f) for h, f in found.items()} == {"host0": [], "host1": []}


@pytest.mark.parametrize(("workers", "fires"), [(3, True), (2, False)])
def test_workers_against_files_per_host(
    tmp_path: Path, make_pod: ModuleType, workers: int, fires: bool
) -> None:
    """4 Parquet files, 2 per host (files[process_id::2], repeated under the interleave so
    that a surplus worker reads files again instead of ending the pipeline)."""
    run_dir = _capture(
        make_pod, tmp_path, f"files{workers}", files=4, workers=workers, repeat_files=True
    )
    grain = json.loads((run_dir / "host1.traceinspect.capture.json").read_text())["grain"]
    assert (grain["files"], grain["file_shards"], grain["worker_count"]) == (4, 2, workers)
    found = _host_findings(run_dir)
    expected = ["workers_vs_files"] if fires else []
    assert {h: _sharding_rules(f) for h, f in found.items()} == {
        "host0": expected,
        "host1": expected,
    }


def test_a_worker_without_a_file_ends_the_pipeline(tmp_path: Path, make_pod: ModuleType) -> None:
    """Not repeated, the third worker of a host with 2 files gets none: Grain stops with an
    IndexError, and capture says why."""
    with pytest.raises(make_pod.PodError, match="IndexError"):
        _capture(make_pod, tmp_path, "nofile", files=4, workers=3)
    log = (tmp_path / "logs" / "nofile" / "host0.log").read_text()
    assert (
        "traceinspect: 3 mp_prefetch workers share 2 file(s) on this host (4 listed under "
        "the InterleaveIterDataset, 4 // 2 per host): a worker given no file ends Grain's "
        "pipeline with this IndexError. Use at most 2 worker(s)"
    ) in log
    sidecar = json.loads(
        (tmp_path / "plugins/profile/nofile/host0.traceinspect.capture.json").read_text()
    )
    assert any(n.startswith("3 mp_prefetch workers share 2 file(s)") for n in sidecar["notes"])


def test_attach_to_a_two_host_pod_names_the_slow_host(tmp_path: Path, make_pod: ModuleType) -> None:
    """capture --attach to both hosts of a running pod, each serving jax's profiler: one run
    directory with both hosts' traces, and the pod analysis names the slow one."""
    from traceinspect.attach import snapshot
    from traceinspect.capture.attach import wait_for_server

    pod = make_pod.Pod(hosts=2, slow_host=1, slow_ms=20.0)
    coordinator = f"127.0.0.1:{make_pod.free_port()}"
    ports = [make_pod.free_port(), make_pod.free_port()]
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
            wait_for_server(address, 60.0, running=functools.partial(_running, proc))
        time.sleep(6.0)  # compile and warm-up before attaching
        shot = snapshot(addresses, 3.0, logdir=str(tmp_path / "logs"))
        names = sorted(Path(p).name for p in shot.result.trace_paths)
        assert names == sorted(f"127.0.0.1_{port}.xplane.pb" for port in ports)
        pod_result = traceinspect.analyze_run(shot.result.run_dir, jobs=1)
        assert pod_result.straggler is not None, pod_result.summary
        assert pod_result.straggler.host == f"127.0.0.1_{ports[1]}", pod_result.summary
        for proc in procs:
            out, _ = proc.communicate(timeout=300)
            assert proc.returncode == 0, out
    finally:
        make_pod._stop(procs)


def _running(process: subprocess.Popen[str]) -> bool:
    return process.poll() is None
