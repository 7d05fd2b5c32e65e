"""`traceinspect sample`: where the small traces shipped inside the package are."""

from __future__ import annotations

import json
from pathlib import Path

import click

from traceinspect.cli._options import json_option
from traceinspect.errors import UsageError

# Package data (pyproject.toml: tool.setuptools.package-data), so a wheel has them too: each
# a run directory with its trace and capture's sidecar, copied from sample_traces/.
SAMPLES = Path(__file__).resolve().parents[1] / "_samples"
DEFAULT = "sync_bound"
ABOUT = {
    "sync_bound": "a small training loop on XLA's CPU backend that reads its loss every "
    "step (float(loss)), captured by traceinspect capture: sync-bound",
}


def sample_names() -> list[str]:
    """The bundled samples' names."""
    return sorted(p.name for p in SAMPLES.iterdir() if any(p.glob("*.xplane.pb")))


def sample_path(name: str = DEFAULT) -> Path:
    """The trace file of the bundled sample ``name`` (its sidecar sits beside it)."""
    found = sorted((SAMPLES / name).glob("*.xplane.pb")) if name in sample_names() else []
    if not found:
        raise UsageError(
            f"No bundled sample named {name!r}: the samples are {', '.join(sample_names())} "
            "(traceinspect sample --list)."
        )
    return found[0]


@click.command()
@click.argument("name", required=False, default=DEFAULT)
@click.option("--list", "list_all", is_flag=True, help="List the bundled samples instead.")
@json_option
def sample(name: str, list_all: bool, as_json: bool) -> None:
    """Print the path of a small trace shipped with traceinspect, to try the commands on.

    NAME picks the sample (default: sync_bound, a training loop that reads its loss every
    step). The trace's capture sidecar sits beside it, as capture writes them.

    \b
    Examples:
      traceinspect analyze $(traceinspect sample)
      traceinspect info $(traceinspect sample sync_bound)
      traceinspect sample --list
    """
    if list_all:
        names = sample_names()
        if as_json:
            rows = [{"name": n, "path": str(sample_path(n)), "about": ABOUT.get(n)} for n in names]
            click.echo(json.dumps({"samples": rows}, indent=2))
        else:
            width = max(map(len, names))
            for n in names:
                click.echo(f"{n:<{width}}  {ABOUT.get(n, '')}".rstrip())
        return
    path = sample_path(name)
    if as_json:
        click.echo(json.dumps({"name": name, "path": str(path), "about": ABOUT.get(name)}))
    else:
        click.echo(str(path))
