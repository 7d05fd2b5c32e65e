"""A Flax NNX classifier checkpointed by Orbax, on a Grain pipeline: its sizes, input cost and
checkpointing by flags.

What a user writes from Flax's NNX guides and Orbax's checkpointing docs: an ``nnx.Module``
MLP classifier, ``nnx.Optimizer`` over optax's AdamW, an ``nnx.MultiMetric`` (accuracy and
average loss) updated inside an ``@nnx.jit`` train step and ``.compute()``d (then reset)
every ``--metrics-every`` steps (200, as Flax's MNIST tutorial logs them) and at the last,
fed by a Grain ``MapDataset`` (source, shuffle, a per-record Python ``Augment`` map, batch,
read threads, ``mp_prefetch`` worker processes), and an ``ocp.CheckpointManager`` whose
``save_interval_steps`` decides which of the ``save()`` calls the loop makes every step
write ``nnx.state(model)`` with ``ocp.args.StandardSave``. Flags:

- ``--checkpoint sync|async|none``: the manager with ``enable_async_checkpointing`` False
  (the loop waits for each write) or True (the arrays are copied to the host, then written
  by a background thread), or no manager;
- ``--checkpoint-every N``: ``save_interval_steps`` (10);
- ``--hidden H``, ``--layers L``, ``--batch B``: the model's width and depth and the rows a
  batch (8 records of ``B / 8`` rows): the checkpoint's size grows with ``H * H * L``, the
  step's work with ``B * H * H * L``;
- ``--map-passes N``: each record's map runs N passes of pure-Python arithmetic over its
  values (0: cheap input, records from memory);
- ``--workers N``: ``mp_prefetch`` worker processes (0: the pipeline runs in the loop's
  process, on its read thread);
- ``--prebuilt``: one batch made before the loop, drawn again every step, and no
  checkpoint: the device's step alone, for the truth;
- ``--stats-json -``: print one JSON line with every step's host start time (and, last, the
  time the device finished), so the step time can be measured without any profiler.

Run it by hand with::

    python tests/capture/scripts/nnx_orbax_loop.py --checkpoint sync --steps 200
"""

from __future__ import annotations

import argparse
import itertools
import json
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grain
import jax
import numpy as np
import optax
import orbax.checkpoint as ocp  # type: ignore[import-not-found, unused-ignore]
from absl import flags
from flax import nnx

RECORDS_PER_BATCH = 8
FEATURES = 256
CLASSES = 10
POOL = 64  # distinct records; the source cycles through them
# The augmentation's pure-Python pass reads this many of a record's values.
AUGMENTED_VALUES = 2048


class Records(grain.sources.RandomAccessDataSource):  # type: ignore[misc]
    """Labelled rows of a fixed random pool, as a file of fixed-size records would give them."""

    def __init__(self, n: int, rows: int) -> None:
        self._n = n
        rng = np.random.default_rng(0)
        self._x = rng.standard_normal((POOL, rows, FEATURES), dtype=np.float32)
        self._y = rng.integers(0, CLASSES, (POOL, rows), dtype=np.int32)

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, i: int) -> dict[str, np.ndarray]:
        return {"image": self._x[i % POOL], "label": self._y[i % POOL]}


class Augment(grain.transforms.Map):  # type: ignore[misc]
    """A per-record augmentation written in Python: ``passes`` passes over its values (a
    jitter scale computed value by value), then the record scaled by it."""

    def __init__(self, passes: int) -> None:
        self._passes = passes

    def map(self, element: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        if not self._passes:
            return element
        values = element["image"].ravel()[:AUGMENTED_VALUES].tolist()
        scale = 0.0
        for _ in range(self._passes):
            scale += sum(v * v for v in values) / len(values)
        image = element["image"] * np.float32(1.0 + 1e-3 * scale / self._passes)
        return {"image": image, "label": element["label"]}


def make_dataset(batch: int, map_passes: int, workers: int, steps: int) -> Any:
    rows = batch // RECORDS_PER_BATCH
    n = (steps + 64) * RECORDS_PER_BATCH
    ds = (
        grain.MapDataset.source(Records(n, rows))
        .shuffle(seed=0)
        .map(Augment(map_passes))
        .batch(RECORDS_PER_BATCH, drop_remainder=True)
        .to_iter_dataset(grain.ReadOptions(num_threads=1, prefetch_buffer_size=4))
    )
    if workers:
        ds = ds.mp_prefetch(grain.MultiprocessingOptions(num_workers=workers))
    return ds


class Classifier(nnx.Module):  # type: ignore[misc]
    def __init__(self, hidden: int, layers: int, rngs: nnx.Rngs) -> None:
        self.w_in = nnx.Linear(FEATURES, hidden, rngs=rngs)
        self.hidden = nnx.List([nnx.Linear(hidden, hidden, rngs=rngs) for _ in range(layers)])
        self.w_out = nnx.Linear(hidden, CLASSES, rngs=rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        h = nnx.relu(self.w_in(x))
        for layer in self.hidden:
            h = nnx.relu(layer(h)) + h
        return self.w_out(h)


def loss_fn(model: Classifier, batch: dict[str, jax.Array]) -> tuple[jax.Array, jax.Array]:
    logits = model(batch["image"])
    loss = optax.softmax_cross_entropy_with_integer_labels(logits, batch["label"]).mean()
    return loss, logits


@nnx.jit  # type: ignore[untyped-decorator]
def train_step(
    model: Classifier,
    optimizer: nnx.Optimizer,
    metrics: nnx.MultiMetric,
    batch: dict[str, jax.Array],
) -> None:
    batch = {
        "image": batch["image"].reshape(-1, FEATURES),
        "label": batch["label"].reshape(-1),
    }
    grad_fn = nnx.value_and_grad(loss_fn, has_aux=True)
    (loss, logits), grads = grad_fn(model, batch)
    metrics.update(loss=loss, logits=logits, labels=batch["label"])
    optimizer.update(model, grads)


def checkpoint_manager(kind: str, every: int, directory: Path) -> Any:
    """Orbax's manager as its docs make one, or None for ``--checkpoint none``."""
    if kind == "none":
        return None
    options = ocp.CheckpointManagerOptions(
        save_interval_steps=every,
        max_to_keep=2,
        enable_async_checkpointing=kind == "async",
    )
    return ocp.CheckpointManager(directory.absolute(), options=options)


def train(args: argparse.Namespace, directory: Path) -> list[float]:
    """Run ``args.steps`` steps; return each step's host start time (perf_counter, s) and,
    last, the time the device (and any checkpoint write) finished."""
    model = Classifier(args.hidden, args.layers, nnx.Rngs(0))
    optimizer = nnx.Optimizer(model, optax.adamw(1e-3), wrt=nnx.Param)
    metrics = nnx.MultiMetric(
        accuracy=nnx.metrics.Accuracy(),
        loss=nnx.metrics.Average("loss"),
    )
    history: dict[str, list[float]] = {"accuracy": [], "loss": []}
    kind = "none" if args.prebuilt else args.checkpoint
    manager = checkpoint_manager(kind, args.checkpoint_every, directory)
    if args.prebuilt:
        # One batch made before the loop, drawn again every step: the device's step alone.
        first = next(iter(make_dataset(args.batch, 0, 0, 1)))
        it: Iterator[Any] = itertools.repeat(first)
    else:
        it = iter(make_dataset(args.batch, args.map_passes, args.workers, args.steps))
    starts: list[float] = []
    for step in range(args.steps):
        starts.append(time.perf_counter())
        batch = next(it)
        train_step(model, optimizer, metrics, batch)
        if manager is not None:
            manager.save(step, args=ocp.args.StandardSave(nnx.state(model)))
        if step > 0 and (step % args.metrics_every == 0 or step == args.steps - 1):
            for name, value in metrics.compute().items():
                history[name].append(float(value))
            metrics.reset()
            print(f"step {step}: loss {history['loss'][-1]:.4f}", flush=True)
    for array in jax.tree.leaves(nnx.state(model)):
        array.block_until_ready()
    if manager is not None:
        manager.wait_until_finished()
        manager.close()
    starts.append(time.perf_counter())
    return starts


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint", choices=("sync", "async", "none"), default="async")
    parser.add_argument("--checkpoint-every", type=int, default=10, help="save_interval_steps")
    parser.add_argument("--hidden", type=int, default=512)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--batch", type=int, default=128, help="rows a batch (8 records)")
    parser.add_argument("--map-passes", type=int, default=0, help="Python passes a record")
    parser.add_argument("--workers", type=int, default=1, help="mp_prefetch worker processes")
    parser.add_argument(
        "--metrics-every", type=int, default=200, help="metrics.compute() every N steps"
    )
    parser.add_argument(
        "--prebuilt", action="store_true", help="one batch, drawn again every step; no checkpoint"
    )
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--checkpoint-dir", help="where Orbax writes (default: a temporary one)")
    parser.add_argument("--stats-json", help="write step start times as JSON ('-': stdout)")
    return parser


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    flags.FLAGS.mark_as_parsed()  # Grain's worker processes read absl flags
    scratch = None if args.checkpoint_dir else tempfile.mkdtemp(prefix="nnx_orbax_")
    directory = Path(args.checkpoint_dir or scratch or ".")
    try:
        starts = train(args, directory)
    finally:
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)
    if args.stats_json:
        text = json.dumps({"args": vars(args), "starts_s": starts})
        if args.stats_json == "-":
            print(text)
        else:
            Path(args.stats_json).write_text(text + "\n", encoding="utf-8")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
