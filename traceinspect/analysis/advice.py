"""What the verdict says and what to do: the summary sentence and the recommendations."""

from __future__ import annotations

from traceinspect.analysis.result import Recommendation
from traceinspect.vocabulary import MATTERS, band


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


def recommendations(
    verdict: str,
    fractions: dict[str, float],
    sync_sites: tuple[str, ...],
    input_ns: float,
    busy_ns: float,
    occasional_sync: bool = False,
) -> tuple[Recommendation, ...]:
    recs: list[Recommendation] = []
    if fractions["sync"] >= MATTERS:
        where = f" ({sync_sites[0]})" if sync_sites else ""
        # Without the read the host prepares the next step while the device runs this one:
        # the step is then the device's work, or the input's when that is longer.
        expected = max(busy_ns, input_ns) / 1e6
        limit = "the device's work" if busy_ns >= input_ns else "the input"
        message = (
            f"Stop reading a device value every step{where}: log the previous step's "
            "metrics instead (keep last step's loss and print it after dispatching the "
            "next step), or log every N steps, so the host can run ahead; expected step "
            f"time {expected:.2f} ms (then {limit} limits)."
        )
        expected_ms: float | None = round(expected, 4)
        if occasional_sync:
            expected_ms = None
            message = (
                f"The occasional read of a device value{where} idles the device "
                f"{fractions['sync']:.1%} of step time: read the previous step's value when "
                "you log (keep it, print it after dispatching the next step) to hide it too."
            )
        recs.append(
            Recommendation("remove_sync", message, where=sync_sites, expected_step_ms=expected_ms)
        )
    if fractions["input"] >= MATTERS:
        recs.append(
            Recommendation(
                "input_pipeline",
                "Make batches faster than the step: prefetch in the background (Grain "
                "mp_prefetch with more worker processes, more read threads), or make "
                "preprocessing cheaper.",
                input_ms_per_step=round(input_ns / 1e6, 4),
                device_busy_ms_per_step=round(busy_ns / 1e6, 4),
            )
        )
    if fractions["compile"] >= MATTERS:
        recs.append(
            Recommendation(
                "avoid_recompilation",
                "jit recompiles during training: keep input shapes and static arguments "
                "fixed (pad to a few bucket sizes), and check jax.config "
                "jax_log_compiles to see what changes.",
            )
        )
    if fractions["host"] >= MATTERS:
        recs.append(
            Recommendation(
                "reduce_host_overhead",
                "The host's own work between steps leaves the device idle: fuse small "
                "jitted calls into one step function and move logging or checkpointing "
                "off the training thread.",
            )
        )
    if fractions["runtime"] >= MATTERS:
        recs.append(
            Recommendation(
                "runtime_latency",
                f"The device idles {fractions['runtime']:.1%} of step time between programs the "
                "host had already dispatched: each program pays the runtime's launch and "
                "scheduling latency. Fewer, larger programs pay it less often (one jitted step "
                "function; lax.scan over repeated layers).",
            )
        )
    if verdict == "device-bound":
        recs.append(
            Recommendation(
                "device_bound", "The input pipeline and host keep up; speed up the model itself."
            )
        )
    return tuple(recs)
