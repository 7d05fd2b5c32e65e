"""Test script: a small JAX + Grain loop whose mp_prefetch workers burn CPU, wait, or make
large batches, for the findings' end-to-end tests (tests/test_findings_capture.py).

Each batch is ``--records`` records of ``--batch-mb / --records`` MB; each record costs
``--cpu-ms / --records`` ms of CPU (measured on the thread's own clock, so that a shared
core makes it slower on the wall clock, as real decoding would be) and ``--wait-ms /
--records`` ms of waiting (a read that holds no core). The jitted step does about
``--device-ms`` ms of matrix products (calibrated once at start), at least one.
"""

from __future__ import annotations

import argparse
import functools
import time

import numpy as np

FEATURES = 256


def burn_cpu(seconds: float) -> None:
    """Use ``seconds`` of this thread's CPU time, however long that takes on the wall clock."""
    end = time.thread_time() + seconds
    x = 0
    while time.thread_time() < end:
        for i in range(200):
            x += i * i


def make_record(index: int, *, cpu_s: float, wait_s: float, floats: int) -> np.ndarray:
    if wait_s:
        time.sleep(wait_s)
    if cpu_s:
        burn_cpu(cpu_s)
    # np.full touches every page: the batch is real memory, not a lazy zero mapping.
    return np.full(floats, index % 7, dtype=np.float32)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--buffer", type=int, default=1, help="per_worker_buffer_size")
    parser.add_argument("--records", type=int, default=4, help="records per batch")
    parser.add_argument("--batch-mb", type=float, default=0.05)
    parser.add_argument("--cpu-ms", type=float, default=0.0, help="CPU per batch")
    parser.add_argument("--wait-ms", type=float, default=0.0, help="waiting per batch")
    parser.add_argument("--read-threads", type=int, default=1)
    parser.add_argument("--device-ms", type=float, default=0.0)
    args = parser.parse_args()

    # Grain's mp_prefetch workers read absl flags.
    from absl import flags

    flags.FLAGS.mark_as_parsed()
    import grain
    import jax
    import jax.numpy as jnp

    floats = max(FEATURES, int(args.batch_mb * 1e6 / 4 / args.records) // FEATURES * FEATURES)
    record = functools.partial(
        make_record,
        cpu_s=args.cpu_ms / 1000 / args.records,
        wait_s=args.wait_ms / 1000 / args.records,
        floats=floats,
    )
    ds = (
        grain.MapDataset.range(1_000_000)
        .map(record)
        .batch(args.records, drop_remainder=True)
        .to_iter_dataset(grain.ReadOptions(num_threads=args.read_threads, prefetch_buffer_size=2))
        .mp_prefetch(
            grain.MultiprocessingOptions(
                num_workers=args.workers, per_worker_buffer_size=args.buffer
            )
        )
    )

    @jax.jit
    def step(w: jax.Array, x: jax.Array, products: jax.Array) -> jax.Array:
        # Reads only a slice of the batch: the device's work stays small however big it is.
        m = jax.lax.fori_loop(0, products, lambda _, m: jnp.tanh(m @ w), w)
        return w + 1e-3 * (m.mean() + jnp.tanh(x[:, :FEATURES] @ w).mean())

    w = jnp.eye(FEATURES, dtype=jnp.float32)
    products = jnp.int32(1)
    if args.device_ms:
        x = np.zeros((args.records, FEATURES), np.float32)
        step(w, x, jnp.int32(50)).block_until_ready()
        start = time.perf_counter()
        step(w, x, jnp.int32(50)).block_until_ready()
        per_product_ms = (time.perf_counter() - start) * 1000 / 50
        products = jnp.int32(max(1, round(args.device_ms / per_product_ms)))
    it = iter(ds)
    for _ in range(args.steps):
        w = step(w, next(it), products)
    print(f"done {float(w.sum()):.3f}")


if __name__ == "__main__":
    main()
