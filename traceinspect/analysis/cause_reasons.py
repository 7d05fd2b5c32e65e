"""Why a gap got its cause where its evidence points elsewhere: one sentence per gap piece.

A gap's evidence lists what the training thread did during it (``next_batch (input) 15.64
ms of the gap``), but its cause is decided instant by instant, and then by the sync rule
(:mod:`traceinspect.analysis.attribution`): an instant claimed by several activities goes to
the first of runtime > compile > sync > input > host, and an idle period a blocking read
opened gives the host's work after the read to ``sync``. When the cause that wins is not
the one whose evidence takes the most of the gap, the piece says why, in those terms:
``sync, because the batch could only be requested after the read returned (the read ended
0.20 ms before the 15.64 ms wait for input)``.

What each cause's evidence takes of a piece is what the evidence shows for it, each on its
own: the training thread's input, sync and compile events (and compiler threads), its other
work where none of those runs (a dispatch waiting for the compiler shows as compile, not as
host work beside it), the time a dispatched program waited to run, and the untraced rest.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from traceinspect.analysis.training_thread import HostActivity
from traceinspect.intervals import Intervals
from traceinspect.vocabulary import CAUSES, CLAIM_ORDER, SYNC_RULE_TAKES

# Under 0.01 ms apart, as printed (a shorter time prints as 0.00 ms), the one follows the
# other: the read ended "just" before.
_PRINTS_AS_NONE_NS = 5_000

# Who gave a piece's time to another cause: the causes above, or the sync rule.
SYNC_RULE = "the sync rule"
# Why each claims an instant first, where it took another cause's time but did not win.
_FIRST = {
    "runtime": "the device's next program was already dispatched",
    "compile": "XLA was compiling",
    "sync": "the host was blocked reading a device value",
    SYNC_RULE: "it came after a blocking read, by the sync rule",
}


@dataclass(frozen=True, eq=False)
class Attribution:
    """One array per gap piece (``starts``, ``ends``, the start of the idle period each
    belongs to), what each cause got before the sync rule (``claimed``) and after
    (``final``), and ``owned``: each cause's claimed instants over the whole trace."""

    starts: np.ndarray
    ends: np.ndarray
    period_starts: np.ndarray
    claimed: dict[str, np.ndarray]
    final: dict[str, np.ndarray]
    owned: dict[str, Intervals]
    #: The device's work per step: of an idle period a read opened, the sync takes that much.
    sync_cap_ns: float


def largest_cause(parts: dict[str, np.ndarray], n: int) -> np.ndarray:
    """Each piece's cause: the one with the most of it (of equals, the first in CAUSES)."""
    by_cause = np.stack([parts[c] for c in CAUSES]) if n else np.zeros((len(CAUSES), 0))
    return np.array(CAUSES, dtype=object)[np.argmax(by_cause, axis=0)]


def cause_reasons(at: Attribution, cause: np.ndarray, host: HostActivity) -> np.ndarray:
    """Per piece, why it got ``cause`` where another cause's evidence takes more of it;
    None where the evidence agrees (its cause's evidence is the largest, or equal to it)."""
    n = len(at.starts)
    out = np.full(n, None, dtype=object)
    if n == 0:
        return out
    shown_iv = {
        "runtime": at.owned["runtime"],
        "compile": host.compile,
        "sync": host.sync,
        "input": host.input,
        "host": host.host.difference(host.compile.union(host.sync).union(host.input)),
    }
    shown = {c: iv.overlap_with(at.starts, at.ends) for c, iv in shown_iv.items()}
    shown["unknown"] = at.claimed["unknown"]
    stacked = np.stack([shown[c] for c in CAUSES])
    own = stacked[[CAUSES.index(c) for c in cause.tolist()], np.arange(n)]
    rows = np.flatnonzero((stacked > own).any(axis=0))
    moved = {c: at.claimed[c] - at.final[c] for c in SYNC_RULE_TAKES}
    # Pieces the sync rule made the sync's, and the others with the cause whose evidence
    # is the largest: what took its time from it decides the sentence.
    by_rule, others = [], []
    for row in rows.tolist():
        c = str(cause[row])
        if c == "sync" and any(moved[e][row] > 0 for e in moved):
            by_rule.append(row)
        else:
            others.append((row, max((e for e in CAUSES if e != c), key=lambda e: shown[e][row])))
    for row in by_rule:
        of = {str(e): int(shown[e][row]) for e in CAUSES}
        out[row] = _after_read(at, row, host, shown_iv, of, {e: int(moved[e][row]) for e in moved})
    for other in {e for _, e in others}:
        mine = np.array([row for row, e in others if e == other], dtype=np.int64)
        took = _taken(at, shown_iv, other, mine)
        if other in moved:
            took[SYNC_RULE] = moved[other][mine]
        for k, row in enumerate(mine.tolist()):
            taker = max(took, key=lambda t: int(took[t][k]), default=None)
            if taker is None or took[taker][k] <= 0:
                continue  # (cannot be: only the sync rule adds to a cause's evidence)
            c = str(cause[row])
            out[row] = _precedence(
                c, taker, int(took[taker][k]), other, int(shown[other][row]), int(at.final[c][row])
            )
    return out


def _taken(
    at: Attribution, shown_iv: dict[str, Intervals], lost: str, rows: np.ndarray
) -> dict[str, np.ndarray]:
    """For the pieces ``rows``: how much of ``lost``'s evidence each cause claimed before it
    (an instant goes to the first in CLAIM_ORDER) took."""
    if lost not in CLAIM_ORDER:
        return {}
    starts, ends = at.starts[rows], at.ends[rows]
    return {
        taker: shown_iv[lost].intersect(at.owned[taker]).overlap_with(starts, ends)
        for taker in CLAIM_ORDER[: CLAIM_ORDER.index(lost)]
    }


def _what(cause: str, ns: int) -> str:
    """A cause's evidence in the user's words: ``the 15.64 ms wait for input``."""
    ms = f"{ns / 1e6:.2f} ms"
    return {
        "input": f"the {ms} wait for input",
        "sync": f"the {ms} read",
        "compile": f"the {ms} of compilation",
        "host": f"the {ms} of host work",
        "runtime": f"the {ms} the dispatched program waited",
        "unknown": f"the {ms} that no event covers",
    }[cause]


def _precedence(cause: str, taker: str, ns: int, other: str, other_ns: int, own_ns: int) -> str:
    """Why ``cause`` won over ``other``, whose evidence ``taker`` took ``ns`` of."""
    ms = f"{ns / 1e6:.2f} ms"
    lost = _what(other, other_ns)
    if taker == cause == "runtime":
        return (
            f"runtime, because the device's next program was already dispatched and waiting "
            f"to run during {ms} of {lost}: the device had work, so its idle time is the "
            "runtime's latency"
        )
    if taker == cause == "compile":
        return (
            f"compile, because XLA was compiling during {ms} of {lost}: a step cannot run "
            "before its program is compiled, so compilation comes first"
        )
    if taker == cause == "sync":
        return (
            f"sync, because for {ms} of {lost} the host was blocked reading a device value "
            "(a read made inside it)"
        )
    return (
        f"{cause} ({own_ns / 1e6:.2f} ms), the largest cause once {ms} of {lost} went to "
        f"{'sync' if taker == SYNC_RULE else taker} ({_FIRST[taker]})"
    )


def _after_read(
    at: Attribution,
    row: int,
    host: HostActivity,
    shown_iv: dict[str, Intervals],
    of: dict[str, int],
    moved: dict[str, int],
) -> str:
    """Why a piece of an idle period a blocking read opened is the sync's: what the host did
    after the read (the most of what the rule moved) could only start once it returned."""
    g0, g1 = int(at.starts[row]), int(at.ends[row])
    # The read that opened the period was waiting when it opened (the blocking reads'
    # union: a read's Await inside it ends with it).
    p0 = int(at.period_starts[row])
    k = int(np.searchsorted(host.sync.starts, p0, side="left")) - 1
    read_end = int(host.sync.ends[k]) if k >= 0 and host.sync.ends[k] >= p0 else p0
    what = max(moved, key=lambda e: moved[e])
    # Beyond the device's step the work after a read keeps its own cause.
    kept = at.final[what][row] > 0
    stays = (
        f"; what exceeds the device's step ({at.sync_cap_ns / 1e6:.2f} ms) stays {what}"
        if kept
        else ""
    )
    if what == "unknown":
        return (
            "sync, because the host could only go on after the read returned "
            f"({_what('unknown', of['unknown'])} came after it){stays}"
        )
    first = _first_start(shown_iv[what], g0, g1)
    after = (first if first is not None else g0) - read_end
    if what == "input" and after < 0:
        # The read was made inside the wait for input (the iterator read a device value):
        # the rule still counts it as sync, though the batch was asked for first.
        return (
            "sync, by the sync rule: the idle period opened when a read returned, though the "
            f"wait for input began {-after / 1e6:.2f} ms before the read ended (the read was "
            f"made inside it){stays}"
        )
    by = "just" if after < _PRINTS_AS_NONE_NS else f"{after / 1e6:.2f} ms"
    ended = f"the read ended {by} before {_what(what, of[what])}"
    could = (
        "the batch could only be requested"
        if what == "input"
        else "the host's next work could only start"
    )
    return f"sync, because {could} after the read returned ({ended}){stays}"


def _first_start(iv: Intervals, lo: int, hi: int) -> int | None:
    """The start of the first interval of ``iv`` overlapping ``[lo, hi)``."""
    k = int(np.searchsorted(iv.ends, lo, side="right"))
    if k < len(iv) and int(iv.starts[k]) < hi:
        return int(iv.starts[k])
    return None
