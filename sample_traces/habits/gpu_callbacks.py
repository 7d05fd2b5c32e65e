"""A host callback inside jit on a GPU: what it costs, what the fixes save, what it writes.

Run on one GPU (jax with CUDA), with ``OUT`` set to a folder::

    OUT=/tmp/out python sample_traces/habits/gpu_callbacks.py

1. Times a jitted step (20 4096-wide products, ~7 ms on an H200) over 60 steps, without
   the profiler: with no callback; with ``jax.debug.callback`` to a logger that sleeps 6 ms
   (unordered, jax's default, and ``ordered=True``); with a callback that hands the value to
   a queue and returns (a thread of the loop's drains it, 6 ms each); and with no callback,
   the loop logging the previous step's loss itself (``float``, then the 6 ms logger). Prints
   one JSON line of ms per step (``gpu_callbacks.json`` holds the H200's).
2. Traces 5 steps of a program with every kind of callback (``jax.debug.callback``,
   ``jax.debug.print``, ``jax.pure_callback``, ``io_callback`` ordered), with the Python
   tracer off and on, into ``OUT/all_py0.xplane.pb`` and ``OUT/all_py1.xplane.pb``.

(Run on 2026-11-27 as one inline command of the same code, in compact form.)
"""

from __future__ import annotations

import json
import os
import queue
import shutil
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import io_callback

LOGGER_S = 0.006
backlog: queue.Queue[Any] = queue.Queue()


def slow_logger(x: Any) -> None:
    time.sleep(LOGGER_S)


def drain() -> None:
    while True:
        backlog.get()
        time.sleep(LOGGER_S)


def hand_over(x: Any) -> None:
    backlog.put(np.asarray(x))


def make_step(callback: Callable[[Any], None] | None, ordered: bool = False) -> Any:
    @jax.jit
    def step(w: jax.Array, x: jax.Array) -> tuple[jax.Array, jax.Array]:
        m = x
        for _ in range(20):
            m = jnp.tanh(m @ w)
        loss = jnp.mean(m)
        if callback is not None:
            jax.debug.callback(callback, loss, ordered=ordered)
        return w + 1e-9 * loss, loss

    return step


def ms_per_step(step: Any, w: jax.Array, x: jax.Array, log: Any = None, n: int = 60) -> float:
    for _ in range(10):
        w, loss = step(w, x)
    jax.block_until_ready(w)
    start = time.perf_counter()
    previous = None
    for _ in range(n):
        w, loss = step(w, x)
        if log is not None and previous is not None:
            log(float(previous))  # the loop logs the previous step's loss: a step behind
        previous = loss
    jax.block_until_ready(w)
    return round((time.perf_counter() - start) / n * 1e3, 3)


def host_double(v: Any) -> Any:
    time.sleep(0.001)
    return np.asarray(v) * 2


def log_metrics(v: Any) -> None:
    time.sleep(0.002)


@jax.jit
def every_kind(w: jax.Array, x: jax.Array) -> tuple[jax.Array, jax.Array]:
    loss = jnp.mean(jnp.tanh(x @ w))
    jax.debug.callback(log_metrics, loss)
    jax.debug.print("l={l}", l=loss)
    shape = jax.ShapeDtypeStruct((), loss.dtype)
    y = jax.pure_callback(host_double, shape, loss)
    z = io_callback(host_double, shape, y, ordered=True)
    return w + 1e-9 * z, z


def main() -> None:
    out = os.environ["OUT"]
    threading.Thread(target=drain, daemon=True).start()
    w, x = jnp.eye(4096) * 0.5, jnp.ones((4096, 4096))
    result: dict[str, Any] = {"dev": str(jax.devices()[0]), "jax": jax.__version__}
    runs = [
        ("none", make_step(None), None),
        ("cb", make_step(slow_logger), None),
        ("cb_ordered", make_step(slow_logger, ordered=True), None),
        ("cb_queue", make_step(hand_over), None),
        ("log_outside", make_step(None), slow_logger),
        ("none2", make_step(None), None),
        ("cb2", make_step(slow_logger), None),
    ]
    for name, step, log in runs:
        result[name] = ms_per_step(step, w, x, log)
    print(json.dumps(result), flush=True)

    s, u = jnp.eye(512), jnp.ones((512, 512))
    for _ in range(3):
        s, z = every_kind(s, u)
    jax.block_until_ready(s)
    for level in (0, 1):
        options = jax.profiler.ProfileOptions()
        options.python_tracer_level = level
        logdir = tempfile.mkdtemp()
        with jax.profiler.trace(logdir, profiler_options=options):
            for _ in range(5):
                s, z = every_kind(s, u)
                float(z)
        (trace,) = Path(logdir).glob("plugins/profile/*/*.xplane.pb")
        shutil.copy(trace, Path(out) / f"all_py{level}.xplane.pb")


if __name__ == "__main__":
    main()
