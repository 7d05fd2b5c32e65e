"""`traceinspect -v`: how the answer was reached, on stderr (the library only logs)."""

from __future__ import annotations

import json
import logging

from click.testing import CliRunner

from traceinspect.cli import main
from traceinspect.cli.sample import sample_path

SAMPLE = str(sample_path())


def test_verbose_says_what_was_read_and_why_the_verdict() -> None:
    result = CliRunner().invoke(main, ["-v", "analyze", SAMPLE, "--no-cache", "--json"])
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["verdict"] == "sync-bound"  # stdout stays JSON
    lines = result.stderr.splitlines()
    assert any(
        line.startswith(f"traceinspect: read {sample_path().parent} (1 file(s)") for line in lines
    )
    (verdict,) = [line for line in lines if line.startswith("traceinspect: verdict ")]
    assert verdict.startswith("traceinspect: verdict sync-bound: idle time as a share of step ")
    assert "sync 33.1%" in verdict and "recurs in 100% of the steps" in verdict


def test_without_verbose_nothing_is_logged_and_the_handler_is_gone() -> None:
    result = CliRunner().invoke(main, ["analyze", SAMPLE, "--no-cache", "--json"])
    assert result.exit_code == 0
    assert "traceinspect: verdict" not in result.stderr
    logger = logging.getLogger("traceinspect")
    assert logger.handlers == [] and logger.level == logging.NOTSET


def test_a_kept_answer_says_so() -> None:
    CliRunner().invoke(main, ["analyze", SAMPLE])
    result = CliRunner().invoke(main, ["-v", "analyze", SAMPLE])
    assert result.exit_code == 0
    assert "traceinspect: printing the answer kept from an earlier analyze" in result.stderr
