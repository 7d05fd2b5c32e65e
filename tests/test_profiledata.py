"""Cross-check against jax's own XPlane reader, jax.profiler.ProfileData, on every real trace."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from traces import all_traces

import traceinspect
from traceinspect import schema as S

_jax_profiler = pytest.importorskip("jax.profiler")
if not hasattr(_jax_profiler, "ProfileData"):  # jax before 0.7 (the oldest stack kept)
    pytest.skip("this jax has no jax.profiler.ProfileData", allow_module_level=True)
ProfileData = _jax_profiler.ProfileData


@pytest.mark.parametrize("path", all_traces(), ids=lambda p: p.name)
def test_same_events_as_jax_profiledata(path: Path, decoder: str) -> None:
    trace = traceinspect.load(path, decoder=decoder, use_cache=False)  # type: ignore[arg-type]
    names, starts, durations, planes, lines = [], [], [], [], []
    for plane in ProfileData.from_file(str(path)).planes:
        for line in plane.lines:
            for event in line.events:
                names.append(event.name)
                starts.append(event.start_ns)
                durations.append(event.duration_ns)
                planes.append(plane.name)
                lines.append(line.name)
    ev = trace.events
    assert len(ev) == len(names) > 0
    assert ev[S.NAME].astype(str).tolist() == names
    assert ev[S.PLANE].astype(str).tolist() == planes
    assert ev[S.LINE].astype(str).tolist() == lines
    # ProfileData keeps times as doubles of absolute ns (sub-ns kept, but only ~16 digits);
    # we keep exact integer ns, flooring both ends. They agree to 1 ns plus the double's ulp.
    theirs = np.asarray(starts, dtype=np.float64)
    tolerance = 1.0 + np.spacing(np.abs(theirs))
    ours = ev[S.START_NS].to_numpy()
    assert np.all(np.abs(ours.astype(np.float64) - theirs) <= tolerance)
    ours_dur = ev[S.DURATION_NS].to_numpy().astype(np.float64)
    assert np.all(np.abs(ours_dur - np.asarray(durations)) <= 1.0)
