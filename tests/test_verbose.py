"""`-v`: how the answer was reached, on stderr (the library only logs); before or after the
command's name, one meaning."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from traceinspect.cli import main
from traceinspect.cli.sample import sample_path

SAMPLE = str(sample_path())


def test_verbose_says_what_was_read_and_why_the_verdict() -> None:
    result = CliRunner().invoke(main, ["-v", "analyze", SAMPLE, "--no-cache", "--json"])
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["verdict"] == "sync-bound"  # stdout stays JSON
    lines = result.stderr.splitlines()
    assert any(
        line.startswith(f"traceinspect: read {sample_path().parent} (1 file(s)") for line in lines
    )
    (verdict,) = [line for line in lines if line.startswith("traceinspect: verdict ")]
    assert verdict.startswith("traceinspect: verdict sync-bound by rule idle_cause (sync 33.1%")
    assert "idle time as a share of step time" in verdict
    assert "sync 33.1%" in verdict and "recurs in 100% of the steps" in verdict


def test_without_verbose_nothing_is_logged_and_the_handler_is_gone() -> None:
    result = CliRunner().invoke(main, ["analyze", SAMPLE, "--no-cache", "--json"])
    assert result.exit_code == 0
    assert "traceinspect: verdict" not in result.stderr
    logger = logging.getLogger("traceinspect")
    assert logger.handlers == [] and logger.level == logging.NOTSET


def test_a_kept_answer_says_so() -> None:
    CliRunner().invoke(main, ["analyze", SAMPLE])
    result = CliRunner().invoke(main, ["-v", "analyze", SAMPLE])
    assert result.exit_code == 0
    assert "traceinspect: printing the answer kept from an earlier analyze" in result.stderr


def _verdict_line(args: list[str]) -> str:
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.stderr
    (line,) = [line for line in result.stderr.splitlines() if " verdict " in line]
    return line


@pytest.mark.parametrize("printed", [["--json"], []])
def test_a_cached_answer_gives_the_same_reasoning(printed: list[str]) -> None:
    """From the kept answer (the same printing again) and from the kept analysis (printed
    another way): the line the analysis logged when it decided."""
    fresh = _verdict_line(["-v", "analyze", SAMPLE, "--no-cache", "--json"])
    assert fresh.startswith("traceinspect: verdict sync-bound by rule idle_cause (sync 33.1%")
    CliRunner().invoke(main, ["analyze", SAMPLE, "--json"])  # keeps the analysis and answer
    assert _verdict_line(["-v", "analyze", SAMPLE, *printed]) == fresh
    assert _verdict_line(["analyze", SAMPLE, *printed, "-v"]) == fresh


def test_a_cached_answer_without_its_analysis_says_where_the_reasoning_is() -> None:
    from traceinspect.xplane.cache import cache_dir

    CliRunner().invoke(main, ["analyze", SAMPLE])
    for stored in cache_dir().glob("*.analysis.npz"):
        stored.unlink()
    result = CliRunner().invoke(main, ["-v", "analyze", SAMPLE])
    assert result.exit_code == 0
    assert "traceinspect: printing the answer kept from an earlier analyze" in result.stderr
    assert result.stderr.splitlines()[-1] == (
        "traceinspect: the answer came from the cache: run with --no-cache to see the reasoning"
    )


def _commands() -> list[str]:
    ctx = click.Context(main)
    return main.list_commands(ctx)


@pytest.mark.parametrize("name", _commands())
def test_every_command_takes_verbose_as_the_group_does(name: str) -> None:
    """-v after the command's name means what it means before it (one definition)."""
    command = main.get_command(click.Context(main), name)
    assert command is not None
    (option,) = [p for p in command.params if "-v" in getattr(p, "opts", ())]
    (group,) = [p for p in main.params if "-v" in getattr(p, "opts", ())]
    assert isinstance(option, click.Option) and isinstance(group, click.Option)
    assert option.opts == group.opts == ["-v", "--verbose"]
    assert option.count and option.callback is group.callback and option.help == group.help


@pytest.mark.parametrize(
    "args",
    [["-v", "analyze", SAMPLE], ["analyze", SAMPLE, "-v"], ["analyze", "--verbose", SAMPLE]],
)
def test_verbose_before_or_after_the_command(args: list[str]) -> None:
    result = CliRunner().invoke(main, [*args, "--no-cache", "--json"])
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["verdict"] == "sync-bound"
    assert "traceinspect: verdict sync-bound by rule idle_cause " in result.stderr
    assert " run(s); reading the newest" not in result.stderr  # that detail is -vv's
    logger = logging.getLogger("traceinspect")
    assert logger.handlers == [] and logger.level == logging.NOTSET


@pytest.mark.parametrize(
    "args", [["-vv", "info", SAMPLE], ["info", SAMPLE, "-vv"], ["-v", "info", SAMPLE, "-v"]]
)
def test_vv_anywhere_adds_the_details_with_one_handler(args: list[str], tmp_path: Path) -> None:
    for run in ("2024_01_01_00_00_00", "2024_01_02_00_00_00"):  # -vv says which was read
        (tmp_path / "plugins/profile" / run).mkdir(parents=True)
        shutil.copy(sample_path(), tmp_path / "plugins/profile" / run)
    result = CliRunner().invoke(main, [str(tmp_path) if a == SAMPLE else a for a in args])
    assert result.exit_code == 0, result.stderr
    lines = result.stderr.splitlines()
    assert len([line for line in lines if line.startswith("traceinspect: read ")]) == 1
    assert [line for line in lines if " run(s); reading the newest, " in line]
    assert logging.getLogger("traceinspect").handlers == []


def test_verbose_handler_goes_when_the_command_line_is_wrong() -> None:
    result = CliRunner().invoke(main, ["analyze", SAMPLE, "-v", "--no-such-option"])
    assert result.exit_code == 2
    logger = logging.getLogger("traceinspect")
    assert logger.handlers == [] and logger.level == logging.NOTSET


def test_after_capture_the_scripts_own_v_is_the_scripts() -> None:
    """capture stops reading its options at the script: a -v there is the script's."""
    from traceinspect.cli.capture import capture

    # Under the group's context, as the CLI runs it: Click keeps the first help option it
    # makes for a command (a bare context's would be --help alone, not -h, --help).
    with click.Context(main, **main.context_settings) as parent:
        args = ["-v", "--", "python", "train.py", "-v"]
        ctx = capture.make_context("capture", args, parent=parent)
        assert ctx.meta["traceinspect.verbose"] == 1
        assert ctx.params["command"] == ("python", "train.py", "-v")
    assert logging.getLogger("traceinspect").handlers == []
