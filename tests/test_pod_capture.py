"""A real two-host pod on this machine, captured by ``make_pod.py``: one run, one trace per host.

Two processes of ``sample_traces/pod/train_pod.py`` joined by jax.distributed (gloo CPU
collectives), each under ``traceinspect capture --run-name --host-name``; host1 sleeps 20 ms
per batch, so host0 waits for it in the gradient all-reduce.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest

import traceinspect

pytestmark = pytest.mark.slow

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
