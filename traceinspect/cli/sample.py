"""`traceinspect sample`: where the small traces shipped inside the package are."""

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
# tests/test_manifest.py).
SOURCE = SAMPLES.parents[1] / "sample_traces"
MANIFEST = SOURCE / "manifest.json"


def sample_names() -> list[str]:
    """The samples packaged with traceinspect (in a wheel too)."""
    return sorted(p.name for p in SAMPLES.iterdir() if any(p.glob("*.xplane.pb")))


def source_samples() -> dict[str, dict[str, str]]:
    """The traces of a source checkout's ``sample_traces/`` by name (their path there, less
    ``.xplane.pb``): each ``path`` (a file, or a run directory) and ``about`` (the verdict
    its manifest expects). Empty outside a source checkout."""
    try:
        entries = json.loads(MANIFEST.read_text(encoding="utf-8"))["traces"]
    except (OSError, ValueError, KeyError):
        return {}
    out = {}
    for entry in entries:
        path = SOURCE / entry["path"]
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
    source = source_samples().get(name)
    if source is not None:
        return Path(source["path"])
    more = len(source_samples())
    also = f", and this checkout's sample_traces/ holds {more} more" if more else ""
    raise UsageError(
        f"No bundled sample named {name!r}: the packaged samples are "
        f"{', '.join(sample_names())}{also} (traceinspect sample --list)."
    )


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
    help="List the samples instead: the packaged ones, and in a source checkout the traces "
    "of sample_traces/ with their expected verdicts.",
)
@json_option
@click.pass_context
@verbose_option
def sample(ctx: click.Context, name: str, list_all: bool, as_json: bool) -> None:
    """Print the path of a small trace shipped with traceinspect, to try the commands on.

    NAME picks the sample (default: sync_bound, a training loop that reads its loss every
    step). The trace's capture sidecar sits beside it, as capture writes them. In a source
    checkout the traces of sample_traces/ are samples too (sample --list names them).

    \b
    Examples:
      traceinspect analyze $(traceinspect sample)
      traceinspect info $(traceinspect sample sync_bound)
      traceinspect sample --list
    """
    refuse_unused(ctx, [("name", list_all, "cannot go with --list, which lists them all.")])
    if list_all:
        rows = all_samples()
        if as_json:
            click.echo(json.dumps({"samples": rows}, indent=2))
        else:
            width = max(len(str(r["name"])) for r in rows)
            for r in rows:
                click.echo(f"{r['name']:<{width}}  {r['about'] or ''}".rstrip())
        return
    path = sample_path(name)
    if as_json:
        about = ABOUT.get(name) or source_samples().get(name, {}).get("about")
        click.echo(json.dumps({"name": name, "path": str(path), "about": about}))
    else:
        click.echo(str(path))
