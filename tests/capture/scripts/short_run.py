"""A short training run whose device step (~10 ms on 2 cores) is far slower than the host's
dispatch of it: a Grain pipeline of ready-made batches feeds a chain of matrix products.

``--truth`` times the same loop without traceinspect on one pre-built batch (the loop's
NumPy batch, made once, passed to every step): ``--steps`` steps dispatched, the device
waited for at the end (the time per completed step), 3 times; it prints
``{"step_ms": <best>, "reps_ms": [...]}``."""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import grain
import jax
import jax.numpy as jnp
import numpy as np

SIZE = 512


# Made once: the pipeline's work per batch is a lookup, so input costs the step nothing.
_BATCHES = [
    {"x": np.random.default_rng(i).standard_normal((SIZE, SIZE), dtype=np.float32) / SIZE}
    for i in range(4)
]


def make_batch(index: int) -> dict[str, np.ndarray]:
    return _BATCHES[index % len(_BATCHES)]


@jax.jit
def train_step(w: jax.Array, batch: dict[str, jax.Array]) -> tuple[jax.Array, jax.Array]:
    for _ in range(4):
        w = jnp.tanh(w @ batch["x"])
    return w, jnp.mean(w)


def truth(steps: int) -> list[float]:
    w = jnp.eye(SIZE, dtype=jnp.float32)
    # The batch as the loop gets it (NumPy arrays, put on the device by each call), built once.
    batch = make_batch(0)
    w, loss = train_step(w, batch)
    loss.block_until_ready()
    reps = []
    for _ in range(3):
        began = time.perf_counter()
        for _ in range(steps):
            w, loss = train_step(w, batch)
        loss.block_until_ready()
        reps.append((time.perf_counter() - began) / steps * 1000)
    return reps


def _since_process_start() -> float:
    """Seconds since this process started (/proc: its start time in clock ticks since boot)."""
    stat = Path("/proc/self/stat").read_text(encoding="ascii")
    ticks = int(stat.rsplit(")", 1)[1].split()[19])
    uptime = float(Path("/proc/uptime").read_text(encoding="ascii").split()[0])
    return uptime - ticks / os.sysconf("SC_CLK_TCK")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--crash-at", type=int, default=-1)
    parser.add_argument("--truth", action="store_true")
    parser.add_argument(
        "--start-delay", type=float, default=0.0, help="seconds of set-up before the loop"
    )
    parser.add_argument(
        "--start-at",
        type=float,
        default=0.0,
        help="begin the loop this many seconds after the process started (Linux)",
    )
    args = parser.parse_args()
    if args.truth:
        reps = truth(args.steps)
        print(json.dumps({"step_ms": min(reps), "reps_ms": reps}))
        return
    from absl import flags

    flags.FLAGS.mark_as_parsed()
    time.sleep(args.start_delay)  # a long set-up: loading, sharding, compiling elsewhere
    if args.start_at:
        time.sleep(max(0.0, args.start_at - _since_process_start()))
    batches = iter(grain.MapDataset.range(10_000).map(make_batch).to_iter_dataset())
    w = jnp.eye(SIZE, dtype=jnp.float32)
    loss = jnp.zeros(())
    began = 0.0
    for step in range(args.steps):
        if step == args.crash_at:
            raise RuntimeError(f"crashed at step {step}")
        if step == 2:
            w.block_until_ready()
            began = time.perf_counter()
        w, loss = train_step(w, next(batches))
    print(f"final loss {float(loss):.4f}")
    # The loop's own time per completed step after compilation (steps 2 to the end).
    print(json.dumps({"loop_step_ms": (time.perf_counter() - began) / (args.steps - 2) * 1000}))


if __name__ == "__main__":
    main()
