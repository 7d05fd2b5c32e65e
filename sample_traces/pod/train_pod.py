"""One process of a tiny data-parallel JAX training run, joined to the others by jax.distributed.

``make_pod.py`` starts N of these on one machine (each under ``traceinspect capture``, or
plainly to time them). Every process is one "host" of a pod with one CPU device; the devices
form a 1-D mesh ``("data",)``. Each step every process:

1. draws its own batch of ``global_batch / N`` records from a Grain pipeline that reads only
   its shard of the data (records ``process_id::N``), on the main thread, no prefetch;
2. makes the global batch with ``jax.make_array_from_process_local_data`` (sharded over
   ``"data"``) and runs one jitted SGD step on replicated weights. XLA inserts an
   all-reduce of the gradients across processes (gloo CPU collectives), so no process's
   step can end before the slowest one has sent its gradients.

With ``--slow-host K --slow-ms M``, process K's pipeline sleeps M ms per batch (slow I/O
that holds no core). When M is well above the balanced pod's step (~15 ms for 4 processes
on 2 cores, ~6 ms for 2), K becomes input-bound and every other process waits for it inside
the all-reduce. By hand, one process per shell::

    python sample_traces/pod/train_pod.py --process-id 0 --num-processes 2 --slow-host 1
    python sample_traces/pod/train_pod.py --process-id 1 --num-processes 2 --slow-host 1

``--timing-json FILE`` writes this process's step times (no profiler involved).

Set-ups for the multi-host checks (``tests/test_pod_capture.py``):

- ``--whole-batch-per-host --no-shard``: every process batches the whole global batch and
  puts it on the devices with ``jax.device_put`` and the batch sharding, which keeps only
  the process's slice of it (jax checks that every process passed the same value, so the
  processes must read the same records);
- ``--host-local``: the global batch is built with
  ``multihost_utils.host_local_array_to_global_array``;
- ``--files N --workers W``: the records come from N Parquet files (each process writes
  the same ones to a directory of its own), sliced per process (``files[process_id::N]``,
  as MaxText does), read one file after another through ``InterleaveIterDataset`` in W
  ``mp_prefetch`` workers; ``--repeat-files`` repeats the process's file list without end
  under the interleave.
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import grain
import jax
import jax.numpy as jnp
import numpy as np
from absl import flags
from jax.experimental import multihost_utils
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

FEATURES = 128
HIDDEN = 256
POOL = 4096  # distinct records; the source cycles through them
RECORDS = 1 << 20  # the dataset's length: far more than any run reads


class Records(grain.sources.RandomAccessDataSource):  # type: ignore[name-defined,misc]
    """Cheap records: rows of a fixed random pool."""

    def __init__(self) -> None:
        self._x = np.random.default_rng(0).standard_normal((POOL, FEATURES), dtype=np.float32)

    def __len__(self) -> int:
        return RECORDS

    def __getitem__(self, i: int) -> np.ndarray:
        return self._x[i % POOL]


class SlowRead(grain.transforms.Map):  # type: ignore[name-defined,misc]
    """Stands for one host's slow storage or decoding: sleeps ``ms`` per batch."""

    def __init__(self, ms: float) -> None:
        self._s = ms / 1000.0

    def map(self, element: np.ndarray) -> np.ndarray:
        if self._s:
            time.sleep(self._s)
        return element


def make_iterator(
    process_id: int, num_processes: int, per_host: int, slow_ms: float, shard: bool = True
) -> Any:
    """This process's batches: its shard of the records, batched, read on the main thread.
    ``shard=False`` is the classic mistake: every process reads all records, in the same
    order, so all hosts train on the same batches."""
    source = grain.MapDataset.source(Records())
    # ShardOptions(shard_index=process_id, shard_count=num_processes) as a slice: each
    # process reads every N-th record, so the shards are disjoint and cover the data.
    shard_ds = source[process_id::num_processes] if shard else source
    shard = shard_ds.shuffle(seed=0)
    ds = shard.batch(per_host, drop_remainder=True).map(SlowRead(slow_ms))
    # num_threads=0: batches are read when asked for, so the sleep is on this host's step.
    options = grain.ReadOptions(num_threads=0, prefetch_buffer_size=0)
    return iter(ds.to_iter_dataset(options))


def read_file(path: str) -> Any:
    """One Parquet file's rows (Grain opens it in the worker that reads it)."""
    return grain.experimental.ParquetIterDataset(path)


class Features(grain.transforms.Map):  # type: ignore[name-defined,misc]
    """A Parquet row's feature vector."""

    def map(self, row: dict[str, np.ndarray]) -> np.ndarray:
        return row["x"]


def write_files(files: int, rows: int) -> list[str]:
    """``files`` Parquet files of ``rows`` rows each (the same in every process), in a
    directory of this process's own."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    out = Path(tempfile.mkdtemp(prefix="train_pod_files_"))
    paths = []
    for i in range(files):
        x = np.random.default_rng(i).standard_normal((rows, FEATURES), dtype=np.float32)
        column = pa.FixedSizeListArray.from_arrays(pa.array(x.ravel()), FEATURES)
        path = out / f"part-{i:03d}.parquet"
        pq.write_table(pa.table({"x": column}), path)
        paths.append(str(path))
    return paths


def make_file_iterator(
    process_id: int,
    num_processes: int,
    per_host: int,
    files: int,
    workers: int,
    steps: int,
    repeat: bool = False,
) -> Any:
    """This process's batches from Parquet files: its slice of the file list (repeated
    without end with ``repeat``), each file read in turn, batched, in ``workers`` worker
    processes."""
    mine = len(range(process_id, files, num_processes))
    # Enough rows in this process's files for every step, whichever worker reads them.
    rows = (4 if repeat else steps // max(1, min(mine, workers or 1)) + 2) * per_host
    paths = write_files(files, rows)
    listed = grain.MapDataset.source(paths)[process_id::num_processes]
    ds = (listed.repeat() if repeat else listed).map(read_file)
    ds = grain.experimental.InterleaveIterDataset(ds, cycle_length=1)
    ds = ds.map(Features()).batch(per_host, drop_remainder=True)
    if workers:
        ds = ds.mp_prefetch(grain.MultiprocessingOptions(num_workers=workers))
    return iter(ds)


Params = dict[str, jax.Array]


@jax.jit
def train_step(params: Params, x: jax.Array) -> tuple[Params, jax.Array]:
    """One SGD step of a small autoencoder; the mean over the sharded batch makes the
    gradients an all-reduce across processes."""

    def loss_fn(p: Params) -> jax.Array:
        h = jnp.tanh(x @ p["w1"])
        return jnp.mean((h @ p["w2"] - x) ** 2)

    loss, grads = jax.value_and_grad(loss_fn)(params)
    return jax.tree.map(lambda p, g: p - 0.1 * g, params, grads), loss


def train(args: argparse.Namespace) -> tuple[list[float], float, float]:
    """Run the steps; return each step's start (perf_counter, s), the end with the device
    drained, and the last loss."""
    n = args.num_processes
    if args.global_batch % n:
        raise SystemExit(f"--global-batch {args.global_batch} is not a multiple of {n} processes")
    per_host = args.global_batch // n
    slow_ms = args.slow_ms if args.process_id == args.slow_host else 0.0

    mesh = Mesh(np.array(jax.devices()), ("data",))
    batch_sharding = NamedSharding(mesh, P("data"))
    replicated = NamedSharding(mesh, P())
    # numpy, not jax.random: every jitted computation's HLO is stored in each host's trace.
    rng = np.random.default_rng(1)
    params = jax.device_put(
        {
            "w1": rng.standard_normal((FEATURES, HIDDEN), dtype=np.float32) * 0.03,
            "w2": rng.standard_normal((HIDDEN, FEATURES), dtype=np.float32) * 0.03,
        },
        replicated,
    )
    if args.files:
        batches = make_file_iterator(
            args.process_id, n, per_host, args.files, args.workers, args.steps, args.repeat_files
        )
    else:
        rows = args.global_batch if args.whole_batch_per_host else per_host
        batches = make_iterator(args.process_id, n, rows, slow_ms, shard=not args.no_shard)
    starts: list[float] = []
    loss = None
    for step in range(args.steps):
        starts.append(time.perf_counter())
        with jax.profiler.StepTraceAnnotation("train", step_num=step):
            local = next(batches)
            if args.whole_batch_per_host:
                x = jax.device_put(local, batch_sharding)
            elif args.host_local:
                x = multihost_utils.host_local_array_to_global_array(local, mesh, P("data"))
            else:
                x = jax.make_array_from_process_local_data(batch_sharding, local)
            params, loss = train_step(params, x)
    jax.block_until_ready(params)
    end = time.perf_counter()
    return starts, end, float(loss) if loss is not None else float("nan")


def summarize(starts: list[float], end: float, warmup: int) -> dict[str, Any]:
    """Host step times (ms, start to next start) after ``warmup`` steps.

    Every process's loop is held to the pod's pace once it is in steady state: the slow one
    by its input, the others by the CPU client's limit on in-flight steps (a loop that never
    waits runs ~30 steps ahead of its device until that limit holds it back, so the warm-up
    must be longer than that). ``ms_per_step``, the mean host step after the warm-up, is then
    the pod's step time and the same on every process; ``median_step_ms`` is below it on a
    process whose steps are uneven. ``drain_ms``: from the last step's start to the end of
    the run with the device drained (the steps still in flight).
    """
    step_ms = [(b - a) * 1000.0 for a, b in itertools.pairwise(starts[warmup:])]
    return {
        "steps": len(starts),
        "warmup_steps": warmup,
        "ms_per_step": round(statistics.mean(step_ms), 3),
        "median_step_ms": round(statistics.median(step_ms), 3),
        "drain_ms": round((end - starts[-1]) * 1000.0, 3),
        "step_ms": [round(t, 3) for t in step_ms],
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--process-id", type=int, required=True)
    parser.add_argument("--num-processes", type=int, required=True)
    parser.add_argument("--coordinator", default="127.0.0.1:12356", help="HOST:PORT")
    parser.add_argument("--slow-host", type=int, default=-1, help="process to slow (-1: none)")
    parser.add_argument("--slow-ms", type=float, default=40.0, help="its sleep per batch (ms)")
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--no-shard", action="store_true", help="every process reads all data")
    parser.add_argument("--global-batch", type=int, default=128)
    parser.add_argument(
        "--whole-batch-per-host",
        action="store_true",
        help="every process batches the whole global batch and device_puts it",
    )
    parser.add_argument(
        "--host-local",
        action="store_true",
        help="build the global batch with multihost_utils.host_local_array_to_global_array",
    )
    parser.add_argument("--files", type=int, default=0, help="read N Parquet files instead")
    parser.add_argument("--workers", type=int, default=0, help="mp_prefetch workers (--files)")
    parser.add_argument("--repeat-files", action="store_true", help="repeat the file list")
    parser.add_argument("--warmup", type=int, default=60, help="steps left out of the timing")
    parser.add_argument("--timing-json", help="write this process's step times to this file")
    parser.add_argument(
        "--profiler-port",
        type=int,
        help="serve jax's profiler on this port (jax.profiler.start_server), for capture --attach",
    )
    args = parser.parse_args(argv)
    warmup = min(args.warmup, args.steps - 2)
    flags.FLAGS.mark_as_parsed()  # Grain reads absl flags

    # Before the backend starts: CPU collectives across processes need gloo.
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(
        coordinator_address=args.coordinator,
        num_processes=args.num_processes,
        process_id=args.process_id,
    )
    if args.profiler_port:
        jax.profiler.start_server(args.profiler_port)
    starts, end, loss = train(args)
    if args.timing_json:
        stats = {
            "process_id": args.process_id,
            "num_processes": args.num_processes,
            "slowed": args.process_id == args.slow_host,
            "slow_ms": args.slow_ms if args.process_id == args.slow_host else 0.0,
        }
        stats |= summarize(starts, end, warmup)
        Path(args.timing_json).write_text(json.dumps(stats) + "\n", encoding="utf-8")
    print(f"process {args.process_id}: {args.steps} steps, final loss {loss:.5f}", flush=True)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
