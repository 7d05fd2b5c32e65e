"""The worker-count recommendation in words: its message, the setting's name in the user's code."""

from __future__ import annotations

from typing import Any


def _setting(maxtext: bool | None, value: object) -> str:
    """The worker count's name in the user's code: MaxText's config key, or Grain's option;
    both when the run is not known (no capture sidecar)."""
    grain = f"MultiprocessingOptions(num_workers={value})"
    return grain if maxtext is False else f"{grain}, grain_worker_count in MaxText"


def _message(rec: dict[str, Any], maxtext: bool | None = True) -> str:
    current = "unknown" if rec["current"] is None else rec["current"]
    keep = rec["value"] == (rec["current"] or 0)
    if maxtext:
        if rec["value"] is None:
            return f"No change to grain_worker_count is needed: {rec['reason']}."
        head = (
            f"Keep grain_worker_count at {rec['value']}"
            if keep
            else f"Set grain_worker_count to {rec['value']} (now {current})"
        )
    elif rec["value"] is None:
        setting = _setting(maxtext, "N")
        return f"No change to the Grain worker count ({setting}) is needed: {rec['reason']}."
    elif maxtext is False:
        setting = _setting(maxtext, rec["value"])
        head = f"Keep {setting}" if keep else f"Set {setting} (now {current})"
    else:
        setting = _setting(maxtext, rec["value"])
        head = (
            f"Keep the Grain worker count at {rec['value']} ({setting})"
            if keep
            else f"Set the Grain worker count to {rec['value']} (now {current}; {setting})"
        )
    step = f"{rec['expected_step_ms']:.2f} ms"
    if rec.get("untraced"):
        step += ", as capture timed the run without the profiler"
    elif rec.get("traced_only"):
        step += ", the traced step with the profiler's cost in it " + (
            "(capture stopped the script after the window: without --stop-after it times the "
            "run's own)"
            if rec["traced_only"] == "stopped"
            else "(the script ended before capture could time steps without it: run more "
            "steps for the run's own)"
        )
    if rec.get("unchanged"):
        return (
            f"{head}: {rec['reason']}; the step stays at about {step} "
            "(input is not what holds it back)."
        )
    if rec.get("read_limits"):
        return (
            f"{head}: {rec['reason']}; expected step time {step}, "
            "where the read of a device value every step then limits it (remove it next)."
        )
    return f"{head}: {rec['reason']}; expected step time {step}."
