"""Multi-host runs on precisely built TPU traces: exact numbers for the straggler rule,
engines that agree, the CLI, and bad hosts among good ones."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import xspace as X
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st
from matplotlib.patches import Rectangle

import traceinspect
from traceinspect import schema as S
from traceinspect.analysis.straggler import HostResult, analyze_pod
from traceinspect.cli import main
from traceinspect.errors import AnalysisError, UsageError
from traceinspect.pod import (
    DaskEngine,
    ProcessEngine,
    SerialEngine,
    analyze_host,
    analyze_run,
    load_host,
)

ms = X.ms


def host_trace(
    input_ms: float,
    compute_ms: float = 3.0,
    period: float = 10.0,
    n: int = 6,
    first_step: int = 0,
    collectives: bool = True,
) -> object:
    """One host of a data-parallel TPU job, ``n`` steps of ``period`` ms: fetch the batch
    (``input_ms``), dispatch 0.1 ms, compute ``compute_ms`` on the TPU, then the gradient
    all-reduce until the step ends (the wait for the slowest host is inside it). Without
    ``collectives`` the device just stops after computing (separately run hosts)."""
    xs = X.space()
    host = [
        X.Ev("train", ms(period * i), ms(period), {"step_num": first_step + i}) for i in range(n)
    ]
    ops = []
    for i in range(n):
        t = period * i
        host += [
            X.Ev("PrefetchDatasetIterator.__next__", ms(t), ms(input_ms)),
            X.Ev("PjitFunction(train_step)", ms(t + input_ms), ms(0.1)),
        ]
        c0 = t + input_ms + 0.1
        ops.append(X.Ev("fusion.12", ms(c0), ms(compute_ms)))
        if collectives:
            ar = "%all-reduce.3 = f32[1024]{0} all-reduce(f32[1024]{0} %p), replica_groups={}"
            ops.append(X.Ev(ar, ms(c0 + compute_ms), ms(t + period - c0 - compute_ms)))
    X.add_plane(xs, "/host:CPU").line("python", 0, host)
    X.add_plane(xs, "/device:TPU:0").line("XLA Ops", 0, ops)
    return xs


def write_run(root: Path, hosts: dict[str, object]) -> Path:
    run = root / "plugins" / "profile" / "2026_11_22_10_00_00"
    run.mkdir(parents=True)
    for name, xs in hosts.items():
        X.write(xs, run / f"{name}.xplane.pb")
    return root


def straggler_run(root: Path, slow: str = "h2", n_hosts: int = 4) -> Path:
    """Every host 10 ms/step; ``slow`` fetches for 6 ms, the others for 0.2 ms and wait
    in the all-reduce instead."""
    return write_run(
        root,
        {f"h{i}": host_trace(6.0 if f"h{i}" == slow else 0.2) for i in range(n_hosts)},
    )


def test_one_slow_host_is_named_and_confirmed(tmp_path: Path) -> None:
    pod = analyze_run(straggler_run(tmp_path), jobs=1)
    s = pod.straggler
    assert s is not None and s.host == "h2" and s.confirmed
    assert (s.starved_steps, s.aligned_steps) == (6, 6)
    # h2: fetch 6 ms, so the device idles 6 ms for input (and 0.1 ms dispatch); computes
    # 3 ms, and its all-reduce is the rest of the step: 10 - 6.1 - 3 = 0.9 ms.
    assert s.input_wait_ms_per_step == 6.0 and s.collective_ms_per_step == 0.9
    # The others: 0.2 ms fetch, all-reduce 10 - 0.3 - 3 = 6.7 ms; 5.8 ms longer than h2's,
    # which is 5.8 / 6 of h2's input idle time.
    assert s.others_input_wait_ms_per_step == 0.2 and s.others_collective_ms_per_step == 6.7
    assert s.explained_fraction == pytest.approx(5.8 / 6, abs=1e-4)
    assert pod.verdict == "straggler"
    assert pod.summary.startswith("Host h2 starves the pod: its device waits 6.00 ms/step")
    assert list(pod.hosts[S.ROLE]) == ["waits for h2", "waits for h2", "straggler", "waits for h2"]
    # Per-host verdicts disagree, as they do on a real pod.
    assert list(pod.hosts[S.VERDICT]) == [
        "device-bound",
        "device-bound",
        "input-bound",
        "device-bound",
    ]
    assert list(pod.hosts[S.COLLECTIVE_MS_PER_STEP]) == [6.7, 6.7, 0.9, 6.7]
    assert pod.per_step[S.STARVED_HOST].tolist() == ["h2"] * 6
    assert pod.per_step[S.STARVED_INPUT_IDLE_MS].tolist() == [6.0] * 6
    assert len(pod.steps) == 24 and sorted(pod.steps[S.STEP].unique()) == list(range(6))
    kinds = [r.kind for r in pod.recommendations]
    assert kinds[0] == "fix_straggler" and "grain_worker_count" in kinds
    workers = next(r for r in pod.recommendations if r.kind == "grain_worker_count")
    # h2 makes a batch in 6 ms for 3.9 ms of device work (3 compute + 0.9 all-reduce):
    # ceil(6 * 1.25 / 3.9) = 2 workers, one setting for every host.
    assert workers.host == "h2" and workers.value == 2
    assert workers.message.startswith("Set the Grain worker count to 2 on every host: h2 needs")


def test_balanced_pod_has_no_straggler(tmp_path: Path) -> None:
    pod = analyze_run(write_run(tmp_path, {f"h{i}": host_trace(0.2) for i in range(4)}), jobs=1)
    assert pod.straggler is None
    assert pod.verdict == "device-bound"
    assert pod.summary.startswith("All 4 hosts are device-bound")
    assert pod.per_step[S.STARVED_HOST].isna().all()
    assert set(pod.hosts[S.ROLE]) == {""}


def test_every_host_slow_alike_is_pod_wide_input_bound(tmp_path: Path) -> None:
    pod = analyze_run(write_run(tmp_path, {f"h{i}": host_trace(6.0) for i in range(3)}), jobs=1)
    assert pod.straggler is None
    assert pod.verdict == "input-bound"
    assert pod.summary.startswith("All 3 hosts are input-bound")


def test_without_collectives_the_slowest_starved_host_is_named_unconfirmed(
    tmp_path: Path,
) -> None:
    hosts = {f"h{i}": host_trace(0.2, collectives=False) for i in range(3)}
    hosts["h1"] = host_trace(16.0, period=20.0, collectives=False)
    pod = analyze_run(write_run(tmp_path, hosts), jobs=1)
    s = pod.straggler
    assert s is not None and s.host == "h1" and not s.confirmed
    assert s.explained_fraction is None and s.input_wait_ms_per_step == 16.0
    assert "cannot be checked" in s.message
    assert pod.verdict == "straggler"
    assert pod.per_step[S.SLOWEST_HOST].tolist() == ["h1"] * 6
    assert pod.per_step[S.SLOWEST_MS].tolist() == [20.0] * 6


def test_a_starved_host_the_others_do_not_wait_for_is_not_a_straggler(tmp_path: Path) -> None:
    """h1 fetches for 6 ms but still finishes its step in time and the others' all-reduce
    is no longer than its own: its pipeline is slow, yet nobody waits for it."""
    hosts = {f"h{i}": host_trace(0.2, compute_ms=3.0) for i in range(3)}
    # Same step length, same all-reduce length (3.8 ms) as the others' would need.
    hosts["h1"] = host_trace(6.0, compute_ms=0.1)
    pod = analyze_run(write_run(tmp_path, hosts), jobs=1)
    assert pod.straggler is None


def test_steps_are_aligned_by_number_not_position(tmp_path: Path) -> None:
    hosts = {"h0": host_trace(0.2, n=6), "h1": host_trace(6.0, n=6, first_step=2)}
    pod = analyze_run(write_run(tmp_path, hosts), jobs=1)
    assert pod.per_step[S.STEP].tolist() == [2, 3, 4, 5]
    assert any("4 step number(s) traced by only some hosts" in n for n in pod.notes)
    disjoint = {"h0": host_trace(0.2), "h1": host_trace(6.0, first_step=100)}
    pod = analyze_run(write_run(tmp_path / "d", disjoint), jobs=1)
    assert pod.per_step.empty and pod.straggler is None
    assert any("No step number was traced by every host" in n for n in pod.notes)


def test_a_broken_host_file_is_reported_and_the_rest_analysed(tmp_path: Path) -> None:
    root = straggler_run(tmp_path)
    run = next((root / "plugins" / "profile").iterdir())
    data = (run / "h3.xplane.pb").read_bytes()
    (run / "h3.xplane.pb").write_bytes(data[: len(data) // 2])
    pod = analyze_run(root, jobs=1)
    assert pod.straggler is not None and pod.straggler.host == "h2"
    assert pod.hosts.loc["h3", S.VERDICT] == "error"
    assert "h3.xplane.pb: not a readable XPlane trace" in str(pod.hosts.loc["h3", S.ERROR])
    assert pod.notes[0].startswith("1 of 4 host(s) could not be analysed")
    for name in ("h0", "h1", "h2"):
        (run / f"{name}.xplane.pb").write_bytes(b"garbage")
    with pytest.raises(AnalysisError, match="none of the 4 hosts could be analysed"):
        analyze_run(root, jobs=1)


def test_a_host_that_cannot_be_analysed_still_counts_for_the_data_check(tmp_path: Path) -> None:
    """Its batch digests and its sidecar's own checks come from its sidecar: a host whose
    window was refused (no analysis) and that drew the same batches as another is still
    named, and so is what its sidecar shows set up wrong."""
    root = straggler_run(tmp_path, n_hosts=3)
    run = next((root / "plugins" / "profile").iterdir())
    whole = {"api": "jax.device_put", "local_rows": 96, "global_rows": 96, "host_rows": 32}
    for host, digests in (("h0", ["aa", "bb"]), ("h1", ["cc", "dd"]), ("h2", ["aa", "bb"])):
        sidecar = {
            "schema_version": 1,
            "grain": {"first_batches": digests},
            "global_arrays": [{**whole, "processes": 3}],
        }
        (run / f"{host}.traceinspect.capture.json").write_text(json.dumps(sidecar))
    (run / "h2.xplane.pb").write_bytes(b"garbage")
    pod = analyze_run(root, jobs=1, use_cache=False)
    assert pod.hosts.loc["h2", S.VERDICT] == "error"
    same, h2 = pod.findings
    assert same.rule == "same_data_on_hosts"
    assert "h0, h2 drew identical first batches" in same.message
    assert h2.rule == "batch_vs_global"
    assert h2.message.startswith("h2 (not analysed; from its capture sidecar): Each host's")
    # The analysed hosts' own findings stay in their analyses.
    assert [f.rule for f in pod.analyses["h0"].findings] == ["batch_vs_global"]
    # No host analysed at all: the sidecars' findings are still the pod's result.
    for host in ("h0", "h1"):
        (run / f"{host}.xplane.pb").write_bytes(b"garbage")
    pod = analyze_run(root, jobs=1, use_cache=False)
    assert pod.verdict == "error" and pod.analyses == {}
    assert [f.rule for f in pod.findings] == ["same_data_on_hosts"] + 3 * ["batch_vs_global"]
    out = CliRunner().invoke(main, ["analyze", str(root), "-j", "1", "--no-cache"])
    assert out.exit_code == 0, out.output
    assert "Findings across hosts" in out.output
    assert "h1 (not analysed; from its capture sidecar): Each host's" in out.output
    html = tmp_path / "pod.html"
    out = CliRunner().invoke(main, ["analyze", str(root), "-j", "1", "--html", str(html)])
    assert out.exit_code == 0, out.output
    assert "<li><b>same_data_on_hosts</b> (warning)" in html.read_text()


def test_engines_agree(tmp_path: Path) -> None:
    root = straggler_run(tmp_path)
    serial = analyze_run(root, engine=SerialEngine())
    pooled = analyze_run(root, engine=ProcessEngine(2))

    def strip(d: dict[str, object]) -> dict[str, object]:
        for h in d["hosts"]:  # type: ignore[attr-defined]
            h.pop("seconds")
        return d

    assert strip(serial.to_dict()) == strip(pooled.to_dict())


@pytest.mark.slow
def test_dask_local_cluster_agrees(tmp_path: Path) -> None:
    pytest.importorskip("distributed")
    root = straggler_run(tmp_path)
    serial = analyze_run(root, jobs=1)
    dask = analyze_run(root, scheduler="local", jobs=2)
    assert dask.straggler == serial.straggler
    assert dask.hosts.equals(serial.hosts)


def test_unreachable_dask_scheduler_is_a_clean_error(tmp_path: Path) -> None:
    pytest.importorskip("distributed")
    root = straggler_run(tmp_path)
    engine = DaskEngine("tcp://127.0.0.1:9", connect_timeout_s=1.0)
    with pytest.raises(UsageError, match=r"cannot reach the Dask scheduler at tcp://127.0.0.1:9"):
        analyze_run(root, engine=engine)


def test_results_keep_only_the_longest_gaps(tmp_path: Path) -> None:
    from traceinspect.pod import KEPT_GAPS, HostTask

    xs = host_trace(6.0, n=KEPT_GAPS + 10)
    path = X.write(xs, tmp_path / "h.xplane.pb")
    result = analyze_host(HostTask("h", str(path), path.stat().st_size))
    assert result.analysis is not None
    assert len(result.analysis.gaps) == KEPT_GAPS
    assert len(result.analysis.per_step) == KEPT_GAPS + 10 - 0


def test_load_host_reads_one_hosts_frames(tmp_path: Path) -> None:
    pod = analyze_run(straggler_run(tmp_path), jobs=1)
    trace = load_host(pod, "h2")
    assert trace.hosts == ["h2"]
    with pytest.raises(UsageError, match="no host named 'h9'"):
        load_host(pod, "h9")


@settings(max_examples=25, deadline=None)
@given(order=st.permutations(["h0", "h1", "h2", "h3"]), slow=st.sampled_from(["h0", "h3"]))
def test_host_order_does_not_matter(order: list[str], slow: str) -> None:
    """The straggler and the numbers do not depend on the order results arrive in."""
    results = {name: _result(name, 6.0 if name == slow else 0.2) for name in order}
    pod = analyze_pod([results[h] for h in order], path="p", run="r")
    assert pod.straggler is not None and pod.straggler.host == slow
    assert pod.straggler.explained_fraction == pytest.approx(5.8 / 6, abs=1e-4)


_RESULTS: dict[tuple[str, float], HostResult] = {}


def _result(name: str, input_ms: float) -> HostResult:
    key = (name, input_ms)
    if key not in _RESULTS:
        import tempfile

        with tempfile.TemporaryDirectory() as tmp:
            path = X.write(host_trace(input_ms), Path(tmp) / f"{name}.xplane.pb")
            analysis = traceinspect.analyze(traceinspect.load(path, use_cache=False))
        _RESULTS[key] = HostResult(name, str(path), 0, analysis)
    return _RESULTS[key]


def test_cli_pod_text_json_host_and_errors(tmp_path: Path) -> None:
    root = straggler_run(tmp_path)
    runner = CliRunner()
    out = runner.invoke(main, ["analyze", str(root), "--jobs", "1"])
    assert out.exit_code == 0, out.output
    assert out.output.startswith("Verdict   straggler: Host h2 starves the pod")
    run_line = "Run       plugins/profile/2026_11_22_10_00_00: 4 host(s), 4 analysed, 6 step(s)"
    assert run_line in out.output
    assert "  h2                   input-bound" in out.output
    assert "straggler" in out.output and "waits for h2" in out.output
    js = runner.invoke(main, ["analyze", str(root), "--json", "-j", "2"])
    data = json.loads(js.output)
    assert data["verdict"] == "straggler" and data["straggler"]["host"] == "h2"
    assert data["host_count"] == 4 and len(data["steps"]) == 6
    assert data["hosts"][2]["analysis"]["verdict"] == "input-bound"
    assert data["hosts_table"][2]["collective_ms_per_step"] == 0.9
    # The input idle columns keep their historical JSON keys.
    assert data["hosts_table"][2]["input_wait_ms_per_step"] == 6.0
    assert data["steps"][0]["starved_input_wait_ms"] == 6.0
    assert "input_idle_ms_per_step" not in data["hosts_table"][2]
    one = runner.invoke(main, ["analyze", str(root), "--host", "h2"])
    assert one.exit_code == 0 and one.output.startswith("Verdict   input-bound")
    two = runner.invoke(main, ["analyze", str(root), "--host", "h2", "--host", "h0", "-j", "1"])
    assert "2 host(s), 2 analysed" in two.output
    bad = runner.invoke(main, ["analyze", str(root), "--host", "nope"])
    assert bad.exit_code == 2
    assert bad.output.strip().endswith("hosts: h0, h1, h2, h3.")
    assert "Traceback" not in bad.output
    zero = runner.invoke(main, ["analyze", str(root), "--jobs", "0"])
    assert zero.exit_code == 2 and "--jobs must be at least 1" in zero.output


def test_cli_pod_plots_and_html(tmp_path: Path) -> None:
    root = straggler_run(tmp_path / "logs")
    out = CliRunner().invoke(
        main,
        [
            "analyze",
            str(root),
            "-j",
            "1",
            "--plots",
            str(tmp_path / "plots"),
            "--html",
            str(tmp_path / "pod.html"),
        ],
    )
    assert out.exit_code == 0, out.output
    assert sorted(p.name for p in (tmp_path / "plots").iterdir()) == [
        "host_steps.png",
        "hosts.png",
    ]
    page = (tmp_path / "pod.html").read_text()
    assert "Host h2 starves the pod" in page and page.count("data:image/png;base64") == 2


def test_pod_plots_draw_the_numbers(tmp_path: Path) -> None:
    from traceinspect.report.pod_plots import plot_host_steps, plot_hosts

    pod = analyze_run(straggler_run(tmp_path), jobs=1)
    ax = plot_hosts(pod)
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert labels == ["h0", "h1", "h2  (straggler)", "h3"]
    # Bars top to bottom are h0..h3; the second layer is time in collectives.
    widths = [round(p.get_width(), 4) for p in ax.patches if isinstance(p, Rectangle)]
    n = 4
    compute, coll, idle_input = widths[0:n], widths[n : 2 * n], widths[2 * n : 3 * n]
    assert compute == [3.0] * 4
    assert coll == [6.7, 6.7, 0.9, 6.7]
    assert idle_input == [0.2, 0.2, 6.0, 0.2]
    ax2 = plot_host_steps(pod)
    lines = {line.get_label(): np.asarray(line.get_ydata()).tolist() for line in ax2.get_lines()}
    assert lines["h2 (straggler)"] == [10.0] * 6
    assert ax2.get_title(loc="left") == "h2 starves the pod"


def test_a_single_file_run_is_the_single_host_analysis(tmp_path: Path) -> None:
    root = write_run(tmp_path, {"h0": host_trace(6.0)})
    out = CliRunner().invoke(main, ["analyze", str(root)])
    assert out.output.startswith("Verdict   input-bound")
    shutil.rmtree(tmp_path)


@pytest.mark.parametrize(
    ("plane", "line", "name"),
    [
        ("/device:TPU:0", "XLA Ops", "%all-gather-start.2 = (f32[8]) all-gather-start(%x)"),
        ("/device:GPU:0", "Stream #13(Compute)", "ncclDevKernel_AllReduce_Sum_f32_RING_LL"),
        ("/host:CPU", "tf_XLAEigen/123", "all-reduce.3"),
        ("/host:CPU", "tf_XLAEigen/123", "reduce-scatter"),
    ],
)
def test_collectives_are_found_on_every_backend(
    tmp_path: Path, plane: str, line: str, name: str
) -> None:
    """3 steps of 10 ms: 2 ms of compute, then 5 ms in the collective."""
    xs = X.space()
    device = []
    for i in range(3):
        device += [X.Ev("fusion.1", ms(10 * i + 1), ms(2)), X.Ev(name, ms(10 * i + 3), ms(5))]
    cpu = X.add_plane(xs, "/host:CPU")
    cpu.line("python", 0, X.step_events(3, 10))
    if plane == "/host:CPU":
        cpu.line(line, 0, device)
    else:
        X.add_plane(xs, plane).line(line, 0, device)
    a = traceinspect.analyze(traceinspect.load(X.write(xs, tmp_path / "t.xplane.pb")))
    assert a.collective_ms_per_step == 5.0 and a.device_busy_ms_per_step == 7.0
    assert a.to_dict()["per_step"][1]["collective_ms"] == 5.0


def test_names_that_only_look_like_collectives_are_not() -> None:
    from traceinspect.backends.activity import COLLECTIVE

    for name in ("all-reduce.3", "%all-reduce = f32[] all-reduce(...)", "all-to-all", "ncclKernel"):
        assert COLLECTIVE.search(name), name
    for name in ("fusion.all", "reduce.4", "my-all-reducer", "gather.2", "all-reduce_fusion"):
        assert not COLLECTIVE.search(name), name


POD_SAMPLES = Path(__file__).resolve().parents[1] / "sample_traces" / "pod"


def test_real_cpu_pod_names_the_slowed_host() -> None:
    """Four jax.distributed processes (gloo all-reduce), host2's input made slow on purpose
    (sample_traces/pod/MEASUREMENTS.md): the other three wait for it in the all-reduce."""
    pod = analyze_run(POD_SAMPLES / "straggler", jobs=2)
    s = pod.straggler
    assert s is not None and s.host == "host2" and s.confirmed
    # 20 steps traced per host; a host whose device sat idle from its trace's start leaves its
    # first step out (capture opened the trace at that step's boundary: no context).
    assert s.starved_steps == s.aligned_steps == 19
    assert s.input_wait_ms_per_step > 20 and s.others_input_wait_ms_per_step < 1
    assert s.others_collective_ms_per_step - s.collective_ms_per_step > 0.5 * (
        s.input_wait_ms_per_step
    )
    assert pod.hosts.loc["host2", S.VERDICT] == "input-bound"
    assert (pod.hosts.drop(index="host2")[S.ROLE] == "waits for host2").all()
    # Each host's sidecar (capture --run-name) is its own.
    assert all(r.analysis is not None for r in pod.results)


def test_real_cpu_pod_without_a_slow_host_has_no_straggler() -> None:
    pod = analyze_run(POD_SAMPLES / "balanced", jobs=1)
    assert pod.straggler is None and pod.verdict != "straggler"
    assert len(pod.per_step) == 19


def test_pod_behind_a_url(tmp_path: Path) -> None:
    """The same analysis through fsspec: file:// on a process pool (workers open the URL
    themselves), memory:// in process."""
    fsspec = pytest.importorskip("fsspec")
    root = straggler_run(tmp_path)
    local = analyze_run(root, jobs=1)
    url = analyze_run(root.as_uri(), jobs=2)
    assert url.straggler == local.straggler
    assert url.results[0].location.startswith("file://")
    mem = fsspec.filesystem("memory")
    run = next((root / "plugins" / "profile").iterdir())
    for f in run.iterdir():
        mem.pipe(f"/pod/plugins/profile/{run.name}/{f.name}", f.read_bytes())
    try:
        remote = analyze_run("memory://pod", jobs=1)
        assert remote.straggler == local.straggler
        assert remote.path == "memory://pod"
    finally:
        mem.rm("/pod", recursive=True)


def test_docs_show_the_real_pod_output() -> None:
    """The documentation's multi-host example is what the command prints on the bundled pod
    (tests/test_readme.py checks every example line by line; this one with one job)."""
    readme = (POD_SAMPLES.parents[1] / "docs" / "multi-host.md").read_text()
    block = readme.split("$ traceinspect analyze sample_traces/pod/straggler\n", 1)[1]
    shown = [line for line in block.split("```", 1)[0].splitlines() if line != "..."]
    out = CliRunner().invoke(main, ["analyze", str(POD_SAMPLES / "straggler"), "-j", "1"])
    printed = out.output.splitlines()
    for line in shown[:10]:
        assert line in printed, line


def test_analysing_merged_hosts_says_to_analyse_per_host(tmp_path: Path) -> None:
    trace = traceinspect.load(straggler_run(tmp_path))
    a = traceinspect.analyze(trace)
    assert any("merges 4 hosts" in n and "analyze_run()" in n for n in a.notes)


def test_process_pool_from_a_threaded_caller(tmp_path: Path) -> None:
    """A caller with threads running (a notebook with jax loaded) gets forkserver workers:
    same results, no fork of a threaded process."""
    import threading

    root = straggler_run(tmp_path)
    stop = threading.Event()
    thread = threading.Thread(target=stop.wait, daemon=True)
    thread.start()
    try:
        pod = analyze_run(root, engine=ProcessEngine(2))
    finally:
        stop.set()
        thread.join()
    assert pod.straggler is not None and pod.straggler.host == "h2"


def test_default_jobs_are_capped_by_cores_files_and_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    from traceinspect.pod import _engines

    monkeypatch.setattr(_engines, "usable_cpus", lambda: 8)
    monkeypatch.setattr(_engines, "available_memory", lambda: 32 << 30)
    assert _engines.default_jobs([1 << 20] * 32) == (8, "8 usable core(s)")
    assert _engines.default_jobs([1 << 20] * 3) == (3, "3 host file(s)")
    # 7 GB host files: 5 x 7 GB = 35 GB per worker, so 32 GiB holds one at a time.
    jobs, reason = _engines.default_jobs([7_000_000_000] * 32)
    assert jobs == 1 and reason.startswith("memory: 32.0 GiB available holds 1 host(s)")


def test_a_memory_limited_pool_is_noted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from traceinspect.pod import _engines

    monkeypatch.setattr(_engines, "available_memory", lambda: 1_000)
    pod = analyze_run(straggler_run(tmp_path))
    assert any(n.startswith("Analysed 1 host(s) at a time, limited by memory") for n in pod.notes)


@pytest.mark.parametrize("n_hosts", [1, 3])
def test_cli_lists_the_log_directory_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, n_hosts: int
) -> None:
    """A bucket is listed once per command, whether one host or a pod is analysed."""
    from traceinspect.xplane import fs

    calls = []
    real_find = fs.find

    def counting_find(*args: object, **kwargs: object) -> object:
        calls.append(args[0])
        return real_find(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(fs, "find", counting_find)
    root = straggler_run(tmp_path, n_hosts=n_hosts, slow="h0")
    out = CliRunner().invoke(main, ["analyze", str(root), "-j", "1"])
    assert out.exit_code == 0, out.output
    assert len(calls) == 1
