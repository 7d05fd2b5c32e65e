"""Measure what ``traceinspect capture`` costs per training step (Python tracer off).

A small real JAX + Grain loop (an MLP, a Grain map/batch pipeline with read threads) runs in
three ways, each in a fresh process, alternating so that machine noise hits all alike:

- ``plain``: ``python this_file.py --loop`` with no traceinspect at all;
- ``hooks``: under ``run_capture`` with the window after the measured steps: the cost of our
  step detection, batch and host-read hooks with no trace running;
- ``traced``: under ``run_capture`` with the window exactly on the measured steps
  (``--skip-steps`` = warm-up, ``--steps`` = measured), Python tracer off, host tracer
  level 2 (the default; on the CPU backend it records every XLA op as a host event);
- ``traced-l1``: the same with host tracer level 1 (user and library annotations only);
- ``traced-nosampler``: as ``traced``, with the training thread's stack sampler off
  (``--sample-interval-ms 0``): ``traced`` against it is what the sampler costs (its target:
  under 2% of the step).

The loop times the measured steps itself (``perf_counter`` between two
``block_until_ready``), so start-up, compilation and the trace export after the window are
not counted. Reported: the median over repeats of the mean step time, and the ratios.

    python benchmarks/capture_overhead.py                # 5 repeats x 5 modes
    python benchmarks/capture_overhead.py --repeat 9 --steps 60 --json out.json
    python benchmarks/capture_overhead.py --hidden 2048      # longer steps
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
WARMUP = 5


def _example(index: int) -> dict[str, Any]:
    import numpy as np

    rng = np.random.default_rng(index)
    x = rng.standard_normal(256, dtype=np.float32)
    return {"x": x, "y": np.float32(x[:8].sum())}


def _loop(steps: int, hidden: int, out: Path) -> None:
    """The measured training loop (runs in the child process)."""
    from absl import flags

    flags.FLAGS.mark_as_parsed()
    import grain
    import jax
    import jax.numpy as jnp

    ds = (
        grain.MapDataset.range(10_000_000)
        .map(_example)
        .batch(64, drop_remainder=True)
        .to_iter_dataset(grain.ReadOptions(num_threads=2, prefetch_buffer_size=8))
    )
    it = iter(ds)
    key = jax.random.key(0)
    params = {
        "w1": jax.random.normal(key, (256, hidden)) * 0.05,
        "w2": jax.random.normal(key, (hidden, hidden)) * 0.05,
        "w3": jax.random.normal(key, (hidden, 1)) * 0.05,
    }

    @jax.jit
    def train_step(p: dict[str, jax.Array], batch: dict[str, jax.Array]) -> Any:
        def loss_fn(p: dict[str, jax.Array]) -> jax.Array:
            h = jax.nn.relu(batch["x"] @ p["w1"])
            h = jax.nn.relu(h @ p["w2"])
            return jnp.mean(((h @ p["w3"])[:, 0] - batch["y"]) ** 2)

        loss, grads = jax.value_and_grad(loss_fn)(p)
        return jax.tree.map(lambda a, g: a - 1e-3 * g, p, grads), loss

    loss = jnp.zeros(())
    start = elapsed = 0.0
    # One step more than measured: its batch fetch is what closes capture's window.
    for step in range(WARMUP + steps + 1):
        if step == WARMUP:
            loss.block_until_ready()
            start = time.perf_counter()
        elif step == WARMUP + steps:
            loss.block_until_ready()
            elapsed = time.perf_counter() - start
        params, loss = train_step(params, next(it))
    out.write_text(json.dumps({"mean_step_ms": elapsed / steps * 1e3}))


def _run_mode(mode: str, steps: int, hidden: int, workdir: Path) -> float:
    out = workdir / f"{mode}.json"
    command = [sys.executable, str(Path(__file__).resolve()), "--loop", str(steps), str(hidden)]
    command.append(str(out))
    if mode == "plain":
        subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    else:
        sys.path.insert(0, str(REPO))
        from traceinspect.capture import CaptureOptions, run_capture

        # "traced": the window is exactly the measured steps; "hooks": it opens after them.
        traced = mode.startswith("traced")
        options = CaptureOptions(
            logdir=str(workdir / "logs"),
            skip_steps=WARMUP if traced else WARMUP + steps + 10,
            steps=steps,
            host_tracer_level=1 if mode == "traced-l1" else 2,
            **({"sample_interval_ms": 0.0} if mode == "traced-nosampler" else {}),
            quiet=True,
        )
        result = run_capture(command, options)
        if result.exit_code != 0:
            raise SystemExit(f"{mode} run failed: {result.summary()}")
        if traced and (result.partial or not result.trace_paths):
            raise SystemExit(f"traced run did not capture its window: {result.summary()}")
    value: float = json.loads(out.read_text())["mean_step_ms"]
    return value


def main() -> None:
    if len(sys.argv) == 5 and sys.argv[1] == "--loop":
        _loop(int(sys.argv[2]), int(sys.argv[3]), Path(sys.argv[4]))
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5, help="runs per mode")
    parser.add_argument("--steps", type=int, default=40, help="measured steps per run")
    parser.add_argument("--hidden", type=int, default=512, help="MLP width (step size)")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()

    modes = ("plain", "hooks", "traced", "traced-l1", "traced-nosampler")
    times: dict[str, list[float]] = {m: [] for m in modes}
    with tempfile.TemporaryDirectory(prefix="capture_overhead_") as tmp:
        for i in range(args.repeat):
            for mode in modes:
                times[mode].append(_run_mode(mode, args.steps, args.hidden, Path(tmp)))
            print(
                f"repeat {i + 1}/{args.repeat}: "
                + ", ".join(f"{m} {times[m][-1]:.3f} ms" for m in modes),
                file=sys.stderr,
            )
    median = {m: statistics.median(v) for m, v in times.items()}
    best = {m: min(v) for m, v in times.items()}
    print(
        f"step time over {args.repeat} runs x {args.steps} steps, MLP width {args.hidden}"
        " (Python tracer off):"
    )
    print(f"  {'mode':10s} {'median':>9s} {'min':>9s}   ratio to plain (median, min)")
    for mode in modes:
        ratios = f"{median[mode] / median['plain']:.3f}, {best[mode] / best['plain']:.3f}"
        print(f"  {mode:10s} {median[mode]:7.3f}ms {best[mode]:7.3f}ms   {ratios}")
    sampler = median["traced"] / median["traced-nosampler"]
    print(f"  the stack sampler (traced / traced-nosampler, median): {sampler:.3f} (target < 1.02)")
    if args.json:
        figures = {"steps": args.steps, "hidden": args.hidden, "times_ms": times}
        args.json.write_text(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
