"""A record of an analysis: what the result cache (``traceinspect/results.py``) stores.

JSON-able values, and numpy arrays for the columns and intervals (no pickles): read back, an
analysis prints exactly as the one that was stored.
"""

from __future__ import annotations

from dataclasses import asdict, fields
from typing import Any

import numpy as np

from traceinspect.analysis.input_stages import InputStages
from traceinspect.analysis.result import (
    Analysis,
    Finding,
    Recommendation,
    StepSummary,
    Table,
    Timeline,
)
from traceinspect.analysis.rules import Decision
from traceinspect.intervals import Intervals

RECORD_FORMAT = 3
_TUPLE_FIELDS = ("devices", "sync_sites", "notes", "first_batches")
# Fields kept in a shape of their own (the others are JSON values as they are).
_STRUCTURED_FIELDS = frozenset(
    (
        "steps",
        "recommendations",
        "per_step_columns",
        "gap_columns",
        "timeline",
        "input_stages",
        "findings",
        "decision",
    )
)


def _table_record(table: Table, prefix: str, arrays: dict[str, np.ndarray]) -> list[dict[str, Any]]:
    """Each column: numbers into ``arrays``, anything else as a JSON list."""
    columns: list[dict[str, Any]] = []
    for name, col in table.items():
        entry: dict[str, Any] = {"name": str(name), "dtype": str(col.dtype)}
        if col.dtype.kind in "biuf":
            arrays[f"{prefix}.{name}"] = col
        else:
            entry["values"] = [list(v) if isinstance(v, list) else v for v in col.tolist()]
        columns.append(entry)
    return columns


def _table_from_record(
    columns: list[dict[str, Any]], prefix: str, arrays: dict[str, np.ndarray]
) -> Table:
    table: Table = {}
    for entry in columns:
        name = entry["name"]
        if "values" in entry:
            values = np.empty(len(entry["values"]), dtype=object)
            for i, v in enumerate(entry["values"]):
                values[i] = v
            table[name] = values
        else:
            table[name] = np.asarray(arrays[f"{prefix}.{name}"])
    return table


def _intervals_record(
    parts: dict[str, Intervals], prefix: str, arrays: dict[str, np.ndarray]
) -> list[str]:
    for i, iv in enumerate(parts.values()):
        arrays[f"{prefix}.{i}.starts"] = iv.starts
        arrays[f"{prefix}.{i}.ends"] = iv.ends
    return list(parts)


def _intervals_from_record(
    keys: list[str], prefix: str, arrays: dict[str, np.ndarray]
) -> dict[str, Intervals]:
    return {
        key: Intervals(
            np.asarray(arrays[f"{prefix}.{i}.starts"]), np.asarray(arrays[f"{prefix}.{i}.ends"])
        )
        for i, key in enumerate(keys)
    }


def analysis_record(a: Analysis) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """``a`` as JSON-able fields and named arrays; :func:`analysis_from_record` reads it."""
    arrays: dict[str, np.ndarray] = {}
    plain = {f.name: getattr(a, f.name) for f in fields(a) if f.name not in _STRUCTURED_FIELDS}
    for name in _TUPLE_FIELDS:
        plain[name] = list(plain[name])
    record: dict[str, Any] = {
        "format": RECORD_FORMAT,
        **plain,
        "steps": {f.name: getattr(a.steps, f.name) for f in fields(a.steps)},
        "recommendations": [
            {
                f.name: list(v) if isinstance(v := getattr(r, f.name), tuple) else v
                for f in fields(r)
            }
            for r in a.recommendations
        ],
        "findings": [{f.name: getattr(x, f.name) for f in fields(x)} for x in a.findings],
        "decision": None if a.decision is None else asdict(a.decision),
        "input_stages": a.input_stages.to_record() if a.input_stages else None,
        "per_step": _table_record(a.per_step_columns, "per_step", arrays),
        "gaps": _table_record(a.gap_columns, "gaps", arrays),
        "timeline": None,
    }
    if a.timeline is not None:
        t = a.timeline
        record["timeline"] = {
            "busy": _intervals_record(t.busy, "busy", arrays),
            "thread": _intervals_record(t.thread, "thread", arrays),
            "training_line_row": t.training_line_row,
            "device_lines": list(t.device_lines),
            "origin_ns": t.origin_ns,
        }
    return record, arrays


def _recommendation(fields_: dict[str, Any]) -> Recommendation:
    kwargs: dict[str, Any] = dict(fields_)
    for name in ("where", "on_hosts"):
        if kwargs.get(name) is not None:
            kwargs[name] = tuple(kwargs[name])
    return Recommendation(**kwargs)


def analysis_from_record(record: dict[str, Any], arrays: dict[str, np.ndarray]) -> Analysis:
    """The analysis :func:`analysis_record` wrote (``KeyError``/``ValueError``/``TypeError``
    on a record of another shape)."""
    if record.get("format") != RECORD_FORMAT:
        raise ValueError(f"analysis record format {record.get('format')!r}")
    plain = {f.name: record[f.name] for f in fields(Analysis) if f.name not in _STRUCTURED_FIELDS}
    for name in _TUPLE_FIELDS:
        plain[name] = tuple(plain[name])
    recommendations = tuple(_recommendation(r) for r in record["recommendations"])
    timeline = None
    if record["timeline"] is not None:
        t = record["timeline"]
        timeline = Timeline(
            busy=_intervals_from_record(t["busy"], "busy", arrays),
            thread=_intervals_from_record(t["thread"], "thread", arrays),
            training_line_row=t["training_line_row"],
            device_lines=tuple(t["device_lines"]),
            origin_ns=t["origin_ns"],
        )
    stages = record["input_stages"]
    return Analysis(
        **plain,
        steps=StepSummary(**record["steps"]),
        recommendations=recommendations,
        findings=tuple(Finding(**x) for x in record["findings"]),
        decision=None if record["decision"] is None else Decision(**record["decision"]),
        input_stages=InputStages.from_record(stages) if stages else None,
        per_step_columns=_table_from_record(record["per_step"], "per_step", arrays),
        gap_columns=_table_from_record(record["gaps"], "gaps", arrays),
        timeline=timeline,
    )
