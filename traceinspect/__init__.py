"""traceinspect: why is your accelerator idle? Read jax.profiler traces into pandas.

>>> import traceinspect
>>> trace = traceinspect.load("traceinspect_logs")   # file, run dir or log dir
>>> trace.events.head()
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from traceinspect._version import __version__
from traceinspect.errors import (
    AmbiguousRunError,
    AnalysisError,
    CaptureError,
    EmptyTraceError,
    IsolateError,
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
    from traceinspect.isolate import Isolation, run_isolate
    from traceinspect.pod import analyze_run, load_host
    from traceinspect.report.html import render_html
    from traceinspect.report.input_plots import plot_input_stages
    from traceinspect.report.perfetto import PerfettoTrace, perfetto_trace
    from traceinspect.report.plots import (
        analysis_figures,
        plot_gap_distribution,
        plot_step_breakdown,
        plot_timeline,
    )
    from traceinspect.report.pod_plots import plot_host_steps, plot_hosts
    from traceinspect.report.run_plots import plot_step_curve
    from traceinspect.report.sweep import plot_sweep, render_sweep
    from traceinspect.sweep import SweepResult, load_sweep, run_sweep
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
    "load_host": ("traceinspect.pod", "load_host"),
    "plot_input_stages": ("traceinspect.report.input_plots", "plot_input_stages"),
    "plot_step_curve": ("traceinspect.report.run_plots", "plot_step_curve"),
    "plot_sweep": ("traceinspect.report.sweep", "plot_sweep"),
    "render_sweep": ("traceinspect.report.sweep", "render_sweep"),
    "load_sweep": ("traceinspect.sweep", "load_sweep"),
    "Isolation": ("traceinspect.isolate", "Isolation"),
    "run_isolate": ("traceinspect.isolate", "run_isolate"),
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


# How notebooks show results: (module, class) -> the traceinspect.report.notebook function
# that gives its HTML. The classes never import the report layer; IPython finds them here.
_HTML_OF_TYPE = (
    ("traceinspect.trace", "Trace", "trace_html"),
    ("traceinspect.analysis.result", "Analysis", "analysis_html"),
    ("traceinspect.analysis.compare", "Comparison", "comparison_html"),
    ("traceinspect.analysis.pod_result", "PodAnalysis", "pod_html"),
    ("traceinspect.sweep._summary", "SweepResult", "sweep_html"),
)


def _html_of(function: str) -> Callable[[Any], str]:
    def html(obj: Any) -> str:
        from traceinspect.report import notebook

        result: str = getattr(notebook, function)(obj)
        return result

    html.__name__ = html.__qualname__ = function
    return html


def _register_notebook_display() -> None:
    """Register the report layer's HTML with a running IPython shell (a notebook kernel).

    By class name, so nothing (pandas included) is imported until an object is shown. Only
    where IPython is imported already and a shell runs; IPython is never imported here, and
    a failure leaves the objects with their plain repr rather than breaking the import."""
    ipython = sys.modules.get("IPython")
    if ipython is None:
        return
    try:
        shell = ipython.get_ipython()
        if shell is None:
            return
        formatter = shell.display_formatter.formatters["text/html"]
        for module, cls, function in _HTML_OF_TYPE:
            formatter.for_type_by_name(module, cls, _html_of(function))
    except Exception:
        return


_register_notebook_display()


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
    "IsolateError",
    "Isolation",
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
    "load_host",
    "load_sweep",
    "perfetto_trace",
    "plot_gap_distribution",
    "plot_host_steps",
    "plot_hosts",
    "plot_input_stages",
    "plot_step_breakdown",
    "plot_step_curve",
    "plot_sweep",
    "plot_timeline",
    "render_html",
    "render_sweep",
    "run_isolate",
    "run_sweep",
    "schema",
    "typed_values",
]
