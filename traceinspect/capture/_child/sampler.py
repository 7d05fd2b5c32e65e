"""A low-rate sampler of the training thread's Python stack while the trace is on.

With the Python tracer off (the default: it makes traces ~100x larger), the trace says what
the training thread did only where jax, Grain or capture wrote an event: the loop's own code
between them (a checkpoint's file write, a queue, a lookup, a sleep) is a stretch with
nothing in it. A thread of capture's looks at the training thread's innermost frames every
``interval_s`` (``sys._current_frames()``, the training thread only; see
:func:`collector_paused`) and keeps, for each look, the time and the user's frame it was in
(``train.py:231 save_checkpoint``, with the library function below it when the thread was
inside one: ``(in numpy save)``), so the analysis names that untraced time by function and
line.

Each look also reads the training thread's CPU clock (``pthread_getcpuclockid``, where the
platform has one): between two looks, how much of the time the thread ran rather than
waited, so the analysis can tell the loop's own CPU work (which, on XLA's CPU backend,
competes with the program for the cores) from its waiting.

It costs the training thread the GIL for a few microseconds per look (the frame walk is
cached by code object and line): ``benchmarks/capture_overhead.py`` measures it.
"""

from __future__ import annotations

import gc
import os
import sys
import threading
import time
from array import array
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from traceinspect.sidecar import StackSamplesJSON

#: Seconds between looks while the trace is on: 50 a second, coarse next to a 10 ms step's
#: parts, but over a window of tens of steps enough to name any stretch of host time that
#: matters (a few ms a step and up); every 5 ms cost a ~5 ms step 6-10% (GIL hand-overs on
#: two cores shared with XLA's threads), every 20 ms much less (benchmarks/README.md).
INTERVAL_S = 0.02
#: Seconds between checks of whether the trace is on, while it is not.
IDLE_INTERVAL_S = 0.05
#: Looks kept at most (~17 min of tracing at the default interval): the sidecar stays small.
MAX_SAMPLES = 50_000
#: Frames walked from the innermost outwards to find the user's.
_DEPTH = 48
# Frames of these folders are libraries' (the standard library's, installed packages') or
# capture's own, never the user's code.
_HERE = f"{Path(__file__).resolve().parent}{os.sep}"
_STDLIB = f"{Path(os.__file__).parent}{os.sep}"
_LIBRARY_PARTS = (
    f"{os.sep}site-packages{os.sep}",
    f"{os.sep}dist-packages{os.sep}",
    _STDLIB,
    _HERE,
)


# When the loop itself is an installed package's (MaxText's trainer, Keras' fit), its frames
# are named instead: the first frame outside these.
_BELOW_THE_LOOP = (
    *(f"{os.sep}{name}{os.sep}" for name in ("jax", "jaxlib", "numpy", "grain", "absl")),
    _STDLIB,
    _HERE,
)


#: Whether Python may collect garbage in the middle of the sampler's look: CPython before
#: 3.12 collects on any allocation, inside C code too. A collection that gives the GIL away
#: there (a finalizer or a ``gc.callbacks`` entry that waits: jax's callback frees Grain's
#: shared memory, which asks multiprocessing's resource tracker for its lock) breaks two
#: things: inside ``sys._current_frames()``, which holds the interpreter's lock on thread
#: states, another thread takes the GIL and waits for that lock to start a thread (Grain's
#: prefetch starting a new iterator's workers), and the process hangs for good (CPython
#: gh-106883, fixed in 3.11.9); inside the frame walk, the training thread runs on and
#: returns from a frame being read (seen: a frame's ``f_back`` read back as a dict). A
#: capture of the family's loop with a new iterator every 40 steps hung so on 3.11.7. 3.12
#: and later collect only between bytecodes.
_COLLECTS_INSIDE = sys.version_info < (3, 12)


@contextmanager
def collector_paused() -> Iterator[None]:
    """Python's automatic collector off for the block where it could collect inside C code
    (:data:`_COLLECTS_INSIDE`), and on again after it. Paused only when it was on: a script
    that turns it off itself keeps it off (unless it does so during the block, a few
    microseconds)."""
    if not (_COLLECTS_INSIDE and gc.isenabled()):
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def _file_name(path: str) -> str:
    return path.rsplit(os.sep, 1)[-1]


def _is_library(file: str) -> bool:
    return file.startswith("<") or any(part in file for part in _LIBRARY_PARTS)


def _is_below_the_loop(file: str) -> bool:
    return file.startswith("<") or any(part in file for part in _BELOW_THE_LOOP)


class StackSampler:
    """Samples one thread's stack while ``tracing()`` says the trace is on."""

    def __init__(
        self,
        thread_ident: int,
        tracing: Callable[[], bool],
        interval_s: float = INTERVAL_S,
        max_samples: int = MAX_SAMPLES,
    ) -> None:
        self._ident = thread_ident
        self._tracing = tracing
        self.interval_s = interval_s
        self._max = max_samples
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.t_ns = array("q")
        self.site = array("i")
        self.cpu_ns = array("q")
        self._clock = _cpu_clock(thread_ident)
        self.sites: list[str] = []
        self._site_index: dict[str, int] = {}
        # The stack's (code object, line) pairs -> the site's index: most looks land on a
        # few places (a sleep, a write), so the site is named once per place.
        self._cache: dict[tuple[tuple[Any, int], ...], int] = {}

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="traceinspect-sampler", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=1.0)

    def _loop(self) -> None:
        while not self._stop.is_set():
            if not self._tracing():
                self._stop.wait(IDLE_INTERVAL_S)
                continue
            if len(self.t_ns) >= self._max:
                return
            with collector_paused():
                self._look()
            self._stop.wait(self.interval_s)

    def _look(self) -> None:
        """One look at the training thread: the time, its CPU clock and its site."""
        frame = sys._current_frames().get(self._ident)
        if frame is not None:
            self.t_ns.append(time.time_ns())
            if self._clock is not None:
                self.cpu_ns.append(_read_clock(self._clock))
            self.site.append(self._index_of(frame))
        del frame

    def _index_of(self, frame: Any) -> int:
        # The key is the whole stack's places, not the innermost frame's alone: one
        # ``threading.Condition.wait`` line is reached from Grain's next(), Orbax's save and
        # capture's own code alike, and keyed by it the first caller seen named them all (a
        # Flax loop's asynchronous save was sampled "at" its next() line in 4 of 6 captures).
        key: list[tuple[Any, int]] = []
        f = frame
        while f is not None and len(key) < _DEPTH:
            key.append((f.f_code, f.f_lineno))
            f = f.f_back
        places = tuple(key)
        found = self._cache.get(places)
        if found is None:
            found = self._intern(_site(frame))
            if len(self._cache) < 10_000:
                self._cache[places] = found
        return found

    def _intern(self, site: str) -> int:
        index = self._site_index.get(site)
        if index is None:
            index = self._site_index[site] = len(self.sites)
            self.sites.append(site)
        return index

    def report(self) -> StackSamplesJSON | None:
        if not self.t_ns:
            return None
        out: StackSamplesJSON = {
            "interval_ms": round(self.interval_s * 1000.0, 3),
            "t_unix_ns": self.t_ns.tolist(),
            "site": self.site.tolist(),
            "sites": list(self.sites),
        }
        if len(self.cpu_ns) == len(self.t_ns) and min(self.cpu_ns) >= 0:
            out["cpu_ns"] = self.cpu_ns.tolist()
        return out


def _cpu_clock(thread_ident: int) -> int | None:
    """The CPU-time clock of the thread ``thread_ident`` (a ``threading`` ident, which is
    its pthread id), or None where the platform has none."""
    try:
        clock = time.pthread_getcpuclockid(thread_ident)
        time.clock_gettime_ns(clock)
    except (AttributeError, OSError, OverflowError):
        return None
    return clock


def _read_clock(clock: int) -> int:
    try:
        return time.clock_gettime_ns(clock)
    except OSError:  # the thread has ended
        return -1


def _site(frame: Any) -> str:
    """``file.py:line function`` of the innermost frame of the user's own code, followed by
    ``(in module function)`` of the innermost frame when that is a library's, or by
    ``(in traceinspect capture module function)`` when the thread was in capture's own
    bookkeeping (:func:`_in_capture`); ``""`` when no frame of the user's is on the stack."""
    stack: list[Any] = []
    while frame is not None and len(stack) < _DEPTH:
        stack.append(frame)
        frame = frame.f_back
    if not stack:
        return ""
    code = stack[0].f_code
    library = None
    if code.co_name == "_on_gc" and code.co_filename.endswith(f"{os.sep}run_events.py"):
        # capture's own garbage-collection callback (run_events.py): the thread was in a
        # collection, which no Python frame of its own shows.
        library = "gc collect"
    elif _is_library(code.co_filename):
        library = f"{_file_name(code.co_filename).removesuffix('.py')} {code.co_name}"
    for test in (_is_library, _is_below_the_loop):
        for i, f in enumerate(stack):
            if not test(f.f_code.co_filename):
                where = f"{_file_name(f.f_code.co_filename)}:{f.f_lineno} {f.f_code.co_name}"
                own = _in_capture(stack[:i]) if library != "gc collect" else None
                if own is not None:
                    library = own
                return f"{where} (in {library})" if library and f is not stack[0] else where
    return f"(in {library})" if library else ""


#: capture's functions that call through to what the script called (its jitted function,
#: Grain's next(), a host read, a pipeline stage): a look inside what they called is the
#: script's time, not capture's.
_PASS_THROUGH = frozenset(
    {
        "__next__",
        "__call__",
        "wrapper",
        "timed",
        "jit",
        "mp_prefetch",
        "loader_init",
        "prefetch_init",
        "interleave_init",
        "batch_init",
        "add_element_to_queue",
    }
)
#: What a look in capture's own bookkeeping is named after: the analysis reads it
#: (``CAPTURE_LOOK`` in ``analysis/user_code.py``) as capture's cost, never the script's.
CAPTURE_LOOK = "traceinspect capture"


def _in_capture(inner: list[Any]) -> str | None:
    """``traceinspect capture module function`` when the frames inside the user's (``inner``,
    innermost first) are in capture's own code: its innermost frame of ours is not a
    pass-through wrapper calling something else (step detection, completion stamps, the
    status file, a batch's fingerprint)."""
    for k, f in enumerate(inner):
        if f.f_code.co_filename.startswith(_HERE):
            if f.f_code.co_name in _PASS_THROUGH and k > 0:
                return None
            module = _file_name(f.f_code.co_filename).removesuffix(".py")
            return f"{CAPTURE_LOOK} {module} {f.f_code.co_name}"
    return None
