"""Read XPlane files into decoded columns: file access, decoder choice, errors.

The compiled decoder is used when it was built; ``TRACEINSPECT_DECODER=python`` (or
``decoder="python"``) forces the protobuf one, which tests use to check both.
"""

from __future__ import annotations

import gzip
import mmap
import os
import time
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

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

# How often (bytes of input) the compiled decoder drops the mapped file's pages it has
# decoded, so that the file is not resident beside the columns it turns into (85 of the
# 323 MiB peak of reading the 89 MB capture). Each release is one madvise call; 1 MiB
# (85 calls there) cost no measurable decode time against 4 MiB, and keeps at most ~1 MiB
# of consumed file mapped.
RELEASE_EVERY = 1 << 20


def compiled_available() -> bool:
    return _compiled_decode is not None


def resolve_decoder(decoder: DecoderName | None = None) -> Literal["c", "python"]:
    """Which decoder a call will use: explicit choice, else the environment, else C."""
    choice = decoder or os.environ.get("TRACEINSPECT_DECODER", "auto") or "auto"
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
        size = path.stat().st_size
        if size == 0:
            raise TraceDecodeError(
                f"{name}: the file is empty (0 bytes). The profiler did not finish "
                "writing it; capture the run again.",
                path=path,
            )
        with path.open("rb") as fh:
            head = fh.read(2)
            if head == _GZIP_MAGIC:
                fh.seek(0)
                with gzip.GzipFile(fileobj=fh) as gz:
                    data: Any = gz.read()
                return _checked(name, data, decoder, progress, False, release_gil)
            # Mapped, not read: decoded columns never point into the file, so the compiled
            # decoder drops the pages it has decoded as it goes (every RELEASE_EVERY bytes
            # of events and after each plane).
            with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
                return _checked(name, mapped, decoder, progress, True, release_gil)
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


def _checked(
    name: str,
    data: Any,
    decoder: Literal["c", "python"],
    progress: Progress | None,
    release: bool,
    release_gil: bool = False,
) -> Raw:
    try:
        return typed(_decode(data, decoder, progress, release, release_gil))
    except (ValueError, OverflowError) as exc:
        raise TraceDecodeError(
            f"{name}: not a readable XPlane trace ({exc}).{_hint(bytes(data[:64]))} If "
            "the run was interrupted while writing, capture it again."
        ) from None
