"""Text rendering of an :class:`~traceinspect.analysis.Overview` (``traceinspect info``)."""

from __future__ import annotations

from traceinspect.analysis.overview import Overview


def _bytes(n: int) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:,.0f} {unit}" if unit == "B" else f"{n:,.1f} {unit}"
        n /= 1024  # type: ignore[assignment]
    raise AssertionError("unreachable")


def _fmt_ns_as_ms(ns: int) -> str:
    return f"{ns / 1e6:,.1f} ms"


def render_info(ov: Overview, *, all_lines: bool = False) -> str:
    """The ``info`` report. Lines without events are counted, not listed, unless asked."""
    out: list[str] = []
    total = sum(b for _, _, b in ov.files)
    run = ov.run
    if ov.chose_newest:
        run += f"  (newest of {len(ov.runs)} runs; --run NAME to choose another)"
    out.append(f"Run       {run}")
    out.append(f"Files     {len(ov.files)} host file(s), {_bytes(total)}")
    for host, path, size in ov.files:
        out.append(f"          {host}: {path} ({_bytes(size)})")
    out.append(f"Backend   {ov.backend.kind}: {ov.backend.evidence}")
    if ov.backend.kind in ("gpu", "tpu"):
        out.append(f"Devices   {', '.join(ov.backend.devices)}")
    events = f"{ov.event_count:,} events"
    if ov.aggregated_event_count:
        events += f" (+{ov.aggregated_event_count:,} aggregated)"
    out.append(f"Events    {events} over {_fmt_ns_as_ms(ov.span_ns)}")
    if ov.steps.present:
        named = f" on {', '.join(repr(n) for n in ov.steps.names)}" if ov.steps.names else ""
        out.append(f"Steps     {', '.join(ov.steps.sources)}{named}: {ov.steps.count} marked")
    else:
        out.append(
            "Steps     no step annotations (wrap each step in "
            "jax.profiler.StepTraceAnnotation to mark them)"
        )
    prof = ov.profiler
    parts = []
    if "jax_version" in prof:
        parts.append(f"jax {prof['jax_version']}, jaxlib {prof.get('jaxlib_version', '?')}")
    opts = prof.get("options")
    if opts:
        parts.append(
            f"host tracer {opts.get('host_tracer_level')}, "
            f"device tracer {opts.get('device_tracer_level')}, "
            f"python tracer {opts.get('python_tracer_level')}"
        )
    out.append(f"Profiler  {'; '.join(parts) if parts else 'no profiler metadata recorded'}")
    out.append(f"Decoded   in {ov.load_seconds:.2f} s ({ov.decoder} decoder)")
    for msg in ov.errors:
        out.append(f"Profiler error: {msg}")
    for msg in ov.warnings:
        out.append(f"Profiler warning: {msg}")
    out.append("")
    shown = [ln for ln in ov.lines if all_lines or ln.event_count > 0]
    multi_host = len(ov.hosts) > 1
    header = (("host",) if multi_host else ()) + ("plane", "line", "id", "events", "span")
    rows = [
        ((ln.host,) if multi_host else ())
        + (ln.plane, ln.line, str(ln.line_id), f"{ln.event_count:,}", _fmt_ns_as_ms(ln.span_ns))
        for ln in shown
    ]
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    numeric = {len(header) - 2, len(header) - 1}
    for r in [header, *rows]:
        cells = [
            str(c).rjust(w) if i in numeric else str(c).ljust(w)
            for i, (c, w) in enumerate(zip(r, widths, strict=True))
        ]
        out.append("  ".join(cells).rstrip())
    hidden = len(ov.lines) - len(shown)
    if hidden:
        out.append(f"({hidden} line(s) without events not shown; --all-lines lists them)")
    return "\n".join(out)
