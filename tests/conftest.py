"""Shared fixtures: an isolated cache, and a parameter over both decoders; every analysis
the tests make checks its invariants (traceinspect.analysis.invariants)."""

from __future__ import annotations

import os

import pytest
from traces import DECODERS

# Set for the whole session, so worker processes (pods, sweeps) inherit it.
os.environ["TRACEINSPECT_CHECK_INVARIANTS"] = "1"


@pytest.fixture(autouse=True)
def _isolated_cache(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Never read or fill the user's cache from tests.
    monkeypatch.setenv("TRACEINSPECT_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))


@pytest.fixture(params=DECODERS)
def decoder(request: pytest.FixtureRequest) -> str:
    return str(request.param)
