"""Test script: a Grain pipeline whose 2 ``mp_prefetch`` workers are still starting when a
terminal's Ctrl-C comes (the test sends it once ``--marker`` exists, written just before the
first ``next()``, which starts the workers: they import Grain and jax for a second or more).

The workers die of the SIGINT while they import. With Grain's worker profiling on, the main
process waited in jax's ``register_subprocess`` for the dead worker's profiler server holding
the GIL, and no thread of the script ran again.
"""

import pathlib
import sys

import grain
import numpy as np
from absl import flags


class Source:
    def __len__(self) -> int:
        return 4096

    def __getitem__(self, i: int) -> dict[str, np.ndarray]:
        return {"x": np.full((16,), i, dtype=np.float32)}


if __name__ == "__main__":
    flags.FLAGS.mark_as_parsed()
    marker = pathlib.Path(sys.argv[1])
    ds = grain.MapDataset.source(Source()).batch(32).repeat().to_iter_dataset()
    ds = ds.mp_prefetch(grain.MultiprocessingOptions(num_workers=2))
    it = iter(ds)
    marker.touch()
    for _ in range(100_000):
        next(it)
