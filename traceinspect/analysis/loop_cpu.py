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

The cost to the step, on ``N`` cores: while the loop computes beside a running program, it
holds one of the cores, and the program, which would use all ``N``, loses ``1/N`` of its
throughput for that time: ``C / N`` a step (the family's 10 ms on 2 cores: 5 ms; measured
4.7). A sleep, a wait on a queue or a file costs no core: ``a`` is near 0 there and nothing
is said.

Only the CPU spent *beside* the program competes with it. The loop's own code that runs
while the device is idle (between a read of a device value and the next dispatch) is
already the ledger's idle time, host work: charged again as a stretch it would count twice.
An Orbax asynchronous checkpoint shows both: its wait for the arrays (no CPU, the program
running) and its copy to the host (CPU, the program done). With the device's busy time, the
fit splits the own code in two (``cpu = a1 x beside + a2 x apart + b x rest``) and only
``a1 x beside`` is charged; one CI capture of that loop charged the copy and read
host-bound a run the truth measures device-bound.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from traceinspect.analysis.training_thread import LoopCode
from traceinspect.intervals import Intervals

#: Sample intervals are clipped to this long (a pause in sampling, a suspended process).
_MAX_GAP_NS = 200_000_000
#: Fewer sample intervals inside the steps than this make no estimate.
MIN_INTERVALS = 8
#: The share of own code per interval must vary by this much across the intervals for the
#: fit to tell its CPU from the rest's.
MIN_SPREAD = 0.1
#: A free fit's share this far outside [0, 1] is outside the box (rounding aside).
_BOX_EPS = 1e-9


@dataclass(frozen=True)
class LoopCpu:
    """The training thread's CPU work in the loop's own code, per step (ms)."""

    cpu_ms_per_step: float
    #: The loop's own code's time per step (ms), and the CPU share of it.
    own_ms_per_step: float
    own_cpu_share: float
    #: The cores the process may use, and the step's cost: the CPU beside the running
    #: program over the cores (ms).
    cores: int
    cost_ms_per_step: float
    #: The loop's CPU per step while the program ran (ms): what competes with it.
    beside_cpu_ms_per_step: float
    #: The sampled site most often seen in the loop's own code ("train.py:88 train").
    site: str | None


def loop_cpu(
    code: LoopCode | None,
    window: tuple[int, int],
    steps: int,
    cores: int | None,
    device_busy: Intervals | None = None,
) -> LoopCpu | None:
    """The loop's own CPU work over ``window`` (trace ns) of ``steps`` steps, or None
    without the sampler's CPU clock, the loop's own code, or enough samples. With
    ``device_busy`` (the device's busy time), only the CPU beside the running program is the
    cost; without it, all of the own code's CPU is."""
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
    spent = np.diff(cpu)[used].astype(np.float64)
    rest = wall[used] - own[used]
    part = code.spans.clip(lo, hi)
    beside_spans = part.intersect(device_busy) if device_busy is not None else part
    beside = beside_spans.overlap_with(starts, ends).astype(np.float64)[used]
    apart = own[used] - beside
    a = _shares(np.stack([own[used], rest]), spent)[0]
    if device_busy is None or not apart.any():
        a_beside = a_apart = a
    elif not beside.any() or float(np.ptp(beside / wall[used])) < MIN_SPREAD:
        # The time beside the program too even (or absent) to tell its CPU apart: the own
        # code's one share for both parts.
        a_beside = a_apart = a
    else:
        a_beside, a_apart, _ = _shares(np.stack([beside, apart, rest]), spent)
    described = code.described(lo, hi)
    own_ns, counted = (described[0], described[2]) if described is not None else (0, [])
    # capture's own bookkeeping, left out of the own code's time, is left out of the part
    # beside the program in the same measure.
    beside_ns = round(beside_spans.total * own_ns / part.total) if part.total else 0
    cpu_ns = (a_beside * beside_ns + a_apart * max(own_ns - beside_ns, 0)) / steps
    beside_cpu_ns = a_beside * beside_ns / steps
    return LoopCpu(
        cpu_ms_per_step=round(cpu_ns / 1e6, 4),
        own_ms_per_step=round(own_ns / steps / 1e6, 4),
        own_cpu_share=round(cpu_ns * steps / own_ns, 3) if own_ns else round(a, 3),
        cores=cores,
        cost_ms_per_step=round(beside_cpu_ns / cores / 1e6, 4),
        beside_cpu_ms_per_step=round(beside_cpu_ns / 1e6, 4),
        site=counted[0][0] if counted else None,
    )


def _shares(x: np.ndarray, cpu: np.ndarray) -> tuple[float, ...]:
    """The least-squares fit ``cpu = sum(s_k x x_k)`` (``x``: one row per part) with every
    share ``s_k`` in [0, 1]: each way of holding shares at 0 or 1 and fitting the rest
    freely, the best of those inside the box (the bounded optimum is one of them)."""
    k = x.shape[0]
    best: tuple[float, tuple[float, ...]] | None = None
    for held in itertools.product((None, 0.0, 1.0), repeat=k):
        free = [i for i in range(k) if held[i] is None]
        target = cpu - sum((held[i] or 0.0) * x[i] for i in range(k) if held[i] is not None)
        s = [0.0 if h is None else h for h in held]
        if free:
            m = x[free].T
            if not np.any(m):
                continue
            solved, *_ = np.linalg.lstsq(m, target, rcond=None)
            if np.any(solved < -_BOX_EPS) or np.any(solved > 1 + _BOX_EPS):
                continue
            for i, v in zip(free, solved, strict=True):
                s[i] = float(np.clip(v, 0.0, 1.0))
        error = float(np.sum((cpu - np.asarray(s) @ x) ** 2))
        if best is None or error < best[0]:
            best = (error, tuple(s))
    assert best is not None  # every share held at 0 is always inside the box
    return best[1]
