"""The untraced steps after the window that ``analyze`` compares the window with.

Built sidecars whose every step time is known: the step that holds the trace's write, the
batches stored during it, capture's settled block.
"""

from __future__ import annotations

from typing import Any

from traceinspect import sidecar as SC
from traceinspect.analysis.window import window_check

MS = 1_000_000
T0 = 1_700_000_000_000_000_000


def _sidecar(
    walls_ms: list[float],
    traced: range,
    *,
    stop_in: int | None,
    untraced_after: tuple[int, int] | None = None,
    complete: bool = False,
    rule: str = "steady",
) -> SC.Sidecar:
    """Steps of the given walls back to back from T0; ``traced`` are the window's; the
    trace stopped 1 ms into step ``stop_in`` (None: not recorded). Built as capture writes
    it and read by the sidecar's own parser."""
    steps: list[dict[str, Any]] = []
    start = T0
    for i, wall in enumerate(walls_ms):
        steps.append(
            {
                "index": i,
                "step_num": i,
                "start_unix_ns": start,
                "wall_ms": wall,
                "traced": i in traced,
            }
        )
        start += int(wall * MS)
    window: dict[str, Any] = {
        "rule": rule,
        "reason": None,
        "first_step": traced.start,
        "last_step": traced.stop - 1,
        "complete": True,
    }
    if stop_in is not None:
        window["trace_stop_unix_ns"] = steps[stop_in]["start_unix_ns"] + MS
    if untraced_after is not None:
        first, last = untraced_after
        window["untraced_after"] = {"first_step": first, "last_step": last, "complete": complete}
    parsed = SC.parse({"steps": steps, "window": window, "step_source": "grain"})
    assert parsed is not None
    return parsed


def test_the_step_that_holds_the_write_is_not_the_runs() -> None:
    # 20 steps of 10 ms before and in the window, a 500 ms write, then 150 steps of 8 ms
    # (a loop with no stored batches: no catch-up).
    walls = [10.0] * 20 + [500.0] + [8.0] * 150
    window, note = window_check(_sidecar(walls, range(10, 20), stop_in=20))
    assert window is not None
    # Before the fix: (500 + 149 x 8) / 150 = 11.3 ms with the write in, 12% above the
    # run's 8 ms.
    assert window["after_mean_ms"] == 8.0
    assert window["representative"] is True
    assert note is None


def test_batches_stored_during_the_write_are_left_out() -> None:
    # Workers that make a batch every 12 ms went on during a 240 ms write: 20 batches
    # stored, taken at 2 ms each (40 ms), then the pace of 12 ms.
    walls = [12.0] * 30 + [240.0] + [2.0] * 20 + [12.0] * 40
    window, _ = window_check(_sidecar(walls, range(15, 30), stop_in=30))
    assert window is not None
    assert window["after_mean_ms"] == 12.0
    assert window["representative"] is True


def test_without_the_stop_time_the_step_after_the_window_holds_it() -> None:
    walls = [10.0] * 20 + [300.0] + [10.0] * 60
    window, _ = window_check(_sidecar(walls, range(10, 20), stop_in=None))
    assert window is not None and window["after_mean_ms"] == 10.0


def test_too_few_steps_after_the_write_give_no_pace() -> None:
    # A 2 s write (a GPU capture's export) and 30 steps of 10 ms: all within as long
    # again as the write took.
    walls = [10.0] * 20 + [2000.0] + [10.0] * 30
    window, note = window_check(_sidecar(walls, range(10, 20), stop_in=20))
    assert window is not None
    assert window["after_mean_ms"] is None
    # The window is judged against the steady steps before it instead (2-9: 10 ms).
    assert window["before_mean_ms"] == 10.0 and window["before_steps"] == 8
    assert window["representative"] is True
    assert note is None


def test_a_window_the_script_ended_right_after_is_judged_by_the_steady_steps_before_it() -> None:
    """A loop shaped like Grain's tutorial, 240 steps: the profiler slowed its window to 537 ms
    a step from step 174, the script ended one step after it, and the steady rule had timed
    133-142 ms a step just before: the window is said not to represent the run."""
    walls = [400.0, 200.0] + [140.0] * 30 + [537.0] * 20 + [900.0, 140.0]
    window, note = window_check(_sidecar(walls, range(32, 52), stop_in=52))
    assert window is not None and window["after_mean_ms"] is None
    assert window["before_mean_ms"] == 140.0 and window["before_steps"] == 20
    assert window["representative"] is False
    assert note is not None and "the 20 untraced steps before them at 140.00 ms/step" in note


def test_the_steps_before_a_window_opened_by_another_rule_are_no_reference() -> None:
    """Before a window opened at a fixed step (``--skip-steps``) the run may still warm up."""
    walls = [400.0, 200.0] + [140.0] * 30 + [537.0] * 20 + [900.0, 140.0]
    window, note = window_check(_sidecar(walls, range(32, 52), stop_in=52, rule="skip"))
    assert window is not None and window["representative"] is None
    assert "before_mean_ms" not in window and note is None


def test_capture_s_settled_block_is_the_reference() -> None:
    # The block capture timed once the run settled (steps 40-79), whatever came before.
    walls = [10.0] * 20 + [300.0] + [3.0] * 19 + [11.0] * 40 + [50.0] * 5
    window, _ = window_check(
        _sidecar(walls, range(10, 20), stop_in=20, untraced_after=(40, 79), complete=True)
    )
    assert window is not None
    assert window["after_mean_ms"] == 11.0 and window["after_steps"] == 40


def test_a_slower_window_than_the_run_is_said() -> None:
    walls = [10.0] * 10 + [14.0] * 10 + [300.0] + [10.0] * 60
    window, note = window_check(_sidecar(walls, range(10, 20), stop_in=20))
    assert window is not None and window["representative"] is False
    assert note is not None and "the 30 untraced steps after them at 10.00 ms/step" in note


def test_a_window_stopped_after_on_purpose_is_told_from_one_the_script_ended() -> None:
    """``capture --stop-after`` times nothing after the window unless asked to
    (``time_after``); the sidecar's options say which, and the window records it."""
    window = {"rule": "steady", "first_step": 40, "last_step": 47, "complete": True}

    def parsed(options: dict[str, Any]) -> bool:
        record = SC.parse({"window": window, "options": options, "step_source": "grain"})
        assert record is not None and record.window is not None
        return record.window.stopped_after

    assert parsed({"stop_after": True})
    assert parsed({"stop_after": True, "time_after": False})
    assert not parsed({"stop_after": True, "time_after": True})
    assert not parsed({"stop_after": False, "time_after": True})
    assert not parsed({})
