"""The words, rendered last: the verdict's summary (one renderer per deciding cause) and the
notes a reader should know besides it.

Everything here reads the decision (``analysis/rules.py``), what the trace showed
(``analysis/measure.py``) and what the detectors found; nothing decides.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from traceinspect.analysis.callbacks import Callbacks
from traceinspect.analysis.detectors import Found, PipelinePace, Stall
from traceinspect.analysis.loop_cpu import LoopCpu
from traceinspect.analysis.measure import Measured
from traceinspect.analysis.reads import ReadsBehind, reads_behind
from traceinspect.analysis.rules import Decision
from traceinspect.analysis.window import FEW_STEPS
from traceinspect.analysis.workers_inputs import computes, cores_left, machine_busy
from traceinspect.sidecar import MachineLoad, Sidecar
from traceinspect.thresholds import MATTERS, OUTSIDE_NOTE, RUNTIME_NOTE, SYNC_RECURS
from traceinspect.vocabulary import band


def callback_what(callbacks: Callbacks) -> str:
    api = callbacks.apis[0] if callbacks.apis else "a host callback"
    named = [f for f in callbacks.functions if f]
    function = f" to {named[0]}" if named else ""
    return f"{api}{function} ({callbacks.names[0]})"


def _callback(m: Measured, callbacks: Callbacks) -> str:
    return (
        f"A host callback inside the jitted step, {callback_what(callbacks)}, runs "
        f"{callbacks.ms_per_step:.2f} ms of each {m.mean_step_ns / 1e6:.2f} ms step "
        f"({callbacks.ms_per_step * 1e6 / m.mean_step_ns:.0%}): the step cannot end, nor the next "
        "be prepared, until the host returns from it."
    )


def _stall(m: Measured, found: Stall) -> str:
    stall, nature = found.stall, found.nature
    return (
        f"Every {stall.period} steps the loop stalls {stall.cost_ns / 1e6:,.0f} ms "
        f"({nature.what()}): {stall.per_step_ns / 1e6:.2f} ms per step over the run, "
        f"{stall.share:.0%} of its step time ({len(stall.indices)} stalls in "
        f"{stall.period * len(stall.indices)} steps seen)."
    )


def _pipeline_cpu(m: Measured, pace: PipelinePace) -> str:
    stages = pace.stages
    share, cores = stages.threads_cpu_share or 0.0, stages.threads_cores
    on_cpu = f"on a CPU {share:.0%} of its time"
    if cores is not None and not computes(share) and stages.threads_hold_gil:
        # Many threads, each on a CPU a small share of its time, taking turns with the GIL.
        on_cpu = f"its threads keeping {cores:.1f} core(s) busy as they take turns with the GIL"
    return (
        f"The input pipeline on the training process's read thread(s) makes a batch every "
        f"{pace.batch_ms:.2f} ms against a {m.step_ns / 1e6:.2f} ms step, {on_cpu}: it runs "
        "flat out and paces the loop. Its work competes with the training "
        "thread for the GIL and the cores, so the loop's loss shows as slow dispatch and "
        f"transfers, and as the training thread waiting for the GIL (host time, "
        f"{m.fractions['host']:.0%} of the step) more than as waiting "
        f"in next() ({m.input_ns / 1e6:.2f} ms a step)."
    )


def _loop_cpu(m: Measured, competing: LoopCpu) -> str:
    at = f" at {competing.site}" if competing.site else ""
    return (
        f"The loop's own CPU work{at}, {competing.cpu_ms_per_step:.2f} ms a step on the training "
        f"thread ({_cpu_beside_program(competing)}), competes with XLA's CPU backend for the "
        f"{competing.cores} core(s): the "
        f"program runs about {competing.cost_ms_per_step:.2f} ms longer a step beside it "
        f"({competing.cost_ms_per_step * 1e6 / m.mean_step_ns:.0%} of the "
        f"{m.mean_step_ns / 1e6:.2f} ms mean step): the device's work it shows is stretched "
        "by the host's."
    )


def _cpu_beside_program(c: LoopCpu) -> str:
    if c.beside_cpu_ms_per_step >= c.cpu_ms_per_step:
        return "all of it while the program ran"
    return f"{c.beside_cpu_ms_per_step:.2f} ms of it while the program ran"


#: The summary of a verdict a run-level cause decided, by that cause (an idle cause's or the
#: device's: :func:`summary_text`).
SUMMARIES: dict[str, Callable[[Measured, Any], str]] = {
    "stall": _stall,
    "callback": _callback,
    "loop_cpu": _loop_cpu,
    "pipeline_cpu": _pipeline_cpu,
}


def summary(m: Measured, found: dict[str, Found], decision: Decision) -> str:
    """The verdict's sentence, by the cause that decided it."""
    render = SUMMARIES.get(decision.cause)
    if render is not None:
        return render(m, found[decision.cause].detail)
    return summary_text(decision.verdict, decision.cause, m.fractions, m.input_ns, m.device_ns)


def notes(m: Measured, found: dict[str, Found], decision: Decision) -> list[str]:
    """What a reader should know besides the verdict."""
    out = _window_notes(m, decision)
    behind = None if m.work is None else reads_behind(m.host.sync_events, m.work, m.steps)
    out += _runtime_notes(behind, m.fractions, m.summary.typical_ms)
    competing = found.get("loop_cpu")
    if competing is not None and decision.cause != "loop_cpu" and competing.claim.share >= MATTERS:
        c: LoopCpu = competing.detail
        at = f" at {c.site}" if c.site else ""
        out.append(
            f"The loop's own CPU work{at} ({c.cpu_ms_per_step:.2f} ms a step, "
            f"{_cpu_beside_program(c)}) competes with "
            f"XLA's CPU backend for the {c.cores} core(s): about {c.cost_ms_per_step:.2f} ms of "
            f"each step ({competing.claim.share:.0%}), an estimate that decides the verdict only "
            "from 20%."
        )
    return out


def _runtime_notes(
    behind: ReadsBehind | None, fractions: dict[str, float], step_ms: float
) -> list[str]:
    """What the device's runtime and reads one step behind cost, besides the verdict (the
    reads when they recur and hold the host a share of the step that matters)."""
    out = []
    if (
        behind is not None
        and behind.steps_with_behind >= SYNC_RECURS
        and behind.wait_ms >= MATTERS * step_ms
    ):
        out.append(
            f"The loop reads device values after dispatching the next step ({behind.behind} of "
            f"{behind.reads} reads, in {behind.steps_with_behind:.0%} of the steps): they wait "
            f"{behind.wait_ms:.2f} ms a step (median) for the step before to finish while the "
            "device runs the next, so they hold the host to one step ahead and are no per-step "
            "sync; "
            f"the device's idle time after reads is {fractions['sync']:.1%} of step time."
        )
    if fractions["runtime"] >= RUNTIME_NOTE:
        out.append(
            f"The device idled {fractions['runtime']:.1%} of step time with its next program "
            "already dispatched (runtime: the launch and scheduling latency between programs, "
            "which the host does not owe)."
        )
    return out


def _window_notes(m: Measured, decision: Decision) -> list[str]:
    """What the window, the steps and the capture say besides the verdict."""
    fractions, steps_summary, steps = m.fractions, m.summary, m.steps
    out = []
    if decision.occasional_sync:
        out.append(
            f"A read of a device value idles the device in {decision.sync_steps:.0%} of the "
            f"steps ({fractions['sync']:.1%} of step time): an occasional read (logging every "
            "N steps), not a per-step sync, so not the verdict."
        )
    if steps_summary.bursty:
        out.append(
            f"Steps come in bursts (p10 {steps_summary.p10_ms:.2f} ms, median "
            f"{steps_summary.median_ms:.2f} ms, p90 {steps_summary.p90_ms:.2f} ms): several "
            f"batches arrive at once ({_burst_source(m)}), then the loop waits for the next "
            f"ones. The figures use throughput, {steps_summary.mean_ms:.2f} ms per step over "
            "the window."
        )
    if m.work is not None and m.work.queued > 1:
        out.append(
            f"The host ran {m.work.queued} step(s) ahead of the device; each step's device work "
            "is that of the programs it dispatched (linked by execution order), not what ran "
            "during it."
        )
    if fractions["unknown"] >= MATTERS:
        out.append(
            f"{fractions['unknown']:.0%} of step time is idle with nothing traced on the "
            "training thread to explain it; capture with --python-tracer to see Python code."
        )
    if m.outside >= OUTSIDE_NOTE:
        out.append(
            f"{m.outside:.0%} of the device's work lies outside the analysed steps (the host ran "
            "ahead of the device, or host and device clocks are skewed); capture more steps."
        )
    if steps.dropped:
        out.append(
            f"{steps.dropped} step(s) at the edges of the trace left out (partial, or idle "
            "from the trace's start with nothing traced before to say why)."
        )
    return out + _capture_notes(m)


def _capture_notes(m: Measured) -> list[str]:
    """What the capture's sidecar (or its absence) and the trace's hosts say."""
    trace, steps = m.trace, m.steps
    out = []
    if m.window_note:
        out.append(m.window_note)
    elif trace.sidecar is None and len(steps) < FEW_STEPS:
        out.append(
            f"Only {len(steps)} complete steps, and nothing says whether they are steady: a "
            "window opened right after compilation holds warm-up steps (MaxText profiles 5 "
            "steps from step 1 by default). For a verdict that holds, trace more steps later "
            "in the run (MaxText: skip_first_n_steps_for_profiler=20 profiler_steps=20), or "
            "traceinspect capture, which waits until the run is steady."
        )
    if trace.sidecar is not None and trace.sidecar.untested_note:
        out.append(trace.sidecar.untested_note)
    if trace.sidecar is not None and trace.sidecar.ignored_note:
        out.append(trace.sidecar.ignored_note)
    busy = machine_busy(trace.sidecar)
    if busy is not None:
        out.append(_machine_note(busy, trace.sidecar))
    if len(trace.hosts) > 1:
        out.append(
            f"This trace merges {len(trace.hosts)} hosts into one timeline (their clocks "
            "differ); traceinspect.analyze_run() analyses each host and compares them, as "
            "`traceinspect analyze` does for a run directory."
        )
    return out


def _machine_note(busy: MachineLoad, sidecar: Sidecar | None) -> str:
    """Other processes kept a share of the machine busy while traced (OTHERS_LOAD)."""
    host = sidecar.host if sidecar is not None else None
    cores = host.cores if host is not None else None
    machine = busy.cpu_count or cores
    left = cores_left(sidecar)
    if left is None:
        sized = "the worker count may be lower than on a quiet machine"
    else:
        cores_it_had = (
            f"{left} of the {cores} core(s) the script may use"
            if cores is not None and cores != machine
            else f"the {left} core(s) left to the script"
        )
        sized = (
            f"the worker count is sized for {cores_it_had}, and may be lower than on a quiet "
            "machine"
        )
    return (
        f"{machine} cores, {busy.others_cpu_cores:.1f} of them busy with other processes while "
        f"traced (on average over the {busy.window_s:.1f} s window): {sized}, where the host's "
        "times would be shorter too; capture again on a quiet machine for the script's own "
        "figures."
    )


def summary_text(
    verdict: str, top: str, fractions: dict[str, float], input_ns: float, busy_ns: float
) -> str:
    if verdict == "device-bound":
        idle = sum(fractions.values())
        if fractions["runtime"] >= MATTERS:
            return (
                f"The device is busy {1 - idle:.0%} of each step and idles "
                f"{fractions['runtime']:.0%} between programs the host had already dispatched "
                f"(the runtime's latency); no cause on the host reaches {MATTERS:.0%} of step "
                "time."
            )
        return (
            f"The device is busy {1 - idle:.0%} of each step; no cause of idle time reaches "
            f"{MATTERS:.0%} of step time."
        )
    share = fractions[top]
    if top == "sync":
        return (
            f"The device sits idle {share:.0%} of step time because the training loop reads a "
            "device value every step, so the next step is only prepared after the current one "
            f"ends; input work ({input_ns / 1e6:.2f} ms/step) is shorter than the device's "
            f"work ({busy_ns / 1e6:.2f} ms/step), so removing the sync closes the gap."
        )
    if top == "input":
        return (
            f"The device waits for input {share:.0%} of step time: the training thread "
            f"waits {input_ns / 1e6:.2f} ms/step for its next batch against "
            f"{busy_ns / 1e6:.2f} ms/step of device work."
        )
    if top == "compile":
        return f"The device waits for XLA compilation {share:.0%} of step time (recompiling)."
    if top == "unknown":
        return (
            f"The device is idle {share:.0%} of step time with nothing traced on the training "
            "thread to explain it."
        )
    return f"The device waits for other host work {share:.0%} of step time ({band(share)})."


def _burst_source(m: Measured) -> str:
    """What hands batches over several at once: Grain's worker processes (one each, in
    turn), else the pipeline's prefetch buffers (read threads, device_put's buffers)."""
    grain = m.trace.sidecar.grain if m.trace.sidecar is not None else None
    workers = m.stages.workers if m.stages is not None else (grain.worker_count if grain else None)
    if workers:
        return "one per Grain worker"
    if workers == 0:
        return "the training process's read threads and prefetch buffers fill up together"
    return "one per Grain worker, or from prefetch buffers"
