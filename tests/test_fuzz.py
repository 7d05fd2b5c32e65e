"""Mutated and random bytes: the decoders return a valid Trace or raise the typed error."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import xspace as X
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from traces import DECODERS

import traceinspect
from traceinspect import schema as S
from traceinspect.errors import TraceInspectError
from traceinspect.xplane.reader import compiled_available


def _seed() -> bytes:
    xs = X.space()
    plane = X.add_plane(xs, "/host:CPU")
    plane.line(
        "python",
        1000,
        [
            X.Ev("train", 0, 5000, {"step_num": 3, "ratio": 0.5}),
            X.Ev("PjitFunction(f)", 100, 200, {"_src": "a.cc", "ref": ("ref", "train")}),
        ],
    )
    X.add_plane(xs, "/device:TPU:0").line("XLA Ops", 2000, [X.Ev("fusion", 0, 10, {"x": 1})])
    return bytes(xs.SerializeToString())


SEED = _seed()
_SETTINGS = settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


def _check(tmp_path: Path, data: bytes, decoder: str) -> None:
    path = tmp_path / "fuzz.xplane.pb"
    path.write_bytes(data)
    try:
        trace = traceinspect.load(path, decoder=decoder, use_cache=False)  # type: ignore[arg-type]
    except TraceInspectError as exc:
        assert str(path) in str(exc)
        return
    S.check_events(trace.events)
    assert trace.event_count > 0
    assert trace.events[S.LINE_ROW].between(0, len(trace.lines) - 1).all()
    stats = trace.event_stats
    assert stats[S.EVENT_ROW].between(0, trace.event_count - 1).all()


@pytest.mark.parametrize("decoder", DECODERS)
@_SETTINGS
@given(data=st.binary(max_size=512))
def test_random_bytes(tmp_path: Path, decoder: str, data: bytes) -> None:
    _check(tmp_path, data, decoder)


@pytest.mark.parametrize("decoder", DECODERS)
@_SETTINGS
@given(
    flips=st.lists(st.tuples(st.integers(0, len(SEED) - 1), st.integers(0, 255)), max_size=8),
    cut=st.integers(1, len(SEED)),
)
def test_mutated_real_trace(
    tmp_path: Path, decoder: str, flips: list[tuple[int, int]], cut: int
) -> None:
    data = bytearray(SEED[:cut])
    for pos, value in flips:
        if pos < len(data):
            data[pos] = value
    _check(tmp_path, bytes(data), decoder)


# Edits of the seed: (position, byte) replaced, inserted (+256) or deleted (+512).
_EDITS = st.lists(st.tuples(st.integers(0, len(SEED) - 1), st.integers(0, 767)), max_size=6)


@pytest.mark.skipif(not compiled_available(), reason="C decoder not built")
@settings(max_examples=1000, deadline=None)
@given(flips=_EDITS)
# Found by Hypothesis: the plane's `lines` tag turned into a `stat_metadata` map entry
# whose value is malformed, and replaced by a later entry with the same key.
@example(flips=[(14, 42)])
def test_decoders_agree_on_mutations(flips: list[tuple[int, int]]) -> None:
    """Both decoders, the same columns or both a ValueError (1,000 edited seeds: ~2 s)."""
    from test_decoders import assert_same

    from traceinspect.xplane import _wire, pydecode
    from traceinspect.xplane.raw import typed

    data = bytearray(SEED)
    for where, value in flips:
        pos = min(where, len(data) - 1)
        if value < 256:
            data[pos] = value
        elif value < 512:
            data.insert(pos, value - 256)
        else:
            del data[pos]
    results: list[dict[str, Any] | None] = []
    for decode in (_wire.decode, pydecode.decode):
        try:
            results.append(typed(decode(bytes(data))))
        except ValueError:
            results.append(None)
    if results[0] is None or results[1] is None:
        assert results[0] is results[1], "one decoder accepted what the other rejected"
    else:
        assert_same(results[0], results[1])


def _sanitizer_runtime() -> str | None:
    """The ASan and UBSan runtimes to preload into Python, or None without gcc's."""
    import shutil
    import subprocess

    if shutil.which("gcc") is None:
        return None
    libs = []
    for name in ("libasan.so", "libubsan.so"):
        found = subprocess.run(
            ["gcc", f"-print-file-name={name}"], capture_output=True, text=True, check=False
        ).stdout.strip()
        if not Path(found).is_file():
            return None
        libs.append(found)
    return " ".join(libs)


@pytest.mark.slow
def test_the_compiled_decoder_is_clean_under_asan_and_ubsan(tmp_path: Path) -> None:
    """The C decoder built with AddressSanitizer and UndefinedBehaviorSanitizer, over 3,000
    edited traces and as many changed between its passes (~15 s with the build)."""
    import os
    import subprocess
    import sys
    import sysconfig

    runtime = _sanitizer_runtime()
    if runtime is None:
        pytest.skip("gcc with libasan and libubsan is needed")
    source = Path(__file__).resolve().parents[1] / "traceinspect" / "xplane" / "_wire.c"
    built = tmp_path / f"_wire{sysconfig.get_config_var('EXT_SUFFIX')}"
    flags = ["-O1", "-g", "-std=c11", "-shared", "-fPIC", "-fno-omit-frame-pointer"]
    sanitize = ["-fsanitize=address,undefined", "-fno-sanitize-recover=undefined"]
    include = f"-I{sysconfig.get_paths()['include']}"
    subprocess.run(["gcc", *flags, *sanitize, include, str(source), "-o", str(built)], check=True)
    env = {
        **os.environ,
        "LD_PRELOAD": runtime,
        "PYTHONMALLOC": "malloc",
        "ASAN_OPTIONS": "detect_leaks=0:abort_on_error=1",
        "UBSAN_OPTIONS": "print_stacktrace=1:halt_on_error=1",
    }
    script = Path(__file__).resolve().parent / "sanitized_fuzz.py"
    done = subprocess.run(
        [sys.executable, str(script), str(built), "3000", "34"],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    assert "refused" in done.stdout
