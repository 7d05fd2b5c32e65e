"""`traceinspect sample`: where the small traces shipped inside the package are, and those of
the source checkout it runs in."""

from __future__ import annotations

import json
from pathlib import Path

import click

from traceinspect.cli._options import json_option, refuse_unused, verbose_option
from traceinspect.errors import UsageError

# Package data (pyproject.toml: tool.setuptools.package-data), so a wheel has them too: each
# a run directory with its trace and capture's sidecar, copied from sample_traces/.
SAMPLES = Path(__file__).resolve().parents[1] / "_samples"
DEFAULT = "sync_bound"
ABOUT = {
    "sync_bound": "a small training loop on XLA's CPU backend that reads its loss every "
    "step (float(loss)), captured by traceinspect capture: sync-bound",
}


# A source checkout (not a wheel) also has the traces of sample_traces/, each with the verdict
# a measurement made without the profiler expects (its manifest, checked by
# tests/test_manifest.py). A plain `pip install .` copies the package into site-packages,
# away from the checkout: the checkout is then the one the command runs in.
SOURCE_NAME = "sample_traces"
MANIFEST_NAME = "manifest.json"


def sample_names() -> list[str]:
    """The samples packaged with traceinspect (in a wheel too)."""
    return sorted(p.name for p in SAMPLES.iterdir() if any(p.glob("*.xplane.pb")))


def _places() -> list[Path]:
    """Where a checkout's ``sample_traces/`` is looked for, in order: the current directory
    and every directory above it, then the directory holding the package (an editable
    install, or the checkout itself on ``sys.path``)."""
    try:
        here = Path.cwd()
    except OSError:  # the working directory was deleted
        here = None
    places = [] if here is None else [here, *here.parents]
    beside = SAMPLES.parents[1]
    return places if beside in places else [*places, beside]


def sample_traces() -> tuple[Path | None, list[Path]]:
    """The ``sample_traces/`` of the source checkout this runs in (the first with a
    ``manifest.json``), or None, with the directories looked in."""
    places = _places()
    for place in places:
        if (place / SOURCE_NAME / MANIFEST_NAME).is_file():
            return place / SOURCE_NAME, places
    return None, places


def not_found_note(places: list[Path]) -> str:
    """Where ``sample_traces/`` was looked for, in one sentence."""
    cwd, beside = places[0], places[-1]
    where = f"{cwd} or a directory above it" if len(places) > 1 else str(cwd)
    if beside != cwd and beside not in cwd.parents:
        where += f", nor beside the package ({beside})"
    return (
        f"no {SOURCE_NAME}/{MANIFEST_NAME} in {where}: a source checkout's traces are found "
        "when traceinspect runs inside it."
    )


def source_samples() -> dict[str, dict[str, str]]:
    """The traces of a source checkout's ``sample_traces/`` by name (their path there, less
    ``.xplane.pb``): each ``path`` (a file, or a run directory) and ``about`` (the verdict
    its manifest expects). Empty outside a source checkout."""
    source, _ = sample_traces()
    if source is None:
        return {}
    try:
        entries = json.loads((source / MANIFEST_NAME).read_text(encoding="utf-8"))["traces"]
    except (OSError, ValueError, KeyError, TypeError):
        return {}
    out = {}
    for entry in entries:
        path = source / entry["path"]
        if not path.exists():
            continue
        if "verdict" in entry:
            about = f"expected verdict: {entry['verdict']}"
        else:
            about = f"analyze refuses it ('{entry.get('error', '')}...')"
        out[entry["path"].removesuffix(".xplane.pb")] = {"path": str(path), "about": about}
    return out


def sample_path(name: str = DEFAULT) -> Path:
    """The trace file of the bundled sample ``name`` (its sidecar sits beside it), or the
    file or run directory of a source checkout's sample of that name."""
    found = sorted((SAMPLES / name).glob("*.xplane.pb")) if name in sample_names() else []
    if found:
        return found[0]
    checkout = source_samples()
    if name in checkout:
        return Path(checkout[name]["path"])
    more = len(checkout)
    packaged = f"No bundled sample named {name!r}: the packaged samples are " + ", ".join(
        sample_names()
    )
    if more:
        raise UsageError(
            f"{packaged}, and this checkout's sample_traces/ holds {more} more "
            "(traceinspect sample --list)."
        )
    source, places = sample_traces()
    if source is not None:
        why = f"{source / MANIFEST_NAME} names no trace found there."
    else:
        why = not_found_note(places)
    raise UsageError(f"{packaged} (traceinspect sample --list); {why}")


def all_samples() -> list[dict[str, str | None]]:
    """Every sample --list shows: the packaged ones, then a source checkout's."""
    rows: list[dict[str, str | None]] = [
        {"name": n, "path": str(sample_path(n)), "about": ABOUT.get(n), "where": "package"}
        for n in sample_names()
    ]
    rows += [{"name": n, **s, "where": "sample_traces"} for n, s in source_samples().items()]
    return rows


@click.command()
@click.argument("name", required=False, default=DEFAULT)
@click.option(
    "--list",
    "list_all",
    is_flag=True,
    help="List the samples instead: the packaged ones, and in a source checkout (the current "
    "directory or one above it) the traces of its sample_traces/ with their expected verdicts.",
)
@json_option
@click.pass_context
@verbose_option
def sample(ctx: click.Context, name: str, list_all: bool, as_json: bool) -> None:
    """Print the path of a small trace shipped with traceinspect, to try the commands on.

    NAME picks the sample (default: sync_bound, a training loop that reads its loss every
    step). The trace's capture sidecar sits beside it, as capture writes them. Run inside a
    source checkout (the current directory or one above it), the traces of its
    sample_traces/ are samples too (sample --list names them, or says where it looked).

    \b
    Examples:
      traceinspect analyze $(traceinspect sample)
      traceinspect info $(traceinspect sample sync_bound)
      traceinspect sample --list
    """
    refuse_unused(ctx, [("name", list_all, "cannot go with --list, which lists them all.")])
    if list_all:
        rows = all_samples()
        source, places = sample_traces()
        note = None if source is not None else not_found_note(places)
        if as_json:
            out = {"samples": rows, "sample_traces": None if source is None else str(source)}
            click.echo(json.dumps(out if note is None else {**out, "note": note}, indent=2))
            return
        width = max(len(str(r["name"])) for r in rows)
        for r in rows:
            click.echo(f"{r['name']:<{width}}  {r['about'] or ''}".rstrip())
        if note is not None:
            click.echo(f"Note: {note}", err=True)
        return
    path = sample_path(name)
    if as_json:
        about = ABOUT.get(name) or source_samples().get(name, {}).get("about")
        click.echo(json.dumps({"name": name, "path": str(path), "about": about}))
    else:
        click.echo(str(path))
