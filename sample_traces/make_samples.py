"""Regenerate the bundled sample traces: tiny real JAX + Grain training runs on CPU.

Run from the repository root: ``python sample_traces/make_samples.py``. Each sample is a
real ``jax.profiler`` capture (Python tracer off, so each file stays well under 1 MB) of
a small MLP, traced for 8 steps after 60 untraced ones (so the trace shows the steady
state, not compilation and the steps dispatched ahead while jax's queue fills); the
scenarios differ only in how input is fed and whether the loop reads a device value every
step. What produced each file is listed in
``sample_traces/README.md``.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

import grain
import jax
import jax.numpy as jnp
import numpy as np
from absl import flags

HERE = Path(__file__).resolve().parent
BATCH = 32
FEATURES = 256
HIDDEN = 512


class SlowSource(grain.sources.RandomAccessDataSource):  # type: ignore[name-defined,misc]
    """Records that take ``delay_s`` each to produce, like a slow decode/augment."""

    def __init__(self, n: int, delay_s: float) -> None:
        self._n = n
        self._delay_s = delay_s

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, i: int) -> dict[str, np.ndarray]:
        if self._delay_s:
            time.sleep(self._delay_s)
        rng = np.random.default_rng(i)
        x = rng.standard_normal(FEATURES, dtype=np.float32)
        return {"x": x, "y": np.float32(x.sum() > 0)}


def _params() -> dict[str, jax.Array]:
    k1, k2 = jax.random.split(jax.random.key(0))
    return {
        "w1": jax.random.normal(k1, (FEATURES, HIDDEN)) * 0.05,
        "w2": jax.random.normal(k2, (HIDDEN, 1)) * 0.05,
    }


@jax.jit
def train_step(
    params: dict[str, jax.Array], x: jax.Array, y: jax.Array
) -> tuple[dict[str, jax.Array], jax.Array]:
    def loss_fn(p: dict[str, jax.Array]) -> jax.Array:
        h = jnp.tanh(x @ p["w1"])
        for _ in range(4):  # enough device work per step to see on a timeline
            h = jnp.tanh(h @ jnp.ones((HIDDEN, HIDDEN)) * 0.001 + h)
        logits = (h @ p["w2"])[:, 0]
        return jnp.mean((logits - y) ** 2)

    loss, grads = jax.value_and_grad(loss_fn)(params)
    return jax.tree.map(lambda p, g: p - 0.01 * g, params, grads), loss


# Steps run before the trace starts: compilation, then the ~32 steps a loop that never waits
# dispatches ahead while the CPU client's queue fills (see traceinspect capture's window).
WARMUP_STEPS = 60


def run(
    name: str, *, delay_s: float, sync: bool, read_threads: int, steps: int, logdir: Path
) -> Path:
    params = _params()
    options = grain.ReadOptions(num_threads=read_threads, prefetch_buffer_size=4)
    ds = grain.MapDataset.source(SlowSource(10_000, delay_s)).batch(BATCH)
    ds = ds.to_iter_dataset(options)
    if not sync:
        ds = ds.map(lambda b: b)  # keep a stage between source and loop
    it = iter(ds)
    # Warm up outside the trace, into the steady state.
    for _ in range(WARMUP_STEPS):
        batch = next(it)
        params, loss = train_step(params, batch["x"], batch["y"])
        if sync:
            float(loss)
    options = jax.profiler.ProfileOptions()
    options.python_tracer_level = 0
    options.host_tracer_level = 2
    tmp = Path(tempfile.mkdtemp(prefix=f"ti_{name}_"))
    jax.profiler.start_trace(tmp, profiler_options=options)
    for step in range(steps):
        with jax.profiler.StepTraceAnnotation("train", step_num=step):
            batch = next(it)
            params, loss = train_step(params, batch["x"], batch["y"])
            if sync:
                print(f"step {step} loss {float(loss):.4f}")
    jax.block_until_ready(params)
    jax.profiler.stop_trace()
    found = sorted(tmp.rglob("*.xplane.pb"))
    assert len(found) == 1, found
    out = logdir / f"{name}.xplane.pb"
    shutil.copyfile(found[0], out)
    shutil.rmtree(tmp)
    return out


SCENARIOS = {
    # Input is cheap (read ahead by 2 threads) and the loop never waits on the device.
    "cpu_mlp_fast_input": {"delay_s": 0.0, "sync": False, "read_threads": 2},
    # Each record sleeps 0.5 ms, read on the main thread (no read threads): 16 ms of input
    # per batch against ~3 ms of device work.
    "cpu_mlp_slow_input": {"delay_s": 0.0005, "sync": False, "read_threads": 0},
    # print(float(loss)) every step: the host waits for the device each step, then fetches
    # (from 2 read threads' buffer) and dispatches the next while the device idles.
    "cpu_mlp_sync_every_step": {"delay_s": 0.0, "sync": True, "read_threads": 2},
}


def pace(*, delay_s: float, sync: bool, read_threads: int, steps: int = 200) -> float:
    """Mean step time (ms) from step WARMUP_STEPS to the drained end, without the profiler."""
    params = _params()
    options = grain.ReadOptions(num_threads=read_threads, prefetch_buffer_size=4)
    ds = grain.MapDataset.source(SlowSource(10_000, delay_s)).batch(BATCH)
    it = iter(ds.to_iter_dataset(options).map(lambda b: b))
    start = 0.0
    for step in range(steps):
        if step == WARMUP_STEPS:
            start = time.perf_counter()
        batch = next(it)
        params, loss = train_step(params, batch["x"], batch["y"])
        if sync:
            float(loss)
    jax.block_until_ready(params)
    return (time.perf_counter() - start) * 1000 / (steps - WARMUP_STEPS)


def measure(repeats: int) -> None:
    """Each sample's pace with its cause and without it (no profiler), best of repeats."""
    runs: dict[str, list[float]] = {}
    for _ in range(repeats):
        for name, settings in SCENARIOS.items():
            runs.setdefault(name, []).append(pace(**settings))  # type: ignore[arg-type]
        runs.setdefault("device_reference", []).append(
            pace(delay_s=0.0, sync=False, read_threads=2)
        )
        runs.setdefault("slow_input_without_delay", []).append(
            pace(delay_s=0.0, sync=False, read_threads=0)
        )
    for name, values in runs.items():
        print(f"{name}: best {min(values):.2f} ms/step ({', '.join(f'{v:.2f}' for v in values)})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--out", type=Path, default=HERE)
    parser.add_argument("--measure", type=int, metavar="REPEATS", help="time without the profiler")
    parser.add_argument("names", nargs="*", default=list(SCENARIOS))
    args = parser.parse_args()
    flags.FLAGS.mark_as_parsed()
    if args.measure:
        measure(args.measure)
        return
    for name in args.names:
        path = run(name, steps=args.steps, logdir=args.out, **SCENARIOS[name])  # type: ignore[arg-type]
        print(f"{path}: {path.stat().st_size:,} bytes", file=sys.stderr)


if __name__ == "__main__":
    main()
