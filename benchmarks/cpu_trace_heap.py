"""What a long ``jax.profiler`` trace does to a loop on XLA's CPU backend: its heap and its step.

A pure JAX loop (an MLP of ``--layers`` square ``--hidden``-wide layers, its Adam-like update
in the jitted step, batch 8) runs ``--steps`` steps twice, each in a fresh process: once with
``jax.profiler.start_trace`` from its first step to its last (``traced``), once without
(``plain``). Every 10 steps it waits for the device and notes the time, the process's
largest resident memory so far and its minor page faults. Printed: each 10-step block's
time (ms a step) and memory (MiB) in both runs, then the ratio of the traced run's last
third to its first third and to the plain run's last third.

    python benchmarks/cpu_trace_heap.py                       # 1536 wide, 4 layers, 300 steps
    python benchmarks/cpu_trace_heap.py --hidden 512 --steps 1200

Measured on this project's 2-core machine (jax 0.10.2 and 0.12.0.1, 2026-11-29): traced,
the resident memory grows about 30 MB a step (the step's buffers, 9.4 MB each: the freed
ones are not reused while the trace's small allocations sit between them) to 9 GB after 300
steps, against a flat 0.9 GB plain; after 100-190 steps (8-10 GB on 24 GiB) the step's ops
run 3-7x slower (the blocks go from ~33 to 75-130 ms a step) until the trace stops. A
512-wide model (9x smaller buffers) ran 1,200 traced steps without the slowdown.
``MALLOC_MMAP_THRESHOLD_=1048576`` keeps the memory flat but makes every step 1.7x slower
(each buffer a fresh mapping). It is what makes a long early trace slow the window's steps
of capture's Flax NNX + Orbax loop 4x (``sample_traces/frameworks/orbax_MEASUREMENTS.md``);
a recurring stall's expected step takes the window's floors over that slowdown
(``RecurringStall.traced_slowdown``).
"""

from __future__ import annotations

import argparse
import itertools
import json
import subprocess
import sys
from typing import Any

BLOCK = 10


def _loop(hidden: int, layers: int, steps: int, traced: bool, logdir: str) -> None:
    import resource
    import time

    import jax
    import jax.numpy as jnp

    key = jax.random.PRNGKey(0)
    params = [
        jax.random.normal(jax.random.fold_in(key, i), (hidden, hidden)) * 0.02
        for i in range(layers)
    ]
    first = [jnp.zeros_like(p) for p in params]
    second = [jnp.zeros_like(p) for p in params]

    def loss(ps: list[Any], x: Any) -> Any:
        h = x
        for p in ps:
            h = jax.nn.relu(h @ p) + h
        return (h**2).mean()

    @jax.jit
    def step(ps: list[Any], m: list[Any], v: list[Any], x: Any) -> Any:
        g = jax.grad(loss)(ps, x)
        m = [0.9 * a + 0.1 * b for a, b in zip(m, g, strict=True)]
        v = [0.999 * a + 0.001 * b * b for a, b in zip(v, g, strict=True)]
        ps = [p - 1e-3 * a / (jnp.sqrt(b) + 1e-8) for p, a, b in zip(ps, m, v, strict=True)]
        return ps, m, v

    x = jnp.ones((8, hidden))
    if traced:
        jax.profiler.start_trace(logdir)
    marks = []
    for i in range(steps + 1):
        params, first, second = step(params, first, second, x)
        if i % BLOCK == 0:
            jax.block_until_ready(params)
            usage = resource.getrusage(resource.RUSAGE_SELF)
            marks.append((time.perf_counter(), usage.ru_maxrss / 1024, usage.ru_minflt))
    if traced:
        jax.profiler.stop_trace()
    blocks = [
        {
            "ms_per_step": round((b[0] - a[0]) * 1000 / BLOCK, 1),
            "max_rss_mib": round(b[1]),
            "minor_faults": b[2] - a[2],
        }
        for a, b in itertools.pairwise(marks)
    ]
    print(json.dumps(blocks))


def _run(args: argparse.Namespace, traced: bool) -> list[dict[str, Any]]:
    command = [
        sys.executable,
        __file__,
        "--child",
        "--hidden",
        str(args.hidden),
        "--layers",
        str(args.layers),
        "--steps",
        str(args.steps),
        *(["--traced"] if traced else []),
    ]
    done = subprocess.run(command, capture_output=True, text=True, check=True)
    blocks: list[dict[str, Any]] = json.loads(done.stdout.strip().splitlines()[-1])
    return blocks


def _third(blocks: list[dict[str, Any]], last: bool) -> float:
    n = max(1, len(blocks) // 3)
    part = blocks[-n:] if last else blocks[1 : n + 1]
    return sum(b["ms_per_step"] for b in part) / len(part)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hidden", type=int, default=1536)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--traced", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--logdir", default="/tmp/traceinspect-cpu-trace-heap")
    args = parser.parse_args()
    if args.child:
        _loop(args.hidden, args.layers, args.steps, args.traced, args.logdir)
        return
    plain, traced = _run(args, False), _run(args, True)
    for name, blocks in (("plain", plain), ("traced", traced)):
        print(f"{name:7s} ms/step  " + " ".join(f"{b['ms_per_step']:.0f}" for b in blocks))
        print(f"{name:7s} MiB      " + " ".join(str(b["max_rss_mib"]) for b in blocks))
    print(
        f"traced last third / first third: {_third(traced, True) / _third(traced, False):.2f}x; "
        f"traced / plain, last third: {_third(traced, True) / _third(plain, True):.2f}x "
        f"(largest memory {traced[-1]['max_rss_mib']} MiB traced, {plain[-1]['max_rss_mib']} plain)"
    )


if __name__ == "__main__":
    main()
