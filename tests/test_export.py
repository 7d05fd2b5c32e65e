"""`traceinspect export`: Chrome trace-event JSON that Perfetto opens, with every step and
idle gap of the analysis on traceinspect's own tracks, at the analysis' own times."""

from __future__ import annotations

import gzip
import json
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import xspace as X
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st
from traces import public_trace

import traceinspect
from traceinspect import schema as S
from traceinspect.analysis.analyze import analyze
from traceinspect.analysis.result import Analysis
from traceinspect.cli import export as export_cli
from traceinspect.cli import main
from traceinspect.report import perfetto
from traceinspect.report.perfetto import KINDS, perfetto_trace

SAMPLES = Path(__file__).resolve().parents[1] / "sample_traces"
MANIFEST = json.loads((SAMPLES / "manifest.json").read_text(encoding="utf-8"))["traces"]
VERDICTS = {e["path"]: e["verdict"] for e in MANIFEST if "verdict" in e}
SYNC = SAMPLES / "cpu_mlp_sync_every_step.xplane.pb"
# A sync-bound, an input-bound, a compile-bound and a device-bound capture.
EXPORTED = [
    "cpu_mlp_sync_every_step.xplane.pb",
    "scenarios/input_bound",
    "scenarios/recompiling",
    "scenarios/healthy",
]


def _load(path: Path) -> tuple[traceinspect.Trace, Analysis]:
    trace = traceinspect.load(path)
    return trace, analyze(trace)


def _run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.stdout, result.stderr


def validate(doc: dict[str, Any]) -> None:
    """The trace-event format's rules, as Perfetto applies them: the JSON Object Format;
    every event with ph, pid, tid and ts; complete events with a non-negative dur; a name
    for every process and thread used; times in microseconds to the nanosecond; complete
    events on one thread that overlap nest (Perfetto drops one that does not)."""
    assert set(doc) == {"traceEvents", "displayTimeUnit", "metadata"}
    assert doc["displayTimeUnit"] == "ms"
    events = doc["traceEvents"]
    processes: set[int] = set()
    threads: set[tuple[int, int]] = set()
    used: set[tuple[int, int]] = set()
    spans: dict[tuple[int, int], list[tuple[int, int]]] = defaultdict(list)
    for e in events:
        assert {"ph", "pid", "tid", "ts"} <= set(e), e
        assert isinstance(e["pid"], int) and isinstance(e["tid"], int), e
        assert isinstance(e["ts"], (int, float)) and e["ts"] >= 0, e
        if e["ph"] == "M":
            assert e["name"] in {
                "process_name",
                "process_sort_index",
                "thread_name",
                "thread_sort_index",
            }
            if e["name"] == "process_name":
                processes.add(e["pid"])
            if e["name"] == "thread_name":
                threads.add((e["pid"], e["tid"]))
            continue
        assert e["ph"] in {"X", "i"}, e
        assert isinstance(e["name"], str)
        used.add((e["pid"], e["tid"]))
        if e["ph"] == "X":
            assert isinstance(e["dur"], (int, float)) and e["dur"] >= 0, e
            # Microseconds with at most three decimals: whole nanoseconds.
            for value in (e["ts"], e["dur"]):
                assert abs(value * 1e3 - round(value * 1e3)) < 1e-3, e
            start = round(e["ts"] * 1e3)
            spans[(e["pid"], e["tid"])].append((start, start + round(e["dur"] * 1e3)))
    assert used <= threads, used - threads
    assert {pid for pid, _ in used} <= processes
    assert all(tid != pid for pid, tid in threads)  # a tid equal to a pid is its main thread
    for track, pieces in spans.items():
        open_ends: list[int] = []
        for start, end in sorted(pieces, key=lambda p: (p[0], -p[1])):
            while open_ends and open_ends[-1] <= start:
                open_ends.pop()
            assert not open_ends or end <= open_ends[-1], (track, start, end)
            if end > start:
                open_ends.append(end)


def _thread(doc: dict[str, Any], name: str) -> tuple[int, int]:
    (pid_tid,) = [
        (e["pid"], e["tid"])
        for e in doc["traceEvents"]
        if e["ph"] == "M" and e["name"] == "thread_name" and e["args"]["name"] == name
    ]
    return pid_tid


def _on(doc: dict[str, Any], name: str, ph: str = "X") -> list[dict[str, Any]]:
    pid, tid = _thread(doc, name)
    return [e for e in doc["traceEvents"] if e["ph"] == ph and (e["pid"], e["tid"]) == (pid, tid)]


def _us(ns: int) -> float:
    return ns / 1e3


@pytest.mark.parametrize("name", EXPORTED)
def test_every_gap_and_step_is_on_its_track_at_the_analysis_times(name: str) -> None:
    trace, a = _load(SAMPLES / name)
    doc = perfetto_trace(trace, a).to_dict()
    validate(doc)
    origin = trace.start_ns
    assert doc["metadata"]["time_origin_ns"] == origin
    assert doc["metadata"]["verdict"] == a.verdict == VERDICTS[name]
    assert doc["metadata"]["summary"] == a.summary

    gaps = _on(doc, "idle gaps")
    assert len(gaps) == len(a.gaps) > 0
    written = {(round(g["ts"] * 1e3), round(g["dur"] * 1e3)): g for g in gaps}
    assert len(written) == len(gaps)  # no gap twice
    for gap in a.gaps.to_dict("records"):
        g = written[(int(gap[S.START_NS]) - origin, int(gap[S.DURATION_NS]))]
        assert g["ts"] == pytest.approx(_us(int(gap[S.START_NS]) - origin), abs=1e-3)
        assert g["dur"] == pytest.approx(_us(int(gap[S.DURATION_NS])), abs=1e-3)
        assert g["ts"] * 1e3 / 1e6 == pytest.approx(gap[S.START_MS], abs=1e-6)
        assert g["name"] == gap[S.CAUSE]
        assert g["args"]["step"] == gap[S.STEP]
        assert g["args"]["duration_ms"] == round(gap[S.DURATION_NS] / 1e6, 4)
        assert g["args"]["evidence"] == list(gap[S.EVIDENCE])
        assert g["args"].get("sync_site") == gap[S.SYNC_SITE]

    steps = _on(doc, "steps")
    per_step = a.per_step
    assert [s["name"] for s in steps] == [f"step {n}" for n in per_step[S.STEP]]
    assert [round(s["ts"] * 1e3) for s in steps] == (per_step[S.START_NS] - origin).tolist()
    assert [round(s["dur"] * 1e3) for s in steps] == per_step[S.WALL_NS].tolist()

    (verdict,) = _on(doc, "steps", ph="i")
    assert verdict["s"] == "g" and verdict["ts"] == steps[0]["ts"]
    assert verdict["args"]["verdict"] == a.verdict


def test_the_trace_events_of_the_window_are_all_there() -> None:
    trace, a = _load(SYNC)
    result = perfetto_trace(trace, a)
    doc = result.to_dict()
    origin = trace.start_ns
    lo = int(a.per_step[S.START_NS].iloc[0])
    hi = lo + int(a.per_step[S.WALL_NS].sum())
    inside = trace.select(start_ns=lo, end_ns=hi)
    ours = [e for e in doc["traceEvents"] if e["ph"] == "X" and e["pid"] > 1]
    assert len(ours) == result.kept == len(inside) == 1407
    assert sum(result.dropped.values()) == 0
    assert doc["metadata"]["events"] == len(doc["traceEvents"]) == 1452
    assert doc["metadata"]["trace_events"] == 1407
    # Same events, same times, same threads.
    tid_of_line = {}
    for e in doc["traceEvents"]:
        if e["ph"] == "M" and e["name"] == "thread_name":
            tid_of_line[e["args"]["name"]] = e["tid"]
    assert a.timeline is not None and a.timeline.training_line_row is not None
    training = trace.lines[S.LINE].astype(str).tolist()[a.timeline.training_line_row]
    assert tid_of_line[f"{training} (training thread)"]
    expected = Counter(
        (str(n), s - origin, d)
        for n, s, d in zip(inside[S.NAME], inside[S.START_NS], inside[S.DURATION_NS], strict=True)
    )
    got = Counter((e["name"], round(e["ts"] * 1e3), round(e["dur"] * 1e3)) for e in ours)
    assert got == expected
    # Stats travel as args: the XLA CPU ops carry the program they belong to.
    assert any("hlo_module" in e.get("args", {}) for e in ours)
    # Sync gaps name where the read was made.
    sync_gaps = [g for g in _on(doc, "idle gaps") if g["name"] == "sync"]
    assert sync_gaps and all(g["args"]["sync_site"] == "np.asarray(jax.Array)" for g in sync_gaps)
    # The device's work (XLA's CPU threads) is named as such.
    assert sum(name.endswith("(device work)") for name in tid_of_line) == 3


def test_the_cap_keeps_device_training_thread_and_findings() -> None:
    trace, a = _load(SYNC)
    kinds = perfetto._line_kinds(trace, a)
    lo = int(a.per_step[S.START_NS].iloc[0])
    inside = trace.select(start_ns=lo, end_ns=lo + int(a.per_step[S.WALL_NS].sum()))
    kind_of_event = kinds[inside[S.LINE_ROW].to_numpy()]
    # 1407 events: 921 of the device (XLA's CPU threads), 222 on the training thread, 264
    # on other host threads; traceinspect writes 25 (16 gaps, 8 steps, the verdict).
    assert np.bincount(kind_of_event).tolist() == [921, 222, 264]
    for cap, dropped in [
        (1300, {"device": 0, "training thread": 0}),  # other host threads keep their longest
        (1100, {"device": 0, "other host": 264}),  # so does the training thread
        (900, {"training thread": 222, "other host": 264}),  # and the device
    ]:
        result = perfetto_trace(trace, a, max_events=cap)
        doc = result.to_dict()
        validate(doc)
        assert len(doc["traceEvents"]) == result.event_count <= cap
        tool = [e for e in doc["traceEvents"] if e["pid"] == 1 and e["ph"] != "M"]
        assert len(tool) == len(a.gaps) + len(a.per_step) + 1 == 25
        assert {k: result.dropped[k] for k in dropped} == dropped
        assert result.kept + result.dropped_count == 1407 and result.dropped_count > 0
        assert doc["metadata"]["dropped_events"] == result.dropped_count
        assert doc["metadata"]["dropped_by_kind"] == result.dropped
        # Within the kind that overflowed, the longest are kept.
        (partial,) = [k for k in KINDS if k not in dropped]
        code = KINDS.index(partial)
        durations = sorted(inside[S.DURATION_NS].to_numpy()[kind_of_event == code], reverse=True)
        kept = sorted(
            (round(e["dur"] * 1e3) for e in _trace_events_of_kind(doc, partial)), reverse=True
        )
        assert len(kept) == len(durations) - result.dropped[partial] > 0
        assert kept == durations[: len(kept)]


def _trace_events_of_kind(doc: dict[str, Any], kind: str) -> list[dict[str, Any]]:
    def kind_of(name: str) -> str:
        if name.endswith("(training thread)"):
            return "training thread"
        return "device" if name.endswith("(device work)") else "other host"

    tids = {
        e["tid"]
        for e in doc["traceEvents"]
        if e["ph"] == "M"
        and e["name"] == "thread_name"
        and e["pid"] > 1
        and kind_of(e["args"]["name"]) == kind
    }
    return [e for e in doc["traceEvents"] if e["ph"] == "X" and e["tid"] in tids]


def test_cli_writes_gzip_and_says_what_it_wrote(tmp_path: Path) -> None:
    out = tmp_path / "trace.json.gz"
    code, stdout, err = _run("export", str(SYNC), "-o", str(out))
    assert code == 0 and stdout == ""
    assert out.read_bytes()[:2] == b"\x1f\x8b"
    doc = json.loads(gzip.decompress(out.read_bytes()))
    validate(doc)
    n = len(doc["traceEvents"])
    assert err.strip().splitlines() == [
        f"Wrote {n:,} events ({out.stat().st_size / 1e3:,.1f} kB) to {out}; open it at "
        "https://ui.perfetto.dev (Open trace file) or chrome://tracing."
    ]
    plain = tmp_path / "trace.json"
    assert _run("export", str(SYNC), "-o", str(plain), "-q")[2] == ""
    assert json.loads(plain.read_text()) == doc


def test_cli_reports_what_the_cap_left_out(tmp_path: Path) -> None:
    out = tmp_path / "t.json"
    code, _, err = _run("export", str(SYNC), "-o", str(out), "--max-events", "1300")
    assert code == 0
    doc = json.loads(out.read_text())
    dropped = doc["metadata"]["dropped_events"]
    assert dropped > 0
    lines = err.strip().splitlines()
    assert lines[0] == (
        f"Left out {dropped:,} of 1,407 events of the trace, the shortest ({dropped:,} other "
        "host), to stay within --max-events 1,300; --step-range or --window export a shorter "
        "stretch whole."
    )
    assert lines[1].startswith(f"Wrote {len(doc['traceEvents']):,} events")


def test_steps_and_window_choose_what_is_written(tmp_path: Path) -> None:
    trace, a = _load(SYNC)
    origin = trace.start_ns
    doc = perfetto_trace(trace, a, steps=slice(2, 4)).to_dict()
    validate(doc)
    assert [s["name"] for s in _on(doc, "steps")] == ["step 2", "step 3"]
    in_steps = a.gaps[a.gaps[S.STEP_INDEX].isin([2, 3])]
    assert len(_on(doc, "idle gaps")) == len(in_steps) > 0
    lo = int(a.per_step[S.START_NS].iloc[2])
    hi = int(a.per_step[S.START_NS].iloc[3] + a.per_step[S.WALL_NS].iloc[3])
    assert doc["metadata"]["window_ms"] == [(lo - origin) / 1e6, (hi - origin) / 1e6]
    assert doc["metadata"]["steps"] == [2, 4]
    (verdict,) = _on(doc, "steps", ph="i")
    assert round(verdict["ts"] * 1e3) == lo - origin
    trace_events = [e for e in doc["traceEvents"] if e["ph"] == "X" and e["pid"] > 1]
    assert len(trace_events) == len(trace.select(start_ns=lo, end_ns=hi))

    # A window in ms from the trace's first event, alone and with --steps.
    doc = perfetto_trace(trace, a, window_ms=(10.0, 20.0)).to_dict()
    assert doc["metadata"]["window_ms"] == [10.0, 20.0]
    assert doc["metadata"]["steps"] == [2, 5]  # 8.35-12.61 ms to 17.17-21.03 ms
    gaps = _on(doc, "idle gaps")
    assert all(g["ts"] < 20_000 and g["ts"] + g["dur"] > 10_000 for g in gaps)
    both = perfetto_trace(trace, a, steps=slice(2, 4), window_ms=(10.0, 20.0)).to_dict()
    assert both["metadata"]["window_ms"] == [10.0, pytest.approx((hi - origin) / 1e6)]

    out = tmp_path / "w.json"
    assert _run("export", str(SYNC), "-o", str(out), "--step-range", "-2:", "-q")[0] == 0
    assert [s["name"] for s in _on(json.loads(out.read_text()), "steps")] == ["step 6", "step 7"]
    assert _run("export", str(SYNC), "-o", str(out), "--step-range", "3", "-q")[0] == 0
    assert [s["name"] for s in _on(json.loads(out.read_text()), "steps")] == ["step 3"]


def _assert_clean_error(code: int, err: str, *needles: str, exit_code: int = 2) -> None:
    assert code == exit_code, err  # 1: the data; 2: the call
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("Error: ") and "Traceback" not in err
    for needle in needles:
        assert needle in lines[0], lines[0]


def test_cli_errors_are_one_line_as_analyze(tmp_path: Path) -> None:
    out = tmp_path / "t.json"
    missing = str(tmp_path / "nowhere.xplane.pb")
    bad = tmp_path / "bad.xplane.pb"
    bad.write_bytes(b"\x0a\xff\xff")
    xs = X.space()
    X.add_plane(xs, "/host:CPU").line("python", 0, X.step_events(3, 10))
    idle = X.write(xs, tmp_path / "idle.xplane.pb")
    for path, needle in [
        (missing, "no such file"),
        (str(bad), "not a readable XPlane trace"),
        (str(idle), "no device activity found"),
    ]:
        code, _, err = _run("export", path, "-o", str(out))
        _assert_clean_error(code, err, path, needle, exit_code=1)
        assert _run("analyze", path)[2] == err  # the same message as analyze's
    assert not out.exists()
    for args, needle in [
        (["--step-range", "30:40"], "select none of the 8 analysed steps"),
        (["--window", "5:"], "--window needs both ends"),
        (["--window", "20:10"], "the end must come after the start"),
        (["--window", "900:1000"], "holds nothing"),
    ]:
        code, _, err = _run("export", str(SYNC), "-o", str(out), *args)
        _assert_clean_error(code, err, needle)
    code, _, err = _run("export", str(SAMPLES / "pod" / "straggler"), "-o", str(out))
    _assert_clean_error(code, err, "4 hosts", "--host NAME")
    blocked = tmp_path / "file"
    blocked.write_text("")
    code, _, err = _run("export", str(SYNC), "-o", str(blocked / "t.json"))
    _assert_clean_error(code, err, str(blocked / "t.json"), "cannot write the file")
    code, _, err = _run("export", str(SYNC), "-o", str(out), "--step-range", "a:b")
    assert code == 2 and "is not of the form A:B" in err


def test_one_host_of_a_pod(tmp_path: Path) -> None:
    out = tmp_path / "host2.json"
    code, _, _ = _run(
        "export", str(SAMPLES / "pod" / "straggler"), "-o", str(out), "--host", "host2"
    )
    assert code == 0
    doc = json.loads(out.read_text())
    validate(doc)
    assert doc["metadata"]["source"].endswith("host2.xplane.pb")
    assert _on(doc, "idle gaps")


def test_tpu_async_ops_that_overlap_are_split_into_lanes() -> None:
    """TPU ``Async XLA Ops`` overlap without nesting; Perfetto would drop them on one thread."""
    trace, a = _load(public_trace("jax_tpu_v6e_4chip_inference.xplane.pb"))
    result = perfetto_trace(trace, a)
    doc = result.to_dict()
    validate(doc)
    assert doc["metadata"]["verdict"] == a.verdict == "device-bound"
    assert len(_on(doc, "idle gaps")) == len(a.gaps)
    names = [
        e["args"]["name"]
        for e in doc["traceEvents"]
        if e["ph"] == "M" and e["name"] == "thread_name"
    ]
    lanes = [n for n in names if n.startswith("Async XLA Ops")]
    assert "Async XLA Ops" in lanes and "Async XLA Ops (lane 2)" in lanes
    lo = int(a.per_step[S.START_NS].iloc[0])
    inside = trace.select(start_ns=lo, end_ns=lo + int(a.per_step[S.WALL_NS].sum()))
    assert result.kept == len(inside) and result.dropped_count == 0


def test_a_public_gpu_trace() -> None:
    trace, a = _load(public_trace("jax_rocm_mi300x_8gpu_conv3d.xplane.pb"))
    doc = perfetto_trace(trace, a).to_dict()
    validate(doc)
    assert (a.backend, doc["metadata"]["verdict"]) == ("gpu", "sync-bound")
    gaps = _on(doc, "idle gaps")
    assert len(gaps) == len(a.gaps)
    # block_until_ready() after every call: the device idles while the host is blocked
    # (no read ends a gap here, so no gap names a sync site).
    assert Counter(g["name"] for g in gaps) == Counter(a.gaps[S.CAUSE])
    assert any(g["name"] == "sync" for g in gaps)
    sites = {g["args"]["sync_site"] for g in gaps if "sync_site" in g["args"]}
    assert sites == set(a.sync_sites)
    processes = {e["args"]["name"] for e in doc["traceEvents"] if e["name"] == "process_name"}
    assert {f"/device:GPU:{i}" for i in range(8)} <= processes


def test_an_analysis_without_its_timeline_is_refused() -> None:
    from dataclasses import replace

    from traceinspect.errors import UsageError

    trace, a = _load(SYNC)
    with pytest.raises(UsageError, match="kept no timeline"):
        perfetto_trace(trace, replace(a, timeline=None))


def test_cli_default_cap_is_the_library_default() -> None:
    assert export_cli.MAX_EVENTS == perfetto.MAX_EVENTS
    assert KINDS == ("device", "training thread", "other host")


def _nested_by_stack(line: np.ndarray, start: np.ndarray, end: np.ndarray) -> set[int]:
    """The lines where two events overlap without nesting, the slow obvious way."""
    bad = set()
    for row in set(line.tolist()):
        pieces = sorted(
            (int(s), int(e)) for s, e, r in zip(start, end, line, strict=True) if r == row
        )
        for i, (s1, e1) in enumerate(pieces):
            for s2, e2 in pieces[i + 1 :]:
                overlap = s1 < e2 and s2 < e1  # zero-length events overlap nothing
                nested = (s1 <= s2 and e2 <= e1) or (s2 <= s1 and e1 <= e2)
                if overlap and not nested:
                    bad.add(row)
    return bad


events_strategy = st.lists(
    st.tuples(st.integers(0, 2), st.integers(0, 30), st.integers(0, 12)), max_size=25
)


@settings(max_examples=300, deadline=None)
@given(events_strategy)
def test_misnesting_is_found_and_lanes_nest(events: list[tuple[int, int, int]]) -> None:
    line = np.array([e[0] for e in events], dtype=np.int64)
    start = np.array([e[1] for e in events], dtype=np.int64)
    end = start + np.array([e[2] for e in events], dtype=np.int64)
    flagged = perfetto._misnested(line, start, end)
    assert set(line[flagged].tolist()) == _nested_by_stack(line, start, end)
    lanes = perfetto._lanes(line, start, end)
    assert _nested_by_stack(line * 1000 + lanes, start, end) == set()
    if not flagged.any():
        assert (lanes == 0).all()
