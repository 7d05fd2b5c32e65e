"""A training step made of many small jitted calls (``--op-by-op``: 26 calls a step), or the
same step as one jitted function: the ``op_by_op`` finding's scenario.

An MLP of ``LAYERS`` small layers trained with a hand-written backward pass; with
``--op-by-op`` every layer's forward, backward and update is its own ``jax.jit`` call
(3 x LAYERS dispatches a step, each a few microseconds of device work), as code that jits
its building blocks rather than its step does. ``--measure`` times the steady steps of both
forms without the profiler and prints them as JSON::

    python sample_traces/scenarios/op_by_op/train_op_by_op.py --op-by-op --steps 200
    python sample_traces/scenarios/op_by_op/train_op_by_op.py --measure
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable

import jax
import jax.numpy as jnp

LAYERS = 8
WIDTH = 32
BATCH = 16
Params = list[jax.Array]


@jax.jit
def layer_forward(w: jax.Array, h: jax.Array) -> jax.Array:
    return jnp.tanh(h @ w)


@jax.jit
def layer_backward(w: jax.Array, h: jax.Array, out: jax.Array, g: jax.Array) -> tuple:
    d = g * (1 - out**2)
    return d @ w.T, h.T @ d


@jax.jit
def update(w: jax.Array, gw: jax.Array) -> jax.Array:
    return w - 0.01 * gw


def step_op_by_op(params: Params, x: jax.Array) -> Params:
    hs, outs = [], []
    h = x
    for w in params:
        hs.append(h)
        h = layer_forward(w, h)
        outs.append(h)
    g = 2 * h / h.size
    new = list(params)
    for i in reversed(range(len(params))):
        g, gw = layer_backward(params[i], hs[i], outs[i], g)
        new[i] = update(params[i], gw)
    return new


def _loss(params: Params, x: jax.Array) -> jax.Array:
    h = x
    for w in params:
        h = jnp.tanh(h @ w)
    return jnp.mean(h**2)


@jax.jit
def step_jitted(params: Params, x: jax.Array) -> Params:
    grads = jax.grad(_loss)(params, x)
    return [w - 0.01 * g for w, g in zip(params, grads, strict=True)]


def run(step: Callable[[Params, jax.Array], Params], steps: int, annotate: bool) -> list[float]:
    keys = jax.random.split(jax.random.key(0), LAYERS + 1)
    params = [jax.random.normal(k, (WIDTH, WIDTH)) * 0.3 for k in keys[:-1]]
    x = jax.random.normal(keys[-1], (BATCH, WIDTH))
    starts = []
    for i in range(steps):
        starts.append(time.perf_counter())
        if annotate:
            with jax.profiler.StepTraceAnnotation("train", step_num=i):
                params = step(params, x)
        else:
            params = step(params, x)
    jax.block_until_ready(params)
    starts.append(time.perf_counter())
    return starts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--op-by-op", action="store_true", help="one jit call per layer op")
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--measure", action="store_true", help="time both forms, print JSON")
    args = parser.parse_args()
    if args.measure:
        out = {}
        for name, step in (("op_by_op", step_op_by_op), ("jitted", step_jitted)):
            starts = run(step, args.steps, annotate=False)
            steady = starts[len(starts) // 2 :]
            out[f"{name}_ms"] = round((steady[-1] - steady[0]) / (len(steady) - 1) * 1e3, 4)
        # Each layer's forward, backward and update, and the loss gradient's two operations.
        out["dispatches_per_step_op_by_op"] = 3 * LAYERS + 2
        print(json.dumps(out))
        return
    run(step_op_by_op if args.op_by_op else step_jitted, args.steps, annotate=True)


if __name__ == "__main__":
    main()
