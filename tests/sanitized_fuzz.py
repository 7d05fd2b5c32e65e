"""Run by tests/test_fuzz.py under ASan/UBSan: ``python sanitized_fuzz.py WIRE_SO N SEED``.

Loads the sanitizer build of ``_wire.c`` given by path and decodes edited seeds (a built
trace and a bundled capture), each also with another edit of the same length written into
the buffer between the decoder's two passes, a trace of 1 event replaced by one of 5,000
of the same size between the passes, and a mapped file with page release. Any
out-of-bounds access or undefined behaviour aborts the process (a non-zero exit).
"""

from __future__ import annotations

import contextlib
import importlib.util
import mmap
import random
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]

from test_changing_file import _same_size  # noqa: E402
from test_fuzz import SEED  # noqa: E402


def main(so: str, count: int, seed: int) -> None:
    spec = importlib.util.spec_from_file_location("_wire", so)
    assert spec is not None and spec.loader is not None
    wire = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(wire)
    real = (HERE.parent / "traceinspect" / "_samples" / "sync_bound" / "vm.xplane.pb").read_bytes()
    rng = random.Random(seed)

    def edit(base: bytes) -> bytearray:
        data = bytearray(base)
        for _ in range(rng.randint(1, 4)):
            pos, kind = rng.randrange(len(data)), rng.random()
            if kind < 0.8:
                data[pos] = rng.randrange(256)
            elif kind < 0.9:
                data.insert(pos, rng.randrange(256))
            elif len(data) > 1:
                del data[pos]
        return data

    decoded = refused = 0
    for i in range(count):
        base = real if i % 4 == 0 else SEED
        data = edit(base)
        try:
            wire.decode(bytes(data))
            decoded += 1
        except ValueError:
            refused += 1
        other = (edit(base) + bytes(len(data)))[: len(data)]
        buf = bytearray(data)

        def swap(buf: bytearray = buf, other: bytearray = other) -> None:
            buf[:] = other

        with contextlib.suppress(ValueError):  # refused, or read as it was
            wire.decode(buf, between_passes=swap)
    # Far more events the second time than the first pass allocated for (past the capacity
    # the allocator rounds up to, where a write without its bound check would land).
    few, many = _same_size([1], [5000])
    buf = bytearray(few)

    def grow() -> None:
        buf[:] = many

    with contextlib.suppress(ValueError):
        wire.decode(buf, between_passes=grow)
    with tempfile.NamedTemporaryFile(suffix=".xplane.pb") as fh:
        fh.write(real)
        fh.flush()
        with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
            wire.decode(mapped, release_every=4096)
    print(f"decoded {decoded}, refused {refused} of {count}")


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))
