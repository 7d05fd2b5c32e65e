"""Completion stamps (capture/_child/completion.py) on real jax arrays (the pace read back
from them: tests/test_step_pace.py)."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

import pytest

from traceinspect.capture._child.completion import Completions

if TYPE_CHECKING:
    import jax
else:
    jax = pytest.importorskip("jax")
jnp: Any = jax.numpy


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
