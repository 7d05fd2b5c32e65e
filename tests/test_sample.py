"""`traceinspect sample`: the trace shipped inside the package, which the help examples use."""

from __future__ import annotations

import json
import re
import shlex
import shutil
from fnmatch import fnmatch
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from traceinspect.cli import main
from traceinspect.cli.sample import SAMPLES, sample_names, sample_path, source_samples

REPO = Path(__file__).resolve().parents[1]
# Where each packaged sample was copied from.
ORIGINS = {"sync_bound": REPO / "sample_traces" / "scenarios" / "sync_bound"}


def test_sample_prints_the_path_of_a_trace_with_its_sidecar() -> None:
    result = CliRunner().invoke(main, ["sample"])
    assert result.exit_code == 0, result.output
    path = Path(result.stdout.strip())
    assert path.is_absolute() and path.is_file() and path.name.endswith(".xplane.pb")
    assert path == sample_path("sync_bound")
    assert (path.parent / "traceinspect.capture.json").is_file()


def test_the_sample_is_analysed_from_anywhere(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What the help examples do: `traceinspect analyze $(traceinspect sample)`, here from a
    directory with no sample_traces/ in it."""
    monkeypatch.chdir(tmp_path)
    path = CliRunner().invoke(main, ["sample"]).stdout.strip()
    result = CliRunner().invoke(main, ["analyze", path, "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["verdict"] == "sync-bound"
    assert data["window"] is not None  # its sidecar was read


@pytest.mark.parametrize("name", sorted(ORIGINS))
def test_packaged_samples_are_copies_of_the_bundled_ones(name: str) -> None:
    packaged = sorted(p.name for p in (SAMPLES / name).iterdir())
    assert packaged == sorted(p.name for p in ORIGINS[name].iterdir())
    for file in packaged:
        assert (SAMPLES / name / file).read_bytes() == (ORIGINS[name] / file).read_bytes(), file


def test_every_packaged_sample_is_known() -> None:
    assert sample_names() == sorted(ORIGINS)


def test_list_names_the_samples() -> None:
    result = CliRunner().invoke(main, ["sample", "--list"])
    assert result.exit_code == 0
    # The packaged samples, then every trace of the checkout's manifest.
    manifest = json.loads((REPO / "sample_traces" / "manifest.json").read_text())
    from_manifest = [t["path"].removesuffix(".xplane.pb") for t in manifest["traces"]]
    names = [*sample_names(), *from_manifest]
    assert len(from_manifest) >= 9
    assert [line.split()[0] for line in result.stdout.splitlines()] == names
    as_json = json.loads(CliRunner().invoke(main, ["sample", "--list", "--json"]).stdout)
    assert [s["name"] for s in as_json["samples"]] == names
    assert all(Path(s["path"]).exists() for s in as_json["samples"])
    healthy = next(s for s in as_json["samples"] if s["name"] == "scenarios/healthy")
    assert healthy["about"] == "expected verdict: device-bound"
    assert healthy["where"] == "sample_traces"


def test_a_checkout_sample_is_found_by_name() -> None:
    result = CliRunner().invoke(main, ["sample", "scenarios/healthy"])
    assert result.exit_code == 0
    assert Path(result.stdout.strip()) == REPO / "sample_traces" / "scenarios" / "healthy"
    analysed = CliRunner().invoke(main, ["analyze", result.stdout.strip(), "--json"])
    assert json.loads(analysed.stdout)["verdict"] == "device-bound"


def test_a_name_with_list_is_refused() -> None:
    result = CliRunner().invoke(main, ["sample", "sync_bound", "--list"])
    assert result.exit_code == 2
    assert result.stderr == "Error: NAME cannot go with --list, which lists them all.\n"


def test_an_unknown_sample_is_a_one_line_error() -> None:
    result = CliRunner().invoke(main, ["sample", "nope"])
    assert result.exit_code == 2
    assert result.stderr == (
        "Error: No bundled sample named 'nope': the packaged samples are sync_bound, and "
        f"this checkout's sample_traces/ holds {len(source_samples())} more "
        "(traceinspect sample --list).\n"
    )


def test_the_samples_are_package_data() -> None:
    """A wheel holds them: pyproject.toml's package data matches every file of _samples/."""
    tomllib = pytest.importorskip("tomllib")  # Python 3.11 and later

    config = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    patterns = config["tool"]["setuptools"]["package-data"]["traceinspect"]
    package = SAMPLES.parent
    files = [p.relative_to(package).as_posix() for p in SAMPLES.rglob("*") if p.is_file()]
    assert files
    assert [f for f in files if not any(fnmatch(f, pattern) for pattern in patterns)] == []


_SAMPLE = re.compile(r"\$\(traceinspect sample(?: (\w+))?\)")


def _help_examples() -> list[str]:
    """The help examples that read the packaged sample and nothing else of the user's (no
    ``./logs``): those a user can paste anywhere. `view` serves until Ctrl-C: left out."""
    out = []
    for name in ["", *main.list_commands(click.Context(main))]:
        text = CliRunner().invoke(main, [*name.split(), "--help"]).output
        examples = text.split("Examples:", 1)[1].split("\n\n", 1)[0]
        out += [
            line.strip()
            for line in examples.splitlines()
            if _SAMPLE.search(line) and "./" not in line and " view " not in line
        ]
    return sorted(set(out))


HELP_EXAMPLES = _help_examples()


def test_the_help_examples_use_the_sample() -> None:
    commands = {example.split()[1] for example in HELP_EXAMPLES}
    assert {"analyze", "info", "events", "export"} <= commands


@pytest.mark.parametrize("example", HELP_EXAMPLES)
def test_help_example_runs_from_anywhere(
    example: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # no sample_traces/ here; -o writes here
    line = _SAMPLE.sub(lambda m: shlex.quote(str(sample_path(m.group(1) or "sync_bound"))), example)
    result = CliRunner().invoke(main, shlex.split(line)[1:])
    assert result.exit_code == 0, result.output


@pytest.fixture
def plain_install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The package as `pip install .` leaves it: in a site-packages away from the checkout
    (its samples copied there); returns that site-packages."""
    import traceinspect.cli.sample as module

    site = tmp_path / "site-packages"
    shutil.copytree(SAMPLES, site / "traceinspect" / "_samples")
    monkeypatch.setattr(module, "SAMPLES", site / "traceinspect" / "_samples")
    return site


def test_a_plain_install_finds_the_checkout_it_runs_in(
    plain_install: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """From the checkout or any directory below it: its sample_traces/, as in a source tree."""
    checkout = tmp_path / "checkout"
    (checkout / "docs" / "deep").mkdir(parents=True)
    (checkout / "sample_traces").symlink_to(REPO / "sample_traces")
    monkeypatch.chdir(checkout / "docs" / "deep")
    listed = json.loads(CliRunner().invoke(main, ["sample", "--list", "--json"]).stdout)
    assert listed["sample_traces"] == str(checkout / "sample_traces")
    assert "note" not in listed
    assert listed["samples"][0]["path"].startswith(str(plain_install))
    healthy = next(s for s in listed["samples"] if s["name"] == "scenarios/healthy")
    assert healthy["path"] == str(checkout / "sample_traces" / "scenarios" / "healthy")
    assert len(listed["samples"]) == 1 + len(source_samples())
    result = CliRunner().invoke(main, ["sample", "scenarios/healthy"])
    assert result.stdout.strip() == healthy["path"]


def test_outside_a_checkout_list_says_where_it_looked(
    plain_install: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    note = (
        f"no sample_traces/manifest.json in {elsewhere} or a directory above it, nor beside "
        f"the package ({plain_install}): a source checkout's traces are found when "
        "traceinspect runs inside it."
    )
    result = CliRunner().invoke(main, ["sample", "--list"])
    assert result.exit_code == 0
    assert [line.split()[0] for line in result.stdout.splitlines()] == ["sync_bound"]
    assert result.stderr == f"Note: {note}\n"
    listed = json.loads(CliRunner().invoke(main, ["sample", "--list", "--json"]).stdout)
    assert [s["name"] for s in listed["samples"]] == ["sync_bound"]
    assert listed["sample_traces"] is None and listed["note"] == note
    unknown = CliRunner().invoke(main, ["sample", "scenarios/healthy"])
    assert unknown.exit_code == 2
    assert unknown.stderr == (
        "Error: No bundled sample named 'scenarios/healthy': the packaged samples are "
        f"sync_bound (traceinspect sample --list); {note}\n"
    )
