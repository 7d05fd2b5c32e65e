"""A loop shaped like Grain's JAX training tutorial ("Putting it all together"), as its docs
write it: an in-memory source, a Python ``map``, ``batch``, Grain's default read threads (16),
``grain.experimental.device_put``, a jitted step. Our own code following its structure.

    python grain_tutorial_loop.py [WORKERS] [STEPS] [READ_THREADS]

With 0 workers the Python map runs on the training process's read threads, which take turns
with the GIL: the pipeline, not the loop's own code, paces the loop. ``READ_THREADS`` sets
``grain.ReadOptions(num_threads=...)`` (Grain's default, 16, when left out). Besides the
``done:`` line (ms a step over the run, its start included), a ``phases:`` line gives the
mean step of each block of 100 steps: with a Python map, workers and 16 read threads a
run's first few hundred steps can be ~3x slower than its later ones
(``sample_traces/frameworks/grain_tutorial_MEASUREMENTS.md``).
"""

from __future__ import annotations

import itertools
import sys
import time

import grain
import jax
import jax.numpy as jnp
import numpy as np
from absl import flags

N = 4096
DIM = 256


class Source:
    def __len__(self) -> int:
        return N

    def __getitem__(self, i: int) -> dict[str, np.ndarray]:
        rng = np.random.default_rng(i)
        return {"x": rng.standard_normal(DIM).astype(np.float32), "y": np.float32(i % 2)}


def transform(rec: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    # A Python map: per-record work in Python (normalise, a few ops).
    x = rec["x"]
    for _ in range(20):
        x = (x - x.mean()) / (x.std() + 1e-6)
    return {"x": x, "y": rec["y"]}


def init(key: jax.Array) -> dict[str, jax.Array]:
    k1, k2 = jax.random.split(key)
    return {
        "w1": jax.random.normal(k1, (DIM, 512)) * 0.05,
        "w2": jax.random.normal(k2, (512, 1)) * 0.05,
    }


@jax.jit
def train_step(
    params: dict[str, jax.Array], batch: dict[str, jax.Array]
) -> tuple[dict[str, jax.Array], jax.Array]:
    def loss_fn(p: dict[str, jax.Array]) -> jax.Array:
        h = jax.nn.relu(batch["x"] @ p["w1"])
        out = (h @ p["w2"])[:, 0]
        return jnp.mean((out - batch["y"]) ** 2)

    loss, grads = jax.value_and_grad(loss_fn)(params)
    params = jax.tree.map(lambda p, g: p - 0.01 * g, params, grads)
    return params, loss


PHASE = 100


def main(workers: int = 0, steps: int = 300, read_threads: int | None = None) -> None:
    mapped = grain.MapDataset.source(Source()).shuffle(seed=0).map(transform).batch(64).repeat()
    ds = (
        mapped.to_iter_dataset()
        if read_threads is None
        else mapped.to_iter_dataset(grain.ReadOptions(num_threads=read_threads))
    )
    if workers:
        ds = ds.mp_prefetch(grain.MultiprocessingOptions(num_workers=workers))
    ds = grain.experimental.device_put(ds, jax.devices()[0])
    params = init(jax.random.key(0))
    t0 = time.perf_counter()
    ends: list[float] = []
    for _, batch in zip(range(steps), ds, strict=False):
        params, loss = train_step(params, batch)
        ends.append(time.perf_counter())
    loss.block_until_ready()
    print(f"done: {(time.perf_counter() - t0) / steps * 1000:.2f} ms/step")
    # Each block's mean step (ms), from the end of the block before (the first from the start).
    marks = [t0, *ends[PHASE - 1 :: PHASE]]
    blocks = [(b - a) / PHASE * 1000 for a, b in itertools.pairwise(marks)]
    print("phases:", " ".join(f"{ms:.1f}" for ms in blocks), f"(ms a step, per {PHASE} steps)")


if __name__ == "__main__":
    flags.FLAGS.mark_as_parsed()
    args = [int(a) for a in sys.argv[1:]]
    main(*args)
