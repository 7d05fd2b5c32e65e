"""When each step's device work finished: step times as the device's throughput, not the
host's dispatch rate.

jax returns from a jitted call as soon as the work is queued; the CPU client queues ~32
steps, so a short run's host finishes its loop long before the device does, and host step
times read up to half the real step (issue 22: a 9 ms device step read as 5.0 ms). Here a
thread of our own waits, step by step, on one small array the step's last jitted call
returned, and stamps the moment it became ready: all outputs of one XLA execution become
ready together, so that moment is when the step's program finished.

The array waited on is the smallest output leaf the next call does not donate. A donated
leaf is deleted when the next call is dispatched, maybe before its work is done, so a wait
on it says nothing: for each jitted function, the leaves of its first calls' outputs are
checked after the next call (:meth:`Completions.learn`) and donated positions are never used
(a train state's step counter is donated, its loss is not); a stamp whose array was deleted
by the time the wait returned is dropped."""

from __future__ import annotations

import contextlib
import queue
import sys
import threading
import time
from typing import Any

# Bounded like the report's steps, so a million-step run does not grow without limit.
MAX_STAMPED = 10_000
# Positions of the output leaves tried per jitted function before giving up on it.
_MAX_TRIES = 8
# Calls of each jitted function whose outputs are checked for donated leaves.
LEARN_CALLS = 3


class Completions:
    """Stamps of the moment each submitted step's work finished (Unix ns, by step index)."""

    def __init__(self) -> None:
        self.done_ns: dict[int, int] = {}
        self._queue: queue.SimpleQueue[tuple[int, Any, str, int, int] | threading.Event] = (
            queue.SimpleQueue()
        )
        self._thread: threading.Thread | None = None
        # Per jitted function: output leaf positions by size, those found donated or failing,
        # and how many calls were checked for donation.
        self._order: dict[str, list[int]] = {}
        self._bad: dict[str, set[int]] = {}
        self._learned: dict[str, int] = {}
        #: Bumped when the steps are counted anew (another step source): stamps of the
        #: steps submitted before are dropped.
        self._generation = 0

    def learning(self, key: str) -> bool:
        """Whether the outputs of ``key``'s calls are still checked for donated leaves."""
        return self._learned.get(key, 0) < LEARN_CALLS

    def learn(self, key: str, previous_output: Any) -> None:
        """After a call of ``key``: the leaves of its previous output that the call deleted
        (donated) are never waited on."""
        self._learned[key] = self._learned.get(key, 0) + 1
        jax = sys.modules.get("jax")
        if jax is None:
            return
        with contextlib.suppress(Exception):
            leaves = jax.tree_util.tree_leaves(previous_output)
            bad = self._bad.setdefault(key, set())
            for i, leaf in enumerate(leaves):
                deleted = getattr(leaf, "is_deleted", None)
                if deleted is not None and deleted():
                    bad.add(i)

    def forget(self) -> None:
        """The steps are counted anew (capture follows another step source): drop the
        stamps so far, and those of steps submitted but not yet done."""
        self._generation += 1
        self.done_ns = {}

    def submit(self, index: int, key: str, output: Any) -> None:
        """Wait (on our thread) for ``output``, the last jitted call of step ``index``
        (``key`` names the jitted function), and stamp it; an ``index`` below 0 is waited on
        (:meth:`drain` then waits for it too) but not stamped. Costs one pytree flatten on
        the caller."""
        if index >= 0 and (index in self.done_ns or len(self.done_ns) >= MAX_STAMPED):
            return
        leaf = self._leaf(key, output)
        if leaf is None:
            return
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._run, name="traceinspect-completions", daemon=True
            )
            self._thread.start()
        self._queue.put((index, leaf[1], key, leaf[0], self._generation))

    def drain(self, timeout_s: float) -> bool:
        """Wait until every step submitted so far is stamped (or failed); whether it was
        within ``timeout_s``."""
        if self._thread is None:
            return True
        event = threading.Event()
        self._queue.put(event)
        return event.wait(timeout_s)

    def _leaf(self, key: str, output: Any) -> tuple[int, Any] | None:
        """(position, leaf): the smallest output leaf of ``key`` not known to be donated."""
        jax = sys.modules.get("jax")
        if jax is None:
            return None
        try:
            leaves = jax.tree_util.tree_leaves(output)
        except Exception:
            return None
        order = self._order.get(key)
        if order is None or len(order) != len(leaves):
            sizes = [
                (int(getattr(leaf, "nbytes", 0) or 0), i)
                for i, leaf in enumerate(leaves)
                if hasattr(leaf, "block_until_ready")
            ]
            order = self._order[key] = [i for _, i in sorted(sizes)][:_MAX_TRIES]
        bad = self._bad.get(key, set())
        for position in order:
            if position not in bad:
                return position, leaves[position]
        return None

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if isinstance(item, threading.Event):
                item.set()
                continue
            index, leaf, key, position, generation = item
            try:
                leaf.block_until_ready()
                stamp = time.time_ns()
                deleted = bool(getattr(leaf, "is_deleted", lambda: False)())
            except Exception:
                deleted = True
            finally:
                del leaf
            if deleted:
                # Donated to the next step (or failed): no stamp, and the next smallest leaf
                # of this function from now on.
                self._bad.setdefault(key, set()).add(position)
                continue
            if index >= 0 and generation == self._generation:
                self.done_ns[index] = stamp
