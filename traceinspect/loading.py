"""Reading a trace on another thread while the caller goes on.

The compiled decoder touches no Python object while it decodes, so it runs without the
GIL: a command starts reading the file here, imports what its analysis needs meanwhile
(numpy and the analysis modules take about as long to import as a 60 MB trace takes to
decode), then waits for the trace. This module imports neither numpy nor pandas, so the
decoding starts before they load.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

from traceinspect.xplane.fs import URLPath
from traceinspect.xplane.locate import Located, locate
from traceinspect.xplane.reader import DecoderName, read_run, resolve_decoder

if TYPE_CHECKING:
    from traceinspect.trace import Trace
    from traceinspect.xplane.raw import Raw


class Loading:
    """A trace being read on another thread (:func:`load_in_background`)."""

    def __init__(self, located: Located, decoder: DecoderName | None, use_cache: bool) -> None:
        self.located = located
        self._decoder = resolve_decoder(decoder)
        self._started = time.perf_counter()
        self._read: tuple[list[Raw], int] | None = None
        self._error: BaseException | None = None

        def run() -> None:
            try:
                self._read = read_run(located, self._decoder, use_cache, release_gil=True)
            except BaseException as exc:  # raised in the caller's thread by result()
                self._error = exc

        # A daemon: an interrupted caller does not wait for the decoding to end.
        self._thread = threading.Thread(target=run, name="traceinspect-load", daemon=True)
        self._thread.start()

    def result(self) -> Trace:
        """The trace, once read; raises what :func:`traceinspect.load` would have."""
        from traceinspect.trace import trace_of

        self._thread.join()
        if self._error is not None:
            raise self._error
        assert self._read is not None
        raws, cached = self._read
        self._read = None  # the columns are the trace's from here on
        seconds = time.perf_counter() - self._started
        return trace_of(self.located, raws, self._decoder, cached, seconds)


def load_in_background(
    path: str | Path | URLPath | Located,
    *,
    run: str | None = None,
    decoder: DecoderName | None = None,
    use_cache: bool = True,
) -> Loading:
    """Start reading a trace as :func:`traceinspect.load` does, on another thread, and
    return at once; ``.result()`` waits for the :class:`~traceinspect.trace.Trace`. No
    progress is reported. Where and what to read is checked first, in the caller's thread
    (a missing path raises here)."""
    located = path if isinstance(path, Located) else locate(path, run)
    return Loading(located, decoder, use_cache)
