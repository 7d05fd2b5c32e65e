"""Each attribution rule on precisely built XSpaces (TPU and GPU layouts), exact numbers."""

from __future__ import annotations

from pathlib import Path

import pytest
import xspace as X
from click.testing import CliRunner

import traceinspect
from traceinspect import schema as S
from traceinspect.analysis.analyze import analyze
from traceinspect.cli import main
from traceinspect.errors import AnalysisError

ms = X.ms
MS = 1_000_000  # ns


def _host(xs: object, events: list[X.Ev]) -> None:
    X.add_plane(xs, "/host:CPU").line("python", 0, events)


_steps = X.step_events


def _load(tmp_path: Path, xs: object) -> traceinspect.Trace:
    return traceinspect.load(X.write(xs, tmp_path / "t.xplane.pb"))


def test_input_bound_tpu(tmp_path: Path) -> None:
    """Each 10 ms step: 6 ms fetching the batch, 0.5 ms dispatch, 3 ms of device work."""
    xs = X.space()
    host = _steps(3, 10)
    ops = []
    for i in range(3):
        t = 10 * i
        host += [
            X.Ev("PrefetchDatasetIterator.__next__", ms(t), ms(6)),
            X.Ev("PjitFunction(step)", ms(t + 6), ms(0.5)),
        ]
        ops.append(X.Ev("fusion.1", ms(t + 6.5), ms(3)))
    _host(xs, host)
    X.add_plane(xs, "/device:TPU:0").line("XLA Ops", 0, ops)
    a = analyze(_load(tmp_path, xs))
    assert a.backend == "tpu" and a.devices == ("/device:TPU:0",)
    assert a.steps.count == 3 and a.steps.median_ms == 10.0
    assert a.idle_by_cause_ms == {
        "input": 18.0,
        "sync": 0.0,
        "compile": 0.0,
        "host": 1.5,
        "runtime": 0.0,
        "unknown": 1.5,
    }
    assert a.busy_fraction == pytest.approx(0.3)
    assert a.verdict == "input-bound"
    assert a.input_ms_per_step == 6.0 and a.device_busy_ms_per_step == 3.0
    kinds = [r.kind for r in a.recommendations]
    assert kinds == ["grain_worker_count", "input_pipeline", "reduce_host_overhead"]
    # No sidecar: assumed in-process input; 6 ms/batch against 3 ms of device work with 25%
    # headroom -> ceil(6 * 1.25 / 3) = 3 workers, a batch every 2 ms, so the device paces it.
    workers = a.recommendations[0]
    assert (workers.value, workers.current, workers.bounded_by) == (3, None, None)
    assert workers.expected_step_ms == 3.0
    assert workers.reason is not None
    assert "assumed no worker processes" in workers.reason
    top = a.to_dict()["gaps"][0]
    assert top["cause"] == "input" and top["duration_ms"] == 6.5
    assert any("PrefetchDatasetIterator.__next__ (input) 6.00 ms" in e for e in top["evidence"])


_sync_trace = X.sync_loop


def test_sync_bound_gpu(tmp_path: Path) -> None:
    a = analyze(_load(tmp_path, _sync_trace(input_ms=1.0)))
    assert a.backend == "gpu"
    # Step 0 starts cold (1 ms fetch + 0.5 ms dispatch before any sync). Every later idle
    # period opens when np.asarray returns: 0.5 ms at the end of a step + 1.5 ms at the
    # start of the next, all caused by the sync (input 1 ms/step < device 8.5 ms/step).
    assert a.idle_by_cause_ms == {
        "input": 1.0,
        "sync": 4.5,
        "compile": 0.0,
        "host": 0.5,
        "runtime": 0.0,
        "unknown": 0.0,
    }
    assert a.verdict == "sync-bound"
    assert a.sync_sites == ("np.asarray(jax.Array)",)
    assert a.recommendations[0].kind == "remove_sync"
    sync_gap = next(g for g in a.to_dict()["gaps"] if g["cause"] == "sync")
    assert "np.asarray(jax.Array) blocked the host" in sync_gap["evidence"][0]


def test_sync_with_slow_input_is_input_bound(tmp_path: Path) -> None:
    """Same loop, but fetching takes 6 ms against 3 ms of device work: input-bound."""
    a = analyze(_load(tmp_path, _sync_trace(input_ms=6.0)))
    assert a.input_ms_per_step == 6.0 and a.device_busy_ms_per_step == 3.0
    # Only the 0.2 ms per step while np.asarray wakes up after the kernel ends.
    assert a.idle_by_cause_ms["sync"] == pytest.approx(0.6)
    assert a.verdict == "input-bound"


def test_compile_on_compiler_thread(tmp_path: Path) -> None:
    xs = X.space()
    host = _steps(3, 10)
    ops = [X.Ev("fusion", ms(10 * i + 1), ms(8)) for i in range(3)]
    host.append(X.Ev("PjitFunction(step)", ms(10), ms(1)))
    plane = X.add_plane(xs, "/host:CPU")
    plane.line("python", 0, host)
    # Step 1 recompiles: 9 ms of compilation replace its device work.
    plane.line("tf_PjRtCompilerThreadPool/1", 0, [X.Ev("HloPassPipeline", ms(10), ms(9))])
    X.add_plane(xs, "/device:TPU:0").line("XLA Ops", 0, [ops[0], ops[2]])
    a = analyze(_load(tmp_path, xs))
    assert a.idle_by_cause_ms["compile"] == 9.0
    assert a.verdict == "compile-bound"
    assert a.recommendations[0].kind == "avoid_recompilation"


def test_bounded_sync_that_keeps_the_device_busy_is_not_flagged(tmp_path: Path) -> None:
    """MaxText-style throttling: the host waits on step N-1 while the device runs step N."""
    xs = X.space()
    host = _steps(4, 10)
    ops = []
    for i in range(4):
        t = 10 * i
        host.append(X.Ev("np.asarray(jax.Array)", ms(t + 1), ms(8)))
        ops.append(X.Ev("fusion", ms(t), ms(10)))
    _host(xs, host)
    X.add_plane(xs, "/device:TPU:0").line("XLA Ops", 0, ops)
    a = analyze(_load(tmp_path, xs))
    assert a.idle_fraction == 0.0
    assert a.verdict == "device-bound"
    assert [r.kind for r in a.recommendations] == ["device_bound"]


def test_unexplained_idle_is_called_unknown(tmp_path: Path) -> None:
    xs = X.space()
    _host(xs, _steps(3, 10))
    X.add_plane(xs, "/device:TPU:0").line(
        "XLA Ops", 0, [X.Ev("fusion", ms(10 * i), ms(4)) for i in range(3)]
    )
    a = analyze(_load(tmp_path, xs))
    assert a.idle_by_cause_ms["unknown"] == 18.0
    assert a.verdict == "unknown"
    assert "nothing traced" in a.summary


def test_no_device_activity(tmp_path: Path) -> None:
    xs = X.space()
    _host(xs, _steps(3, 10))
    with pytest.raises(AnalysisError, match="no device activity found"):
        analyze(_load(tmp_path, xs))


def test_one_step_is_not_enough(tmp_path: Path) -> None:
    xs = X.space()
    _host(xs, _steps(1, 10))
    X.add_plane(xs, "/device:TPU:0").line("XLA Ops", 0, [X.Ev("fusion", 0, ms(4))])
    with pytest.raises(AnalysisError, match="only one complete step"):
        analyze(_load(tmp_path, xs))


def test_cli_analyze_json_and_errors(tmp_path: Path) -> None:
    path = X.write(_sync_trace(input_ms=1.0), tmp_path / "sync.xplane.pb")
    result = CliRunner().invoke(main, ["analyze", str(path), "--json"])
    assert result.exit_code == 0, result.output
    import json

    data = json.loads(result.stdout)
    assert data["verdict"] == "sync-bound"
    assert set(data["idle_by_cause_ms"]) == {
        "input",
        "sync",
        "compile",
        "host",
        "runtime",
        "unknown",
    }
    assert data["steps"]["count"] == 3 and data["steps"]["source"] == "StepTraceAnnotation 'train'"
    assert {"step", "start_ms", "duration_ms", "cause", "evidence"} <= set(data["gaps"][0])
    # Per step: wall = busy + idle, and idle split by cause.
    step1 = data["per_step"][1]
    assert step1["wall_ms"] == 10.0 and step1["busy_ms"] == 8.0 and step1["idle_ms"] == 2.0
    assert step1["idle_by_cause_ms"]["sync"] == 2.0
    text = CliRunner().invoke(main, ["analyze", str(path)])
    assert text.stdout.startswith("Verdict   sync-bound: ")
    xs = X.space()
    _host(xs, _steps(3, 10))
    bad = X.write(xs, tmp_path / "nodevice.xplane.pb")
    err = CliRunner().invoke(main, ["analyze", str(bad)])
    assert err.exit_code == 1
    assert err.stderr.strip().startswith("Error: ") and len(err.stderr.strip().splitlines()) == 1


def test_user_annotation_wins_over_captures_copy(tmp_path: Path) -> None:
    """capture writes traceinspect/step (with step_num) around the user's own steps."""
    xs = X.space()
    host = _steps(3, 10) + [
        X.Ev("traceinspect/step", ms(10 * i), ms(10), {"step_num": i, "step_index": i})
        for i in range(3)
    ]
    _host(xs, host)
    X.add_plane(xs, "/device:TPU:0").line(
        "XLA Ops", 0, [X.Ev("fusion", ms(10 * i), ms(9)) for i in range(3)]
    )
    a = analyze(_load(tmp_path, xs))
    assert a.steps.count == 3
    assert a.steps.source == "StepTraceAnnotation 'train'"
    # Both envelopes are left out of host work: the 1 ms tails are unexplained.
    assert a.idle_by_cause_ms["unknown"] == 3.0


def test_python_tracer_names_the_users_line(tmp_path: Path) -> None:
    """With Python frames around each wait, the user's own frame is named, not jax's."""
    frames = [
        X.Ev(name, ms(10 * i + 1.6) - pad, ms(8.1) + 2 * pad)
        for i in range(3)
        for name, pad in (
            ("$train.py:57 train_loop", ms(0.2)),
            ("$/venv/lib/python3.11/site-packages/jax/_src/array.py:300 __float__", ms(0.1)),
        )
    ]
    a = analyze(_load(tmp_path, _sync_trace(input_ms=1.0, extra=frames)))
    assert a.verdict == "sync-bound"
    assert a.sync_sites == ("train.py:57 train_loop",)
    assert "train.py:57 train_loop" in a.recommendations[0].message


def test_cpu_programs_run_inline_on_the_calling_thread(tmp_path: Path) -> None:
    """Tiny CPU programs show only as the execute call on the training thread."""
    xs = X.space()
    host = _steps(3, 10)
    for i in range(3):
        t = 10 * i
        host += [
            X.Ev("PrefetchDatasetIterator.__next__", ms(t), ms(7)),
            X.Ev("CommonPjRtLoadedExecutable::ExecuteHelperOnSingleDevice", ms(t + 7), ms(2)),
        ]
    _host(xs, host)
    a = analyze(_load(tmp_path, xs))
    assert a.backend == "cpu"
    assert a.device_busy_ms_per_step == 2.0
    assert a.idle_by_cause_ms["input"] == 21.0
    assert a.verdict == "input-bound"


def test_device_and_host_clocks_that_do_not_overlap(tmp_path: Path) -> None:
    xs = X.space()
    _host(xs, _steps(3, 10))
    # The device's timeline sits an hour after the host's: clocks were not aligned.
    X.add_plane(xs, "/device:TPU:0").line(
        "XLA Ops", 3_600_000_000_000, [X.Ev("fusion", ms(10 * i), ms(9)) for i in range(3)]
    )
    with pytest.raises(AnalysisError, match="do not overlap in time"):
        analyze(_load(tmp_path, xs))


def test_steps_dispatched_while_the_device_waited(tmp_path: Path) -> None:
    # A loaded capture of buffered batches (1 run in 8): the device finished the earlier
    # steps before the window, the host dispatched all 3 traced steps in 3 ms, and the
    # device started on them 2 ms after. Not a clock skew: the window holds no device work.
    xs = X.space()
    X.add_plane(xs, "/host:CPU").line("python", 30_000_000, _steps(3, 1))
    work = [X.Ev("fusion", ms(5 * i), ms(4)) for i in range(4)]
    work += [X.Ev("fusion", ms(35 + 5 * i), ms(4)) for i in range(3)]
    X.add_plane(xs, "/device:TPU:0").line("XLA Ops", 0, work)
    with pytest.raises(AnalysisError, match="dispatched all 3 traced steps before the device"):
        analyze(_load(tmp_path, xs))


def test_steps_from_the_capture_sidecar(tmp_path: Path) -> None:
    """No step annotation, no repeated program: the host step times capture recorded."""
    import json

    from traceinspect.capture import SIDECAR_NAME

    base = 1_795_000_000_000_000_000  # profile start, Unix ns
    xs = X.space()
    env = X.add_plane(xs, "Task Environment")
    env.set_stat(env.plane.stats.add(), "profile_start_time", base)
    host = [X.Ev("PrefetchDatasetIterator.__next__", ms(10 * i), ms(5)) for i in range(3)]
    _host(xs, host)
    X.add_plane(xs, "/device:TPU:0").line(
        "XLA Ops", 0, [X.Ev("fusion", ms(10 * i + 5), ms(5)) for i in range(3)]
    )
    run = tmp_path / "run"
    run.mkdir()
    X.write(xs, run / "host.xplane.pb")
    steps = [
        {
            "index": i,
            "step_num": 7 + i,
            "start_unix_ns": base + 10 * i * MS,
            "wall_ms": 10.0,
            "traced": True,
        }
        for i in range(3)
    ]
    (run / SIDECAR_NAME).write_text(json.dumps({"steps": steps}))
    a = analyze(traceinspect.load(run))
    assert a.steps.source == "steps timed by traceinspect capture"
    assert a.steps.count == 3
    assert a.per_step["step"].tolist() == [7, 8, 9]
    # The training thread is the one drawing batches: the idle halves are input.
    assert a.idle_by_cause_ms["input"] == 15.0
    assert a.verdict == "input-bound"


def test_launch_gaps_shorter_than_10us_count_as_busy(tmp_path: Path) -> None:
    """Kernels 5 us apart: device-side launch latency, not host-caused idle time."""
    xs = X.space()
    host = _steps(2, 10)
    kernels = [
        X.Ev("gemm", ms(10 * i) + k * 105_000_000, 100_000_000)  # 100 us on, 5 us off
        for i in range(2)
        for k in range(90)
    ]
    _host(xs, host)
    X.add_plane(xs, "/device:GPU:0").line("Stream #1(Compute)", 0, kernels)
    a = analyze(_load(tmp_path, xs))
    # 90 kernels cover 9.445 ms of each 10 ms step; only the tail after them is idle.
    assert a.device_busy_ms_per_step == 9.445
    assert len(a.gaps) == 2


def test_host_work_longer_than_the_device_step_is_not_the_syncs_fault(tmp_path: Path) -> None:
    """float(loss) every step, but the host then spends 7 ms building the next batch in
    plain Python (not a Grain iterator) against 2 ms of device work: removing the read
    could not hide that, so it stays host time."""
    xs = X.space()
    host = _steps(3, 10)
    kernels = []
    for i in range(3):
        t = 10 * i
        host += [
            X.Ev("$train.py:40 make_batch", ms(t), ms(7)),
            X.Ev("PjitFunction(step)", ms(t + 7), ms(0.5)),
            X.Ev("np.asarray(jax.Array)", ms(t + 7.6), ms(2.1)),
        ]
        kernels.append(X.Ev("gemm", ms(t + 7.5), ms(2)))
    _host(xs, host)
    X.add_plane(xs, "/device:GPU:0").line("Stream #7(Compute)", 0, kernels)
    a = analyze(_load(tmp_path, xs))
    assert a.verdict == "host-bound"
    # Only the read's wake-up (0.2 ms after each kernel) is sync; the 0.3 ms after each
    # read until the step ends has nothing traced.
    assert a.idle_by_cause_ms["sync"] == pytest.approx(0.6)
    assert a.idle_by_cause_ms["host"] == pytest.approx(22.5)
    assert a.idle_by_cause_ms["unknown"] == pytest.approx(0.9)


@pytest.mark.parametrize(("batch_ms", "verdict"), [(1.3, "sync-bound"), (1.6, "host-bound")])
def test_host_work_within_the_knee_tolerance_of_the_device_step_is_the_syncs(
    tmp_path: Path, batch_ms: float, verdict: str
) -> None:
    """float(loss) every step; the host then builds the next batch in plain Python. Each
    step: the batch, 0.5 ms dispatch, 2 ms of device work, the read until 0.2 ms after it,
    0.3 ms more: an idle period of batch + 1 ms, 0.2 of it the read's wake-up, so after each
    read the host works batch + 0.8 ms. At 2.1 ms (1.3 ms batches) that is within 10% of the
    device's 2 ms step, the knee's tolerance: without the read the device would keep up, so
    the idle time is the read's. At 2.4 ms (1.6 ms batches) it is 20% over: host time."""
    step = batch_ms + 3.0
    xs = X.space()
    host = _steps(4, step)
    kernels = []
    for i in range(4):
        t = step * i
        host += [
            X.Ev("$train.py:40 make_batch", ms(t), ms(batch_ms)),
            X.Ev("PjitFunction(step)", ms(t + batch_ms), ms(0.5)),
            X.Ev("np.asarray(jax.Array)", ms(t + batch_ms + 0.6), ms(2.1)),
        ]
        kernels.append(X.Ev("gemm", ms(t + batch_ms + 0.5), ms(2)))
    _host(xs, host)
    X.add_plane(xs, "/device:GPU:0").line("Stream #7(Compute)", 0, kernels)
    a = analyze(_load(tmp_path, xs))
    assert a.device_busy_ms_per_step == 2.0
    assert a.verdict == verdict, a.idle_by_cause_ms


def test_the_invariant_checker_catches_a_broken_analysis(tmp_path: Path) -> None:
    """Every analysis in the tests is checked (conftest sets TRACEINSPECT_CHECK_INVARIANTS);
    the checker itself fails on a result whose parts do not add up."""
    import dataclasses

    from traceinspect.analysis.invariants import check_invariants

    xs = X.space()
    host = _steps(3, 10)
    ops = [X.Ev("fusion.1", ms(10 * i + 6.5), ms(3)) for i in range(3)]
    host += [X.Ev("PrefetchDatasetIterator.__next__", ms(10 * i), ms(6)) for i in range(3)]
    _host(xs, host)
    X.add_plane(xs, "/device:TPU:0").line("XLA Ops", 0, ops)
    a = analyze(_load(tmp_path, xs))
    check_invariants(a)
    broken = {**a.gap_columns, "input": a.gap_columns["input"] + 1}
    with pytest.raises(AssertionError, match="gap parts != gap"):
        check_invariants(dataclasses.replace(a, gap_columns=broken))
    per_step = {**a.per_step_columns, S.IDLE_NS: a.per_step_columns[S.IDLE_NS] - 1}
    with pytest.raises(AssertionError, match="busy \\+ idle != wall"):
        check_invariants(dataclasses.replace(a, per_step_columns=per_step))


def _in_process_pipeline_run(tmp_path: Path, thread_cpu_s: float) -> traceinspect.Trace:
    """Each 20 ms step: 2 ms in next(), a 14 ms dispatch, 4 ms of device work; the batches
    made on one read thread of the training process at 19.5 ms each (its stages' time,
    capture's stage timers), whose CPU time over the window is ``thread_cpu_s``; the
    process's CPU time 30 ms a step on 2 cores."""
    import json

    from traceinspect.capture import SIDECAR_NAME

    xs = X.space()
    host = _steps(3, 20)
    ops = []
    for i in range(3):
        t = 20 * i
        host += [
            X.Ev("PrefetchDatasetIterator.__next__", ms(t), ms(2)),
            X.Ev("PjitFunction(step)", ms(t + 2), ms(14)),
        ]
        ops.append(X.Ev("fusion.1", ms(t + 16), ms(4)))
    _host(xs, host)
    X.add_plane(xs, "/device:TPU:0").line("XLA Ops", 0, ops)
    run = tmp_path / "run"
    run.mkdir()
    X.write(xs, run / "host.xplane.pb")
    stages = {
        "window_s": 0.06,
        "batches": 3,
        "worker_elements": None,
        "seconds": {"threads": {"preprocessing": 0.0585}},
        "calls": {"threads": {"preprocessing": 24}},
        "thread_cpu_s": {"threads": thread_cpu_s},
        "thread_run_delay_s": {"threads": 0.0},
        "process_cpu_s": 0.09,
    }
    sidecar = {
        "host": {"cpu_count": 2},
        "grain": {"worker_count": None, "read_threads": 1, "stages": stages},
    }
    (run / SIDECAR_NAME).write_text(json.dumps(sidecar))
    return traceinspect.load(run)


def test_an_in_process_pipeline_on_busy_read_threads_paces_the_loop(tmp_path: Path) -> None:
    """The read thread runs flat out (19.5 ms a batch, a 20 ms step) on a CPU 97% of its
    time: what the loop loses shows as a slow dispatch (host time), yet the pipeline is the
    limit. Input-bound, the worker count first, sized under the host's CPU floor."""
    a = analyze(_in_process_pipeline_run(tmp_path, thread_cpu_s=0.057))
    assert a.cause_fractions["host"] == pytest.approx(0.7)
    assert a.verdict == "input-bound"
    assert a.summary.startswith(
        "The input pipeline on the training process's read thread(s) makes a batch every "
        "19.50 ms against a 20.00 ms step, on a CPU 97% of its time"
    )
    first = a.recommendations[0]
    assert first.kind == "grain_worker_count"
    # ceil(19.5 x 1.25 / 15) = 2, where 15 ms = 30 ms of the process's CPU a step on 2
    # cores: the step the host's CPU allows; the read thread's share keeps 2 within the cores.
    assert (first.value, first.current, first.expected_step_ms) == (2, 0, 15.0)
    assert first.reason is not None
    assert "the host's CPU work per step (30.00 ms on 2 core(s))" in first.reason
    assert "reduce_host_overhead" not in [r.kind for r in a.recommendations]
    assert a.input_stages is not None and a.input_stages.host_cpu_ms_per_step == 30.0


def test_an_in_process_pipeline_that_waits_leaves_the_host_bound_verdict(tmp_path: Path) -> None:
    """The same, the read thread on a CPU 5% of its time (waiting on storage): it holds
    neither the GIL nor a core, so the dispatch's time is the host's own."""
    a = analyze(_in_process_pipeline_run(tmp_path, thread_cpu_s=0.003))
    assert a.verdict == "host-bound"
    assert a.input_stages is not None
    assert a.input_stages.threads_cpu_share == pytest.approx(0.003 / 0.0585)
