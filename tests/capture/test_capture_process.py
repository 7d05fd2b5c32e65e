"""The capture parent as its own process: Python semantics, Ctrl-C, SIGTERM, SIGKILL, exit
codes, and no process of the script left behind."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from capture_helpers import REPO, SCRIPTS, TRAIN, capture, parent_process

from traceinspect.capture import SIDECAR_NAME, TERMINATE_GRACE_S
from traceinspect.capture._child import ENTRY

# A real capture analysed: run on every stack of the support matrix (noxfile.py).
pytestmark = [pytest.mark.slow, pytest.mark.stack]


def _sidecar(logdir: Path) -> dict[str, object]:
    (path,) = (logdir / "plugins" / "profile").glob(f"*/{SIDECAR_NAME}")
    data: dict[str, object] = json.loads(path.read_text())
    return data


def _wait_for(path: Path, proc: subprocess.Popen[str], timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        assert proc.poll() is None, "the run ended before reaching the marker"
        assert time.monotonic() < deadline, "the run never reached the marker"
        time.sleep(0.1)


def test_bare_script_runs_as_python_would(tmp_path: Path) -> None:
    """Same argv, __main__, sys.path[0], cwd, stdin, environment; spawn and fork still work."""
    facts = tmp_path / "facts.json"
    workdir = tmp_path / "work"
    workdir.mkdir()
    command = [str(TRAIN), "--steps", "6", "--facts", str(facts), "--mp-check"]
    proc = parent_process(
        command,
        tmp_path / "logs",
        cwd=workdir,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env={"TI_TEST_ENV": "kept"},
    )
    out, _ = proc.communicate("a line on stdin\n", timeout=120)

    assert proc.returncode == 0
    assert "final loss" in out
    seen = json.loads(facts.read_text())
    assert seen["name"] == "__main__"
    assert seen["argv"] == command
    assert seen["path0"] == str(SCRIPTS)
    assert seen["cwd"] == str(workdir)
    assert seen["stdin"] == "a line on stdin"
    assert seen["env"] == "kept"
    assert seen["spawn"] == [4, 9] and seen["fork"] == [16]
    assert _sidecar(tmp_path / "logs")["exit_code"] == 0


# What a script sees of the child's setting, where traceinspect is not importable.
_WITHOUT_THE_PACKAGE = """\
import importlib.util, json, sys
json.dump(
    {
        "findable": importlib.util.find_spec("traceinspect") is not None,
        "imported": sorted(m for m in sys.modules if m.split(".")[0] == "traceinspect"),
        "path": sys.path,
    },
    open(sys.argv[1], "w"),
)
"""


@pytest.mark.parametrize("isolation", [["-S"], ["-I", "-S"]], ids=" ".join)
def test_the_child_runs_where_traceinspect_cannot_be_imported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, isolation: list[str]
) -> None:
    """The child's entry file loads its sibling modules itself: with no site-packages (-S,
    where the installed traceinspect is) and no PYTHONPATH, the script runs under the capture
    and its report is written; the child's directory is not left on sys.path."""
    script = tmp_path / "script.py"
    script.write_text(_WITHOUT_THE_PACKAGE)
    facts = tmp_path / "facts.json"
    monkeypatch.delenv("PYTHONPATH", raising=False)
    monkeypatch.chdir(tmp_path)

    result = capture(tmp_path / "logs", [sys.executable, *isolation, str(script), str(facts)])

    assert result.exit_code == 0
    seen = json.loads(facts.read_text())
    assert seen["findable"] is False and seen["imported"] == []
    child_dir = str(Path(ENTRY).resolve().parent)
    assert child_dir not in seen["path"]
    if isolation == ["-S"]:
        assert seen["path"][0] == str(tmp_path)
    # The child's own report reached the sidecar (not the runner's stand-in for a dead child).
    sidecar = json.loads(Path(result.sidecar_path).read_text())
    assert sidecar["ended"] == "returned" and sidecar["host"]["hostname"]


def test_ctrl_c_in_the_window_writes_a_partial_trace(tmp_path: Path) -> None:
    """... and what the script started ends with it, even a process deaf to Ctrl-C."""
    marker, grandchild = tmp_path / "in_window", tmp_path / "grandchild"
    command = [sys.executable, str(TRAIN), "--steps", "20", "--hang-at", "4"]
    command += ["--marker", str(marker), "--grandchild", str(grandchild)]
    proc = parent_process(
        command, tmp_path / "logs", start_new_session=True, stderr=subprocess.PIPE
    )
    _wait_for(marker, proc)
    # What a terminal does on Ctrl-C: SIGINT to the whole foreground process group.
    os.killpg(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=60)

    assert proc.returncode == 130
    assert "KeyboardInterrupt" in err
    sidecar = _sidecar(tmp_path / "logs")
    assert sidecar["exit_code"] == 130
    assert sidecar["partial"] is True
    assert any("interrupted" in str(r) for r in sidecar["partial_reasons"])  # type: ignore[attr-defined]
    assert sidecar["trace_files"]
    run_dir = next((tmp_path / "logs" / "plugins" / "profile").iterdir())
    assert list(run_dir.glob("*.xplane.pb"))
    sleeper = int(grandchild.read_text())
    left = _left_after([sleeper], 5)
    _kill_all([sleeper])
    assert not left, "the script's `sleep` outlived it"


def test_a_signal_capture_was_started_with_ignored_stays_ignored(tmp_path: Path) -> None:
    """A background job of a non-interactive shell is started with SIGINT ignored, a nohup
    run with SIGHUP ignored: its script inherits that (Python then installs no
    KeyboardInterrupt), so capture does not relay it either; it relays the others."""
    from traceinspect.capture._runner import _SignalRelay

    sigs = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    before = {sig: signal.getsignal(sig) for sig in sigs}
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    try:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        relay = _SignalRelay(proc, 1.0, -1, str(tmp_path / "stop"))
        with relay.installed():
            assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
            assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
            assert signal.getsignal(signal.SIGTERM) == relay.on_terminate
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
        # Started as a terminal's foreground job: all three relayed.
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGHUP, signal.SIG_DFL)
        with relay.installed():
            assert signal.getsignal(signal.SIGINT) == relay.on_sigint
            assert signal.getsignal(signal.SIGHUP) == relay.on_terminate
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)


def test_sigterm_to_capture_is_passed_on_and_the_trace_kept(tmp_path: Path) -> None:
    """... and the process the script started (a `sleep`) ends with it."""
    marker, grandchild = tmp_path / "in_window", tmp_path / "grandchild"
    command = [sys.executable, str(TRAIN), "--steps", "20", "--hang-at", "3"]
    command += ["--marker", str(marker), "--grandchild", str(grandchild)]
    proc = parent_process(command, tmp_path / "logs", start_new_session=True)
    _wait_for(marker, proc)
    started = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=60)

    assert proc.returncode == 128 + signal.SIGTERM
    assert time.monotonic() - started < 15
    sidecar = _sidecar(tmp_path / "logs")
    assert sidecar["exit_signal"] == "SIGTERM"
    assert sidecar["partial"] is True
    assert sidecar["trace_files"]
    window = sidecar["window"]
    assert isinstance(window, dict) and window["first_step"] == 2
    sleeper = int(grandchild.read_text())
    left = _left_after([sleeper], 5)
    _kill_all([sleeper])
    assert not left, "the script's `sleep` outlived it"


def _children(pid: int) -> list[int]:
    found = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        found += [int(c) for c in (task / "children").read_text().split()]
    return found


def _tree(pid: int) -> list[int]:
    """``pid`` and every process below it."""
    found = [pid]
    for child in _children(pid):
        found += _tree(child)
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _left_after(pids: list[int], timeout_s: float) -> list[str]:
    """The command lines of ``pids`` still alive ``timeout_s`` from now (at most)."""
    deadline = time.monotonic() + timeout_s
    while any(_alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    left = []
    for pid in pids:
        with contextlib.suppress(OSError):
            if _alive(pid):
                left.append(Path(f"/proc/{pid}/cmdline").read_text().replace("\0", " "))
    return left


def _kill_all(pids: list[int]) -> None:
    for pid in pids:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)


def _sigkill_capture(tmp_path: Path, *script_args: str, kill_grace_s: float = 20) -> list[str]:
    """Run the script under a capture process, SIGKILL the capture inside the window and
    return what of the script's processes is left after ``kill_grace_s`` + 10 s; the run
    directory must hold the trace."""
    marker, grandchild = tmp_path / "in_window", tmp_path / "grandchild"
    command = [sys.executable, str(TRAIN), "--steps", "20", "--hang-at", "3"]
    command += ["--marker", str(marker), "--grandchild", str(grandchild), *script_args]
    proc = parent_process(
        command, tmp_path / "logs", kill_grace_s=kill_grace_s, start_new_session=True
    )
    _wait_for(marker, proc)
    (script,) = _children(proc.pid)
    processes = _tree(script)
    assert int(grandchild.read_text()) in processes
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)
    try:
        left = _left_after(processes, kill_grace_s + 10)
    finally:
        _kill_all(processes)
    run_dir = next((tmp_path / "logs" / "plugins" / "profile").iterdir())
    assert list(run_dir.glob("*.xplane.pb")), f"the trace was lost: {_what_was_left(tmp_path)}"
    return left


def _what_was_left(tmp_path: Path) -> str:
    """For a failure's message: the files under the log directory and what the script's
    capture wrote in its report (the capture process died before it read it)."""
    logs = tmp_path / "logs"
    files = sorted(str(p.relative_to(logs)) for p in logs.rglob("*") if p.is_file())
    said = []
    for report in logs.glob(".traceinspect-tmp-*/report.json"):
        data = json.loads(report.read_text())
        said += [*data.get("partial_reasons", []), *data.get("notes", [])]
    return f"files {files}; the script's capture said {said}"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_sigkill_of_capture_ends_the_script_too(tmp_path: Path) -> None:
    """A scheduler's kill or an OOM kill of `traceinspect capture`: the script does not run
    on orphaned (it got SIGTERM from the kernel, and its handler ended it), and neither do
    the processes it started: a Grain worker and a `sleep`."""
    left = _sigkill_capture(tmp_path, "--workers", "1")
    assert not left, f"ran on after their capture process was killed: {left}"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc is Linux's")
def test_sigkill_of_capture_ends_a_script_that_ignores_sigterm(tmp_path: Path) -> None:
    """The kernel's SIGTERM is ignored: the child's watch on its capture process saves the
    trace and kills the script and its `sleep`, ``kill_grace_s`` later."""
    started = time.monotonic()
    left = _sigkill_capture(tmp_path, "--ignore-sigterm", kill_grace_s=1)
    assert not left, f"ran on after their capture process was killed: {left}"
    assert time.monotonic() - started < 60


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc is Linux's")
def test_a_script_that_ignores_sigterm_is_killed_after_the_grace(tmp_path: Path) -> None:
    """SIGTERM to `traceinspect capture`, whose script ignores it: TERMINATE_GRACE_S later
    the script is killed with its `sleep`, its trace saved first; capture exits as the
    script did (137) and says so in one line."""
    marker, grandchild = tmp_path / "in_window", tmp_path / "grandchild"
    proc = subprocess.Popen(
        [
            *(sys.executable, "-m", "traceinspect", "capture", "--logdir", str(tmp_path / "logs")),
            *("--skip-steps", "2", "--steps", "5", "--", sys.executable, str(TRAIN)),
            *("--steps", "20", "--hang-at", "3", "--marker", str(marker)),
            *("--grandchild", str(grandchild), "--ignore-sigterm"),
        ],
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        start_new_session=True,
    )
    _wait_for(marker, proc)
    processes = _tree(_children(proc.pid)[0])
    started = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=TERMINATE_GRACE_S + 30)
    took = time.monotonic() - started
    left = _left_after(processes, 5)
    _kill_all(processes)

    assert proc.returncode == 128 + signal.SIGKILL, err[-3000:]
    assert TERMINATE_GRACE_S <= took < TERMINATE_GRACE_S + 10
    assert not left, f"ran on after the script was killed: {left}"
    killed = [line for line in err.splitlines() if line.startswith("traceinspect: the script was")]
    assert killed == [
        f"traceinspect: the script was killed (it went on {TERMINATE_GRACE_S:g} s after"
        " SIGTERM), with the processes it started"
    ], err[-3000:]
    sidecar = _sidecar(tmp_path / "logs")
    assert sidecar["exit_signal"] == "SIGKILL"
    assert sidecar["trace_files"], sidecar["partial_reasons"]
    assert any("killed by traceinspect" in str(r) for r in sidecar["partial_reasons"])  # type: ignore[attr-defined]


# Holds the GIL for ever in a C loop that checks no signal: no Python handler and no other
# thread of the script runs again. Its `sleep` is started first.
_STUCK = """\
import itertools, pathlib, subprocess, sys
sleeper = subprocess.Popen(["sleep", "1000"])
pathlib.Path(sys.argv[1]).write_text(str(sleeper.pid))
pathlib.Path(sys.argv[2]).write_text("stuck")
sum(itertools.repeat(0))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc is Linux's")
def test_a_script_stuck_holding_the_gil_is_killed_from_capture(tmp_path: Path) -> None:
    """Neither its SIGTERM handler nor the thread that would save its trace can run: capture
    kills it, and its `sleep`, SAVE_GRACE_S after asking; the sidecar says why no trace."""
    script, marker, grandchild = tmp_path / "stuck.py", tmp_path / "stuck", tmp_path / "pid"
    script.write_text(_STUCK)
    proc = parent_process(
        [sys.executable, str(script), str(grandchild), str(marker)],
        tmp_path / "logs",
        kill_grace_s=1,
        save_grace_s=1,
        start_new_session=True,
    )
    _wait_for(marker, proc)
    processes = _tree(_children(proc.pid)[0])
    started = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=30)
    took = time.monotonic() - started
    left = _left_after(processes, 5)
    _kill_all(processes)

    assert proc.returncode == 128 + signal.SIGKILL
    assert took < 10
    assert not left, f"ran on after the script was killed: {left}"
    sidecar = _sidecar(tmp_path / "logs")
    assert sidecar["partial_reasons"] == [
        "the script was killed by traceinspect (it went on 1 s after SIGTERM) before it saved"
        " a trace"
    ]


def test_os_exit_inside_the_window_keeps_the_trace(tmp_path: Path) -> None:
    result = capture(
        tmp_path, [sys.executable, str(TRAIN), "--steps", "12", "--exit-at", "4", "--os-exit"]
    )
    assert result.exit_code == 3
    assert result.trace_paths
    assert result.partial
    assert any("os._exit(3)" in r for r in result.partial_reasons), result.partial_reasons
    assert result.record.window is not None and result.record.window.first_step == 2


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 512 KiB tmpfs (root on Linux only), filled but for 16 KiB: a capture starts in it,
    and its trace (a few MB) cannot be written."""
    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=512k", "tmpfs", str(disk)],
        capture_output=True,
        check=False,
    )
    if mounted.returncode != 0:
        pytest.skip("mounting a small tmpfs needs root")
    try:
        free = os.statvfs(disk).f_bavail * os.statvfs(disk).f_frsize
        (disk / "filler").write_bytes(bytes(free - (16 << 10)))
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)


def test_a_full_disk_is_reported_and_exits_non_zero(small_disk: Path) -> None:
    capture_cli = [sys.executable, "-m", "traceinspect", "capture"]
    window = ["--skip-steps", "2", "--steps", "5"]
    done = subprocess.run(
        [
            *capture_cli,
            "--logdir",
            str(small_disk / "logs"),
            *window,
            "--",
            sys.executable,
            str(TRAIN),
        ],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])},
        timeout=300,
        check=False,
    )
    assert done.returncode == 1, done.stderr[-3000:]
    lines = [line for line in done.stderr.splitlines() if line.startswith("traceinspect:")]
    assert any("no trace written" in line and "is full" in line for line in lines), lines
    assert "Traceback (most recent call last)" not in done.stderr.split("traceinspect:")[-1]
