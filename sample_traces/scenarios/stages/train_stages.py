"""A JAX + Grain loop whose input pipeline spends a set time in each stage, for checking the
stage breakdown of ``traceinspect analyze`` against known costs.

Each record costs ``--read-ms`` of waiting in the data source's ``__getitem__`` (a read that
holds no core, as a remote or disk read) and ``--map-cpu-ms`` of CPU in a ``map``
transformation (measured with ``time.thread_time``, as decoding would be); a batch holds
``RECORDS_PER_BATCH`` records, so a batch costs 8x each. The device step is small (~1 ms on
XLA's CPU backend) so that the pipeline, not the step, sets the pace and the cores stay
free for it. ``--workers`` puts the pipeline in ``mp_prefetch`` worker processes (0: in the
training process, with ``--read-threads`` Grain read threads). Run it by hand with::

    python sample_traces/scenarios/stages/train_stages.py --read-ms 2 --workers 1 --steps 100
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path
from typing import Any

import grain
import jax
import jax.numpy as jnp
import numpy as np
from absl import flags

RECORDS_PER_BATCH = 8
FEATURES = 64
POOL = 64
# The run's own timing of its source reads and maps (set TRAIN_STAGES_TIMES to a folder):
# each process that reads or maps rewrites <folder>/<pid>.json every 64 calls with every
# call's Unix start time and wall time (ns), so the check compares with what the stages
# cost in this very run, over the very window traceinspect traced.
TIMES_DIR = os.environ.get("TRAIN_STAGES_TIMES")
_times: dict[str, list[tuple[int, int]]] = {"read": [], "map": []}


def _count(kind: str, start_unix_ns: int, ns: int) -> None:
    _times[kind].append((start_unix_ns, ns))
    if TIMES_DIR and len(_times[kind]) % 64 == 0:
        path = Path(TIMES_DIR, f"{os.getpid()}.json")
        path.with_suffix(".tmp").write_text(json.dumps(_times))
        path.with_suffix(".tmp").replace(path)


class Records(grain.sources.RandomAccessDataSource):  # type: ignore[name-defined,misc]
    """Fixed records behind a read that waits ``read_ms``."""

    def __init__(self, n: int, read_ms: float) -> None:
        self._n = n
        self._wait_s = read_ms / 1000.0
        self._x = np.random.default_rng(0).standard_normal((POOL, FEATURES), dtype=np.float32)

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, i: int) -> np.ndarray:
        at, t0 = time.time_ns(), time.perf_counter_ns()
        if self._wait_s:
            time.sleep(self._wait_s)
        record = self._x[i % POOL]
        _count("read", at, time.perf_counter_ns() - t0)
        return record


def burn_cpu(seconds: float) -> None:
    """Use ``seconds`` of this thread's CPU time, however long that takes on the wall clock."""
    end = time.thread_time() + seconds
    x = 0
    while time.thread_time() < end:
        for i in range(200):
            x += i * i


class Decode(grain.transforms.Map):  # type: ignore[name-defined,misc]
    def __init__(self, cpu_ms: float) -> None:
        self._cpu_s = cpu_ms / 1000.0

    def map(self, element: np.ndarray) -> np.ndarray:
        at, t0 = time.time_ns(), time.perf_counter_ns()
        if self._cpu_s:
            burn_cpu(self._cpu_s)
        _count("map", at, time.perf_counter_ns() - t0)
        return element


def make_iterator(read_ms: float, map_cpu_ms: float, workers: int, threads: int, n: int) -> Any:
    ds = (
        grain.MapDataset.source(Records(n * RECORDS_PER_BATCH, read_ms))
        .map(Decode(map_cpu_ms))
        .batch(RECORDS_PER_BATCH, drop_remainder=True)
        .to_iter_dataset(grain.ReadOptions(num_threads=threads, prefetch_buffer_size=2))
    )
    if workers:
        ds = ds.mp_prefetch(grain.MultiprocessingOptions(num_workers=workers))
    return iter(ds)


def calibrate(read_ms: float, map_cpu_ms: float, batches: int = 40) -> dict[str, float]:
    """The truth the stage breakdown is checked against: each stage's wall time per batch,
    timed around the very calls Grain makes, in this process alone."""
    source, decode = Records(batches * RECORDS_PER_BATCH, read_ms), Decode(map_cpu_ms)
    read_s = map_s = 0.0
    for i in range(batches * RECORDS_PER_BATCH):
        t0 = time.perf_counter()
        record = source[i]
        t1 = time.perf_counter()
        decode.map(record)
        t2 = time.perf_counter()
        read_s, map_s = read_s + t1 - t0, map_s + t2 - t1
    return {"read_ms": read_s * 1e3 / batches, "preprocessing_ms": map_s * 1e3 / batches}


@jax.jit
def train_step(w: jax.Array, x: jax.Array) -> tuple[jax.Array, jax.Array]:
    loss, grad = jax.value_and_grad(lambda w: jnp.mean(jnp.tanh(x @ w) ** 2))(w)
    return w - 0.01 * grad, loss


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--read-ms", type=float, default=0.0, help="wait per record (source)")
    parser.add_argument("--map-cpu-ms", type=float, default=0.0, help="CPU per record (map)")
    parser.add_argument("--workers", type=int, default=0, help="mp_prefetch worker processes")
    parser.add_argument("--read-threads", type=int, default=0, help="Grain read threads")
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument(
        "--calibrate",
        action="store_true",
        help="print the source's and the map's time per batch, timed directly (no Grain, no "
        "profiler), as JSON, and exit",
    )
    args = parser.parse_args()
    flags.FLAGS.mark_as_parsed()  # Grain's worker processes read absl flags
    if args.calibrate:
        print(json.dumps(calibrate(args.read_ms, args.map_cpu_ms)))
        return

    it = make_iterator(
        args.read_ms, args.map_cpu_ms, args.workers, args.read_threads, args.steps + 64
    )
    w = jnp.zeros((FEATURES, FEATURES))
    for step in range(args.steps):
        with jax.profiler.StepTraceAnnotation("train", step_num=step):
            w, _ = train_step(w, next(it))
    jax.block_until_ready(w)


if __name__ == "__main__":
    main()
