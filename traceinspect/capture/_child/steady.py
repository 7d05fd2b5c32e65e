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
        #: When step ``block_start`` started (None until it is seen).
        self.block_start_ns: int | None = None
        #: The next step expected (steps are seen once each, in order).
        self.next_step = 0
        self.blocks: list[tuple[int, int, float]] = []  # (first step, last step, mean ms)
        #: The last block must start at or after this step (see :meth:`resume_after`).
        self.fresh_from = 0

    def resume_after(self, step: int) -> None:
        """Step ``step`` was disturbed (capture paused the script there): the block it was
        in is dropped, blocks start again after it, and the run is steady again only once a
        block after it agrees with the ones before (it shows the disturbance has passed)."""
        self.block_start = step + 1
        self.block_start_ns = None
        self.fresh_from = step + 1

    def step(self, index: int, start_ns: int) -> None:
        """Step ``index`` started at ``start_ns``: close the current block if this start ends
        it (it holds ``block_steps`` steps at least and lasts ``STEADY_BLOCK_S`` at least).

        Constant time and memory, however long the run: capture feeds every step, and keeps
        only the first steps' times for its report. A step seen again is ignored; after a
        gap (steps never seen), the block starts again at ``index``."""
        if index < self.next_step:
            return
        gap = index > self.next_step
        self.next_step = index + 1
        if index < self.block_start:
            return
        first_ns = self.block_start_ns
        if gap or index == self.block_start or first_ns is None:
            self.block_start, self.block_start_ns = index, start_ns
            return
        first = self.block_start
        span = start_ns - first_ns
        if index - first >= self.block_steps and span >= STEADY_BLOCK_S * 1e9:
            self.blocks.append((first, index - 1, span / (index - first) / 1e6))
            self.block_start, self.block_start_ns = index, start_ns

    def add(self, starts_ns: Sequence[int], count: int | None = None) -> None:
        """Feed the steps not yet seen among the first ``count`` (default all) of
        ``starts_ns``, the start times of steps 0, 1, ... (a recorded series, or the steps a
        step source saw before it was chosen)."""
        n = len(starts_ns) if count is None else min(count, len(starts_ns))
        for index in range(self.next_step, n):
            self.step(index, starts_ns[index])

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
