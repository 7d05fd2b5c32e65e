"""Trace helpers on a precisely built XSpace: frames, selection, windows, stat joins."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
import xspace as X

import traceinspect
from traceinspect import schema as S
from traceinspect.errors import UsageError
from traceinspect.report.notebook import trace_html
from traceinspect.trace import Trace


@pytest.fixture
def trace(tmp_path: Path, decoder: str) -> Trace:
    xs = X.space()
    meta = X.add_plane(xs, "/host:metadata")
    for k, v in {"jax_version": "0.10.2", "jaxlib_version": "0.10.2"}.items():
        meta.set_stat(meta.plane.stats.add(), k, v)
    cpu = X.add_plane(xs, "/host:CPU")
    cpu.line(
        "python",
        1_000_000,
        [
            X.Ev("train", 0, 10_000_000, {"step_num": 0}),
            X.Ev("PjitFunction(step)", 1_000_000, 2_000_000, {"_r": 1}),
            X.Ev("np.asarray(jax.Array)", 4_000_000, 5_000_000, {"_src": "train.py"}),
            X.Ev("train", 10_000_000, 10_000_000, {"step_num": 1}),
        ],
        line_id=77,
    )
    tpu = X.add_plane(xs, "/device:TPU:0")
    tpu.line("XLA Ops", 1_000_000, [X.Ev("fusion.1", 2_000_000, 3_000_000, {"flops": 1.5})])
    # A metadata stat: every "fusion.1" event inherits hlo_category unless it sets its own.
    md = X.event_metadata(tpu.plane, tpu.event_id("fusion.1"))
    tpu.set_stat(md.stats.add(), "hlo_category", "convolution")
    tpu.set_stat(md.stats.add(), "flops", 9.0)
    path = X.write(xs, tmp_path / "built.xplane.pb")
    return traceinspect.load(path, decoder=decoder)  # type: ignore[arg-type]


def test_frames_hold_exact_values(trace: Trace) -> None:
    ev = trace.events
    assert ev[S.NAME].astype(str).tolist() == [
        "train",
        "PjitFunction(step)",
        "np.asarray(jax.Array)",
        "train",
        "fusion.1",
    ]
    assert ev[S.START_NS].tolist() == [1_000_000, 1_001_000, 1_004_000, 1_010_000, 1_002_000]
    assert ev[S.DURATION_NS].tolist() == [10_000, 2_000, 5_000, 10_000, 3_000]
    assert trace.start_ns == 1_000_000 and trace.end_ns == 1_020_000
    lines = trace.lines.set_index(S.LINE)
    assert lines.loc["python", S.LINE_ID] == 77
    assert lines.loc["python", S.EVENT_COUNT] == 4
    assert lines.loc["python", S.FIRST_START_NS] == 1_000_000
    assert lines.loc["python", S.LAST_END_NS] == 1_020_000
    planes = trace.planes.set_index(S.PLANE)
    assert planes[S.EVENT_COUNT].to_dict() == {
        "/host:metadata": 0,
        "/host:CPU": 4,
        "/device:TPU:0": 1,
    }
    assert trace.metadata == {"jax_version": "0.10.2", "jaxlib_version": "0.10.2"}


def test_select_by_regex_and_window(trace: Trace) -> None:
    assert trace.select(name="^train$").index.tolist() == [0, 3]
    assert trace.select(plane="TPU", line="XLA").index.tolist() == [4]
    assert trace.select(line="python", name="Pjit|asarray").index.tolist() == [1, 2]
    # Overlap semantics: [1_003_000, 1_004_000) touches train#0, Pjit ends at 1_003_000
    # (excluded), fusion.1 [1_002_000, 1_005_000) overlaps, asarray starts at 1_004_000.
    assert trace.window(1_003_000, 1_004_000).index.tolist() == [0, 4]
    with pytest.raises(UsageError, match="invalid regular expression for name"):
        trace.select(name="(")


def test_with_stats_typed_columns(trace: Trace) -> None:
    df = trace.with_stats(trace.select(plane="CPU"))
    assert df["step_num"].dtype == "Int64"
    assert df["step_num"].tolist() == [0, pd.NA, pd.NA, 1]
    assert df["_src"].tolist()[2] == "train.py"
    only = trace.with_stats(stats=["step_num"])
    assert list(only.columns) == [*S.EVENTS_COLUMNS, "step_num"]


def test_metadata_stats_are_inherited_unless_overridden(trace: Trace) -> None:
    df = trace.with_stats(trace.select(plane="TPU"))
    assert df["hlo_category"].tolist() == ["convolution"]
    assert df["flops"].tolist() == [1.5]  # the event's own value wins over metadata's 9.0


def test_stats_of_and_typed_values(trace: Trace) -> None:
    stats = trace.stats_of([0, 4])
    assert stats[S.STAT].astype(str).tolist() == ["step_num", "flops"]
    assert traceinspect.typed_values(stats).tolist() == [0, 1.5]


def test_repr_and_html(trace: Trace) -> None:
    assert "5 events" in repr(trace)
    html = trace_html(trace)
    assert "<table" in html and "/device:TPU:0" in html
