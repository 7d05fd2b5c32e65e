"""traceinspect: why is your accelerator idle? Read jax.profiler traces into pandas.

>>> import traceinspect
>>> trace = traceinspect.load("traceinspect_logs")   # file, run dir or log dir
>>> trace.events.head()
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from traceinspect._version import __version__
from traceinspect.errors import (
    AmbiguousRunError,
    AnalysisError,
    CaptureError,
    EmptyTraceError,
    TraceDecodeError,
    TraceInspectError,
    TraceNotFoundError,
    UsageError,
)

if TYPE_CHECKING:
    from traceinspect import schema
    from traceinspect.analysis.analyze import analyze
    from traceinspect.analysis.compare import Comparison, compare
    from traceinspect.analysis.result import Analysis
    from traceinspect.analysis.straggler import PodAnalysis
    from traceinspect.pod import analyze_run
    from traceinspect.report.html import render_html
    from traceinspect.report.perfetto import PerfettoTrace, perfetto_trace
    from traceinspect.report.plots import (
        analysis_figures,
        plot_gap_distribution,
        plot_step_breakdown,
        plot_timeline,
    )
    from traceinspect.report.pod_plots import plot_host_steps, plot_hosts
    from traceinspect.sweep import SweepResult, run_sweep
    from traceinspect.trace import LoadInfo, Trace, load, typed_values

# pandas takes ~0.3 s to import: the names that need it load on first use, so
# `traceinspect --help` and `import traceinspect.errors` stay fast.
_LAZY = {
    "schema": ("traceinspect.schema", None),
    "Analysis": ("traceinspect.analysis.result", "Analysis"),
    "analyze": ("traceinspect.analysis.analyze", "analyze"),
    "Comparison": ("traceinspect.analysis.compare", "Comparison"),
    "compare": ("traceinspect.analysis.compare", "compare"),
    "PodAnalysis": ("traceinspect.analysis.straggler", "PodAnalysis"),
    "analyze_run": ("traceinspect.pod", "analyze_run"),
    "plot_hosts": ("traceinspect.report.pod_plots", "plot_hosts"),
    "plot_host_steps": ("traceinspect.report.pod_plots", "plot_host_steps"),
    "analysis_figures": ("traceinspect.report.plots", "analysis_figures"),
    "plot_gap_distribution": ("traceinspect.report.plots", "plot_gap_distribution"),
    "plot_step_breakdown": ("traceinspect.report.plots", "plot_step_breakdown"),
    "plot_timeline": ("traceinspect.report.plots", "plot_timeline"),
    "render_html": ("traceinspect.report.html", "render_html"),
    "PerfettoTrace": ("traceinspect.report.perfetto", "PerfettoTrace"),
    "perfetto_trace": ("traceinspect.report.perfetto", "perfetto_trace"),
    "SweepResult": ("traceinspect.sweep", "SweepResult"),
    "run_sweep": ("traceinspect.sweep", "run_sweep"),
    "LoadInfo": ("traceinspect.trace", "LoadInfo"),
    "Trace": ("traceinspect.trace", "Trace"),
    "load": ("traceinspect.trace", "load"),
    "typed_values": ("traceinspect.trace", "typed_values"),
}


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'traceinspect' has no attribute {name!r}")
    module_name, attr = _LAZY[name]
    module = importlib.import_module(module_name)
    value = module if attr is None else getattr(module, attr)
    globals()[name] = value
    return value


__all__ = [
    "AmbiguousRunError",
    "Analysis",
    "AnalysisError",
    "CaptureError",
    "Comparison",
    "EmptyTraceError",
    "LoadInfo",
    "PerfettoTrace",
    "PodAnalysis",
    "SweepResult",
    "Trace",
    "TraceDecodeError",
    "TraceInspectError",
    "TraceNotFoundError",
    "UsageError",
    "__version__",
    "analysis_figures",
    "analyze",
    "analyze_run",
    "compare",
    "load",
    "perfetto_trace",
    "plot_gap_distribution",
    "plot_host_steps",
    "plot_hosts",
    "plot_step_breakdown",
    "plot_timeline",
    "render_html",
    "run_sweep",
    "schema",
    "typed_values",
]
