"""Draw the stored pictures and run the notebooks again, so they show what the code says now.

    python docs/make_pictures.py                  # everything below
    python docs/make_pictures.py --no-notebooks   # the two PNG files only (about 2 s)

Run it after a change to a plot or to the wording of a verdict, advice or summary, from an
environment with traceinspect's test tools (nbclient, nbformat, ipykernel). It writes:

- `docs/images/sync_bound_timeline.png` (README.md, docs/why-idle.md): `plot_timeline` of
  the bundled sync_bound capture, as `analyze --plots` draws it;
- `sample_traces/sweep/sweep.png`: the saved sweep's plot, drawn by `write_sweep` from its
  `sweep.json` as `traceinspect sweep` draws it (the JSON and CSV stay as measured);
- `notebooks/*.ipynb`: each run top to bottom in `notebooks/` (as tests/test_notebooks.py
  runs them) and saved with its outputs, without the per-cell timing metadata.

`docs/images/sync_bound_trace_viewer.png` is a browser's picture: `make_viewer_picture.py`.
Not imported by the package or the tests.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TIMELINE = ROOT / "docs" / "images" / "sync_bound_timeline.png"
SWEEP = ROOT / "sample_traces" / "sweep"
NOTEBOOKS = ROOT / "notebooks"


def timeline() -> None:
    import traceinspect

    trace = traceinspect.load(ROOT / "sample_traces/scenarios/sync_bound/vm.xplane.pb")
    ax = traceinspect.plot_timeline(trace, traceinspect.analyze(trace))
    # 100 dpi: 1100 px wide, the README's width.
    ax.figure.savefig(TIMELINE, dpi=100)  # type: ignore[union-attr]
    print(f"wrote {TIMELINE.relative_to(ROOT)}")


def sweep() -> None:
    import traceinspect
    from traceinspect.report.sweep import PLOT_NAME, write_sweep

    result = traceinspect.load_sweep(SWEEP)
    with tempfile.TemporaryDirectory() as tmp:
        shutil.copy(write_sweep(result, tmp)["png"], SWEEP / PLOT_NAME)
    print(f"wrote {(SWEEP / PLOT_NAME).relative_to(ROOT)}")


def notebooks() -> None:
    import nbclient
    import nbformat

    # The kernel imports this checkout's traceinspect, whatever else is installed.
    os.environ["PYTHONPATH"] = os.pathsep.join(
        filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])
    )
    for path in sorted(NOTEBOOKS.glob("*.ipynb")):
        nb = nbformat.read(path, as_version=4)  # type: ignore[no-untyped-call]
        client = nbclient.NotebookClient(
            nb,
            timeout=180,
            kernel_name="python3",
            record_timing=False,
            resources={"metadata": {"path": str(NOTEBOOKS)}},
        )
        client.execute()
        for cell in nb.cells:
            cell.metadata.pop("execution", None)  # timestamps: noise in every diff
        nbformat.write(nb, path)  # type: ignore[no-untyped-call]
        print(f"ran and saved {path.relative_to(ROOT)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-notebooks", action="store_true", help="only the PNG files")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    timeline()
    sweep()
    if not args.no_notebooks:
        notebooks()


if __name__ == "__main__":
    main()
