"""Read XPlane files into decoded columns: file access, decoder choice, errors.

The compiled decoder is used when it was built; ``TRACEINSPECT_DECODER=python`` (or
``decoder="python"``) forces the protobuf one, which tests use to check both.
"""

from __future__ import annotations

import gzip
import mmap
import os
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from traceinspect.errors import TraceDecodeError, UsageError
from traceinspect.xplane import fs
from traceinspect.xplane.locate import HostFile
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
    data: Any, decoder: Literal["c", "python"], progress: Progress | None, release: bool
) -> Any:
    if decoder == "c":
        assert _compiled_decode is not None
        return _compiled_decode(data, progress, release_every=RELEASE_EVERY if release else 0)
    # Imported here: it brings protobuf, which the compiled decoder never needs.
    from traceinspect.xplane import pydecode

    return pydecode.decode(data, progress)


def decode_file(
    hf: HostFile, decoder: Literal["c", "python"], progress: Progress | None = None
) -> Raw:
    """Decode one host file, fetched to a temporary file first when it is behind a URL.
    Raises :class:`TraceDecodeError` naming the file (the URL, never the temporary copy)."""
    with fs.fetched(hf.path) as local:
        return _decode_local(local, hf.location, decoder, progress)


def _decode_local(
    path: Path, name: str, decoder: Literal["c", "python"], progress: Progress | None
) -> Raw:
    try:
        size = path.stat().st_size
        if size == 0:
            raise TraceDecodeError(
                f"{name}: the file is empty (0 bytes). The profiler did not finish "
                "writing it; capture the run again."
            )
        with path.open("rb") as fh:
            head = fh.read(2)
            if head == _GZIP_MAGIC:
                fh.seek(0)
                with gzip.GzipFile(fileobj=fh) as gz:
                    data: Any = gz.read()
                return _checked(name, data, decoder, progress, release=False)
            # Mapped, not read: decoded columns never point into the file, so the compiled
            # decoder drops the pages it has decoded as it goes (every RELEASE_EVERY bytes
            # of events and after each plane).
            with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
                return _checked(name, mapped, decoder, progress, release=True)
    except (EOFError, gzip.BadGzipFile, zlib.error) as exc:
        raise TraceDecodeError(
            f"{name}: the gzip stream is truncated or corrupt ({exc}). Capture the run "
            "again, or decompress a complete copy."
        ) from None
    except OSError as exc:
        raise TraceDecodeError(
            f"{name}: cannot read the file ({exc.strerror or exc}). Check permissions."
        ) from None


def _checked(
    name: str, data: Any, decoder: Literal["c", "python"], progress: Progress | None, release: bool
) -> Raw:
    try:
        return typed(_decode(data, decoder, progress, release))
    except (ValueError, OverflowError) as exc:
        raise TraceDecodeError(
            f"{name}: not a readable XPlane trace ({exc}).{_hint(bytes(data[:64]))} If "
            "the run was interrupted while writing, capture it again."
        ) from None
