"""Read XPlane files into decoded columns: file access, decoder choice, errors.

The compiled decoder is used when it was built; ``TRACEINSPECT_DECODER=python`` (or
``decoder="python"``) forces the protobuf one, which tests use to check both.
"""

from __future__ import annotations

import gzip
import io
import mmap
import os
import time
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, Literal

from traceinspect.errors import TraceDecodeError, UsageError
from traceinspect.xplane import cache, fs
from traceinspect.xplane.locate import HostFile, Located
from traceinspect.xplane.raw import Raw, typed

if TYPE_CHECKING:
    from traceinspect.xplane._wire import Decoded

_compiled_decode: Callable[..., Decoded] | None
try:
    from traceinspect.xplane._wire import decode as _compiled_decode
except ImportError:  # not built: no compiler at install time
    _compiled_decode = None

DecoderName = Literal["auto", "c", "python"]
Progress = Callable[[int], object]
#: ``progress(done_bytes, total_bytes)``, called while a run's files are decoded.
RunProgress = Callable[[int, int], object]

_GZIP_MAGIC = b"\x1f\x8b"
# How far a gzipped trace may inflate: XPlane protobufs compress 2.5-3.8x with gzip
# (levels 1-9, the bundled captures and the 89 MB benchmark one), so 20x leaves 5x of
# headroom; any file may inflate to INFLATE_FLOOR (small ones of one repeated name do more).
# The 6.5 MB gzip of 1.5 GB of zeros of issue 34 stops at 130 MB instead of 2.9 GB.
INFLATE_RATIO = 20
INFLATE_FLOOR = 64 << 20
# How often (bytes of input) the compiled decoder drops the mapped file's pages it has
# decoded, so that the file is not resident beside the columns it turns into (85 of the
# 323 MiB peak of reading the 89 MB capture). Each release is one madvise call; 1 MiB
# (85 calls there) cost no measurable decode time against 4 MiB, and keeps at most ~1 MiB
# of consumed file mapped.
RELEASE_EVERY = 1 << 20
#: What the compiled decoder says (ValueError) when the two passes over a file disagree.
CHANGED = (
    "the trace changed while it was read: is it still being written? read it again when it "
    "is complete"
)


def compiled_available() -> bool:
    return _compiled_decode is not None


def resolve_decoder(decoder: DecoderName | None = None) -> Literal["c", "python"]:
    """Which decoder a call will use: "c" or "python" as asked, else (None or "auto", as
    the CLI's hidden ``--decoder`` defaults to) ``TRACEINSPECT_DECODER``, else C."""
    choice: str = decoder if decoder is not None and decoder != "auto" else ""
    choice = choice or os.environ.get("TRACEINSPECT_DECODER", "auto") or "auto"
    if choice not in ("auto", "c", "python"):
        raise UsageError(f"unknown decoder {choice!r}: use 'auto', 'c' or 'python'.")
    if choice == "c" and _compiled_decode is None:
        raise UsageError(
            "the compiled decoder is not built in this install; reinstall traceinspect "
            "on a machine with a C compiler, or use the 'python' decoder."
        )
    if choice == "auto":
        return "c" if _compiled_decode is not None else "python"
    return "c" if choice == "c" else "python"


def _hint(head: bytes) -> str:
    stripped = head.lstrip()
    if stripped[:1] in (b"{", b"["):
        return (
            " It looks like JSON (a Chrome trace.json?); traceinspect reads the "
            "*.xplane.pb file jax.profiler writes beside it."
        )
    return " Expected an XSpace protobuf written by jax.profiler (*.xplane.pb)."


def _decode(
    data: Any,
    decoder: Literal["c", "python"],
    progress: Progress | None,
    release: bool,
    release_gil: bool = False,
) -> Any:
    if decoder == "c":
        assert _compiled_decode is not None
        return _compiled_decode(
            data,
            progress,
            release_every=RELEASE_EVERY if release else 0,
            release_gil=release_gil and progress is None,
        )
    # Imported here: it brings protobuf, which the compiled decoder never needs.
    from traceinspect.xplane import pydecode

    return pydecode.decode(data, progress)


def read_run(
    located: Located,
    decoder: Literal["c", "python"],
    use_cache: bool = True,
    progress: RunProgress | None = None,
    *,
    release_gil: bool = False,
) -> tuple[list[Raw], int]:
    """Every host file of the run, decoded, or read from the cache of decoded files
    (kept for large files that took a while to decode): the decoded columns, and how many
    came from the cache. ``release_gil``: see :func:`decode_file`."""
    files = located.run.files
    sizes = [f.size for f in files]
    total = sum(sizes)
    raws: list[Raw] = []
    done = 0
    cached = 0
    for hf, size in zip(files, sizes, strict=True):
        raw = cache.load(hf) if use_cache and size >= cache.MIN_BYTES else None
        if raw is None:
            base = done
            cb = None if progress is None else (lambda n, b=base: progress(b + n, total))
            started = time.perf_counter()
            raw = decode_file(hf, decoder, cb, release_gil=release_gil)
            slow = time.perf_counter() - started >= cache.MIN_DECODE_SECONDS
            if use_cache and size >= cache.MIN_BYTES and slow:
                cache.store(hf, raw)
        else:
            cached += 1
        done += size
        raws.append(raw)
    return raws, cached


def decode_file(
    hf: HostFile,
    decoder: Literal["c", "python"],
    progress: Progress | None = None,
    *,
    release_gil: bool = False,
) -> Raw:
    """Decode one host file, fetched to a temporary file first when it is behind a URL.
    Raises :class:`TraceDecodeError` naming the file (the URL, never the temporary copy).
    ``release_gil``: the compiled decoder lets other threads run Python meanwhile (without
    ``progress``, which it cannot call then)."""
    with fs.fetched(hf.path) as local:
        return _decode_local(local, hf.location, decoder, progress, release_gil)


def _decode_local(
    path: Path,
    name: str,
    decoder: Literal["c", "python"],
    progress: Progress | None,
    release_gil: bool = False,
) -> Raw:
    try:
        with path.open("rb") as fh:
            before = os.fstat(fh.fileno())
            if before.st_size == 0:
                raise TraceDecodeError(
                    f"{name}: the file is empty (0 bytes). The profiler did not finish "
                    "writing it; capture the run again.",
                    path=path,
                )
            # The hint of an error is made from these bytes, not from a mapping that may have
            # shrunk by then (a read past its file's end is a SIGBUS).
            head = fh.read(64)
            gzipped = head[:2] == _GZIP_MAGIC
            fh.seek(0)
            if decoder == "c" and not gzipped:
                # Mapped, not read: decoded columns never point into the file, so the
                # compiled decoder drops the pages it has decoded as it goes (every
                # RELEASE_EVERY bytes of events and after each plane). A file that shrinks
                # meanwhile is a SIGBUS the decoder turns into CHANGED; one rewritten in
                # place, a count that differs between its passes, or the stamps below.
                try:
                    with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
                        raw = _checked(name, mapped, head, decoder, progress, True, release_gil)
                finally:  # a change explains a failure too: say so rather than "malformed"
                    _unchanged(fh, before, name)
                return raw
            data = _read_whole(fh, before, name)
            if gzipped:
                data = _inflate(data, name)
            return _checked(name, data, data[:64], decoder, progress, False, release_gil)
    except TraceDecodeError as exc:
        exc.path = exc.path or str(path)
        raise
    except (EOFError, gzip.BadGzipFile, zlib.error) as exc:
        raise TraceDecodeError(
            f"{name}: the gzip stream is truncated or corrupt ({exc}). Capture the run "
            "again, or decompress a complete copy.",
            path=path,
        ) from None
    except OSError as exc:
        raise TraceDecodeError(
            f"{name}: cannot read the file ({exc.strerror or exc}). Check permissions.",
            path=path,
        ) from None


def _inflate(data: bytes, name: str) -> bytes:
    """A gzip file's content, or :class:`TraceDecodeError` once it inflates past what a
    trace of its size could hold: a gzip bomb stops at that size, not at the memory's."""
    limit = max(INFLATE_FLOOR, INFLATE_RATIO * len(data))
    with gzip.GzipFile(fileobj=io.BytesIO(data)) as gz:
        out = gz.read(limit + 1)
    if len(out) > limit:
        raise TraceDecodeError(
            f"{name}: the gzip stream inflates past {limit >> 20} MiB from "
            f"{len(data) / 2**20:.1f} MiB (traces compress 2.5-4x): not a gzipped trace. If "
            "it is one, decompress it (gunzip) and read the .xplane.pb."
        )
    return out


def _stamp(st: os.stat_result) -> tuple[int, int, int, int]:
    return (st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)


def _unchanged(fh: BinaryIO, before: os.stat_result, name: str) -> None:
    """:class:`TraceDecodeError` when the file's size, mtime, ctime or inode changed since
    ``before``: it was written while it was read (benchmarks/README.md, "Holding the file
    while it is decoded", measures what this and the mapping cost)."""
    if _stamp(os.fstat(fh.fileno())) != _stamp(before):
        raise TraceDecodeError(f"{name}: {CHANGED}.")


def _read_whole(fh: BinaryIO, before: os.stat_result, name: str) -> bytes:
    """The file's bytes in this process's own memory (what the Python decoder parses, and
    a gzip stream), or :class:`TraceDecodeError` when the file changed while it was read."""
    data = fh.read()
    if len(data) != before.st_size:
        raise TraceDecodeError(f"{name}: {CHANGED}.")
    _unchanged(fh, before, name)
    return data


def _checked(
    name: str,
    data: Any,
    head: bytes,
    decoder: Literal["c", "python"],
    progress: Progress | None,
    release: bool,
    release_gil: bool = False,
) -> Raw:
    try:
        return typed(_decode(data, decoder, progress, release, release_gil))
    except (ValueError, OverflowError) as exc:
        if str(exc) == CHANGED:
            raise TraceDecodeError(f"{name}: {CHANGED}.") from None
        raise TraceDecodeError(
            f"{name}: not a readable XPlane trace ({exc}).{_hint(head)} If "
            "the run was interrupted while writing, capture it again."
        ) from None
