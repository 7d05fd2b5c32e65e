"""The machine's load over the traced window: capture records it in the sidecar
(``machine_load``), and the analysis sizes the worker count for the cores other processes
left the script and says so: on a real capture beside busy loops (``while True: pass``), and
on the bundled sample's sidecar given a load.

The script is pipeline.py: one mp_prefetch worker waiting 25 ms a batch, a tiny step, so
the script itself holds little CPU and the window (20 steps) lasts about half a second.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from capture_helpers import REPO, SCRIPTS
from click.testing import CliRunner

from traceinspect import sidecar as SC
from traceinspect.analysis.explain import _machine_note
from traceinspect.analysis.workers_inputs import (
    cores_left,
    machine_busy,
    machine_load_record,
    worker_inputs,
)
from traceinspect.capture._child.facts import _machine_busy_s
from traceinspect.cli import main
from traceinspect.thresholds import OTHERS_LOAD

PIPELINE = [
    sys.executable,
    str(SCRIPTS / "pipeline.py"),
    *("--steps", "40", "--workers", "1", "--wait-ms", "25"),
]
CPUS = os.cpu_count() or 1
# Busy loops enough for twice the threshold's share of the machine: one on 2 to 3 cores.
LOOPS = max(1, math.ceil(2 * OTHERS_LOAD * CPUS))
# Each loop is one thread. Beside it the script runs at most two threads at once (its main
# thread and its worker, which mostly sleep), so on 2 cores a loop gets at least 2/3 of a
# core (the kernel's fair share among 3 runnable threads); more cores only give it more.
LOOP_CORES = 0.6


def _capture(logdir: Path) -> Path:
    command = [
        *(sys.executable, "-m", "traceinspect", "capture", "-q", "--logdir", str(logdir)),
        *("--skip-steps", "10", "--steps", "20", "--"),
        *PIPELINE,
    ]
    done = subprocess.run(
        command,
        check=False,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    (run_dir,) = (logdir / "plugins" / "profile").iterdir()
    return run_dir


def _load(run_dir: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((run_dir / SC.FILE_NAME).read_text(encoding="utf-8"))
    load = data["machine_load"]
    assert load is not None, "no machine_load: /proc unreadable?"
    assert set(load) == set(SC.MachineLoadJSON.__annotations__)
    assert load["cpu_count"] == CPUS
    assert 0.3 <= load["window_s"] < 30
    # The script is no other process: its own cores never count as others'.
    assert 0 < load["script_cpu_cores"] <= CPUS + 0.1
    assert 0 <= load["others_cpu_cores"] <= CPUS + 0.1
    return data


def _machine_busy_cores(seconds: float) -> float:
    """The cores the whole machine kept busy over the next ``seconds`` (capture's reading
    of /proc/stat)."""
    first = _machine_busy_s()
    time.sleep(seconds)
    last = _machine_busy_s()
    assert first is not None and last is not None
    return (last - first) / seconds


@contextmanager
def _busy_loops(count: int) -> Iterator[None]:
    loops = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count)]
    try:
        time.sleep(0.5)  # running flat out
        yield
    finally:
        for loop in loops:
            loop.kill()
            loop.wait()


def _analyze(run_dir: Path) -> tuple[str, dict[str, Any]]:
    runner = CliRunner()
    text = runner.invoke(main, ["analyze", "--no-cache", str(run_dir)], catch_exceptions=False)
    assert text.exit_code == 0, text.output
    as_json = runner.invoke(
        main, ["analyze", "--no-cache", "--json", str(run_dir)], catch_exceptions=False
    )
    assert as_json.exit_code == 0, as_json.output
    out: dict[str, Any] = json.loads(as_json.output)
    return text.output, out


def _machine_notes(result: dict[str, Any]) -> list[str]:
    return [n for n in result["notes"] if "busy with other processes while traced" in n]


@pytest.fixture(scope="module")
def quiet(tmp_path_factory: pytest.TempPathFactory) -> float | None:
    """Others' cores in a capture on a quiet machine; None when the machine was not quiet
    (the other tests, or other users of this machine, were running)."""
    if not Path("/proc/stat").exists():
        pytest.skip("no /proc/stat on this platform")
    if _machine_busy_cores(1.0) >= OTHERS_LOAD * CPUS / 2:
        return None
    data = _load(_capture(tmp_path_factory.mktemp("quiet")))
    others: float = data["machine_load"]["others_cpu_cores"]
    if others >= OTHERS_LOAD * CPUS and _machine_busy_cores(1.0) >= OTHERS_LOAD * CPUS / 2:
        return None  # load came meanwhile
    return others


@pytest.mark.slow
def test_a_quiet_machine_reads_quiet(quiet: float | None) -> None:
    if quiet is None:
        pytest.skip("the machine was busy before or after the capture")
    assert quiet < OTHERS_LOAD * CPUS


@pytest.mark.slow
def test_busy_loops_beside_the_script(tmp_path: Path, quiet: float | None) -> None:
    with _busy_loops(LOOPS):
        run_dir = _capture(tmp_path)
    data = _load(run_dir)
    others = data["machine_load"]["others_cpu_cores"]
    assert others >= LOOP_CORES * LOOPS
    if quiet is not None:
        # The loops, not the machine's background, made the figure.
        assert others - quiet >= LOOP_CORES * LOOPS - 0.2

    record = SC.parse(data)
    assert record is not None and record.machine_load is not None
    assert record.machine_load.others_cpu_cores == others
    cores = record.host.cores if record.host is not None else None
    assert cores is not None
    left = record.machine_load.cores_left(cores)
    # At least one core taken (others >= 0.6 cores), never below one.
    assert left is not None and 1 <= left <= min(cores, max(1, CPUS - 1))

    text, result = _analyze(run_dir)
    assert result["machine_load"]["others_cpu_cores"] == others
    assert result["machine_load"]["cores"] == cores
    assert result["machine_load"]["cores_left"] == left
    assert result["machine_load"]["busy"] is True
    (note,) = _machine_notes(result)
    assert note.startswith(f"{CPUS} cores, {others:.1f} of them busy with other processes")
    assert f"sized for the {left} core(s)" in note
    assert "busy with other processes while traced" in " ".join(text.split())


# -- the analysis, on sidecars given a load -------------------------------------------------

SAMPLE = REPO / "traceinspect" / "_samples" / "sync_bound"  # captured on a 2-core machine


def _sidecar(others: float | None, cpus_available: int = 2, cpu_count: int = 2) -> SC.Sidecar:
    data: dict[str, Any] = {
        "host": {"hostname": "vm", "cpu_count": cpu_count, "cpus_available": cpus_available}
    }
    if others is not None:
        data["machine_load"] = {
            "window_s": 1.25,
            "cpu_count": cpu_count,
            "others_cpu_cores": others,
            "script_cpu_cores": 0.9,
        }
    record = SC.parse(data)
    assert record is not None
    return record


@pytest.mark.parametrize(
    ("others", "busy", "left"),
    [
        (None, False, 2),  # an older sidecar: the host's cores
        (0.1, False, 2),
        (0.29, False, 2),  # below OTHERS_LOAD of 2 cores: as on a quiet machine
        (0.3, True, 2),  # noted, but the nearest whole core is still 2
        (0.6, True, 1),
        (1.1, True, 1),
    ],
)
def test_the_worker_count_is_sized_for_the_cores_left(
    others: float | None, busy: bool, left: int
) -> None:
    sidecar = _sidecar(others)
    assert (machine_busy(sidecar) is not None) is busy
    assert cores_left(sidecar) == left
    inputs = worker_inputs("input-bound", 10.0, 5.0, 4.0, sidecar)
    assert (inputs.cpus, inputs.host_cores, inputs.others_cpu_cores) == (left, 2, others)
    record = machine_load_record(sidecar)
    if others is None:
        assert record is None
    else:
        assert record is not None
        assert (record["cores"], record["cores_left"], record["busy"]) == (2, left, busy)
        assert record["others_cpu_cores"] == others


def test_without_a_sidecar_nothing_is_known() -> None:
    assert cores_left(None) is None and machine_busy(None) is None
    assert machine_load_record(None) is None
    assert worker_inputs("input-bound", 10.0, 5.0, 4.0, None).cpus is None


def test_the_note() -> None:
    sidecar = _sidecar(1.1)
    busy = machine_busy(sidecar)
    assert busy is not None
    assert _machine_note(busy, sidecar) == (
        "2 cores, 1.1 of them busy with other processes while traced (on average over the "
        "1.2 s window): the worker count is sized for the 1 core(s) left to the script, and "
        "may be lower than on a quiet machine, where the host's times would be shorter too; "
        "capture again on a quiet machine for the script's own figures."
    )
    # An affinity of 4 of a 64-core machine's cores: others' 20 cores run on the rest.
    wide = _sidecar(20.0, cpus_available=4, cpu_count=64)
    busy = machine_busy(wide)
    assert busy is not None
    assert "sized for 4 of the 4 core(s) the script may use" in _machine_note(busy, wide)
    # 5 of 64 cores is below OTHERS_LOAD: no note, all cores.
    assert machine_busy(_sidecar(5.0, cpus_available=64, cpu_count=64)) is None


@pytest.mark.parametrize("others", [None, 0.05, 1.1])
def test_analyze_says_so(tmp_path: Path, others: float | None) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / "vm.xplane.pb").write_bytes((SAMPLE / "vm.xplane.pb").read_bytes())
    data = json.loads((SAMPLE / SC.FILE_NAME).read_text(encoding="utf-8"))
    assert "machine_load" not in data
    if others is not None:
        data["machine_load"] = {
            "window_s": 1.25,
            "cpu_count": 2,
            "others_cpu_cores": others,
            "script_cpu_cores": 0.9,
        }
    (run / SC.FILE_NAME).write_text(json.dumps(data), encoding="utf-8")
    text, result = _analyze(run)
    noted = "busy with other processes while traced" in " ".join(text.split())
    assert noted is (others == 1.1)
    assert len(_machine_notes(result)) == (others == 1.1)
    if others is None:
        # An older sidecar: no key (the bundled traces' JSON is unchanged).
        assert "machine_load" not in result
        return
    assert result["machine_load"] == {
        "window_s": 1.25,
        "cpu_count": 2,
        "others_cpu_cores": others,
        "script_cpu_cores": 0.9,
        "cores": 2,
        "cores_left": 2 if others < 0.5 else 1,
        "busy": others == 1.1,
    }
