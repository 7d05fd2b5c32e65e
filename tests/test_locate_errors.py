"""What a path that is not a trace is, said as it is (issue 34): a symbolic link that loops
or leads nowhere, a directory that cannot be read."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from traceinspect.errors import TraceNotFoundError
from traceinspect.xplane.locate import locate


def test_a_symbolic_link_loop_is_named(tmp_path: Path) -> None:
    link = tmp_path / "logs"
    link.symlink_to(link)
    with pytest.raises(TraceNotFoundError, match="a symbolic link that loops back to itself"):
        locate(link)


def test_a_dangling_symbolic_link_names_its_target(tmp_path: Path) -> None:
    link = tmp_path / "logs"
    link.symlink_to(tmp_path / "gone")
    with pytest.raises(TraceNotFoundError, match=r"a symbolic link to .*gone, which does not"):
        locate(link)


def test_a_missing_path_is_missing(tmp_path: Path) -> None:
    with pytest.raises(TraceNotFoundError, match="no such file or directory"):
        locate(tmp_path / "nothing")


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads every directory")
def test_an_unreadable_directory_says_so(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / "vm.xplane.pb").write_bytes(b"\n")
    run.chmod(0)
    try:
        with pytest.raises(TraceNotFoundError, match="cannot be read"):
            locate(run)
    finally:
        run.chmod(0o755)
