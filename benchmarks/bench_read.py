"""How to hold a file while the compiled decoder reads it: the cost of each way, measured.

A trace mapped with ``mmap`` kills the process with SIGBUS when the file shrinks while it is
decoded, and a file rewritten in place changes under the decoder's two passes. The ways
compared, each in a fresh process (its own peak RSS), interleaved, best of ``--repeat``:

- ``mmap``: the file mapped read-only, the decoder dropping the pages it has decoded
  (what ``reader.py`` did before issue 34; since, ``_wire.c`` guards a mapped input
  against SIGBUS itself);
- ``mmap+stamps``: the same, with the file's size, mtime, ctime and inode compared before
  and after (a change: without the guard, it cannot stop the SIGBUS of a shrinking file;
  what ``reader.py`` does for the compiled decoder);
- ``private``: the whole file read into the process's own memory (``read()``), stamps
  compared around the read, then decoded: nothing the file does later reaches the decoder.

    python benchmarks/bench_read.py                       # benchmarks/_data/ files, 5 runs
    python benchmarks/bench_read.py FILE --repeat 3
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

DATA = Path(__file__).resolve().parent / "_data"
METHODS = ("mmap", "mmap+stamps", "private")


def _stamp(st: os.stat_result) -> tuple[int, ...]:
    return (st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)


def _child(path: Path, method: str) -> None:
    import mmap

    from traceinspect.xplane import _wire
    from traceinspect.xplane.raw import typed

    t0 = time.perf_counter()
    with path.open("rb") as fh:
        if method == "private":
            before = os.fstat(fh.fileno())
            data = fh.read()
            assert _stamp(before) == _stamp(os.fstat(fh.fileno()))
            assert len(data) == before.st_size
            raw = typed(_wire.decode(data))
        else:
            before = os.fstat(fh.fileno())
            with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
                raw = typed(_wire.decode(mapped, release_every=1 << 20))
            if method == "mmap+stamps":
                assert _stamp(before) == _stamp(os.fstat(fh.fileno()))
    wall = time.perf_counter() - t0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"wall": wall, "peak": peak, "events": len(raw["events"]["start_ns"])}))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("files", nargs="*", type=Path)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--_child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args._child:
        _child(Path(args._child[0]), args._child[1])
        return 0
    files = args.files or [DATA / "cpu_mlp.xplane.pb", DATA / "cpu_mlp_x6.xplane.pb"]
    for path in files:
        path.read_bytes()  # into the page cache: every method finds it there
        results: dict[str, list[dict[str, float]]] = {m: [] for m in METHODS}
        for _ in range(args.repeat):
            for method in METHODS:
                out = subprocess.run(
                    [sys.executable, __file__, "--_child", str(path), method],
                    check=True,
                    capture_output=True,
                    text=True,
                )
                results[method].append(json.loads(out.stdout))
        size = path.stat().st_size
        print(f"{path.name}: {size / 1e6:.1f} MB, {results['mmap'][0]['events']:,.0f} events")
        print(f"  {'method':<12} {'best s':>7} {'median s':>9} {'peak MiB':>9}")
        for method, runs in results.items():
            walls = sorted(r["wall"] for r in runs)
            peak = max(r["peak"] for r in runs)
            print(f"  {method:<12} {walls[0]:>7.3f} {walls[len(walls) // 2]:>9.3f} {peak:>9.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
