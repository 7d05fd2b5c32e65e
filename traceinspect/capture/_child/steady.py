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
# one way (each block faster than the last, or each slower, by more than STEADY_TREND in all:
# still settling; MaxText at 4 workers opened on 546.6, 421.8, 406.9 ms). Step 0 (tracing and
# compiling) is never in a block. Measured on the scenario family (sample_traces/scenarios/
# family): a loop that never waits dispatches ~30 steps in 0.1-1 ms each while the CPU client's
# queue and the prefetch buffers fill, then settles; settled blocks differ by 3-20% on a shared
# 2-core machine, while a block that still holds the fill phase is 2-30x faster than the next.
STEADY_BLOCK_STEPS = 8
STEADY_BLOCK_S = 0.5
STEADY_BLOCKS = 3
STEADY_TOLERANCE = 1.35
# Means that move one way are still settling only when they move by more than settled blocks
# differ (STEADY_TREND, largest / smallest): three settled blocks are in order one time in
# three by chance alone. A Flax NNX loop's settled blocks went 15.2, 14.4, 13.0 ms and 13.3,
# 13.7, 15.1 ms on the 2-core machine (x1.17, x1.14), which kept 2 of 3 default captures from
# opening for 70-100 steps, and a CI run's past its 300th and last step; settled blocks differ
# by up to 20% (above). MaxText's settle, 546.6, 421.8, 406.9 ms, moved x1.34.
STEADY_TREND = 1.2
# A stall every N steps (a synchronous checkpoint every 25 steps: 250 ms against 10 ms steps) puts
# one, two or no stalls in a block: its means never agree (18.8, 27.3, 12.6 ms on a GPU), and the
# run was never called steady. A step is a stall when it lasts STALL_FACTOR times the mean of the
# last STALL_HISTORY steps (judged once STALL_JUDGED steps are in it); once STALL_SEEN stalls are
# evenly spaced (give or take a step) the rule knows the period and cuts a second series of
# blocks, each a whole number of periods (at least STALL_BLOCK_PERIODS), each holding as many
# stalls as the next: the run is steady when either series agrees (the first is the rule as it
# was: a loop that reads every 10th step still opens where it did). With a period known, the
# default window holds STALL_WINDOW_PERIODS periods, so that the trace shows what the stalls are.
STALL_FACTOR = 5.0
STALL_HISTORY = 64
STALL_JUDGED = 16
STALL_SEEN = 3
STALL_BLOCK_PERIODS = 1
STALL_WINDOW_PERIODS = 2
# Periods longer than this are not worth blocks of their own (the rule's other limits hold);
# shorter than STALL_MIN_PERIOD they are a pipeline's bursts, which blocks of twice the worker
# count already hold whole.
STALL_MIN_PERIOD = 5
STALL_MAX_PERIOD = 500


class _Steady:
    """Block means of host step times, to tell when a run has settled (see STEADY_*)."""

    def __init__(
        self, block_steps: int, period: int | None = None, trend_above: float = STEADY_TREND
    ) -> None:
        self.block_steps = block_steps
        #: Means in order move one way only beyond this (largest / smallest): STEADY_TREND
        #: for capture's window; 1.0 (any order) for isolate's phases, whose figures are set
        #: against each other within 20%, where a drift under 20% inside one could move the
        #: verdict (a phase waits longer instead; its time limit bounds it).
        self.trend_above = trend_above
        self.block_start = 1  # step 0 compiles: never in a block
        #: When step ``block_start`` started (None until it is seen).
        self.block_start_ns: int | None = None
        #: The next step expected (steps are seen once each, in order).
        self.next_step = 0
        self.blocks: list[tuple[int, int, float]] = []  # (first step, last step, mean ms)
        #: The last block must start at or after this step (see :meth:`resume_after`).
        self.fresh_from = 0
        #: A stall's period in steps, once seen (see STALL_*): this series' blocks are whole
        #: periods when given; else the rule learns it and then cuts ``by_period``.
        self.period: int | None = period
        self._learns = period is None
        self.by_period: _Steady | None = None
        self._previous: tuple[int, int] | None = None  # (index, start) of the step before
        self._walls: list[int] = []  # the last STALL_HISTORY steps' times (ns)
        self._stalls: list[int] = []  # the steps found to be stalls

    def resume_after(self, step: int) -> None:
        """Step ``step`` was disturbed (capture paused the script there): the block it was
        in is dropped, blocks start again after it, and the run is steady again only once a
        block after it agrees with the ones before (it shows the disturbance has passed)."""
        self.block_start = step + 1
        self.block_start_ns = None
        self.fresh_from = step + 1
        if self.by_period is not None:
            self.by_period.resume_after(step)

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
        self._learn_period(index, start_ns, gap)
        if index < self.block_start:
            return
        first_ns = self.block_start_ns
        if gap or index == self.block_start or first_ns is None:
            self.block_start, self.block_start_ns = index, start_ns
            return
        first = self.block_start
        span = start_ns - first_ns
        whole = self.period is None or self._learns or (index - first) % self.period == 0
        if index - first >= self.block_steps and span >= STEADY_BLOCK_S * 1e9 and whole:
            self.blocks.append((first, index - 1, span / (index - first) / 1e6))
            self.block_start, self.block_start_ns = index, start_ns

    def _learn_period(self, index: int, start_ns: int, gap: bool) -> None:
        """Watch the step that just ended (``index - 1``) for a stall; once stalls recur
        evenly, blocks span whole periods from the next step on."""
        previous, self._previous = self._previous, (index, start_ns)
        if self.by_period is not None:
            self.by_period.step(index, start_ns)
            return
        if not self._learns or previous is None or gap or previous[0] < 1:
            return
        wall = start_ns - previous[1]
        history = self._walls
        # Judged against enough history: the first steps are few to average over.
        if len(history) >= STALL_JUDGED:
            # Against the mean, not the median: a host that runs ahead of the device takes
            # 0.1-14 ms a step between stalls of 700 ms (the CPU backend's queue), whose
            # median would make every longer step a stall.
            mean = sum(history) / len(history)
            if mean > 0 and wall > STALL_FACTOR * mean:
                self._stalls.append(previous[0])
        history.append(wall)
        if len(history) > STALL_HISTORY:
            del history[0]
        stalls = self._stalls[-STALL_SEEN:]
        if len(stalls) < STALL_SEEN:
            return
        spacing = [b - a for a, b in itertools.pairwise(stalls)]
        period = max(spacing)
        if STALL_MIN_PERIOD <= period <= STALL_MAX_PERIOD and period - min(spacing) <= 1:
            self.period = period
            # Blocks of whole periods from here: those cut before hold uneven numbers of stalls.
            self.by_period = _Steady(
                max(self.block_steps, STALL_BLOCK_PERIODS * period), period, self.trend_above
            )
            self.by_period.block_start = self.by_period.next_step = index
            self.by_period.fresh_from = self.fresh_from
            self.by_period.step(index, start_ns)

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
        """ "falling" or "rising" when the last blocks' means move one way by more than
        settled blocks differ (STEADY_TREND), else None."""
        means = self._last_means()
        if len(means) < STEADY_BLOCKS or min(means) <= 0:
            return None
        if max(means) / min(means) <= self.trend_above:
            return None
        pairs = list(itertools.pairwise(means))
        if all(b < a for a, b in pairs):
            return "falling"
        if all(b > a for a, b in pairs):
            return "rising"
        return None

    def is_steady(self) -> bool:
        return self._agrees() or (self.by_period is not None and self.by_period._agrees())

    def steady_by_period(self) -> bool:
        """Steady by the blocks of whole periods only (the window then holds two periods)."""
        return not self._agrees() and self.by_period is not None and self.by_period._agrees()

    def _agrees(self) -> bool:
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
        if self.steady_by_period():
            assert self.by_period is not None
            return self.by_period.reason(index)
        first = self.blocks[-STEADY_BLOCKS][0]
        period = (
            f" (blocks of {self.block_steps} steps: a stall recurs every {self.period} steps)"
            if self.period and not self._learns
            else ""
        )
        return (
            f"steady from step {first}: {STEADY_BLOCKS} blocks of steps since then have mean "
            f"step times within {STEADY_TOLERANCE - 1:.0%} of each other, not moving one way"
            + (f" by over {self.trend_above - 1:.0%}" if self.trend_above > 1 else "")
            + f" ({self._means()} ms){period}; traced from step {index}"
        )


# The untraced block after the window (capture's ``time_after``) must hold the run's pace, not
# the run-down of the batches the pipeline stored while the trace's write held the script.
# A drain can be flat and then end at once: on `threads_slowdev` of the scenario family (4 read
# threads running Python beside a slow device step, 2 cores) the ~1 s write let the threads
# store ~30 batches; the loop then took them at 24-28 ms a step for ~115 steps, and ran at its
# pace, 34.5 ms, from there to its end. The steady rule over the steps after the write agreed
# on the flat part (blocks within 35%), so 3 of 3 default captures timed a block that held the
# drain's end and read 29.6-31.2 ms for a loop whose untraced run measured 35.7-36.9. So a
# complete block is cut in UNTRACED_PARTS parts (whole periods of a recurring stall when there
# is one, as many as it holds up to UNTRACED_PARTS; a block of one period is not cut), the
# steps go on for one part more (the look-ahead: a drain that ends in the block's last steps
# moves no part of it much, one that ends just after it moves none), and the block is timed
# again from there when its last part or the look-ahead is slower than the fastest part
# before it by more than STEADY_TREND (more than settled blocks differ); at most
# UNTRACED_RETRIES times, and not past the capture's ``max_wait_s``. A block taken keeps its
# look-ahead. Limit: a drain that outlasts the block and its look-ahead is flat throughout and
# is not seen. Measured on the blocks that `apply_advice.py --keep` kept (sessions 11-13,
# MEASUREMENTS.md): the rule times again each of the 12 `threads_slowdev` captures (both
# stacks), once each (28.4-37.5 ms -> 33.1-38.0), and 2 of the 39 of the family's other
# two-cause loops: one whose steps slowed from 22.6 to 31.8 ms a few steps after the block
# (it is the later pace that is then taken) and one whose look-ahead held a checkpoint 22%
# slower than the block's (a block more is timed). Without the look-ahead one of the 12
# was missed with parts of a third (its drain ended in its last 11 steps).
UNTRACED_PARTS = 4
UNTRACED_RETRIES = 3


def _units(block_steps: int, period: int | None) -> tuple[int, int]:
    """The unit a block is cut by (a recurring stall's period, else a step) and how many
    whole ones it holds."""
    unit = period if period and period > 0 else 1
    return unit, block_steps // unit


def look_ahead_steps(block_steps: int, period: int | None = None) -> int:
    """How many steps the untraced block's look-ahead holds: one of its UNTRACED_PARTS
    parts, in whole periods of a recurring stall when there is one."""
    unit, units = _units(block_steps, period)
    return max(1, round(units / UNTRACED_PARTS)) * unit


def slowed_within(
    starts_ns: Sequence[int], block_steps: int, period: int | None = None
) -> list[float] | None:
    """The mean step times (ms) of a timed block's parts and of its look-ahead when its last
    part or the look-ahead is slower than the fastest part before it by more than
    STEADY_TREND (the block held a drain's end), else None. ``starts_ns``: the start times
    of the block's ``block_steps`` steps, of the look-ahead's after them, and, last, of the
    step after those; ``period``: a recurring stall's, in steps (parts are then whole
    periods)."""
    unit, units = _units(block_steps, period)
    parts = min(UNTRACED_PARTS, units)
    if parts < 1:
        return None
    bounds = [round(k * units / parts) * unit for k in range(parts)] + [block_steps]
    ahead = len(starts_ns) - 1 > block_steps
    if ahead:
        bounds.append(len(starts_ns) - 1)
    means = [(starts_ns[b] - starts_ns[a]) / (b - a) / 1e6 for a, b in itertools.pairwise(bounds)]
    # Judged against the parts before them: the block's last part, and the look-ahead.
    last_part = len(means) - 2 if ahead else len(means) - 1
    for k in range(max(1, last_part), len(means)):
        fastest = min(means[:k])
        if fastest > 0 and means[k] / fastest > STEADY_TREND:
            return means
    return None
