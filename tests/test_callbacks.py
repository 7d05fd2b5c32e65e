"""Host callbacks inside jit (analysis/callbacks.py): on real captures of the family's loop
with a 6 ms ``jax.debug.callback`` (CPU backend here, an H200), and on tiny XSpaces."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from xspace import Ev, add_plane, ms, space, step_events, write

import traceinspect
from traceinspect import names as N
from traceinspect.analysis.callbacks import Callbacks, host_callbacks
from traceinspect.analysis.steps import find_steps
from traceinspect.backends.activity import device_activity

SAMPLES = Path(__file__).resolve().parents[1] / "sample_traces"
CPU_RUN = SAMPLES / "habits" / "callback_cpu"
GPU_RUN = SAMPLES / "gpu" / "callback"
NO_CALLBACK = SAMPLES / "scenarios" / "healthy"
SLEEP_MS = 6.0  # what the callback's function waits (train_family.py --callback-ms 6)


def _callbacks(path: Path) -> tuple[Callbacks, traceinspect.Trace]:
    trace = traceinspect.load(path, use_cache=False)
    return host_callbacks(trace, find_steps(trace)), trace


def test_the_op_names_jax_gives_callbacks() -> None:
    for name in ("debug_callback.1", "debug_print.2", "pure_callback.1", "io_callback.3"):
        assert N.HOST_CALLBACK.search(name), name
    assert N.HOST_CALLBACK.search("%io_callback.3 = f32[4]{0} custom-call(f32[4]{0} %x)")
    for name in ("end: debug_callback.1", "debug_callback_fn", "PjitFunction(debug_callback)"):
        assert not N.HOST_CALLBACK.search(name), name
    assert N.HOST_TRANSFER_OP.search(
        "%recv-done.1 = (f32[], token[]) recv-done((f32[], u32[], token[]) %recv.1), "
        "channel_id=3, is_host_transfer=true"
    )
    assert not N.HOST_TRANSFER_OP.search("%recv-done.1 = f32[] recv-done(%recv.1), channel_id=3")


def test_cpu_capture_callback_inside_the_execution() -> None:
    """jax 0.10.2, CPU backend: the callback op runs inside the program, mostly on the
    training thread, while the program's other ops go on on an XLA thread."""
    cb, trace = _callbacks(CPU_RUN)
    steps = find_steps(trace)
    assert cb.layout == "cpu"
    assert cb.names == ("debug_callback.1",)
    assert cb.apis == ("jax.debug.callback",)
    assert cb.functions == ("",)  # Python tracer off: the function's name is not traced
    assert len(cb) == 103
    assert (cb.host_starts == cb.starts).all()  # no operand copy on the CPU backend
    on_main = cb.line_rows == steps.main_line_row
    assert on_main.sum() == 96  # the other 7 ran on a tf_XLAEigen thread
    # One call a step, each the 6 ms sleep plus the wait for the GIL and the arguments'
    # conversion: 7.23 ms the median call, 7.48 ms a step.
    assert cb.steps_with_callback > 0.95
    assert SLEEP_MS <= cb.call_ms <= 1.25 * SLEEP_MS
    assert cb.ms_per_step == pytest.approx(7.48, abs=0.01)
    # The step less its callback time is the loop without the callback, within 20%: 16.48 ms
    # a step measured without the profiler (sample_traces/habits/measurements.json).
    without = np.mean(steps.wall_ns) / 1e6 - cb.ms_per_step
    assert without == pytest.approx(16.48, rel=0.2)
    # The program's backward ops ran beside it: alone, the callback held the device 2.3 ms.
    assert cb.alone_ms_per_step == pytest.approx(2.31, abs=0.01)
    assert cb.alone.total < cb.host.total
    # With a callback, the CPU client ran the program on the dispatching thread: no
    # tf_XLAPjRtCpuClient line, unlike the same loop without one.
    lines = set(trace.columns.line_name())
    assert not any(n.startswith("tf_XLAPjRtCpuClient") for n in lines)
    healthy = set(traceinspect.load(NO_CALLBACK).columns.line_name())
    assert any(n.startswith("tf_XLAPjRtCpuClient") for n in healthy)


def test_gpu_capture_device_idles_while_the_host_runs_it() -> None:
    """jax 0.11.2 on an H200: the callback runs on the training thread inside the dispatch;
    the host first copies the operands (waiting for the device to reach the callback), then
    runs the function while the streams are empty."""
    cb, trace = _callbacks(GPU_RUN)
    steps = find_steps(trace)
    assert cb.layout == "gpu"
    assert cb.names == ("debug_callback.1",)
    # One a step over the whole trace: each step marker but the last (cut by the trace's end).
    markers = trace.columns.events["name"] == trace.columns.event_names.index("traceinspect/step")
    assert len(cb) == int(markers.sum()) - 1 == 143
    assert (cb.line_rows == steps.main_line_row).all()
    # The host's part: the 6 ms sleep and a little (within 10%).
    assert cb.call_ms == pytest.approx(SLEEP_MS, rel=0.1)
    # Before it, the operand copy waits for the step's device work (7.96 ms a step).
    wait_ms = np.median(cb.host_starts - cb.starts) / 1e6
    assert 7.0 < wait_ms < 8.5
    # The device did nothing else meanwhile: all of it is idle time.
    assert cb.alone.total == pytest.approx(cb.host.total, rel=0.01)
    # Per step, between the sleep and what the callback costs measured without the
    # profiler: 16.06 ms a step against 8.86 without it (sample_traces/habits/README.md).
    assert SLEEP_MS < cb.ms_per_step < 16.06 - 8.86
    assert cb.steps_with_callback > 0.95
    assert cb.to_dict()["calls"] == 143


def test_no_callback_in_a_loop_without_one() -> None:
    cb, _ = _callbacks(NO_CALLBACK)
    assert cb.layout == "none"
    assert len(cb) == 0
    assert cb.ms_per_step == 0.0
    assert cb.to_dict()["names"] == []


# --- tiny traces: exact expectations ---------------------------------------------------------
def _gpu_loop(tmp_path: Path) -> Path:
    """3 steps of 10 ms: a dispatch whose program runs 3 ms of kernels, then a callback whose
    operand copy waits for them (1.0-3.0 ms) and whose function runs 3.0-7.0 ms, then 1 ms
    of kernels after it."""
    xs = space()
    host = step_events(3, 10)
    kernels = []
    for i in range(3):
        t = 10 * i
        host += [
            Ev("PjitFunction(train_step)", ms(t + 0.5), ms(7.0)),
            Ev("debug_callback.1", ms(t + 1.0), ms(6.0)),
            Ev("MemcpyD2H", ms(t + 1.1), ms(1.9)),
        ]
        kernels += [Ev("gemm", ms(t + 0.6), ms(2.4)), Ev("add", ms(t + 7.2), ms(1.0))]
    add_plane(xs, "/host:CPU").line("python", 0, host)
    add_plane(xs, "/device:GPU:0").line("Stream #7(Compute)", 0, kernels)
    return write(xs, tmp_path / "gpu.xplane.pb")


def test_gpu_callback_host_part_starts_after_the_operand_copy(tmp_path: Path) -> None:
    trace = traceinspect.load(_gpu_loop(tmp_path), use_cache=False)
    steps = find_steps(trace)
    cb = host_callbacks(trace, steps)
    assert cb.layout == "gpu"
    assert len(cb) == 3
    np.testing.assert_array_equal(cb.host_starts - cb.starts, [2_000_000] * 3)
    np.testing.assert_array_equal(cb.per_step_ns, [4_000_000] * 3)
    np.testing.assert_array_equal(cb.alone_per_step_ns, [4_000_000] * 3)
    np.testing.assert_array_equal(cb.step_index, [0, 1, 2])
    assert cb.ms_per_step == pytest.approx(4.0)
    assert cb.call_ms == pytest.approx(4.0)
    given = host_callbacks(trace, steps, device_activity(trace))
    np.testing.assert_array_equal(given.alone_per_step_ns, cb.alone_per_step_ns)


def _cpu_loop(tmp_path: Path, frames: bool) -> Path:
    """2 steps of 10 ms: the program's ops on the training thread (0-3 ms), then its callback
    (3-8 ms) while an op runs on an XLA thread (3-5 ms). With ``frames``, the Python tracer's
    frames inside the callback: jax's wrappers, its conversion of the arguments, the user's
    function and what it calls."""
    xs = space()
    host = step_events(2, 10)
    eigen = []
    op = {"hlo_module": "jit_train_step"}
    for i in range(2):
        t = 10 * i
        host += [
            Ev("PjitFunction(train_step)", ms(t + 0.1), ms(8.5)),
            Ev("ThunkExecutor::Execute", ms(t + 0.2), ms(8.2)),
            Ev("dot.1", ms(t + 0.3), ms(2.7), {**op, "hlo_op": "dot.1"}),
            Ev("debug_callback.1", ms(t + 3.0), ms(5.0), {**op, "hlo_op": "debug_callback.1"}),
        ]
        if frames:
            host += [
                Ev("$callback.py:815 _wrapped_callback", ms(t + 3.1), ms(4.8)),
                Ev("$api.py:2035 device_put", ms(t + 3.2), ms(0.3)),
                Ev("$dispatch.py:598 _batched_device_put_impl", ms(t + 3.3), ms(0.1)),
                Ev("$debugging.py:495 _flat_callback", ms(t + 3.6), ms(4.2)),
                Ev("$train.py:12 log_metrics", ms(t + 3.7), ms(4.0)),
                Ev("$writer.py:40 write", ms(t + 3.8), ms(3.8)),
            ]
        eigen.append(Ev("dot.2", ms(t + 3.0), ms(2.0), {**op, "hlo_op": "dot.2"}))
    plane = add_plane(xs, "/host:CPU")
    plane.line("python", 0, host)
    plane.line("tf_XLAEigen/1", 0, eigen)
    return write(xs, tmp_path / "cpu.xplane.pb")


@pytest.mark.parametrize("frames", [False, True])
def test_cpu_callback_alone_is_what_no_other_op_covers(tmp_path: Path, frames: bool) -> None:
    trace = traceinspect.load(_cpu_loop(tmp_path, frames), use_cache=False)
    cb = host_callbacks(trace, find_steps(trace))
    assert cb.layout == "cpu"
    np.testing.assert_array_equal(cb.per_step_ns, [5_000_000] * 2)
    np.testing.assert_array_equal(cb.alone_per_step_ns, [3_000_000] * 2)
    assert cb.functions == (("train.py:12 log_metrics",) if frames else ("",))
    assert cb.to_dict()["functions"] == list(cb.functions)


def test_tpu_host_transfer_waits_are_device_wait(tmp_path: Path) -> None:
    xs = space()
    add_plane(xs, "/host:CPU").line("main", 0, [Ev("PjitFunction(f)", 0, ms(9))])
    add_plane(xs, "/device:TPU:0").line(
        "XLA Ops",
        0,
        [
            Ev("%fusion.1 = f32[8]{0} fusion(f32[8]{0} %p), kind=kLoop", 0, ms(2)),
            Ev(
                "%recv-done.1 = (f32[], token[]) recv-done((f32[], u32[], token[]) %recv.1),"
                " channel_id=2, is_host_transfer=true",
                ms(2),
                ms(5),
            ),
            Ev("%fusion.2 = f32[8]{0} fusion(f32[8]{0} %q), kind=kLoop", ms(7), ms(1)),
        ],
    )
    trace = traceinspect.load(write(xs, tmp_path / "tpu.xplane.pb"), use_cache=False)
    cb = host_callbacks(trace, find_steps(trace))
    assert cb.layout == "tpu"
    assert len(cb) == 0
    assert cb.device_wait.total == 5_000_000


@pytest.mark.parametrize(
    ("run", "without_ms"),
    # The loop without its callback, measured without the profiler: on the GPU 8.86 ms a step
    # (gpu/callback/truth.json), on the CPU backend 16.48 (habits/measurements.json).
    [(GPU_RUN, 8.86), (CPU_RUN, 16.48)],
    ids=["gpu", "cpu"],
)
def test_analyze_names_the_callback_and_the_step_without_it(run: Path, without_ms: float) -> None:
    analysis = traceinspect.analyze(traceinspect.load(run))
    assert analysis.verdict == "host-bound"
    assert "jax.debug.callback" in analysis.summary and "debug_callback.1" in analysis.summary
    advice = analysis.recommendations[0]
    assert advice.kind == "host_callback"
    assert advice.expected_step_ms is not None
    assert advice.expected_step_ms == pytest.approx(without_ms, rel=0.20)
    assert advice.expected_step_ms >= analysis.device_busy_ms_per_step
    assert not any(r.kind == "reduce_host_overhead" for r in analysis.recommendations)
