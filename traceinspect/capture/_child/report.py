"""The child's report: what the parent adds to the sidecar (``traceinspect.sidecar``
declares the format), built from the capture's state when the window closes and at exit."""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, Any, cast

from ._base import SOURCE_TIME
from .facts import _NOT_DISTRIBUTED, _backend_info, _distributed_info, _host_info, _versions
from .measured import machine_load, others_cores, stages_measured, workers_measured

if TYPE_CHECKING:  # the sidecar's format and the capture (never imported at run time)
    from traceinspect.sidecar import (
        ChildReportJSON,
        GrainJSON,
        PhaseReportJSON,
        StepJSON,
        UntracedJSON,
    )

    from .state import _State


def _untraced_after(cap: _State) -> UntracedJSON | None:
    """The steps timed without the profiler after the window: complete, or up to the last
    step whose successor began (the script ended first). A block complete whose look-ahead
    the script's end cut short (``steady.UNTRACED_PARTS``) is the block, unjudged."""
    u, chosen = cap.untraced, cap.chosen
    if u is None or u.first is None or chosen is None:
        return None
    if u.last is None and u.block_steps is not None:
        last = u.first + u.block_steps - 1
        return {"first_step": u.first, "last_step": last, "complete": True}
    last = u.last if u.last is not None else chosen.count - 2
    if last < u.first:
        return None
    return {"first_step": u.first, "last_step": last, "complete": u.last is not None}


def build_report(cap: _State) -> ChildReportJSON:
    """What the parent adds to the sidecar (traceinspect.sidecar declares the format);
    in a phase of isolate, what the parent times (with ``phase``)."""
    distributed = cap.distributed or _distributed_info() or _NOT_DISTRIBUTED
    chosen = cap.chosen
    steps: list[StepJSON] = []
    last = cap._window_last()
    done = cap.completions.done_ns
    if chosen is not None and chosen.kind != SOURCE_TIME:
        starts, indices = chosen.starts_ns, chosen.indices
        cpu = chosen.cpu_ns if len(chosen.cpu_ns) == len(starts) else None
        for k, (i, start) in enumerate(zip(indices, starts, strict=True)):
            # A step's wall time needs the next step's start (kept unless past the caps).
            following = k + 1 < len(indices) and indices[k + 1] == i + 1
            wall_ms = (starts[k + 1] - start) / 1e6 if following else None
            traced = (
                cap.window_first is not None
                and last is not None
                and cap.window_first <= i <= last
                and cap.trace_start_ns is not None
            )
            step: StepJSON = {
                "index": i,
                "step_num": chosen.step_nums[k],
                "start_unix_ns": start,
                "wall_ms": wall_ms,
                "traced": traced,
                "done_unix_ns": done.get(i),
            }
            if cpu is not None:
                step["cpu_ms"] = (cpu[k + 1] - cpu[k]) / 1e6 if following else None
            steps.append(step)
    report: ChildReportJSON = {
        "step_source": chosen.kind if chosen is not None else None,
        "step_source_detail": chosen.detail if chosen is not None else None,
        "window": {
            "skip_steps": cap.skip,
            "rule": cap.window_rule,
            "reason": cap.window_reason,
            "requested_steps": cap.steps,
            "first_step": cap.window_first,
            "last_step": last,
            "complete": cap.window_complete,
            "trace_start_unix_ns": cap.trace_start_ns,
            "trace_stop_unix_ns": cap.trace_stop_ns,
            "untraced_after": _untraced_after(cap),
        },
        "early_trace": {
            "state": cap.early,
            "first_step": cap.early_first,
            "last_step": cap.early_last,
            "costs_ms": {k: round(v, 3) for k, v in cap.early_costs_ms.items()},
        },
        "steps": steps,
        "steps_seen": chosen.count if chosen is not None else 0,
        "trace_files": cap.trace_files,
        "partial_reasons": cap.partial_reasons,
        "notes": cap.notes,
        "stopped_by_traceinspect": cap.stopped_by_us,
        "ended": cap.ended_how,
        "script_start_unix_ns": cap.script_start_ns,
        "profiler": {
            "host_tracer_level": cap.config["host_tracer_level"],
            "python_tracer_level": cap.config["python_tracer_level"],
            "device_tracer_level": cap.config.get("device_tracer_level"),
            "device_tracer_level_applied": cap.device_tracer_applied,
            "grain_worker_profiling": cap.grain_worker_profiling,
        },
        "host": _host_info(cap.memory_at_start),
        "versions": _versions(),
        # Whether the script ran MaxText: the worker advice names its setting then.
        "maxtext": any(name.partition(".")[0].lower() == "maxtext" for name in list(sys.modules)),
        "backend": _backend_info(),
        "grain": grain_summary(cap),
        "process_index": distributed["process_index"],
        "process_count": distributed["process_count"],
        "global_arrays": cap.global_arrays,
        "stack_samples": cap.sampler.report() if cap.sampler is not None else None,
    }
    if cap.timing is None:
        # A phase of isolate says the same in its ``phase`` (isolate weighs it itself).
        report["machine_load"] = machine_load(cap.at_open, cap.at_close)
        report["run_events"] = cap.run_events.report()
    if cap.timing is not None:
        cast("PhaseReportJSON", report)["phase"] = {
            "timing": cap.timing,
            "deadline_s": cap.deadline_s,
            "batches_drawn": cap.batches_drawn,
            "ended_early": cap.phase_end,
            "blocks": [list(b) for b in cap.steady.blocks] if cap.steady else [],
            "input_wait_s": round(cap.window_input_ns / 1e9, 6),
            "host_read_s": round(cap.window_read_ns / 1e9, 6),
            "host_reads": cap.window_reads,
            "others_cpu_cores": others_cores(cap.at_open, cap.at_close),
            "cpu_count": os.cpu_count(),
        }
        if cap.at_open is not None and cap.at_close is not None:
            cpu_ns = cap.at_close.cpu_ns - cap.at_open.cpu_ns
            cast("PhaseReportJSON", report)["phase"]["process_cpu_s"] = round(cpu_ns / 1e9, 6)
    return report


def grain_summary(cap: _State) -> GrainJSON | None:
    if "grain" not in sys.modules and not cap.grain_events:
        return None

    def last(kind: str, field: str) -> Any:
        return cap._grain_setting(kind, field, cap.window_open_ns)

    workers = last("mp_prefetch", "num_workers")
    buffer = last("mp_prefetch", "per_worker_buffer_size")
    if workers is None:
        workers = last("DataLoader", "worker_count")
        buffer = last("DataLoader", "worker_buffer_size")
    # The pipeline's own ReadOptions come before its mp_prefetch; Grain builds more of its
    # own afterwards (0.2.18: num_threads=4), which are not the workers' read threads.
    mp_at = [e["unix_ns"] for e in cap.grain_events if e["kind"] == "mp_prefetch"]
    before = min(mp_at[-1], cap.window_open_ns or mp_at[-1]) if mp_at else cap.window_open_ns
    read_threads = cap._grain_setting("ReadOptions", "num_threads", before)
    if read_threads is None:
        read_threads = last("DataLoader", "read_threads")
    return {
        "workers_override": cap.config.get("workers"),
        "worker_count": workers,
        "per_worker_buffer_size": buffer,
        "read_threads": read_threads,
        "read_prefetch_buffer_size": cap._grain_setting(
            "ReadOptions", "prefetch_buffer_size", before
        ),
        "batch_size": last("batch", "batch_size"),
        "batch_rows": cap.batch_rows,
        "bytes_per_batch": cap.batch_bytes,
        "files": last("interleave", "files"),
        "file_shards": last("interleave", "file_shards"),
        "first_batches": cap.first_batches,
        "workers_measured": workers_measured(cap.at_open, cap.at_close, cap.batches_in_window),
        "stages": stages_measured(cap.at_open, cap.at_close, cap.batches_in_window),
        "observed": cap.grain_events,
    }
