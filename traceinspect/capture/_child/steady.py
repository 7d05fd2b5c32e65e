"""The steady-state rule that opens capture's default window: block means of the host's
step times that agree and do not move one way. Pure: step start times in, a decision out
(``tests/test_window.py`` runs it on recorded series)."""

from __future__ import annotations

import itertools
from collections.abc import Sequence

# The steady-state rule (the default window; ``--skip-steps N`` replaces it with a fixed skip).
# Host step times are cut into blocks of at least STEADY_BLOCK_STEPS steps (twice the Grain
# worker count when larger: mp_prefetch delivers in bursts of about one batch per worker) and
# at least STEADY_BLOCK_S seconds. The run is steady once the mean step time of the last
# STEADY_BLOCKS blocks agrees within STEADY_TOLERANCE (largest / smallest) and does not move
# one way (each block faster than the last, or each slower: still settling, however close;
# MaxText at 4 workers opened on 546.6, 421.8, 406.9 ms). Step 0 (tracing and
# compiling) is never in a block. Measured on the scenario family (sample_traces/scenarios/
# family): a loop that never waits dispatches ~30 steps in 0.1-1 ms each while the CPU client's
# queue and the prefetch buffers fill, then settles; settled blocks differ by 3-20% on a shared
# 2-core machine, while a block that still holds the fill phase is 2-30x faster than the next.
STEADY_BLOCK_STEPS = 8
STEADY_BLOCK_S = 0.5
STEADY_BLOCKS = 3
STEADY_TOLERANCE = 1.35


class _Steady:
    """Block means of host step times, to tell when a run has settled (see STEADY_*)."""

    def __init__(self, block_steps: int) -> None:
        self.block_steps = block_steps
        self.block_start = 1  # step 0 compiles: never in a block
        self.blocks: list[tuple[int, int, float]] = []  # (first step, last step, mean ms)
        #: The last block must start at or after this step (see :meth:`resume_after`).
        self.fresh_from = 0

    def resume_after(self, step: int) -> None:
        """Step ``step`` was disturbed (capture paused the script there): the block it was
        in is dropped, blocks start again after it, and the run is steady again only once a
        block after it agrees with the ones before (it shows the disturbance has passed)."""
        self.block_start = step + 1
        self.fresh_from = step + 1

    def add(self, starts_ns: Sequence[int], count: int | None = None) -> None:
        """Close every block complete in the first ``count`` (default all) of ``starts_ns``,
        the start times of steps 0, 1, ..."""
        n = len(starts_ns) if count is None else count
        while True:
            first = self.block_start
            last = first + self.block_steps  # the step whose start ends the block
            if last >= n:
                return
            while last < n - 1 and starts_ns[last] - starts_ns[first] < STEADY_BLOCK_S * 1e9:
                last += 1
            span = starts_ns[last] - starts_ns[first]
            if span < STEADY_BLOCK_S * 1e9:
                return
            self.blocks.append((first, last - 1, span / (last - first) / 1e6))
            self.block_start = last

    def _last_means(self) -> list[float]:
        return [b[2] for b in self.blocks[-STEADY_BLOCKS:]]

    def trend(self) -> str | None:
        """ "falling" or "rising" when the last blocks' means move one way, else None."""
        means = self._last_means()
        if len(means) < STEADY_BLOCKS:
            return None
        pairs = list(itertools.pairwise(means))
        if all(b < a for a, b in pairs):
            return "falling"
        if all(b > a for a, b in pairs):
            return "rising"
        return None

    def is_steady(self) -> bool:
        means = self._last_means()
        if len(means) < STEADY_BLOCKS or self.trend() is not None:
            return False
        if self.blocks[-1][0] < self.fresh_from:
            return False
        return min(means) > 0 and max(means) / min(means) <= STEADY_TOLERANCE

    def _means(self) -> str:
        return ", ".join(f"{m:.1f}" for m in self._last_means())

    def describe(self) -> str:
        means = self._means()
        if not means:
            return "no complete block"
        trend = self.trend()
        still = f", still {trend}" if trend else ""
        return f"mean step of the last blocks {means} ms{still}"

    def reason(self, index: int) -> str:
        first = self.blocks[-STEADY_BLOCKS][0]
        return (
            f"steady from step {first}: {STEADY_BLOCKS} blocks of steps since then have mean "
            f"step times within {STEADY_TOLERANCE - 1:.0%} of each other, not moving one way "
            f"({self._means()} ms); traced from step {index}"
        )
