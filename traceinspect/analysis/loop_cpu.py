"""The loop's own CPU work on XLA's CPU backend, which competes with the program for the cores.

On a GPU or TPU, host work between steps that is shorter than the device's step costs
nothing: the device runs the step meanwhile. On XLA's CPU backend the "device" is the host's
cores, and the program's threads share them with the training thread: a busy loop there
(preprocessing on the training thread, metrics in Python) stretches every program it runs
beside. The device then reads busy all step (device-bound) while it is the loop's CPU work
that slows it: the scenario family's loop with 10 ms of CPU a step on the training thread ran
14.4 ms a step against 9.7 without it (2 cores, jax 0.10.2), and 2 of 3 default captures read
device-bound.

What is measured: capture's stack sampler reads the training thread's CPU clock at each
look. Between two looks, the thread's CPU time is split between the loop's own code (the
stretches of the step no traced event covers, :class:`~traceinspect.analysis.training_thread.
LoopCode`) and the rest by least squares over the window's looks (``cpu = a x own + b x
rest``, ``a`` and ``b`` the CPU shares of each, in [0, 1]); ``a`` times the own code's time
per step is its CPU per step, ``C``. A sampler in step with the loop (a 20 ms look, a 10 ms
step) sees the same share of own code in every interval: then nothing is said.

The cost to the step, on ``N`` cores: while the loop computes, it holds one of them, and the
program, which would use all ``N``, loses ``1/N`` of its throughput for that time: ``C / N``
a step (the family's 10 ms on 2 cores: 5 ms; measured 4.7). A sleep, a wait on a queue or a
file costs no core: ``a`` is near 0 there and nothing is said.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from traceinspect.analysis.training_thread import LoopCode

#: Sample intervals are clipped to this long (a pause in sampling, a suspended process).
_MAX_GAP_NS = 200_000_000
#: Fewer sample intervals inside the steps than this make no estimate.
MIN_INTERVALS = 8
#: The share of own code per interval must vary by this much across the intervals for the
#: fit to tell its CPU from the rest's.
MIN_SPREAD = 0.1
#: The fit's normal equations count as singular (own code's share moving with the rest's)
#: when their determinant is below this share of their diagonal's product.
_SINGULAR_EPS = 1e-9


@dataclass(frozen=True)
class LoopCpu:
    """The training thread's CPU work in the loop's own code, per step (ms)."""

    cpu_ms_per_step: float
    #: The loop's own code's time per step (ms), and the CPU share of it.
    own_ms_per_step: float
    own_cpu_share: float
    #: The cores the process may use, and the step's cost: cpu / cores (ms).
    cores: int
    cost_ms_per_step: float
    #: The sampled site most often seen in the loop's own code ("train.py:88 train").
    site: str | None


def loop_cpu(
    code: LoopCode | None, window: tuple[int, int], steps: int, cores: int | None
) -> LoopCpu | None:
    """The loop's own CPU work over ``window`` (trace ns) of ``steps`` steps, or None
    without the sampler's CPU clock, the loop's own code, or enough samples."""
    samples = code.samples if code is not None else None
    if code is None or samples is None or samples.cpu_ns is None or steps <= 0 or not cores:
        return None
    lo, hi = window
    t, cpu = samples.t_ns, samples.cpu_ns
    keep = (t >= lo) & (t <= hi)
    t, cpu = t[keep], cpu[keep]
    if len(t) < MIN_INTERVALS + 1:
        return None
    starts, ends = t[:-1], t[1:]
    wall = (ends - starts).astype(np.float64)
    used = (np.diff(cpu).astype(np.float64) >= 0) & (wall > 0) & (wall <= _MAX_GAP_NS)
    if int(used.sum()) < MIN_INTERVALS:
        return None
    own = code.spans.overlap_with(starts, ends).astype(np.float64)
    share = own[used] / wall[used]
    if float(np.ptp(share)) < MIN_SPREAD:
        # Every interval holds the same share of own code (the sampler in step with the
        # loop, or no own code): its CPU cannot be told from the rest's.
        return None
    a = _own_share(own[used], wall[used] - own[used], np.diff(cpu)[used].astype(np.float64))
    described = code.described(lo, hi)
    own_ns, counted = (described[0], described[2]) if described is not None else (0, [])
    cpu_ns = a * own_ns / steps
    return LoopCpu(
        cpu_ms_per_step=round(cpu_ns / 1e6, 4),
        own_ms_per_step=round(own_ns / steps / 1e6, 4),
        own_cpu_share=round(a, 3),
        cores=cores,
        cost_ms_per_step=round(cpu_ns / cores / 1e6, 4),
        site=counted[0][0] if counted else None,
    )


def _own_share(own: np.ndarray, rest: np.ndarray, cpu: np.ndarray) -> float:
    """``a`` of the least-squares fit ``cpu = a x own + b x rest`` with ``a`` and ``b`` in
    [0, 1]: the free fit where it lies inside, else the best fit on the square's edges."""
    m = np.array([[own @ own, own @ rest], [own @ rest, rest @ rest]])
    v = np.array([own @ cpu, rest @ cpu])
    if abs(float(np.linalg.det(m))) > _SINGULAR_EPS * max(float(m[0, 0] * m[1, 1]), 1.0):
        a, b = (float(x) for x in np.linalg.solve(m, v))
        if 0.0 <= a <= 1.0 and 0.0 <= b <= 1.0:
            return a

    def fit(x: np.ndarray, target: np.ndarray) -> float:
        xx = float(x @ x)
        return float(np.clip((x @ target) / xx, 0.0, 1.0)) if xx > 0 else 0.0

    candidates = []
    for fixed in (0.0, 1.0):
        a = fit(own, cpu - fixed * rest)
        candidates.append((a, fixed))
        b = fit(rest, cpu - fixed * own)
        candidates.append((fixed, b))
    errors = [float(np.sum((cpu - a * own - b * rest) ** 2)) for a, b in candidates]
    return candidates[int(np.argmin(errors))][0]
