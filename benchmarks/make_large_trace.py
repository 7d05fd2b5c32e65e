"""Make the large XPlane inputs of the load benchmark, cached under ``benchmarks/_data/``.

Three files:

- ``cpu_mlp.xplane.pb``: a real CPU capture of a small JAX MLP training loop with the
  Python tracer on (>= 80 MB, >= 5M events), because the Python tracer is what makes
  real host traces large;
- ``cpu_mlp_medium.xplane.pb``: the same program with fewer examples per step: the ~63 MB,
  ~3.7M-event class the analysis benchmark also runs on (``--medium`` makes only it);
- ``cpu_mlp_x6.xplane.pb``: the same capture with the lines of its ``/host:CPU`` plane
  repeated (line ids and timestamps shifted) until the file is >= 500 MB, so its content
  stays realistic (same names, stats and nesting) rather than synthetic.

Files that already exist are kept; ``--force`` makes them again. The data is git-ignored.

    python benchmarks/make_large_trace.py            # the three files
    python benchmarks/make_large_trace.py --medium   # only the ~63 MB one
    python benchmarks/make_large_trace.py --small    # a ~1 MB capture for --quick runs
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

DATA = Path(__file__).resolve().parent / "_data"
REAL = DATA / "cpu_mlp.xplane.pb"
LARGE = DATA / "cpu_mlp_x6.xplane.pb"
SMALL = DATA / "cpu_mlp_small.xplane.pb"
MEDIUM = DATA / "cpu_mlp_medium.xplane.pb"

MIN_REAL_BYTES = 80 << 20
MIN_REAL_EVENTS = 5_000_000
MIN_LARGE_BYTES = 500 << 20

# Tuned on this machine so that 20 steps give ~89 MB / ~5.5M events (4000 gave 156 MB): the
# Python tracer records one event per Python call, and a per-example Python pipeline is
# what makes real host traces big.
DEFAULT_EXAMPLES = 2300
# The 63 MB class of the analysis benchmark (the 62.7 MB / 3.66M-event capture):
# events grow with the examples, 2300 -> 5.53M, so ~1520 -> ~3.66M.
MEDIUM_EXAMPLES = 1520


# --- the captured program ------------------------------------------------------------------
# It runs in a child process (see ``_capture``) so the generator's own imports and the
# replication code never appear in the trace, and jax's memory goes away with the child.


def _augment(row: list[float], scale: float) -> list[float]:
    return [_clip(v * scale) for v in row]


def _clip(v: float) -> float:
    return min(max(v, -3.0), 3.0)


def _example(rng: Any, dim: int) -> tuple[list[float], int]:
    row = [rng.gauss(0.0, 1.0) for _ in range(dim)]
    return _augment(row, 0.5), int(sum(row) > 0)


def _batches(examples: int, dim: int, steps: int) -> Iterator[tuple[Any, Any]]:
    import random

    import numpy as np

    rng = random.Random(0)
    for _ in range(steps):
        rows, labels = zip(*(_example(rng, dim) for _ in range(examples)), strict=True)
        yield np.asarray(rows, np.float32), np.asarray(labels, np.int32)


def _train(steps: int, examples: int, out_dir: Path, python_tracer: bool) -> None:
    import jax
    import jax.numpy as jnp

    dim, hidden = 16, 256

    def init(key: Any) -> dict[str, Any]:
        k1, k2, k3 = jax.random.split(key, 3)
        return {
            "w1": jax.random.normal(k1, (dim, hidden)) * 0.1,
            "w2": jax.random.normal(k2, (hidden, hidden)) * 0.1,
            "w3": jax.random.normal(k3, (hidden, 2)) * 0.1,
        }

    def loss_fn(params: dict[str, Any], x: Any, y: Any) -> Any:
        h = jax.nn.relu(x @ params["w1"])
        h = jax.nn.relu(h @ params["w2"])
        logits = h @ params["w3"]
        return -jnp.mean(jax.nn.log_softmax(logits)[jnp.arange(len(y)), y])

    @jax.jit
    def train_step(params: dict[str, Any], x: Any, y: Any) -> tuple[dict[str, Any], Any]:
        loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
        return jax.tree.map(lambda p, g: p - 0.01 * g, params, grads), loss

    params = init(jax.random.key(0))
    options = jax.profiler.ProfileOptions()
    options.python_tracer_level = 1 if python_tracer else 0
    options.host_tracer_level = 2
    with jax.profiler.trace(str(out_dir), profiler_options=options):
        for step, (x, y) in enumerate(_batches(examples, dim, steps)):
            with jax.profiler.StepTraceAnnotation("train", step_num=step):
                params, loss = train_step(params, x, y)
                loss.block_until_ready()


def _capture(dest: Path, steps: int, examples: int, python_tracer: bool = True) -> None:
    with tempfile.TemporaryDirectory(prefix="ti-capture-") as tmp:
        cmd = [
            sys.executable,
            __file__,
            "--_child",
            tmp,
            "--steps",
            str(steps),
            "--examples",
            str(examples),
        ]
        if not python_tracer:
            cmd.append("--no-python-tracer")
        # JAX_PLATFORMS keeps the capture on CPU even where a GPU plugin is installed.
        subprocess.run(cmd, check=True, env={**os.environ, "JAX_PLATFORMS": "cpu"})
        found = sorted(Path(tmp).glob("plugins/profile/*/*.xplane.pb"))
        if len(found) != 1:
            raise RuntimeError(f"expected one .xplane.pb under {tmp}, found {found}")
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(str(found[0]), dest)


# --- replication ---------------------------------------------------------------------------


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _wrap64(n: int) -> int:
    return (n + (1 << 63)) % (1 << 64) - (1 << 63)


def _field_header(number: int, length: int) -> bytes:
    # Length-delimited key (wire type 2) + length: how a sub-message sits in its parent.
    return _varint(number << 3 | 2) + _varint(length)


def replicate(src: Path, dest: Path, copies: int) -> None:
    """Write ``src`` with the lines of its busiest plane repeated ``copies`` times.

    Copy ``k`` of a line gets id ``id + k`` (line ids are hashed thread ids spread over
    the int64 range, so neighbours never collide) and its timestamp shifted by ``k``
    times the capture's span: the result reads like one longer run whose threads were
    restarted between stretches. Serialized messages merge
    (repeated ``lines`` append, the same metadata map entries overwrite themselves), so
    the plane is written as its original bytes followed by one XPlane per copy holding
    only the shifted lines: only one copy is ever in memory.
    """
    from traceinspect.xplane.proto import message_class

    xplane_cls = message_class("XPlane")
    space = message_class("XSpace").FromString(src.read_bytes())
    big = max(range(len(space.planes)), key=lambda i: space.planes[i].ByteSize())
    plane = space.planes[big]
    # Line durations are often unset, so the span comes from the decoded events.
    events = _decode(src)["events"]
    span_ns = int((events["start_ns"] + events["duration_ns"]).max() - events["start_ns"].min())
    span_ns += 1_000_000  # + 1 ms so copies never overlap

    tmp = dest.with_name(dest.name + ".tmp")
    with tmp.open("wb") as out:
        for i, p in enumerate(space.planes):
            parts = [p.SerializeToString()]
            if i == big:
                for k in range(1, copies):
                    extra = xplane_cls()
                    for ln in plane.lines:
                        dup = extra.lines.add()
                        dup.CopyFrom(ln)
                        dup.id = _wrap64(ln.id + k)
                        dup.timestamp_ns = ln.timestamp_ns + k * span_ns
                    parts.append(extra.SerializeToString())
            out.write(_field_header(1, sum(len(b) for b in parts)))
            for b in parts:
                out.write(b)
        # Everything but the planes (hostnames, errors, warnings) goes after them.
        del space.planes[:]
        out.write(space.SerializeToString())
    tmp.replace(dest)


def _decode(path: Path) -> dict[str, Any]:
    # traceinspect's own decoder (columns only, no frames): the fastest way to look.
    from traceinspect.xplane.locate import HostFile
    from traceinspect.xplane.reader import decode_file, resolve_decoder

    return decode_file(HostFile(host="bench", path=path), resolve_decoder())


def count_events(path: Path) -> int:
    """Events in ``path`` (timed and aggregated)."""
    from traceinspect.xplane.raw import event_count

    return event_count(_decode(path))


def _report(path: Path) -> None:
    n = count_events(path)
    size = path.stat().st_size
    print(f"{path}: {size / 1e6:,.1f} MB, {n:,} events, {size / n:.1f} bytes/event")


def _make_real(force: bool, steps: int, examples: int) -> None:
    if REAL.exists() and not force:
        return
    t0 = time.perf_counter()
    _capture(REAL, steps, examples)
    print(f"captured {REAL.name} in {time.perf_counter() - t0:.1f} s")
    size, n = REAL.stat().st_size, count_events(REAL)
    if size < MIN_REAL_BYTES or n < MIN_REAL_EVENTS:
        # Reported rather than fatal: the benchmark still runs, but the size
        # floor is not met; raise --examples.
        print(
            f"warning: {REAL.name} is {size / 1e6:.1f} MB / {n:,} events, below the "
            f"{MIN_REAL_BYTES >> 20} MB / {MIN_REAL_EVENTS:,} events floor: raise --examples.",
            file=sys.stderr,
        )


def _make_large(force: bool) -> None:
    if LARGE.exists() and not force:
        return
    copies = -(-MIN_LARGE_BYTES // REAL.stat().st_size)
    t0 = time.perf_counter()
    replicate(REAL, LARGE, copies)
    print(f"wrote {LARGE.name} ({copies} copies of the lines) in {time.perf_counter() - t0:.1f} s")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--force", action="store_true", help="make the files again")
    parser.add_argument("--steps", type=int, default=20, help="training steps captured")
    parser.add_argument(
        "--examples",
        type=int,
        default=DEFAULT_EXAMPLES,
        help="examples per step built in Python (the trace grows with it)",
    )
    parser.add_argument(
        "--small", action="store_true", help=f"only make {SMALL.name} (for --quick)"
    )
    parser.add_argument("--medium", action="store_true", help=f"only make {MEDIUM.name} (~63 MB)")
    parser.add_argument("--_child", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--no-python-tracer", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args._child is not None:
        _train(args.steps, args.examples, args._child, not args.no_python_tracer)
        return 0
    if args.small:
        if args.force or not SMALL.exists():
            _capture(SMALL, steps=3, examples=200)
        _report(SMALL)
        return 0
    if args.force or not MEDIUM.exists():
        _capture(MEDIUM, args.steps, MEDIUM_EXAMPLES)
    if args.medium:
        _report(MEDIUM)
        return 0
    _make_real(args.force, args.steps, args.examples)
    _make_large(args.force)
    for path in (MEDIUM, REAL, LARGE):
        _report(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
