"""Test script: Keras 3 ``model.fit`` (JAX backend) on a Grain dataset, for
tests/capture/test_keras.py.

A ``Sequential`` MLP (``--width`` units, ``--layers`` hidden layers) trained with
``model.fit`` on ``grain.MapDataset.range(...).map(make_batch)`` (``--batch`` rows of a
table per element), read by ``--read-threads`` threads in ``--workers`` ``mp_prefetch``
workers. ``--sleep-ms`` adds a map that waits that long per batch (a slow read that holds
no core): the input-bound configuration. ``--prebuilt`` trains on a few batches made up
front instead (``MapDataset.source(batches).repeat()``, no map and no workers): the model's
own step, the floor any input pipeline can reach.

``--times PATH`` writes, from a Keras callback, the time each batch started
(``on_train_batch_begin``, on the host) and the step time over those from step TRUTH_FROM
on (the queue of steps in flight is full by then). ``--log-loss`` reads the loss every step
in a callback (Keras' guide's per-batch logging). Run it with ``KERAS_BACKEND=jax``.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import time
from typing import Any

import numpy as np

# Keras picks its backend when it is first imported.
os.environ.setdefault("KERAS_BACKEND", "jax")
FEATURES = 64
CLASSES = 10
# The steady part of a run starts here: step 0 compiles and jax's queue of ~32 steps in
# flight fills first (the host's batch ends run ahead of the device until it is full).
TRUTH_FROM = 40


# Batches are rows of a fixed table, taken a batch at a time: the cheap input of the
# compute-bound configuration (one NumPy take per batch: made record by record, 256 records
# of Python cost a 1-worker pipeline ~4 ms of CPU a batch, which on 2 cores the model's
# step then lacks).
TABLE = np.random.default_rng(0).standard_normal((4096, FEATURES), dtype=np.float32)


def make_batch(index: int, *, size: int) -> tuple[np.ndarray, np.ndarray]:
    rows = np.arange(index * size, (index + 1) * size) % len(TABLE)
    return TABLE[rows], (rows % CLASSES).astype(np.int32)


def slow_read(batch: Any, *, seconds: float) -> Any:
    time.sleep(seconds)
    return batch


def build_dataset(args: argparse.Namespace) -> Any:
    import functools

    import grain

    make = functools.partial(make_batch, size=args.batch)
    read = grain.ReadOptions(num_threads=args.read_threads, prefetch_buffer_size=2)
    if args.prebuilt:
        batches = [make(b) for b in range(8)]
        return grain.MapDataset.source(batches).repeat().to_iter_dataset(read)
    ds = grain.MapDataset.range(10_000_000).map(make)
    if args.sleep_ms:
        ds = ds.map(functools.partial(slow_read, seconds=args.sleep_ms / 1000))
    it = ds.to_iter_dataset(read)
    if args.workers:
        it = it.mp_prefetch(grain.MultiprocessingOptions(num_workers=args.workers))
    return it


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--read-threads", type=int, default=1)
    parser.add_argument("--sleep-ms", type=float, default=0.0, help="wait per batch")
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--width", type=int, default=512)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--steps-per-execution", type=int, default=1)
    parser.add_argument("--prebuilt", action="store_true")
    parser.add_argument("--log-loss", action="store_true", help="read the loss every step")
    parser.add_argument("--verbose", default="auto", help="fit's verbose (auto: progress bar)")
    parser.add_argument("--times", help="write the batch end times here (JSON)")
    args = parser.parse_args()

    # Grain's mp_prefetch workers read absl flags.
    from absl import flags

    flags.FLAGS.mark_as_parsed()
    import keras

    starts: list[float] = []
    losses: list[float] = []

    class BatchStarts(keras.callbacks.Callback):  # type: ignore[misc]
        # A batch's start: its logs are empty, so Keras reads no device value for it. (A
        # callback with its own on_train_batch_end, unless async_safe, makes Keras convert
        # the step's logs to floats on the training thread every step: a sync.)
        def on_train_batch_begin(self, batch: int, logs: Any = None) -> None:
            starts.append(time.perf_counter())

    class LossLog(keras.callbacks.Callback):  # type: ignore[misc]
        # Keras' guide's per-batch loss logging: the loss read every step.
        def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
            losses.append(float((logs or {}).get("loss", 0.0)))

    layers: list[Any] = [keras.Input((FEATURES,))]
    layers += [keras.layers.Dense(args.width, activation="relu") for _ in range(args.layers)]
    layers.append(keras.layers.Dense(CLASSES))
    model = keras.Sequential(layers)
    model.compile(
        optimizer="adam",
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        steps_per_execution=args.steps_per_execution,
    )
    start = time.perf_counter()
    model.fit(
        build_dataset(args),
        epochs=1,
        steps_per_epoch=args.steps,
        verbose=args.verbose if args.verbose == "auto" else int(args.verbose),
        shuffle=False,
        callbacks=[BatchStarts(), *([LossLog()] if args.log_loss else [])],
    )
    weights = model.get_weights()  # waits for the last step
    total_s = time.perf_counter() - start
    if args.times:
        # The starts of the steps from TRUTH_FROM on. Once jax's queue is full the host is
        # held back by as many steps in flight at the last start as at the first: the rate
        # of starts is the device's (or the input's, when the host waits for batches).
        steady = starts[TRUTH_FROM // args.steps_per_execution :]
        steps = (len(steady) - 1) * args.steps_per_execution
        record = {
            "args": vars(args),
            "batch_starts_s": [t - start for t in starts],
            "step_ms": (steady[-1] - steady[0]) * 1000 / steps,
            "total_s": total_s,
        }
        pathlib.Path(args.times).write_text(json.dumps(record), encoding="utf-8")
    print(f"keras fit done: {args.steps} steps, {float(np.sum(weights[-1])):.3f}")


if __name__ == "__main__":
    main()
