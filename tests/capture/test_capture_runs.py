"""Real tiny JAX + Grain training runs under capture: files, sidecar, step window, exit codes."""

from __future__ import annotations

import json
import os
import sys
import threading
from pathlib import Path

import pytest
from capture_helpers import (
    SCRIPTS,
    TRAIN,
    assert_clean_run_dir,
    capture,
    read_sidecar,
    trace_events,
    traced_indices,
    train,
)

from traceinspect.analysis.input_stages import threads_cpu_share
from traceinspect.analysis.window import window_check
from traceinspect.capture import ANN_HOST_READ, ANN_NEXT_BATCH, ANN_STEP, SIDECAR_NAME
from traceinspect.sidecar import parse

# A real capture analysed: run on every stack of the support matrix (noxfile.py).
pytestmark = [pytest.mark.slow, pytest.mark.stack]


def test_grain_batches_are_steps_and_the_window_is_steps_2_to_6(tmp_path: Path) -> None:
    result = train(tmp_path / "logs", "--steps", "10")

    assert result.exit_code == 0
    assert not result.partial
    run_dir = Path(result.run_dir)
    assert run_dir.parent == tmp_path / "logs" / "plugins" / "profile"
    assert len(run_dir.name) == len("YYYY_MM_DD_HH_MM_SS")
    host = result.sidecar["host"]["hostname"]
    assert [Path(p).name for p in result.trace_paths] == [f"{host}.xplane.pb"]
    assert (run_dir / SIDECAR_NAME).is_file()
    assert_clean_run_dir(result)

    sidecar = read_sidecar(result)
    assert sidecar == json.loads(json.dumps(result.sidecar))
    assert sidecar["schema_version"] == 1
    assert sidecar["command"] == [sys.executable, str(TRAIN), "--steps", "10"]
    assert sidecar["exit_code"] == 0 and sidecar["exit_signal"] is None
    assert sidecar["step_source"] == "grain"
    assert "PrefetchDatasetIterator" in sidecar["step_source_detail"]
    window = sidecar["window"]
    assert (window["first_step"], window["last_step"], window["complete"]) == (2, 6, True)
    assert traced_indices(sidecar) == [2, 3, 4, 5, 6]
    # Every step of the run is kept (the whole run's pace, before and after the window).
    assert len(sidecar["steps"]) == 10 and sidecar["steps_seen"] == 10
    assert all(s["wall_ms"] > 0 for s in sidecar["steps"][:-1])
    assert window["trace_start_unix_ns"] < window["trace_stop_unix_ns"]

    assert sidecar["host"]["cpus_available"] >= 1
    assert sidecar["host"]["memory_total_bytes"] > 0
    assert sidecar["versions"]["jax"] and sidecar["versions"]["grain"]
    assert sidecar["backend"]["platform"] == "cpu"
    assert sidecar["backend"]["devices"][0]["platform"] == "cpu"
    grain = sidecar["grain"]
    assert grain["batch_size"] == 16
    assert grain["read_threads"] == 2
    assert grain["worker_count"] is None
    assert grain["bytes_per_batch"] == 16 * (32 + 1) * 4
    assert sidecar["profiler"]["python_tracer_level"] == 0

    events = trace_events(result.trace_paths[0])
    # Exactly the intended steps are in the trace, each with one batch fetch.
    assert sorted(e["step_index"] for e in events[ANN_STEP]) == [2, 3, 4, 5, 6]
    assert len(events[ANN_NEXT_BATCH]) == 5
    assert len(events["PrefetchDatasetIterator.__next__"]) == 5


def test_step_trace_annotation_wins_and_syncs_are_marked(tmp_path: Path) -> None:
    result = train(tmp_path / "logs", "--steps", "9", "--annotate", "--sync")

    assert result.exit_code == 0 and not result.partial
    sidecar = read_sidecar(result)
    assert sidecar["step_source"] == "annotation"
    assert sidecar["step_source_detail"] == "StepTraceAnnotation 'train'"
    assert [s["step_num"] for s in sidecar["steps"]] == list(range(9))
    assert traced_indices(sidecar) == [2, 3, 4, 5, 6]

    events = trace_events(result.trace_paths[0])
    # The user's own annotation for exactly the window's steps.
    assert sorted(e["step_num"] for e in events["train"]) == [2, 3, 4, 5, 6]
    reads = events[ANN_HOST_READ]
    assert len(reads) == 5 and {r["kind"] for r in reads} == {"__float__"}
    assert len(events["np.asarray(jax.Array)"]) >= 5


def test_python_tracer_shows_the_line_of_a_sync(tmp_path: Path) -> None:
    result = train(tmp_path / "logs", "--steps", "5", "--sync", python_tracer=True, steps=2)

    assert result.exit_code == 0 and not result.partial
    assert read_sidecar(result)["profiler"]["python_tracer_level"] == 1
    names = trace_events(result.trace_paths[0])
    # The read of the loss, traced as Python frames on the main thread, inside the window.
    # (The script's own $common.py frames in a 2-step window are only Grain reader threads'
    # make_example calls, there only when the readers happen to refill their buffer then.)
    floats = [e for n, es in names.items() if n.startswith("$") and "__float__" in n for e in es]
    assert len(floats) == 2 and {e["line"] for e in floats} == {"python"}


def test_input_heavy_run_shows_long_batch_waits(tmp_path: Path) -> None:
    # Skip past the batches Grain prefetched while step 0 compiled.
    result = train(tmp_path / "logs", "--steps", "11", "--delay-ms", "3", skip_steps=7, steps=3)

    assert result.exit_code == 0 and not result.partial
    sidecar = read_sidecar(result)
    walls = [s["wall_ms"] for s in sidecar["steps"] if s["traced"]]
    # A batch is 16 examples x 3 ms; two read threads make two batches at a time.
    assert len(walls) == 3 and sum(walls) / 3 > 15
    events = trace_events(result.trace_paths[0])
    waits = [e["duration_ns"] for e in events[ANN_NEXT_BATCH]]
    assert len(waits) == 3
    assert sum(waits) / 1e6 > 0.5 * sum(walls)
    # The read threads' clocks: their map sleeps, so they ran on a CPU a small share of
    # their stages' time (where the kernel keeps schedstat, as Linux does).
    record = parse(sidecar)
    assert record is not None and record.grain is not None
    stages = record.grain.stages
    assert stages is not None and stages.process_cpu_s is not None
    if not Path(f"/proc/self/task/{threading.get_native_id()}/schedstat").exists():
        assert stages.thread_cpu_s == {}  # a kernel without schedstat: not measured
        return
    assert stages.thread_cpu_s.keys() == {"threads"}
    share = threads_cpu_share(stages)
    assert share is not None and 0 < share < 0.3, (stages.thread_cpu_s, stages.seconds)


def test_crash_mid_window_keeps_the_trace_and_the_exit_code(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    result = train(tmp_path / "logs", "--steps", "10", "--crash-at", "4")

    assert result.exit_code == 1
    assert result.partial
    assert any("raised RuntimeError inside the window" in r for r in result.partial_reasons)
    assert len(result.trace_paths) == 1
    assert_clean_run_dir(result)
    sidecar = read_sidecar(result)
    assert sidecar["window"]["complete"] is False
    assert traced_indices(sidecar) == [2, 3, 4]
    # Step 4 raised before it ended: traced, but not annotated as a step, whose end would be
    # the script's way out (the unwinding, Grain's workers shutting down).
    assert sorted(e["step_index"] for e in trace_events(result.trace_paths[0])[ANN_STEP]) == [2, 3]
    err = capfd.readouterr().err
    # The traceback is the user's: it starts in their code, not in ours.
    assert "RuntimeError: boom at step 4" in err
    # No frame of the child's package (capture/_child/*.py), nor of runpy.
    assert f"{os.sep}_child{os.sep}" not in err and "runpy" not in err


def test_sys_exit_3_mid_window(tmp_path: Path) -> None:
    result = train(tmp_path / "logs", "--steps", "10", "--exit-at", "3", "--exit-code", "3")

    assert result.exit_code == 3
    assert result.partial
    assert any("sys.exit(3)" in r for r in result.partial_reasons)
    assert traced_indices(read_sidecar(result)) == [2, 3]
    assert len(result.trace_paths) == 1


def test_script_ends_before_the_window_is_complete(tmp_path: Path) -> None:
    result = train(tmp_path / "logs", "--steps", "4")

    assert result.exit_code == 0
    assert result.partial
    assert any("ended inside the window" in r for r in result.partial_reasons)
    assert traced_indices(read_sidecar(result)) == [2, 3]
    assert len(result.trace_paths) == 1


def test_script_ends_before_the_window_opens(tmp_path: Path) -> None:
    result = train(tmp_path / "logs", "--steps", "1")

    assert result.exit_code == 0
    assert result.partial and result.trace_paths == ()
    assert any("before the window opened" in r for r in result.partial_reasons)
    assert Path(result.sidecar_path).is_file()
    assert "no trace captured" in result.summary()


def test_stop_after_ends_the_run_once_the_window_is_captured(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    result = train(tmp_path / "logs", "--steps", "200", "--sync", stop_after=True, steps=3)

    assert result.exit_code == 0 and not result.partial
    sidecar = read_sidecar(result)
    assert sidecar["stopped_by_traceinspect"] is True
    assert len(sidecar["steps"]) == 6  # steps 0-4 ran, step 5 started the stop
    out = capfd.readouterr().out
    assert "step 4 loss" in out and "step 5 loss" not in out and "final loss" not in out


def test_the_steps_after_the_window_are_timed_once_the_write_is_over(tmp_path: Path) -> None:
    """By default capture times a block of untraced steps after the window, from the first
    step after the trace's write on, and analyze compares the window with that block (not
    with the step that holds the write)."""
    # The run settles again over 3 blocks of at least 0.5 s (capture's steady rule) after
    # the write, then times its block: 3,000 steps paced by a 0.1 ms read per record (~2 ms
    # a step; the block came at step ~770). Unpaced, 2,000 steps ran 1.3 ms each on one day
    # and 0.55 ms on jax 0.12 another: 1.1 s in all, and no block was timed (both newest-jax
    # sessions of one CI run).
    result = train(tmp_path / "logs", "--steps", "3000", "--delay-ms", "0.1", "--sync")

    sidecar = parse(read_sidecar(result))
    assert sidecar is not None and sidecar.window is not None
    window = sidecar.window
    assert window.untraced_after is not None and window.untraced_complete
    first, last = window.untraced_after
    assert window.last_step is not None and first > window.last_step + 1
    stop = window.trace_stop_unix_ns
    writes = [s for s in sidecar.steps if s.index == window.last_step + 1]
    assert stop is not None and writes and writes[0].start_unix_ns is not None
    assert writes[0].start_unix_ns <= stop
    walls = [s.wall_ms for s in sidecar.steps if first <= s.index <= last]
    assert len(walls) >= 5 and all(w is not None for w in walls)

    checked, _ = window_check(sidecar)
    assert checked is not None
    assert checked["after_steps"] == len(walls)
    assert checked["after_mean_ms"] == pytest.approx(sum(walls) / len(walls), abs=1e-3)  # type: ignore[arg-type]


def test_jitted_function_calls_are_steps_without_grain(tmp_path: Path) -> None:
    result = capture(tmp_path / "logs", [sys.executable, str(SCRIPTS / "jit_only.py"), "9"])

    assert result.exit_code == 0 and not result.partial
    sidecar = read_sidecar(result)
    assert sidecar["step_source"] == "jit"
    assert "train_step" in sidecar["step_source_detail"]
    assert traced_indices(sidecar) == [2, 3, 4, 5, 6]
    assert sidecar["grain"] is None
    events = trace_events(result.trace_paths[0])
    assert sorted(e["step_index"] for e in events[ANN_STEP]) == [2, 3, 4, 5, 6]
    assert len(events["PjitFunction(train_step)"]) >= 5
    assert {r["kind"] for r in events[ANN_HOST_READ]} == {"block_until_ready"}


def test_time_window_as_the_last_resort(tmp_path: Path) -> None:
    result = capture(
        tmp_path / "logs",
        # Importing jax and compiling take 1 s (jax 0.10, Python 3.11) to 3.5 s (jax 0.12,
        # Python 3.13) here, more on a loaded machine; the loop could run 100 s and is stopped
        # once the window closes: the window falls in the loop with room on either side.
        [sys.executable, str(SCRIPTS / "jit_only.py"), "2000", "0.05"],
        step_source="time",
        delay_s=8.0,
        duration_s=0.5,
        stop_after=True,
    )

    assert result.exit_code == 0 and not result.partial
    sidecar = read_sidecar(result)
    assert sidecar["step_source"] == "time"
    assert sidecar["stopped_by_traceinspect"] is True
    assert sidecar["window"]["complete"] is True
    window = sidecar["window"]
    span_s = (window["trace_stop_unix_ns"] - window["trace_start_unix_ns"]) / 1e9
    assert 0.4 < span_s < 5  # generous: the machine may be busy
    assert len(trace_events(result.trace_paths[0])["PjitFunction(train_step)"]) >= 1


def test_mp_prefetch_with_two_workers(tmp_path: Path) -> None:
    result = train(tmp_path / "logs", "--steps", "9", "--workers", "2")

    assert result.exit_code == 0 and not result.partial
    sidecar = read_sidecar(result)
    assert sidecar["step_source"] == "grain"
    assert traced_indices(sidecar) == [2, 3, 4, 5, 6]
    grain = sidecar["grain"]
    assert (grain["worker_count"], grain["per_worker_buffer_size"]) == (2, 1)
    assert grain["workers_override"] is None
    # Off by default: jaxlib waits for each worker's profiler server holding the GIL.
    assert sidecar["profiler"]["grain_worker_profiling"] is False


def test_workers_option_overrides_the_scripts_worker_count(tmp_path: Path) -> None:
    result = capture(
        tmp_path / "logs",
        [sys.executable, str(SCRIPTS / "absl_train.py"), "--steps=8", "--workers=2"],
        workers=1,
    )

    assert result.exit_code == 0 and not result.partial
    grain = read_sidecar(result)["grain"]
    assert (grain["worker_count"], grain["workers_override"]) == (1, 1)
    assert [e["num_workers"] for e in grain["observed"] if e["kind"] == "mp_prefetch"] == [1]


def test_python_m_form_runs_the_module_as_main(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(SCRIPTS)
    facts = tmp_path / "facts.json"
    result = capture(
        tmp_path / "logs",
        [sys.executable, "-m", "train", "--steps", "8", "--facts", str(facts)],
    )

    assert result.exit_code == 0 and not result.partial
    seen = json.loads(facts.read_text())
    assert seen["name"] == "__main__"
    assert seen["argv"] == [str(TRAIN), "--steps", "8", "--facts", str(facts)]
    assert seen["path0"] == str(SCRIPTS)
    assert read_sidecar(result)["command"][1:3] == ["-m", "train"]
