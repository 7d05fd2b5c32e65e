"""The CPU a process tree used, as capture's child reads it from /proc (facts.py): the root's
own, and its descendants' together (a training process and its Grain workers)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from traceinspect.capture._child.facts import _tree_cpu_s, tree_cpu_split_s

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc")

BURN_S = 0.4


def test_a_grandchilds_cpu_counts_below_the_root_not_as_its_own(tmp_path: Path) -> None:
    done = tmp_path / "burnt"
    burn = (
        "import time, pathlib\n"
        f"end = time.process_time() + {BURN_S}\n"
        "while time.process_time() < end: pass\n"
        f"pathlib.Path({str(done)!r}).touch()\n"
        "time.sleep(30)\n"
    )
    script = tmp_path / "burn.py"
    script.write_text(burn)
    # The root, a shell, waits on another that waits on a Python process, which burns CPU
    # and then sleeps: the burner is the root's grandchild.
    inner = f"'{sys.executable}' '{script}' & wait"
    root = subprocess.Popen(["sh", "-c", f'sh -c "{inner}" & wait'])
    try:
        deadline = time.monotonic() + 30
        while not done.exists():
            assert time.monotonic() < deadline, "the child never finished burning"
            time.sleep(0.02)
        split = tree_cpu_split_s(root.pid)
        assert split is not None
        own, below = split
        assert own < 0.1
        assert below >= BURN_S * 0.9
        total = _tree_cpu_s(root.pid)
        assert total == pytest.approx(own + below, abs=0.05)
    finally:
        subprocess.run(["pkill", "-f", str(script)], check=False)
        root.kill()
        root.wait()


def test_a_process_that_is_not_there_reads_none() -> None:
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    assert tree_cpu_split_s(gone.pid) is None
    assert _tree_cpu_s(gone.pid) is None
