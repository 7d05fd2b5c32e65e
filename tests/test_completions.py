"""Completion stamps (capture/_child/completion.py) on real jax arrays, and the time per
completed step read back from a sidecar's stamps."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import pytest

from traceinspect.capture._child.completion import Completions
from traceinspect.sidecar import HostStep, completed_step_ms, step_pace


@functools.partial(jax.jit, donate_argnums=(0,))
def _step(state: tuple[jax.Array, jax.Array]) -> tuple[tuple[jax.Array, jax.Array], jax.Array]:
    w, count = state
    w = jnp.tanh(w @ w)
    return (w, count + 1), jnp.mean(w)


def test_a_donated_counter_is_never_waited_on_the_loss_is() -> None:
    """The step's outputs ((w, count), loss): count and loss are both 4-byte scalars and
    count comes first, but the next step donates the state. Checked after the next call,
    its leaves are never used again; every step from then on is stamped through its loss."""
    completions = Completions()
    state = (jnp.eye(64), jnp.zeros((), jnp.int32))
    previous = None
    for index in range(12):
        if previous is not None:
            completions.submit(index - 1, "step", previous)
        out = _step(state)
        if previous is not None and completions.learning("step"):
            completions.learn("step", previous)
        previous, state = out, out[0]
    completions.submit(11, "step", previous)
    assert completions.drain(30.0)
    # Leaves: w, count, loss; the state (w, count) is donated.
    assert completions._bad["step"] == {0, 1}
    # Stamped from the first learned call on, in order.
    stamped = sorted(completions.done_ns)
    assert stamped == list(range(stamped[0], 12)) and stamped[0] <= 1
    times = [completions.done_ns[i] for i in stamped]
    assert times == sorted(times)


def test_nothing_to_wait_on_is_no_stamp() -> None:
    completions = Completions()
    completions.submit(0, "f", {"a": 1.0, "b": None})
    assert completions.drain(1.0) and completions.done_ns == {}


def _steps(done: list[int | None]) -> list[HostStep]:
    return [HostStep(i, None, i * 1_000_000, 1.0, i >= 2, d) for i, d in enumerate(done)]


def test_time_per_completed_step_spans_from_the_step_before_the_first() -> None:
    # Steps 2-5 traced; stamps of steps 1..5 every 10 ms: 4 steps in 40 ms.
    steps = _steps([None, 100_000_000, 110_000_000, 120_000_000, 130_000_000, 140_000_000])
    assert completed_step_ms(steps, lambda s: s.traced) == pytest.approx((10.0, 4))
    # Without the stamp before the window: from the first traced one, one step fewer.
    steps = _steps([None, None, 110_000_000, 120_000_000, None, 150_000_000])
    assert completed_step_ms(steps, lambda s: s.traced) == pytest.approx((40 / 3, 3))
    assert completed_step_ms(_steps([None, None, 1, None]), lambda s: s.traced) is None


def _walled(walls: list[float], done_ms: list[float | None]) -> list[HostStep]:
    return [
        HostStep(i, None, i * 1_000_000, w, True, None if d is None else int(d * 1e6))
        for i, (w, d) in enumerate(zip(walls, done_ms, strict=True))
    ]


def test_the_pace_is_the_slower_of_step_starts_and_completions() -> None:
    # The host started a step every 5 ms while the device completed one every 10, 10, 16:
    # the host ran ahead into the queue; the pace is the completions' (mean 12, median 10).
    steps = _walled([5.0, 5.0, 5.0, 5.0], [100.0, 110.0, 120.0, 136.0])
    pace = step_pace(steps, lambda s: True)
    assert pace is not None
    assert (pace.mean_ms, pace.median_ms, pace.count, pace.how) == pytest.approx(
        (12.0, 10.0, 3, "completed")
    )
    # The host's starts slower than the completions (the device ran down a queue): the host's.
    steps = _walled([20.0, 30.0, 20.0, 20.0], [100.0, 110.0, 120.0, 130.0])
    pace = step_pace(steps, lambda s: True)
    assert pace is not None and (pace.mean_ms, pace.median_ms, pace.how) == (22.5, 20.0, "host")
    # Fewer completed steps than asked for: the host's, as if unstamped.
    pace = step_pace(steps, lambda s: True, min_completed=4)
    assert pace is not None and (pace.mean_ms, pace.count, pace.how) == (22.5, 4, "host only")
    assert step_pace(steps, lambda s: False) is None
