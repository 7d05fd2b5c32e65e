"""A plain Grain ``mp_prefetch`` script, which never parses absl's flags, is captured: the child
marks them parsed with their defaults when Grain needs them. A script that parses its own
flags (``absl.app.run``) keeps its command line and gets no note."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import pytest
from capture_helpers import capture, read_sidecar

from traceinspect.capture._child.grain_patches import ABSL_DEFAULTS_NOTE

pytest.importorskip("grain")
pytestmark = [pytest.mark.slow, pytest.mark.stack]

# Without traceinspect this script dies: UnparsedFlagAccessError for
# --grain_enable_multiprocess_worker_profiling, on Grain's prefetch thread.
PLAIN = """
import grain

if __name__ == "__main__":
    ds = grain.MapDataset.range(96).batch(8).to_iter_dataset()
    it = ds.mp_prefetch(grain.MultiprocessingOptions(num_workers=1))
    print("batches", sum(1 for _ in it))
"""

WITH_APP_RUN = """
import json
import sys

import grain
from absl import app, flags

_BATCH = flags.DEFINE_integer("batch", 4, "Batch size.")


def main(argv):
    ds = grain.MapDataset.range(96).batch(_BATCH.value).to_iter_dataset()
    it = ds.mp_prefetch(grain.MultiprocessingOptions(num_workers=1))
    print(json.dumps({"batch": _BATCH.value, "batches": sum(1 for _ in it)}))


if __name__ == "__main__":
    app.run(main)
"""


def _script(tmp_path: Path, source: str) -> str:
    path = tmp_path / "train.py"
    path.write_text(textwrap.dedent(source))
    return str(path)


def test_a_plain_grain_script_runs_with_absl_defaults(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    result = capture(tmp_path / "logs", [sys.executable, _script(tmp_path, PLAIN)])

    out, err = capfd.readouterr()
    assert result.exit_code == 0, err
    assert "UnparsedFlagAccessError" not in err
    assert "batches 12" in out.splitlines()
    assert result.trace_paths
    assert err.count(f"traceinspect: {ABSL_DEFAULTS_NOTE}\n") == 1
    sidecar = read_sidecar(result)
    assert ABSL_DEFAULTS_NOTE in sidecar["notes"]
    assert sidecar["maxtext"] is False  # the worker advice names MultiprocessingOptions


def test_a_script_under_absl_app_run_keeps_its_own_flags(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    result = capture(
        tmp_path / "logs", [sys.executable, _script(tmp_path, WITH_APP_RUN), "--batch=12"]
    )

    out, err = capfd.readouterr()
    assert result.exit_code == 0, err
    printed = json.loads(out.strip().splitlines()[-1])
    assert printed == {"batch": 12, "batches": 8}
    assert ABSL_DEFAULTS_NOTE not in err
    assert ABSL_DEFAULTS_NOTE not in read_sidecar(result)["notes"]
