"""A JAX + Grain training loop whose per-record input cost and host reads are set by flags.

The scenario family of ``make_family.py``: the same ~10 ms device step (an MLP on XLA's CPU
backend, 2 cores) fed by a Grain pipeline shaped like MaxText's (source, a per-record
``parse`` map, batch, read threads, ``mp_prefetch`` worker processes), where each record
costs

- ``io``: a 5 ms wait (sleep: a read that holds no core),
- ``cpu``: 3 ms of CPU (a fixed amount, measured with ``time.thread_time``, so that
  oversubscribed cores make it slower in wall time, as real decoding would be),
- ``mix``: a 2.5 ms wait then 1.5 ms of CPU,
- ``none``: nothing (records come from memory); ``light``: a 0.6 ms wait; ``slow``: a 3 ms
  wait (24 ms a batch: on one read thread, slower than the device),

and the loop reads the loss as a user would: never, every step (``float``, ``device_get``,
``block``, ``item``, ``asarray``), the previous step's loss every step (``prev``), every
10th step (``every10``), or MaxText's metrics buffer (``buffer``: keep each step's
metrics, read the previous step's every 10 steps). ``--synthetic`` feeds one pre-built
batch every step, without Grain (the same model with no input cost: what ``traceinspect
isolate``'s target step is checked against).

The habits real loops have between their steps, each set by a flag:

- ``--checkpoint-every N --checkpoint-ms M``: a synchronous checkpoint after every Nth
  step (``jax.device_get`` of the parameters, ``np.save`` to a scratch file, then M ms of
  slow storage, a sleep);
- ``--eval-every N --eval-batches K``: an evaluation after every Nth step (K jitted forward
  passes over a held batch, their mean loss read with ``float``);
- ``--host-wait-ms M`` / ``--host-cpu-ms M``: the loop's own work between ``next()`` and
  the dispatch (a side file, a queue, a lookup): M ms of waiting, or of CPU;
- ``--callback-ms M``: a host callback inside the jitted step (``jax.debug.callback`` to a
  metrics logger that takes M ms);
- ``--device-repeat R``: R extra 4096-wide matrix products per step, so that an
  accelerator's step lasts about as long as the CPU backend's (0 on the CPU machine);
- ``--log-every N --log-ms M``: remote logging after every Nth step: the loss read with
  ``float`` and POSTed (``urllib``, on the training thread) to a logging server in another
  process that answers after M ms;
- ``--gc-every N --gc-objects K``: ``gc.collect()`` after every Nth step while the loop keeps
  K small Python objects alive (a large heap makes a full collection slow);
- ``--epoch-steps N``: epochs of N steps, each drawn from a new iterator over the dataset
  (``for epoch ...: for batch in dataset``): Grain starts its worker processes again each
  epoch;
- ``--eval-score-host``: the evaluation reads each batch's loss (``float``) and scores it on
  the host (a sort of a million values, ~25 ms), instead of reading their mean once.

Run it by hand with::

    python sample_traces/scenarios/family/train_family.py --record io --workers 2 --steps 200

It prints one JSON line with every step's host start time (``--stats-json -``).
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import gc
import json
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import grain
import jax
import jax.numpy as jnp
import numpy as np
from absl import flags

RECORDS_PER_BATCH = 8
ROWS_PER_RECORD = 16  # a batch is 128 rows of 512 features
FEATURES = 512
HIDDEN = 768
HIDDEN_LAYERS = 2
POOL = 256  # distinct records; the source cycles through them

# Per-record cost: (wait in ms, CPU in ms).
RECORD_COSTS = {
    "none": (0.0, 0.0),
    "io": (5.0, 0.0),
    "cpu": (0.0, 3.0),
    "mix": (2.5, 1.5),
    "light": (0.6, 0.0),  # ~5 ms of waiting per batch: half the device's step
    "slow": (3.0, 0.0),  # 24 ms of waiting per batch: ~2.4x the device's step on one thread
}
READS = (
    "none",
    "float",
    "device_get",
    "block",
    "item",
    "asarray",
    "prev",
    "every10",
    "buffer",
)
REPEAT_WIDTH = 4096  # the extra matrix products of --device-repeat


class Records(grain.sources.RandomAccessDataSource):  # type: ignore[name-defined,misc]
    """Rows of a fixed random pool, as a file of fixed-size records would give them."""

    def __init__(self, n: int) -> None:
        self._n = n
        rng = np.random.default_rng(0)
        self._x = rng.standard_normal((POOL, ROWS_PER_RECORD, FEATURES), dtype=np.float32)

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, i: int) -> np.ndarray:
        return self._x[i % POOL]


def burn_cpu(seconds: float) -> None:
    """Use ``seconds`` of this thread's CPU time, however long that takes on the wall clock."""
    end = time.thread_time() + seconds
    x = 0
    while time.thread_time() < end:
        for i in range(200):
            x += i * i


class Parse(grain.transforms.Map):  # type: ignore[name-defined,misc]
    """Stands for reading and decoding one record: a wait, CPU work, or both."""

    def __init__(self, wait_ms: float, cpu_ms: float) -> None:
        self._wait_s = wait_ms / 1000.0
        self._cpu_s = cpu_ms / 1000.0

    def map(self, element: np.ndarray) -> dict[str, np.ndarray]:
        if self._wait_s:
            time.sleep(self._wait_s)
        if self._cpu_s:
            burn_cpu(self._cpu_s)
        return {"x": element, "y": (element.sum(axis=1) > 0).astype(np.float32)}


def synthetic_batch() -> dict[str, np.ndarray]:
    """One batch as the pipeline makes it (the first records, parsed and stacked), built once."""
    source, parse = Records(RECORDS_PER_BATCH), Parse(0.0, 0.0)
    records = [parse.map(source[i]) for i in range(RECORDS_PER_BATCH)]
    return {key: np.stack([r[key] for r in records]) for key in records[0]}


def make_iterator(record: str, workers: int, read_threads: int, steps: int) -> Any:
    return iter(make_dataset(record, workers, read_threads, steps))


def make_dataset(record: str, workers: int, read_threads: int, steps: int) -> Any:
    wait_ms, cpu_ms = RECORD_COSTS[record]
    n = (steps + 64) * RECORDS_PER_BATCH
    ds = (
        grain.MapDataset.source(Records(n))
        .map(Parse(wait_ms, cpu_ms))
        .batch(RECORDS_PER_BATCH, drop_remainder=True)
        .to_iter_dataset(grain.ReadOptions(num_threads=read_threads, prefetch_buffer_size=4))
    )
    if workers:
        ds = ds.mp_prefetch(grain.MultiprocessingOptions(num_workers=workers))
    return ds


# The remote logging server of --log-every: another process (as a real one would be), which
# answers every POST after the delay its argument gives (ms) and prints its port first.
_LOG_SERVER = """
import http.server, sys, time
delay = float(sys.argv[1]) / 1000.0
class Handler(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        time.sleep(delay)
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")
    def log_message(self, *args):
        pass
server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
print(server.server_port, flush=True)
server.serve_forever()
"""


class RemoteLog:
    """A logging client that POSTs each record to its own server process."""

    def __init__(self, delay_ms: float) -> None:
        self._server = subprocess.Popen(
            [sys.executable, "-c", _LOG_SERVER, str(delay_ms)], stdout=subprocess.PIPE, text=True
        )
        assert self._server.stdout is not None
        self._url = f"http://127.0.0.1:{int(self._server.stdout.readline())}/log"

    def post(self, record: dict[str, float]) -> None:
        body = json.dumps(record).encode()
        request = urllib.request.Request(self._url, body, {"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=30) as response:
            response.read()

    def close(self) -> None:
        self._server.terminate()
        self._server.wait()


Params = dict[str, Any]


def init_params(layers: int = HIDDEN_LAYERS) -> Params:
    keys = jax.random.split(jax.random.key(0), layers + 2)
    return {
        "w_in": jax.random.normal(keys[0], (FEATURES, HIDDEN)) * 0.03,
        "hidden": [jax.random.normal(k, (HIDDEN, HIDDEN)) * 0.03 for k in keys[1 : layers + 1]],
        "w_out": jax.random.normal(keys[-1], (HIDDEN, 1)) * 0.03,
    }


def log_metrics(loss: Any, *, wait_s: float) -> None:
    """A metrics logger called from inside the jitted step: ``wait_s`` of host time."""
    time.sleep(wait_s)


@functools.cache
def make_train_step(device_repeat: int = 0, callback_ms: float = 0.0) -> Any:
    """The jitted step: the MLP's loss and SGD update, plus the habits that live inside jit."""

    def train_step(params: Params, x: jax.Array, y: jax.Array) -> tuple[Params, jax.Array]:
        x = x.reshape(-1, FEATURES)
        y = y.reshape(-1)

        def loss_fn(p: Params) -> jax.Array:
            h = jnp.tanh(x @ p["w_in"])
            for w in p["hidden"]:
                h = jnp.tanh(h @ w) + h
            logits = (h @ p["w_out"])[:, 0]
            return jnp.mean((logits - y) ** 2)

        loss, grads = jax.value_and_grad(loss_fn)(params)
        if device_repeat:
            # Device work that an accelerator needs to last as long as the CPU's step: a
            # chain of products the loss depends on (so XLA keeps it), outside the gradient.
            # Unrolled rather than a loop: an XLA while loop on a GPU may read its condition
            # back to the host every iteration, a sync of its own.
            m = jnp.tanh(jnp.resize(x, (REPEAT_WIDTH, REPEAT_WIDTH)))
            for _ in range(device_repeat):
                m = jnp.tanh(m @ m) * 0.5
            loss = loss + 1e-12 * jnp.mean(m)
        if callback_ms:
            jax.debug.callback(functools.partial(log_metrics, wait_s=callback_ms / 1000.0), loss)
        return jax.tree.map(lambda p, g: p - 0.01 * g, params, grads), loss

    return jax.jit(train_step)


@jax.jit
def eval_step(params: Params, x: jax.Array, y: jax.Array) -> jax.Array:
    x = x.reshape(-1, FEATURES)
    h = jnp.tanh(x @ params["w_in"])
    for w in params["hidden"]:
        h = jnp.tanh(h @ w) + h
    return jnp.mean(((h @ params["w_out"])[:, 0] - y.reshape(-1)) ** 2)


@dataclasses.dataclass(frozen=True)
class Habits:
    """What the loop does between its steps besides drawing a batch and reading the loss."""

    checkpoint_every: int = 0
    checkpoint_ms: float = 250.0
    eval_every: int = 0
    eval_batches: int = 20
    host_wait_ms: float = 0.0
    host_cpu_ms: float = 0.0
    callback_ms: float = 0.0
    device_repeat: int = 0
    log_every: int = 0
    log_ms: float = 50.0
    gc_every: int = 0
    gc_objects: int = 1_000_000
    epoch_steps: int = 0
    eval_score_host: bool = False


def _due(step: int, every: int) -> bool:
    """Whether a habit done every ``every`` steps falls after ``step``."""
    return bool(every) and step % every == every - 1


def host_score(loss: float) -> float:
    """A metric computed on the host from one evaluation batch (~25 ms of NumPy here)."""
    ranks = np.sort(np.random.default_rng(0).random(1_000_000) + loss)
    return float(ranks[len(ranks) // 2])


def checkpoint(params: Params, folder: Path, wait_s: float) -> None:
    """A synchronous checkpoint: copy the parameters to the host, write them, wait on storage."""
    host = jax.device_get(params)
    np.save(folder / "w_in.npy", host["w_in"])
    time.sleep(wait_s)


def train(
    record: str,
    workers: int,
    read_threads: int,
    read: str,
    steps: int,
    synthetic: bool = False,
    layers: int = HIDDEN_LAYERS,
    habits: Habits = Habits(),
) -> list[float]:
    """Run ``steps`` steps; return each step's host start time (perf_counter, s) and, last,
    the time the device finished the final step."""
    params = init_params(layers)
    constant = synthetic_batch() if synthetic or habits.eval_every else None
    dataset = None if synthetic else make_dataset(record, workers, read_threads, steps)
    it = None if dataset is None else iter(dataset)
    log = RemoteLog(habits.log_ms) if habits.log_every else None
    # The heap a long-lived program builds up (caches, records): each full collection walks it.
    heap = [[i] for i in range(habits.gc_objects)] if habits.gc_every else []
    train_step = make_train_step(habits.device_repeat, habits.callback_ms)
    scratch = tempfile.TemporaryDirectory(prefix="train_family_ckpt_")
    starts: list[float] = []
    previous: jax.Array | None = None
    metrics: list[jax.Array] = []  # MaxText's buffer: this step's metrics, read one step late
    for step in range(steps):
        starts.append(time.perf_counter())
        if habits.epoch_steps and step and step % habits.epoch_steps == 0 and dataset is not None:
            it = iter(dataset)  # the next epoch: a new iterator, as `for batch in dataset` makes
        batch = constant if synthetic else next(it)
        if habits.host_wait_ms:
            time.sleep(habits.host_wait_ms / 1000.0)
        if habits.host_cpu_ms:
            burn_cpu(habits.host_cpu_ms / 1000.0)
        params, loss = train_step(params, batch["x"], batch["y"])
        if read == "float":
            print(f"step {step} loss {float(loss):.4f}")
        elif read == "device_get":
            print(f"step {step} loss {jax.device_get(loss):.4f}")
        elif read == "block":
            loss.block_until_ready()
        elif read == "item":
            print(f"step {step} loss {loss.item():.4f}")
        elif read == "asarray":
            print(f"step {step} loss {np.asarray(loss):.4f}")
        elif read == "prev":
            if previous is not None:
                print(f"step {step - 1} loss {float(previous):.4f}")
            previous = loss
        elif read == "every10" and step % 10 == 0:
            print(f"step {step} loss {float(loss):.4f}")
        elif read == "buffer":
            if metrics and step % 10 == 0:
                print(f"step {step - 1} loss {float(metrics[-1]):.4f}")
            metrics = [loss]
        if _due(step, habits.eval_every):
            assert constant is not None
            losses = [
                eval_step(params, constant["x"], constant["y"]) for _ in range(habits.eval_batches)
            ]
            if habits.eval_score_host:
                # Each batch's metric read and scored on the host, one after another (a
                # ranking metric over the batch's scores: a sort of a million values each).
                scores = [host_score(float(value)) for value in losses]
                print(f"step {step} eval score {sum(scores) / len(scores):.4f}")
            else:
                print(f"step {step} eval loss {float(sum(losses)) / len(losses):.4f}")
        if _due(step, habits.checkpoint_every):
            checkpoint(params, Path(scratch.name), habits.checkpoint_ms / 1000.0)
        if log is not None and _due(step, habits.log_every):
            log.post({"step": step, "loss": float(loss)})
        if _due(step, habits.gc_every):
            gc.collect()
    jax.block_until_ready(params)
    scratch.cleanup()
    if log is not None:
        log.close()
    del heap
    starts.append(time.perf_counter())
    return starts


def habits_from(args: argparse.Namespace) -> Habits:
    return Habits(**{f.name: getattr(args, f.name) for f in dataclasses.fields(Habits)})


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--record", choices=sorted(RECORD_COSTS), default="io")
    parser.add_argument("--workers", type=int, default=1, help="mp_prefetch worker processes")
    parser.add_argument("--read-threads", type=int, default=1, help="Grain ReadOptions threads")
    parser.add_argument("--read", choices=READS, default="none", help="how the loss is read")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument(
        "--synthetic", action="store_true", help="one pre-built batch every step, no Grain"
    )
    parser.add_argument(
        "--hidden-layers",
        type=int,
        default=HIDDEN_LAYERS,
        help="hidden layers of the MLP: more make a longer step",
    )
    parser.add_argument("--checkpoint-every", type=int, default=0, metavar="N")
    parser.add_argument("--checkpoint-ms", type=float, default=250.0, metavar="MS")
    parser.add_argument("--eval-every", type=int, default=0, metavar="N")
    parser.add_argument("--eval-batches", type=int, default=20, metavar="K")
    parser.add_argument("--host-wait-ms", type=float, default=0.0, metavar="MS")
    parser.add_argument("--host-cpu-ms", type=float, default=0.0, metavar="MS")
    parser.add_argument("--callback-ms", type=float, default=0.0, metavar="MS")
    parser.add_argument("--device-repeat", type=int, default=0, metavar="R")
    parser.add_argument("--log-every", type=int, default=0, metavar="N")
    parser.add_argument("--log-ms", type=float, default=50.0, metavar="MS")
    parser.add_argument("--gc-every", type=int, default=0, metavar="N")
    parser.add_argument("--gc-objects", type=int, default=1_000_000, metavar="K")
    parser.add_argument("--epoch-steps", type=int, default=0, metavar="N")
    parser.add_argument("--eval-score-host", action="store_true")
    parser.add_argument("--stats-json", help="write step start times as JSON ('-': stdout)")
    parser.add_argument(
        "--profiler-port",
        type=int,
        help="serve jax's profiler on this port (jax.profiler.start_server), for capture --attach",
    )
    return parser


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    flags.FLAGS.mark_as_parsed()  # Grain's worker processes read absl flags
    if args.profiler_port:
        jax.profiler.start_server(args.profiler_port)

    starts = train(
        args.record,
        args.workers,
        args.read_threads,
        args.read,
        args.steps,
        args.synthetic,
        args.hidden_layers,
        habits_from(args),
    )
    if args.stats_json:
        text = json.dumps({"args": vars(args), "starts_s": starts})
        if args.stats_json == "-":
            print(text)
        else:
            Path(args.stats_json).write_text(text + "\n", encoding="utf-8")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
