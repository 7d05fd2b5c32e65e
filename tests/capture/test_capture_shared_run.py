"""Several captures in one run directory (--run-name), each under its own --host-name."""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

import click
import pytest
from capture_helpers import TRAIN, train

from traceinspect.capture import SIDECAR_NAME, CaptureOptions, run_capture, sidecar_name
from traceinspect.errors import CaptureError


def _cli_main() -> click.Command:
    try:
        from traceinspect.cli import main
    except ImportError as exc:  # the other commands of the group may not exist yet
        pytest.skip(f"the CLI group does not import yet: {exc}")
    return main


def _invoke(args: list[str]):  # type: ignore[no-untyped-def]
    from click.testing import CliRunner

    return CliRunner().invoke(_cli_main(), args)


def test_sidecar_name_is_per_host_only_in_a_shared_run() -> None:
    assert sidecar_name(None) == SIDECAR_NAME == "traceinspect.capture.json"
    assert sidecar_name("host3") == "host3.traceinspect.capture.json"


@pytest.mark.slow
def test_two_hosts_land_side_by_side_in_one_run_directory(tmp_path: Path) -> None:
    logdir = tmp_path / "logs"
    first = train(logdir, "--steps", "5", run_name="pod", host_name="host0", steps=2)
    second = train(logdir, "--steps", "5", run_name="pod", host_name="host1", steps=2)

    run_dir = logdir / "plugins" / "profile" / "pod"
    assert [p.name for p in (logdir / "plugins" / "profile").iterdir()] == ["pod"]
    assert first.run_dir == second.run_dir == str(run_dir)
    names = sorted(p.name for p in run_dir.iterdir())
    assert [n for n in names if n.endswith(".xplane.pb")] == ["host0.xplane.pb", "host1.xplane.pb"]
    assert [n for n in names if n.endswith(".json")] == [
        "host0.traceinspect.capture.json",
        "host1.traceinspect.capture.json",
    ]
    # What else jax wrote is renamed for the host too; nothing of this machine's name is left.
    assert {"host0.trace.json.gz", "host1.trace.json.gz"} <= set(names)
    assert len(names) == 6
    assert not list(logdir.glob(".traceinspect-tmp-*"))

    for host, result in (("host0", first), ("host1", second)):
        assert result.exit_code == 0 and not result.partial
        # Each result lists its own host's files only.
        assert result.trace_paths == (str(run_dir / f"{host}.xplane.pb"),)
        assert result.sidecar_path == str(run_dir / f"{host}.traceinspect.capture.json")
        sidecar = json.loads(Path(result.sidecar_path).read_text())
        assert sidecar["run_name"] == "pod" and sidecar["host_name"] == host
        assert sidecar["shared_run"] is True
        assert sidecar["trace_files"] == [f"{host}.xplane.pb"]
        # train.py never calls jax.distributed.
        assert sidecar["process_index"] is None and sidecar["process_count"] is None
        assert sidecar["window"]["complete"] is True

    # The same host again: refused before the script starts, in one line; nothing touched.
    before = {p.name: p.read_bytes() for p in run_dir.iterdir()}
    args = ["capture", "--logdir", str(logdir), "--run-name", "pod", "--host-name", "host0"]
    result = _invoke([*args, "--", sys.executable, str(TRAIN), "--steps", "5"])
    assert result.exit_code == 2
    assert "already holds host 'host0'" in result.output
    assert len(result.output.strip().splitlines()) == 1
    assert {p.name: p.read_bytes() for p in run_dir.iterdir()} == before


@pytest.mark.slow
def test_host_name_without_run_name_renames_the_files_only(tmp_path: Path) -> None:
    result = train(tmp_path / "logs", "--steps", "5", host_name="worker7", steps=2)

    assert result.exit_code == 0 and not result.partial
    run_dir = Path(result.run_dir)
    assert len(run_dir.name) == len("YYYY_MM_DD_HH_MM_SS")
    assert sorted(p.name for p in run_dir.iterdir()) == [
        "traceinspect.capture.json",
        "worker7.trace.json.gz",
        "worker7.xplane.pb",
    ]
    sidecar = json.loads(Path(result.sidecar_path).read_text())
    assert (sidecar["host_name"], sidecar["shared_run"]) == ("worker7", False)


@pytest.mark.parametrize("taken", ["host0.xplane.pb", "host0.traceinspect.capture.json"])
def test_a_host_already_in_the_run_is_refused(tmp_path: Path, taken: str) -> None:
    run_dir = tmp_path / "logs" / "plugins" / "profile" / "pod"
    run_dir.mkdir(parents=True)
    (run_dir / taken).write_text("theirs")
    (run_dir / "host1.xplane.pb").write_text("another host's")

    options = CaptureOptions(logdir=str(tmp_path / "logs"), run_name="pod", host_name="host0")
    with pytest.raises(CaptureError, match="already holds host 'host0'") as info:
        run_capture([sys.executable, str(TRAIN)], options)
    assert taken in str(info.value) and "--host-name" in str(info.value)
    assert "\n" not in str(info.value)
    assert (run_dir / taken).read_text() == "theirs"
    assert sorted(p.name for p in run_dir.iterdir()) == sorted([taken, "host1.xplane.pb"])
    assert not list((tmp_path / "logs").glob(".traceinspect-tmp-*"))


@pytest.mark.parametrize(
    ("option", "name"),
    [
        ("--host-name", ""),
        ("--host-name", "a/b"),
        ("--host-name", ".."),
        ("--host-name", "  "),
        ("--run-name", "runs/1"),
        ("--run-name", ""),
    ],
)
def test_bad_run_and_host_names_are_refused(tmp_path: Path, option: str, name: str) -> None:
    base = CaptureOptions(logdir=str(tmp_path / "logs"))
    options = (
        dataclasses.replace(base, run_name=name)
        if option == "--run-name"
        else dataclasses.replace(base, host_name=name)
    )
    with pytest.raises(CaptureError, match=f"{option} .* cannot be a file name"):
        run_capture([sys.executable, str(TRAIN)], options)
    assert not (tmp_path / "logs").exists()

    result = _invoke(["capture", "--logdir", str(tmp_path), option, name, "--", "x.py"])
    assert result.exit_code == 2
    assert "cannot be a file name" in result.output
    assert len(result.output.strip().splitlines()) == 1
