"""capture's stack sampler of the training thread, and the site of a host read."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from traceinspect import sidecar as SC
from traceinspect.capture._child.jax_patches import caller_site
from traceinspect.capture._child.sampler import StackSampler
from traceinspect.intervals import Intervals


def save_checkpoint(stop: threading.Event, tracing: threading.Event) -> None:
    tracing.set()
    while not stop.is_set():
        time.sleep(0.001)  # the slow storage


def _sample_a_thread(
    seconds: float,
    target: Callable[[threading.Event, threading.Event], None] = save_checkpoint,
    interval_s: float = 0.002,
) -> tuple[StackSampler, Any]:
    stop, tracing = threading.Event(), threading.Event()
    worker = threading.Thread(target=target, args=(stop, tracing))
    worker.start()
    tracing.wait(5)
    assert worker.ident is not None
    sampler = StackSampler(worker.ident, tracing.is_set, interval_s=interval_s)
    sampler.start()
    time.sleep(seconds)
    tracing.clear()
    time.sleep(0.06)  # the sampler sees the trace end
    sampler.stop()
    stop.set()
    worker.join()
    return sampler, sampler.report()


def test_the_sampler_names_the_users_function_and_line() -> None:
    _, report = _sample_a_thread(0.3)
    assert report is not None
    # ~150 looks at 2 ms; a loaded machine takes fewer.
    assert len(report["t_unix_ns"]) >= 20
    assert len(report["t_unix_ns"]) == len(report["site"])
    sites = {report["sites"][i] for i in report["site"]}
    line = save_checkpoint.__code__.co_firstlineno + 3
    assert sites == {f"test_sampler.py:{line} save_checkpoint"}
    assert report["interval_ms"] == 2.0
    times = np.array(report["t_unix_ns"])
    assert (np.diff(times) > 0).all()


def burn(stop: threading.Event, tracing: threading.Event) -> None:
    tracing.set()
    while not stop.is_set():
        sum(range(1000))  # the loop's own CPU work


def test_each_look_reads_the_thread_s_cpu_clock() -> None:
    # A sleeping thread's clock hardly moves between looks; a busy one's moves with the wall
    # clock (less what other threads took of the cores: at least a tenth here).
    _, sleeping = _sample_a_thread(0.2)
    assert sleeping is not None and "cpu_ns" in sleeping
    cpu = np.array(sleeping["cpu_ns"])
    wall = np.array(sleeping["t_unix_ns"])
    assert len(cpu) == len(wall) and (np.diff(cpu) >= 0).all()
    assert (cpu[-1] - cpu[0]) < 0.5 * (wall[-1] - wall[0])
    _, busy = _sample_a_thread(0.3, burn, interval_s=0.005)
    assert busy is not None
    cpu, wall = np.array(busy["cpu_ns"]), np.array(busy["t_unix_ns"])
    assert (cpu[-1] - cpu[0]) > 0.1 * (wall[-1] - wall[0])
    read = SC.parse({"schema_version": 1, "stack_samples": json.loads(json.dumps(busy))})
    assert read is not None and read.stack_samples is not None
    assert read.stack_samples.cpu_ns == tuple(busy["cpu_ns"])


def test_the_sampler_is_idle_while_the_trace_is_off() -> None:
    tracing = threading.Event()
    sampler = StackSampler(threading.get_ident(), tracing.is_set, interval_s=0.001)
    sampler.start()
    time.sleep(0.1)
    sampler.stop()
    assert sampler.report() is None


def test_the_samples_read_back_from_the_sidecar() -> None:
    _, report = _sample_a_thread(0.1)
    assert report is not None
    read = SC.parse({"schema_version": 1, "stack_samples": json.loads(json.dumps(report))})
    assert read is not None and read.stack_samples is not None
    assert read.stack_samples.t_unix_ns == tuple(report["t_unix_ns"])
    assert read.stack_samples.sites == tuple(report["sites"])


def test_damaged_samples_read_as_absent() -> None:
    good = {"interval_ms": 5.0, "t_unix_ns": [1, 2], "site": [0, 0], "sites": ["a.py:1 f"]}
    for damage in (
        {"site": [0, 1]},  # an index past the table
        {"t_unix_ns": [1]},  # lists of unequal length
        {"t_unix_ns": [1.5, 2]},  # not an integer time
        {"interval_ms": float("nan")},
        {"sites": [3]},
    ):
        read = SC.parse({"schema_version": 1, "stack_samples": {**good, **damage}})
        assert read is not None and read.stack_samples is None, damage
    read = SC.parse({"schema_version": 1, "stack_samples": good})
    assert read is not None and read.stack_samples is not None
    assert read.stack_samples.cpu_ns is None
    # A damaged CPU clock is left out alone: the stack stays.
    for cpu in ([5], [5, -1], [5, 2.5], "x"):
        read = SC.parse({"schema_version": 1, "stack_samples": {**good, "cpu_ns": cpu}})
        assert read is not None and read.stack_samples is not None, cpu
        assert read.stack_samples.cpu_ns is None, cpu


def _read_loss() -> str:
    return caller_site()  # as the read wrapper calls it: its caller is the user


def test_a_reads_site_is_the_callers_line() -> None:
    # The frame that called the wrapper (_read_loss stands for it): this test.
    site = _read_loss()
    line = test_a_reads_site_is_the_callers_line.__code__.co_firstlineno + 2
    assert site == f"test_sampler.py:{line} test_a_reads_site_is_the_callers_line"


def test_samples_inside_spans_by_site() -> None:
    from traceinspect.analysis.training_thread import SampledStack

    samples = SampledStack(
        np.array([5, 15, 25, 35, 45], dtype=np.int64),
        np.array([0, 1, 1, 2, 1]),
        ("a.py:1 f", "b.py:2 g", ""),
    )
    spans = Intervals.union_of(np.array([10, 30]), np.array([26, 50]))
    # 15, 25 and 45 are b.py; 35 is outside the user's frames.
    assert samples.sites_in(spans) == [("b.py:2 g", 3)]


def test_capture_s_own_looks_are_neither_named_nor_the_loop_s_time() -> None:
    from traceinspect.analysis.training_thread import LoopCode, SampledStack

    # 4 looks in 40 ns of the loop's own code: one in capture's step detection.
    ours = "a.py:1 f (in traceinspect capture window _on_step)"
    samples = SampledStack(
        np.array([5, 15, 25, 35], dtype=np.int64),
        np.array([0, 1, 0, 0]),
        ("a.py:3 f (in numpy save)", ours),
    )
    spans = Intervals.union_of(np.array([0]), np.array([40]))
    assert samples.sites_in(spans) == [("a.py:3 f (in numpy save)", 3)]
    assert samples.capture_share(spans) == 0.25
    code = LoopCode(spans, np.array([], dtype=np.int64), [], samples)
    described = code.described(0, 40)
    assert described is not None
    assert described[0] == 30 and described[2] == [("a.py:3 f (in numpy save)", 3)]
    # Every look capture's: none of it the loop's.
    only_ours = SampledStack(np.array([5, 15], dtype=np.int64), np.array([0, 0]), (ours,))
    assert LoopCode(spans, np.array([], dtype=np.int64), [], only_ours).described(0, 40) is None


def _in_file(path: str, source: str) -> dict[str, Any]:
    """The functions of ``source`` as if defined in ``path`` (a library's, capture's)."""
    scope: dict[str, Any] = {"sys": __import__("sys")}
    exec(compile(source, path, "exec"), scope)
    return scope


def test_a_look_in_capture_s_bookkeeping_is_named_capture_s() -> None:
    from traceinspect.capture._child import sampler as S

    library = _in_file(S._STDLIB + "fakelib.py", "def wait():\n    return sys._getframe()\n")
    ours = _in_file(
        S._HERE + "window.py",
        "def on_step(wait):\n    return wait()\n\ndef __next__(wait):\n    return wait()\n",
    )
    # Step detection waiting on a lock: capture's time, though the user's next() is below.
    bookkeeping = S._site(ours["on_step"](library["wait"]))
    assert re.fullmatch(
        r"test_sampler\.py:\d+ test_a_look_in_capture_s_bookkeeping_is_named_capture_s "
        r"\(in traceinspect capture window on_step\)",
        bookkeeping,
    ), bookkeeping
    # A wrapper that calls through to what the script called (Grain's next()): the script's.
    through = S._site(ours["__next__"](library["wait"]))
    assert through.endswith(" (in fakelib wait)"), through
    # capture's own frame innermost: its own bytecode.
    own = S._site(ours["on_step"](sys_getframe))
    assert own.endswith("(in traceinspect capture window on_step)"), own


def sys_getframe() -> Any:
    import sys

    return sys._getframe(1)


def first_waiter(stop: threading.Event, tracing: threading.Event) -> None:
    tracing.set()
    while not stop.is_set():
        stop.wait(0.003)  # the wait in next()
        second_waiter(stop)


def second_waiter(stop: threading.Event) -> None:
    stop.wait(0.003)  # the wait in a checkpoint's save


def test_one_library_line_reached_from_two_places_is_named_by_each() -> None:
    # threading.Event.wait's one line, reached from two lines of the loop: each look is
    # named by its own caller (keyed by the innermost frame, the first seen named both).
    _, report = _sample_a_thread(0.4, first_waiter, interval_s=0.002)
    assert report is not None
    sites = {report["sites"][i] for i in report["site"]}
    first = first_waiter.__code__.co_firstlineno + 3
    second = second_waiter.__code__.co_firstlineno + 1
    assert f"test_sampler.py:{first} first_waiter (in threading wait)" in sites, sites
    assert f"test_sampler.py:{second} second_waiter (in threading wait)" in sites, sites


_STARTS_THREADS_WHILE_SAMPLED = """
import gc, sys, threading, time
from traceinspect.capture._child.sampler import StackSampler

def waits(phase, info):
    # A collection on the sampler's thread gives the GIL away, as jax's callback freeing
    # Grain's shared memory does when it waits for multiprocessing's resource tracker.
    if phase == "start" and threading.current_thread().name == "traceinspect-sampler":
        time.sleep(0.01)

gc.callbacks.append(waits)
gc.set_threshold(1)  # a collection on (almost) every allocation
sampler = StackSampler(threading.get_ident(), lambda: True, interval_s=0.0)
sampler.start()
deadline = time.monotonic() + float(sys.argv[1])
while time.monotonic() < deadline:  # Grain's prefetch starting a new iterator's threads
    started = threading.Thread(target=lambda: [[] for _ in range(20)])
    started.start()
    started.join()
sampler.stop()
print(len(sampler.t_ns))
"""


def test_sampling_never_hangs_a_script_that_starts_threads() -> None:
    """CPython before 3.12 may collect garbage inside ``sys._current_frames()`` while it
    holds the lock a new thread's state needs (gh-106883): a collection that gives the GIL
    away there hangs the process once another thread starts one. Written plainly, this
    script hangs on Python 3.11.7 within a second; the sampler pauses the collector around
    its look. (3.12 and later collect only between bytecodes: no hang to provoke.)"""
    done = subprocess.run(
        [sys.executable, "-c", _STARTS_THREADS_WHILE_SAMPLED, "3"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert int(done.stdout) >= 10  # it looked, again and again, as threads started
