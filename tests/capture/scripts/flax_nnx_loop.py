"""A Flax NNX training loop on a Grain pipeline, its input cost, workers and loss read by flags.

What a Flax user writes from the NNX guides: an ``nnx.Module`` MLP (~10 ms of XLA work a
step on a 2-core CPU backend), ``nnx.Optimizer`` over optax's Adam, an ``@nnx.jit`` train
step that takes the model and the optimizer, fed by a Grain ``MapDataset`` (source, a
per-record ``Parse`` map, batch, read threads, ``mp_prefetch`` worker processes). Flags:

- ``--input-ms MS``: each record's map waits MS ms (a read that holds no core; 8 records a
  batch): 0 is cheap input, 5 makes 40 ms a batch, slower than the step on one worker;
- ``--workers N``: ``mp_prefetch`` worker processes (0: the pipeline runs in the loop's
  process, on its read thread);
- ``--read-threads N``: Grain's read threads (0: each batch is made inside ``next()``);
- ``--read-loss``: ``float(loss)`` every step, as a loop that logs its loss does;
- ``--stats-json -``: print one JSON line with every step's host start time (and, last, the
  time the device finished), so the step time can be measured without any profiler.

Run it by hand with::

    python tests/capture/scripts/flax_nnx_loop.py --input-ms 5 --workers 1 --steps 200
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import grain
import jax
import jax.numpy as jnp
import numpy as np
import optax
from absl import flags
from flax import nnx

RECORDS_PER_BATCH = 8
ROWS_PER_RECORD = 16  # a batch is 128 rows of 512 features
FEATURES = 512
HIDDEN = 768
HIDDEN_LAYERS = 2
POOL = 256  # distinct records; the source cycles through them


class Records(grain.sources.RandomAccessDataSource):  # type: ignore[misc]
    """Rows of a fixed random pool, as a file of fixed-size records would give them."""

    def __init__(self, n: int) -> None:
        self._n = n
        rng = np.random.default_rng(0)
        self._x = rng.standard_normal((POOL, ROWS_PER_RECORD, FEATURES), dtype=np.float32)

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, i: int) -> np.ndarray:
        return self._x[i % POOL]


class Parse(grain.transforms.Map):  # type: ignore[misc]
    """Stands for reading and decoding one record: ``wait_ms`` of waiting."""

    def __init__(self, wait_ms: float) -> None:
        self._wait_s = wait_ms / 1000.0

    def map(self, element: np.ndarray) -> dict[str, np.ndarray]:
        if self._wait_s:
            time.sleep(self._wait_s)
        return {"x": element, "y": (element.sum(axis=1) > 0).astype(np.float32)}


def make_dataset(input_ms: float, workers: int, read_threads: int, steps: int) -> Any:
    n = (steps + 64) * RECORDS_PER_BATCH
    ds = (
        grain.MapDataset.source(Records(n))
        .map(Parse(input_ms))
        .batch(RECORDS_PER_BATCH, drop_remainder=True)
        .to_iter_dataset(grain.ReadOptions(num_threads=read_threads, prefetch_buffer_size=4))
    )
    if workers:
        ds = ds.mp_prefetch(grain.MultiprocessingOptions(num_workers=workers))
    return ds


class MLP(nnx.Module):  # type: ignore[misc]
    def __init__(self, rngs: nnx.Rngs) -> None:
        self.w_in = nnx.Linear(FEATURES, HIDDEN, rngs=rngs)
        self.hidden = nnx.List(
            [nnx.Linear(HIDDEN, HIDDEN, rngs=rngs) for _ in range(HIDDEN_LAYERS)]
        )
        self.w_out = nnx.Linear(HIDDEN, 1, rngs=rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        h = jnp.tanh(self.w_in(x))
        for layer in self.hidden:
            h = jnp.tanh(layer(h)) + h
        return self.w_out(h)[:, 0]


@nnx.jit  # type: ignore[untyped-decorator]
def train_step(model: MLP, optimizer: nnx.Optimizer, x: jax.Array, y: jax.Array) -> jax.Array:
    x = x.reshape(-1, FEATURES)
    y = y.reshape(-1)

    def loss_fn(model: MLP) -> jax.Array:
        return jnp.mean((model(x) - y) ** 2)

    loss, grads = nnx.value_and_grad(loss_fn)(model)
    optimizer.update(model, grads)
    return loss


def train(
    input_ms: float, workers: int, read_threads: int, read_loss: bool, steps: int
) -> list[float]:
    """Run ``steps`` steps; return each step's host start time (perf_counter, s) and, last,
    the time the device finished the final step."""
    model = MLP(nnx.Rngs(0))
    optimizer = nnx.Optimizer(model, optax.adam(1e-3), wrt=nnx.Param)
    it = iter(make_dataset(input_ms, workers, read_threads, steps))
    starts: list[float] = []
    loss = None
    for step in range(steps):
        starts.append(time.perf_counter())
        batch = next(it)
        loss = train_step(model, optimizer, batch["x"], batch["y"])
        if read_loss:
            value = float(loss)
            if step % 50 == 0:
                print(f"step {step} loss {value:.4f}")
    for array in jax.tree.leaves((loss, nnx.state(model))):
        array.block_until_ready()
    starts.append(time.perf_counter())
    return starts


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--input-ms", type=float, default=0.0, help="wait per record, in ms")
    parser.add_argument("--workers", type=int, default=1, help="mp_prefetch worker processes")
    parser.add_argument(
        "--read-threads", type=int, default=1, help="Grain ReadOptions threads (0: in next())"
    )
    parser.add_argument("--read-loss", action="store_true", help="float(loss) every step")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--stats-json", help="write step start times as JSON ('-': stdout)")
    return parser


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    flags.FLAGS.mark_as_parsed()  # Grain's worker processes read absl flags
    starts = train(args.input_ms, args.workers, args.read_threads, args.read_loss, args.steps)
    if args.stats_json:
        text = json.dumps({"args": vars(args), "starts_s": starts})
        if args.stats_json == "-":
            print(text)
        else:
            Path(args.stats_json).write_text(text + "\n", encoding="utf-8")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
