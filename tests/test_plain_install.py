"""A plain `pip install traceinspect`, without extras, in a virtual environment of its own:
plots and the HTML page work, and what needs an extra says which in one line.

Slow (it builds the package and installs its dependencies); skipped when pip cannot reach
a package index."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SAMPLE = REPO / "sample_traces" / "scenarios" / "sync_bound" / "vm.xplane.pb"
# What the package's build reads: the source tree, less compiled files and caches.
_SOURCES = ("traceinspect", "pyproject.toml", "setup.py", "README.md")
# Extras only: a plain install must not have them.
_EXTRAS_ONLY = ("jax", "grain", "xprof", "pyarrow", "fsspec", "dask")

pytestmark = pytest.mark.slow


def _run(
    args: list[str | Path], cwd: Path, timeout: float = 900
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    return subprocess.run(
        [str(a) for a in args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A virtual environment (no system site packages) with traceinspect installed from a
    copy of this checkout (pip builds in place, so the checkout itself stays clean)."""
    root = tmp_path_factory.mktemp("plain")
    probe = _run(
        [sys.executable, "-m", "pip", "download", "--no-deps", "--dest", root / "probe", "click"],
        cwd=root,
        timeout=120,
    )
    if probe.returncode != 0:
        pytest.skip(f"no package index reachable: {probe.stderr.strip()[-300:]}")
    src = root / "src"
    src.mkdir()
    for name in _SOURCES:
        path = REPO / name
        if path.is_dir():
            shutil.copytree(
                path, src / name, ignore=shutil.ignore_patterns("__pycache__", "*.so", "*.pyc")
            )
        else:
            shutil.copy2(path, src / name)
    env_dir = root / "venv"
    made = _run([sys.executable, "-m", "venv", env_dir], cwd=root)
    assert made.returncode == 0, made.stderr
    installed = _run([env_dir / "bin" / "python", "-m", "pip", "install", src], cwd=root)
    assert installed.returncode == 0, installed.stderr[-3000:]
    return env_dir


def test_plots_and_html_on_a_plain_install(venv: Path, tmp_path: Path) -> None:
    plots, page = tmp_path / "plots", tmp_path / "report.html"
    out = _run(
        [venv / "bin" / "traceinspect", "analyze", SAMPLE, "--plots", plots, "--html", page],
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stderr
    assert "sync-bound" in out.stdout
    for name in ("timeline", "step_breakdown", "gap_distribution"):
        assert (plots / f"{name}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", name
    html = page.read_text(encoding="utf-8")
    assert "sync-bound" in html
    assert html.count("data:image/png;base64,") >= 3


def test_a_plain_install_has_no_extra_and_keeps_the_extras_names(venv: Path) -> None:
    code = (
        "import importlib.metadata as m, importlib.util as u\n"
        "print(*sorted(m.metadata('traceinspect').get_all('Provides-Extra')))\n"
        f"print(*[n for n in {_EXTRAS_ONLY!r} if u.find_spec(n) is not None])\n"
    )
    out = _run([venv / "bin" / "python", "-c", code], cwd=venv)
    assert out.returncode == 0, out.stderr
    extras, present = [*out.stdout.splitlines(), "", ""][:2]
    # [plots] stays, empty, for old install commands; [xprof] is what `view` asks for.
    assert {"plots", "xprof", "capture", "parquet"} <= set(extras.split())
    assert present == ""


def test_what_needs_an_extra_says_which_in_one_line(venv: Path, tmp_path: Path) -> None:
    parquet = _run(
        [venv / "bin" / "traceinspect", "events", SAMPLE, "--format", "parquet", "-o", "e.pq"],
        cwd=tmp_path,
    )
    assert parquet.returncode == 2
    assert parquet.stderr.strip().splitlines() == [
        "Error: --format parquet needs pyarrow: pip install 'traceinspect[parquet]'."
    ]
    view = _run([venv / "bin" / "traceinspect", "view", SAMPLE], cwd=tmp_path)
    assert view.returncode == 2
    (line,) = view.stderr.strip().splitlines()
    assert line.startswith("Error: ") and "pip install 'traceinspect[xprof]'" in line
