"""What to do about each run-level cause (a host callback, the loop's CPU, the loop's own
code, a recurring stall): one recommendation each, with the step expected without it from
the one counterfactual (``analysis/counterfactual.py``)."""

from __future__ import annotations

import numpy as np

from traceinspect import schema as S
from traceinspect.analysis.callbacks import Callbacks
from traceinspect.analysis.counterfactual import (
    FLOORS_BY_BACKEND,
    HOST_WORK_IDLE,
    SLOWED_BY_PROFILER,
    ahead_without,
    cores_floor_ns,
    expected_without,
    gains_nothing,
    read_floor_ns,
    reads_every_step,
)
from traceinspect.analysis.detectors import Found, Stall
from traceinspect.analysis.explain import callback_what
from traceinspect.analysis.loop_cpu import LoopCpu
from traceinspect.analysis.measure import Measured
from traceinspect.analysis.result import GRAIN_WORKER_COUNT, Recommendation
from traceinspect.analysis.window import typical
from traceinspect.thresholds import CALLBACK_ALONE, LOOP_CODE_MOST, MATTERS, PACE_SAID

# The generic words a cause's own advice replaces.
GENERIC = ("reduce_host_overhead", "device_bound")


Floors = dict[str, "float | None"]


def window_floors(m: Measured, stall: Stall | None) -> Floors:
    """What the counterfactual bounds and adds (ns), in the traced window's pace: the
    device's work and the input's per step, a recurring stall's time spread over the run's
    steps (None: no stall), the read floor where the loop reads a device value every step
    (its read and the device's work run one after the other, whatever else is removed), and
    the floors of the trace's backend (:data:`~traceinspect.analysis.counterfactual.
    FLOORS_BY_BACKEND`)."""
    floors: Floors = {
        "device": m.device_ns,
        "input": m.input_ns,
        "stall": stall.stall.per_step_ns if stall is not None else None,
    }
    if reads_every_step(m.host, m.steps):
        floors["read"] = read_floor_ns(m.per_step)
    if "cores" in FLOORS_BY_BACKEND.get(m.activity.backend.kind, ()):
        # The host's work between programs as a step typically holds it (as the device's
        # and the input's are): a stall in the window is no step's work, and the
        # counterfactual adds the stall apart (a checkpoint's 250 ms in an 81-step window
        # read 12.9 ms a step of it for 6.9 in the median step: "remove the read" then
        # expected 15-18% over the step measured without it, the family's read_ckpt).
        per_step = [np.asarray(m.per_step[S.idle_cause_ns(c)], dtype=float) for c in HOST_WORK_IDLE]
        idle = typical(np.sum(per_step, axis=0), m.summary.bursty) if len(m.steps) else 0.0
        host = m.trace.sidecar.host if m.trace.sidecar is not None else None
        cores = host.cores if host is not None else None
        floors["cores"] = cores_floor_ns(m.device_ns, idle, m.input_ns, cores)
    return floors


def slowdown_of(m: Measured, stall: Stall | None) -> float:
    """How much slower the profiler ran the window's steps than the run's own: a recurring
    stall's figure over the whole run where one recurs, else, where the profiler slows the
    backend's programs (:data:`~traceinspect.analysis.counterfactual.SLOWED_BY_PROFILER`),
    the window's against capture's untraced steps after it; 1.0 otherwise."""
    if stall is not None:
        return stall.stall.traced_slowdown
    return m.traced_slowdown if m.activity.backend.kind in SLOWED_BY_PROFILER else 1.0


def pace_note(m: Measured, stall: Stall | None, advice: tuple[Recommendation, ...]) -> str | None:
    """What the run's pace did to the expected steps, where it scaled a figure of the
    advice (the worker count's is sized in the window's pace, as its pipeline's figures
    are); else None."""
    slowdown = slowdown_of(m, stall)
    scaled = [r for r in advice if r.expected_step_ms is not None and r.kind != GRAIN_WORKER_COUNT]
    if slowdown < 1.0 + PACE_SAID or not scaled:
        return None
    of = "the steps between the stalls" if stall is not None else "the untraced steps after it"
    return (
        f"The traced window's steps ran {slowdown - 1:.1%} slower under the profiler than {of}: "
        "the expected steps of the advice are the run's, with the window's device and input "
        "figures scaled to its pace."
    )


def callback_advice(
    m: Measured, callbacks: Callbacks, floors: Floors, slowdown: float
) -> Recommendation:
    """The step without the callback: where the device idled all along the callback (a
    GPU), the device's work per step (the rest of that idle period was the callback's too:
    the host prepared the next step only after it); else the step less the callback's
    time. In the run's pace, as ``floors`` are: the window's figures over ``slowdown``
    (:func:`slowdown_of`)."""
    alone = callbacks.alone_ms_per_step / callbacks.ms_per_step if callbacks.ms_per_step else 0.0
    # What leaves the device's work with the callback: its time that the ledger counted busy
    # and no other op of the program covered. On XLA's CPU backend the callback's own op is
    # device work on one of the program's threads while its other ops run beside it on
    # another (the family's 5 ms callback: dot and fusion ops on a second thread through 3.8
    # ms of it), and those still run without it. Taking off the whole covered part instead
    # expected the family's callback with a checkpoint (900 steps, both stacks) 0-20% under
    # the step measured without it; this part, 11% over to 3% under.
    lo, hi = m.span
    freed = callbacks.alone.clip(lo, hi).intersect(m.busy).total / max(1, len(m.steps))
    freed_ns = freed / slowdown
    device_ns = max(0.0, (floors["device"] or 0.0) - freed_ns)
    # The cores floor holds the device's work too: less the same part.
    cores = floors.get("cores")
    floors = {**floors, "device": device_ns}
    if cores is not None:
        floors["cores"] = max(0.0, cores - freed_ns)
    rest_ns = (m.step_ns - callbacks.ms_per_step * 1e6) / slowdown
    remaining = device_ns if alone >= CALLBACK_ALONE else rest_ns
    expected_ns = expected_without("callback", remaining, floors)
    return Recommendation(
        "host_callback",
        f"A host callback inside the jitted step, {callback_what(callbacks)}, holds each step "
        f"{callbacks.ms_per_step:.2f} ms of {m.step_ns / 1e6:.2f}: return the values from the "
        "step and log them from the loop (a step behind, or every N steps), or make the "
        "callback return at once (hand the values to a queue a thread of yours drains); "
        "ordered=False is no fix (it is the default); expected step time "
        f"{expected_ns / 1e6:.2f} ms.",
        where=callbacks.names[:3] or None,
        expected_step_ms=round(expected_ns / 1e6, 4),
    )


def loop_cpu_advice(
    m: Measured, competing: LoopCpu, floors: Floors, slowdown: float
) -> Recommendation:
    """Move the loop's CPU work off the cores the program needs; the step expected without
    it: the device's work less what it cost the program, in the run's pace (over
    ``slowdown``, as ``floors`` are)."""
    remaining = (m.device_ns - competing.cost_ms_per_step * 1e6) / slowdown
    expected = expected_without("loop_cpu", remaining, floors) / 1e6
    at = f" at {competing.site}" if competing.site else ""
    return Recommendation(
        "reduce_host_overhead",
        f"The loop's own CPU work{at} ({competing.cpu_ms_per_step:.2f} ms a step, "
        f"{competing.own_cpu_share:.0%} of its own code's time on CPU) takes a core from the "
        "program on this CPU backend: do it less often, cheaper, or outside the training loop "
        "(on an accelerator it would overlap the device's step); expected step time "
        f"{expected:.2f} ms.",
        where=(competing.site,) if competing.site else None,
        expected_step_ms=round(expected, 4),
    )


def loop_code_advice(m: Measured, rec: Recommendation, floors: Floors) -> Recommendation:
    """The host's-work advice, naming the loop's own code when most of the host's idle time
    is spent there (where it sits in the step, what the stack sampler saw), with the step
    expected without it."""
    host, steps, gaps = m.host, m.steps, m.gaps
    assert host.loop_code is not None
    lo, hi = m.span
    found = host.loop_code.described(lo, hi)
    idle_host = int(gaps["host"].sum())
    # Of the device's idle time given to the host, the part in the loop's own code.
    own_idle = int(host.loop_code.spans.overlap_with(gaps[S.START_NS], gaps[S.END_NS]).sum())
    if found is None or own_idle < idle_host * LOOP_CODE_MOST:
        return rec
    total, where, sites = found
    per_step = total / len(steps)
    if floors.get("read") is not None:
        # The read floor holds the loop's own code, which run one after the other with the
        # read and the device's work: without it, the rest.
        floors = {**floors, "read": max(0.0, (floors["read"] or 0.0) - per_step)}
    # Today's step as capture timed it without the profiler after the window, where it did
    # (the profiler slows a CPU-backend step by 5-20%, not the loop's own waiting): the
    # family's per-step read with 4 ms of its own waiting was expected at 13.2-16.8 ms
    # without the wait from the traced step, 11.6-12.7 measured.
    today = m.untraced_ns or m.step_ns
    expected = expected_without("host", today - per_step, floors) / 1e6
    what = f"at {sites[0][0]} " if sites else ""
    return Recommendation(
        rec.kind,
        f"The loop's own code {what}({where}, {per_step / 1e6:.2f} ms a step on the "
        f"training thread, with nothing traced) leaves the device idle "
        f"{idle_host / max(1, int(steps.wall_ns.sum())):.0%} of step time: move that work off "
        "the training thread (a background thread or queue), do it less often, or overlap it "
        f"with the device's step (after dispatching it); expected step time {expected:.2f} ms.",
        where=tuple(site for site, _ in sites[:3]) or None,
        expected_step_ms=round(expected, 4),
    )


def with_stall_advice(
    advice: tuple[Recommendation, ...], own: Recommendation, *, is_verdict: bool
) -> tuple[Recommendation, ...]:
    """The run's advice with a recurring stall's own, which replaces the generic word on
    the host's work: first where the stall is the verdict, else after the verdict's own
    advice (an input-bound run whose stall costs 7% of its step is told its worker count
    first)."""
    rest = tuple(r for r in advice if r.kind != "reduce_host_overhead")
    if is_verdict or not rest:
        return (own, *rest)
    return (rest[0], own, *rest[1:])


def stall_advice(m: Measured, found: Stall, floors: Floors) -> Recommendation:
    """What to do about the stall, with the run's step time expected without it."""
    stall, nature = found.stall, found.nature
    # The floors are in the run's pace (the stall's slowdown), as its expected step is.
    expected = expected_without("stall", stall.expected_ns, floors) / 1e6
    cost = f"{stall.cost_ns / 1e6:,.0f} ms every {stall.period} steps"
    fixes = {
        "checkpoint": (
            f"Checkpoint asynchronously ({cost} now): Orbax's CheckpointManager with "
            "enable_async_checkpointing=True copies the arrays to the host and writes them in "
            "the background (MaxText: async_checkpointing=true); or checkpoint less often"
        ),
        "host": (
            f"Move the loop's own work ({cost}) off the training thread (a background thread "
            "or queue), or do it less often"
        ),
        "sync": f"Read device values less often or one step late ({cost})",
        "evaluation": (
            f"Evaluate less often or on fewer batches ({cost}: device time spent outside "
            "training steps)"
            if nature.device_busy
            else f"Score the evaluation on the device and read one value per evaluation ({cost} "
            "now, each batch's result read and scored on the host while the device waits), "
            "evaluate less often, or score in a thread of yours on values already read"
        ),
        "epoch": (
            f"Make one iterator for the whole run ({cost} now: each new iterator starts "
            "Grain's worker processes and fills its buffers again): iterate a repeated "
            "dataset (.repeat() before .to_iter_dataset() or mp_prefetch) and count epochs "
            "by steps"
        ),
        "gc": (
            f"Collect garbage less often ({cost} now): drop or space out the loop's "
            "gc.collect(), call gc.freeze() once the long-lived objects are built so that "
            "collections skip them, or raise the collector's thresholds (gc.set_threshold)"
        ),
        "logging": (
            f"Send the logs from a background thread ({cost} now): a queue a thread of yours "
            "drains, or the logging client's asynchronous mode; or log less often"
        ),
        "input": (
            f"Prefetch deeper so the recurring wait for input ({cost}) is hidden: more "
            "prefetch buffer per worker, or more read threads"
        ),
        "compile": f"Keep shapes fixed so that jit does not recompile ({cost})",
        "unseen": (
            f"Trace a window that holds one of these stalls ({cost}; capture --steps "
            f"{2 * stall.period}) to see what it is"
        ),
    }
    where = f" ({nature.sites[0][0]})" if nature.sites else ""
    return Recommendation(
        "recurring_stall",
        f"{fixes[nature.kind]}{where}; expected step time {expected:.2f} ms "
        f"(the run's mean is {stall.mean_ns / 1e6:.2f} ms).",
        expected_step_ms=round(expected, 4),
        where=tuple(site for site, _ in nature.sites[:3]) or None,
    )


def read_gains_nothing(m: Measured, found: dict[str, Found]) -> str | None:
    """Why the reads' idle time is no loss, where the step expected without them is no
    faster than the window's step (``counterfactual.gains_nothing``); else None."""
    if m.fractions["sync"] < MATTERS:
        return None
    stall = found.get("stall")
    # The window's floors against the window's step: both in its pace.
    floors = window_floors(m, stall.detail if stall is not None else None)
    if not gains_nothing("sync", floors, m.step_ns):
        return None
    expected = ahead_without("sync", floors) / 1e6
    return (
        f"The device idles after a read of a device value {m.fractions['sync']:.0%} of step "
        f"time, but removing the read gains nothing: the step expected without it is "
        f"{expected:.2f} ms against {m.step_ns / 1e6:.2f} ms now, because that idle time is "
        "the host's work between programs (dispatch, the batch's transfer), which on XLA's "
        "CPU backend takes the cores the program runs on, with the read or without."
    )
