"""Reading a saved sweep back: SweepResult.from_dict round trips, load_sweep on the bundled
sweep (sample_traces/sweep/) and its errors."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st

from traceinspect.analysis.input_stages import InputStages
from traceinspect.errors import TraceInspectError, TraceNotFoundError, UsageError
from traceinspect.report.sweep import write_sweep
from traceinspect.sweep import (
    CRASHED,
    METRICS,
    OK,
    STATUSES,
    TIMEOUT,
    SweepResult,
    SweepRun,
    load_sweep,
    summarize_sweep,
)
from traceinspect.vocabulary import CAUSES

BUNDLED = Path(__file__).resolve().parents[1] / "sample_traces" / "sweep"

ms = st.floats(min_value=0.01, max_value=1e5, allow_nan=False)
maybe_ms = st.none() | ms
maybe_int = st.none() | st.integers(min_value=-15, max_value=64)
runs = st.builds(
    SweepRun,
    workers=st.integers(min_value=0, max_value=64),
    status=st.sampled_from(STATUSES),
    median_ms=maybe_ms,
    p90_ms=maybe_ms,
    p10_ms=maybe_ms,
    mean_ms=maybe_ms,
    input_wait_ms=maybe_ms,
    idle_fractions=st.dictionaries(
        st.sampled_from(CAUSES), st.floats(min_value=0.0, max_value=1.0), max_size=len(CAUSES)
    ),
    verdict=st.none() | st.sampled_from(["input-bound", "device-bound", "sync-bound"]),
    steps=st.integers(min_value=0, max_value=1000),
    exit_code=maybe_int,
    observed_workers=maybe_int,
    elapsed_s=maybe_ms,
    run_dir=st.none() | st.text(max_size=20),
    message=st.text(max_size=40),
)


@given(
    st.lists(runs, max_size=6, unique_by=lambda r: r.workers),
    st.floats(min_value=0.0, max_value=1.0),
    st.sampled_from(METRICS),
    st.lists(st.text(max_size=10), max_size=4),
)
def test_round_trip_through_json(
    given_runs: list[SweepRun], tolerance: float, metric: str, command: list[str]
) -> None:
    result = summarize_sweep(
        given_runs, tolerance=tolerance, metric=metric, command=command, logdir="sw"
    )
    back = SweepResult.from_dict(json.loads(json.dumps(result.to_dict())))
    assert back == result


def test_bundled_sweep_loads_with_its_choice() -> None:
    saved = json.loads((BUNDLED / "sweep.json").read_text(encoding="utf-8"))
    result = load_sweep(BUNDLED)
    assert load_sweep(BUNDLED / "sweep.json") == result
    # Written before runs kept their input stages and analyze's prediction: everything else
    # reads back as it was.
    out = result.to_dict()
    assert [r.pop("input_stages") for r in out["runs"]] == [None] * 3
    assert [r.pop("predicted_workers") for r in out["runs"]] == [None] * 3
    assert [r.pop("predicted_step_ms") for r in out["runs"]] == [None] * 3
    # ... and before sweep timed steps after each trace, without the profiler.
    assert [r.pop("untraced_step_ms") for r in out["runs"]] == [None] * 3
    assert [r.pop("untraced_steps") for r in out["runs"]] == [0] * 3
    # ... and before it timed a count again.
    assert [r.pop("first_untraced_step_ms") for r in out["runs"]] == [None] * 3
    assert out.pop("metric_note") is None
    # ... and before it named the counts within its runs' scatter (none without second runs).
    assert out.pop("scatter") is None
    assert out == saved
    assert result.chosen == saved["chosen"] == 2
    assert [r.workers for r in result.runs] == [0, 1, 2]
    assert all(r.status == OK for r in result.runs)
    # The table matches sweep.csv, written from the same result by `traceinspect sweep`.
    csv = pd.read_csv(BUNDLED / "sweep.csv")
    rows = result.rows()
    # Written before the runtime cause existed: its column is the one added, and empty.
    assert rows.pop("idle_runtime_fraction").isna().all()
    assert rows.pop("untraced_step_ms").isna().all()
    assert rows.pop("first_untraced_step_ms").isna().all()
    assert list(rows.columns) == list(csv.columns)
    for column in ("median_step_ms", "mean_step_ms", "p90_step_ms", "input_wait_ms", "vs_best"):
        assert rows[column].tolist() == pytest.approx(csv[column].tolist())
    assert rows["chosen"].tolist() == csv["chosen"].tolist()


STAGES = InputStages(
    dominant="read",
    ms_per_batch={"read": 8.0, "preprocessing": 2.0, "batch": 0.5, "prefetch": 0.1,
                  "transfer": 0.2},
    where={"read": "workers", "preprocessing": "workers", "batch": "workers", "prefetch": "main",
           "transfer": "main"},
    workers=2,
    effective_ms={"read": 4.0, "preprocessing": 1.0, "batch": 0.25, "prefetch": 0.1,
                  "transfer": 0.2},
    budget_ms=9.0,
    batches=40,
)  # fmt: skip


def test_written_sweep_loads_back(tmp_path: Path) -> None:
    result = summarize_sweep(
        [
            SweepRun(workers=0, status=OK, median_ms=20.0, p90_ms=22.0, p10_ms=19.0,
                     mean_ms=20.5, input_wait_ms=9.0, idle_fractions={"input": 0.4},
                     verdict="input-bound", steps=8, exit_code=0),
            SweepRun(workers=2, status=OK, median_ms=10.0, p90_ms=11.0, p10_ms=9.5,
                     mean_ms=10.1, input_wait_ms=0.1, idle_fractions={"input": 0.01},
                     verdict="device-bound", steps=8, exit_code=0, observed_workers=2,
                     input_stages=STAGES),
            SweepRun(workers=4, status=CRASHED, exit_code=-9, message="killed"),
            SweepRun(workers=8, status=TIMEOUT, message="still running after 600 s"),
        ],
        command=["python", "train.py", "--workers", "{workers}"],
        logdir=str(tmp_path),
    )  # fmt: skip
    written = write_sweep(result, tmp_path)
    back = load_sweep(tmp_path)
    assert back == result
    assert back.run(2).input_stages == STAGES
    assert written["stages_png"].name == "sweep_input_stages.png"
    assert back.chosen == 2
    assert back.run(4).exit_code == -9
    assert math.isclose(back.vs_best(back.run(0)) or 0.0, 2.0)


def test_missing_sweep_names_the_file(tmp_path: Path) -> None:
    with pytest.raises(TraceNotFoundError, match=r"sweep\.json: no such file.*--logdir"):
        load_sweep(tmp_path)
    with pytest.raises(TraceNotFoundError, match=r"nothing\.json"):
        load_sweep(tmp_path / "nothing.json")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{not json", "not JSON"),
        ("[1, 2]", "a JSON object expected"),
        ('{"chosen": 2}', "missing field 'runs'"),
        ('{"runs": [{"status": "ok"}]}', "missing field 'workers'"),
        ('{"runs": [{"workers": "many", "status": "ok"}]}', "invalid literal"),
        ('{"runs": [{"workers": 1, "status": "ok"}], "chosen": 4}', "no run has that count"),
        ('{"runs": [{"workers": 1, "status": "ok"}, {"workers": 1, "status": "ok"}]}', "one run"),
        ('{"runs": [], "metric": "p99"}', "unknown metric"),
    ],
)
def test_malformed_sweep_is_a_usage_error(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "sweep.json"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(UsageError, match=message) as info:
        load_sweep(path)
    assert isinstance(info.value, TraceInspectError)
    assert str(path) in str(info.value)
