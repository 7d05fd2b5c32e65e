"""What happens between steps over the whole run that the trace's window may miss: Python's
garbage collections that take long enough to stall a step, and each new Grain iterator the
loop starts (a loop that makes a new iterator every epoch starts Grain's worker processes
again each time).

The analysis names a recurring stall by them (``analysis/stalls.py``): a stall whose
occurrences hold a long collection is garbage collection, one that starts with a new
iterator is an epoch restart. Both are kept for the whole run, not only the traced window,
since a stall every 40 steps is seldom inside a 20-step window.

A collection costs its callback two calls of a few hundred nanoseconds (``gc.callbacks``);
the young generation's collections, thousands a second in an allocating loop, are timed and
dropped unless they took :data:`GC_KEPT_MIN_NS`.
"""

from __future__ import annotations

import gc
import time
import weakref
from array import array
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from traceinspect.sidecar import RunEventsJSON

#: Collections shorter than this are not kept: a stall is at least 2 ms longer than the
#: typical step (``analysis/stalls.py``'s ``STALL_MIN_NS``), and a collection of half of
#: that is no part of one worth naming.
GC_KEPT_MIN_NS = 1_000_000
#: Collections kept at most, and new iterators: the sidecar stays small on long runs.
MAX_KEPT = 20_000


class RunEvents:
    """Long garbage collections and new iterators, on the Unix clock."""

    def __init__(self) -> None:
        self.gc_start = array("q")
        self.gc_ns = array("q")
        self.gc_generation = array("b")
        self.iterator_starts = array("q")
        self._started = 0
        # The last iterator, weakly: holding it would keep a dropped iterator's worker
        # processes alive; its id alone may be reused by the next one.
        self._last_iterator: Any = None
        self._installed = False

    def install(self) -> None:
        """Time every collection from now on (this process only)."""
        if not self._installed:
            gc.callbacks.append(self._on_gc)
            self._installed = True

    def _on_gc(self, phase: str, info: dict[str, Any]) -> None:
        now = time.time_ns()
        if phase == "start":
            self._started = now
            return
        took = now - self._started
        if self._started and took >= GC_KEPT_MIN_NS and len(self.gc_ns) < MAX_KEPT:
            self.gc_start.append(self._started)
            self.gc_ns.append(took)
            self.gc_generation.append(int(info.get("generation", -1)))

    def batch_from(self, iterator: object) -> None:
        """The loop drew a batch from ``iterator`` (its outermost Grain iterator): a new one
        (not the one it drew from last) started when this call began."""
        last = self._last_iterator
        if isinstance(last, weakref.ref) and last() is iterator:
            return
        if isinstance(last, int) and last == id(iterator):
            return
        try:
            self._last_iterator = weakref.ref(iterator)
        except TypeError:  # no weak references to it: its id, which a later one may reuse
            self._last_iterator = id(iterator)
        if len(self.iterator_starts) < MAX_KEPT:
            self.iterator_starts.append(time.time_ns())

    def report(self) -> RunEventsJSON:
        return {
            "gc_min_ms": GC_KEPT_MIN_NS / 1e6,
            "gc_start_unix_ns": self.gc_start.tolist(),
            "gc_ms": [round(ns / 1e6, 3) for ns in self.gc_ns],
            "gc_generation": self.gc_generation.tolist(),
            "iterator_start_unix_ns": self.iterator_starts.tolist(),
        }
