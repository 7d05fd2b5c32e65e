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

_compiled_decode: Callable[[bytes | memoryview, Callable[[int], object] | None], Decoded] | None
try:
    from traceinspect.xplane._wire import decode as _compiled_decode
except ImportError:  # not built: no compiler at install time
    _compiled_decode = None

DecoderName = Literal["auto", "c", "python"]
Progress = Callable[[int], object]

_GZIP_MAGIC = b"\x1f\x8b"


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


def _decode(data: Any, decoder: Literal["c", "python"], progress: Progress | None) -> Any:
    if decoder == "c":
        assert _compiled_decode is not None
        return _compiled_decode(data, progress)
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
                return _checked(name, data, decoder, progress)
            # Mapped, not read: the pages are dropped as soon as decoding ends, since
            # decoded columns never point into the file.
            with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
                return _checked(name, mapped, decoder, progress)
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
    name: str, data: Any, decoder: Literal["c", "python"], progress: Progress | None
) -> Raw:
    try:
        return typed(_decode(data, decoder, progress))
    except (ValueError, OverflowError) as exc:
        raise TraceDecodeError(
            f"{name}: not a readable XPlane trace ({exc}).{_hint(bytes(data[:64]))} If "
            "the run was interrupted while writing, capture it again."
        ) from None
