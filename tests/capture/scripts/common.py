"""A tiny JAX + Grain training loop shared by the capture test scripts."""

from __future__ import annotations

import contextlib
import functools
import os
import pathlib
import sys
import time

import grain
import jax
import jax.numpy as jnp
import numpy as np

FEATURES = 32


def make_example(index: int, delay_s: float = 0.0) -> dict[str, np.ndarray]:
    # delay_s stands for slow decoding: the input-heavy case.
    if delay_s:
        time.sleep(delay_s)
    rng = np.random.default_rng(index)
    x = rng.standard_normal(FEATURES, dtype=np.float32)
    return {"x": x, "y": np.float32(x.sum())}


def build_iterator(batch_size: int, delay_s: float, workers: int) -> grain.DatasetIterator:
    ds = (
        grain.MapDataset.range(1_000_000)
        .map(functools.partial(make_example, delay_s=delay_s))
        .batch(batch_size, drop_remainder=True)
        .to_iter_dataset(grain.ReadOptions(num_threads=2, prefetch_buffer_size=4))
    )
    if workers:
        ds = ds.mp_prefetch(grain.MultiprocessingOptions(num_workers=workers))
    return iter(ds)


@jax.jit
def train_step(w: jax.Array, batch: dict[str, jax.Array]) -> tuple[jax.Array, jax.Array]:
    def loss_fn(w: jax.Array) -> jax.Array:
        return jnp.mean((batch["x"] @ w - batch["y"]) ** 2)

    loss, grad = jax.value_and_grad(loss_fn)(w)
    return w - 0.01 * grad, loss


def train(
    *,
    steps: int = 12,
    batch_size: int = 16,
    delay_s: float = 0.0,
    workers: int = 0,
    annotate: bool = False,
    sync: bool = False,
    crash_at: int = -1,
    exit_at: int = -1,
    exit_code: int = 3,
    hang_at: int = -1,
    marker: str = "",
    os_exit: bool = False,
) -> float:
    it = build_iterator(batch_size, delay_s, workers)
    w = jnp.zeros((FEATURES,), jnp.float32)
    loss = jnp.zeros(())
    for step in range(steps):
        if step == hang_at:
            # Tells the test the loop is inside the window, then waits to be signalled.
            pathlib.Path(marker).write_text(str(step))
            time.sleep(120)
        ctx = (
            jax.profiler.StepTraceAnnotation("train", step_num=step)
            if annotate
            else contextlib.nullcontext()
        )
        with ctx:
            batch = next(it)
            w, loss = train_step(w, batch)
            if sync:
                print(f"step {step} loss {float(loss):.4f}", flush=True)
        if step == crash_at:
            raise RuntimeError(f"boom at step {step}")
        if step == exit_at:
            if os_exit:  # no finally, no atexit: as a script that must end at once
                os._exit(exit_code)
            sys.exit(exit_code)
    return float(loss)
