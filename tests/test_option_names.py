"""One meaning per option name: an option spelled the same in two commands takes the same
kind of value (a count is a count everywhere, a window is one START_MS:END_MS argument), and
the old spellings of renamed options still work, with a deprecation note."""

from __future__ import annotations

import collections
import json

import click
import pytest
from click.testing import CliRunner

from traceinspect.cli import main
from traceinspect.cli.sample import sample_path

SAMPLE = str(sample_path())


def _kind(param: click.Option) -> tuple[object, ...]:
    """What an option takes: its value's type (a range is its number type), how many, whether
    a flag, and its metavar (which says what the text means: RE, NAME, A:B). Whether it may be
    repeated is no other meaning (analyze --host NAME takes several hosts, export one)."""
    name = param.type.name.removesuffix(" range")
    metavar = param.metavar or (None if param.is_flag else name.upper())
    return (name, param.nargs, param.is_flag, metavar)


def _options_by_name() -> dict[str, dict[tuple[object, ...], list[str]]]:
    """Each option name (every spelling, -q and --quiet alike) -> its kinds -> the commands."""
    out: dict[str, dict[tuple[object, ...], list[str]]] = collections.defaultdict(
        lambda: collections.defaultdict(list)
    )
    ctx = click.Context(main)
    for command_name in main.list_commands(ctx):
        command = main.get_command(ctx, command_name)
        assert command is not None
        for param in command.params:
            if isinstance(param, click.Option):
                for opt in (*param.opts, *param.secondary_opts):
                    out[opt][_kind(param)].append(command_name)
    return out


def test_each_option_name_has_one_meaning_across_commands() -> None:
    by_name = _options_by_name()
    assert len(by_name) > 40  # every command was walked
    clashes = {name: dict(kinds) for name, kinds in by_name.items() if len(kinds) > 1}
    assert clashes == {}


def test_the_check_sees_a_clash() -> None:
    """The test above fails when two commands give one name two kinds of value."""
    kinds = {_kind(click.Option(["--steps"], type=int)), _kind(click.Option(["--steps"]))}
    assert len(kinds) == 2
    regex, name = click.Option(["--host"], metavar="RE"), click.Option(["--host"], metavar="NAME")
    assert _kind(regex) != _kind(name)


def _invoke(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.stdout, result.stderr


@pytest.mark.parametrize(
    ("old", "new"),
    [
        (["--window", "10", "20"], ["--window", "10:20"]),
        (["--host", "v."], ["--host-re", "v."]),
        (["--host=v."], ["--host-re", "v."]),
    ],
)
def test_events_old_spellings_still_work(old: list[str], new: list[str]) -> None:
    code, out, err = _invoke("events", SAMPLE, "--json", *old)
    assert code == 0, err
    assert json.loads(out) == json.loads(_invoke("events", SAMPLE, "--json", *new)[1])
    note = err.splitlines()[0]
    assert note.startswith(f"traceinspect: events {old[0].split('=')[0]} ")
    assert f"is deprecated (it works until 0.2): use {new[0]} {new[1]}." in note


def test_events_window_takes_open_ends() -> None:
    everything = json.loads(_invoke("events", SAMPLE, "--json")[1])
    later = json.loads(_invoke("events", SAMPLE, "--json", "--window", "100:")[1])
    assert 0 < len(later) < len(everything)


def test_export_steps_is_now_step_range(tmp_path: object) -> None:
    out = f"{tmp_path}/t.json"
    code, _, err = _invoke("export", SAMPLE, "-o", out, "--steps", "2:4", "--json")
    assert code == 0, err
    assert "export --steps 2:4 is deprecated (it works until 0.2): use --step-range 2:4." in err
    code, printed, err = _invoke("export", SAMPLE, "-o", out, "--step-range", "2:4", "--json")
    assert code == 0 and err == ""
    assert json.loads(printed)["output"] == out


def test_sweep_workers_is_now_worker_counts() -> None:
    code, _, err = _invoke("sweep", "--workers", "1,x", "--", "train.py")
    assert code == 2
    assert "sweep --workers 1,x is deprecated" in err
    assert "Invalid value for '--worker-counts'" in err


def test_a_scripts_own_options_are_left_alone() -> None:
    """After the command starts (or after --), --workers is the script's."""
    from traceinspect.cli.sweep import sweep

    ctx = click.Context(sweep, allow_interspersed_args=False)
    args = ["--worker-counts", "1,2", "python", "train.py", "--workers", "{workers}"]
    assert sweep._renamed_args(ctx, args) == args
    args = ["--timeout", "5", "--", "python", "train.py", "--workers", "3"]
    assert sweep._renamed_args(ctx, args) == args
