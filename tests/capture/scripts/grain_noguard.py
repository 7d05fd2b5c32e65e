"""Test script: Grain's JAX training tutorial in shape (an in-memory source, a Python `map`,
`to_iter_dataset`, `mp_prefetch` with 2 workers, a jitted step of a tiny MLP), written
without an `if __name__ == "__main__":` guard.

Grain spawns its workers, and a spawned process runs the script's top level again as it
starts: each worker builds the pipeline and draws from it, which reads absl flags nobody
parsed in the worker, and dies (`UnparsedFlagAccessError`). The script's iterator then
waits on them for ever. (Plain `python` fails at once, on the same flags in the script.)

`--steps-before N` first trains N steps from the dataset without workers, so that a
capture has traced something when the workers die.
"""

import argparse

import grain
import jax
import jax.numpy as jnp
import numpy as np

parser = argparse.ArgumentParser()
parser.add_argument("--steps-before", type=int, default=0)
parser.add_argument("--steps", type=int, default=200)
args = parser.parse_args()


class ArraySource:
    """A random-access source held in memory."""

    def __init__(self) -> None:
        rng = np.random.default_rng(0)
        self.x = rng.standard_normal((2048, 16)).astype(np.float32)
        self.y = (self.x.sum(axis=1) > 0).astype(np.int32)

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int) -> dict[str, np.ndarray]:
        return {"x": self.x[i], "y": self.y[i]}


def normalize(example: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return {"x": example["x"] / 4.0, "y": example["y"]}


dataset = (
    grain.MapDataset.source(ArraySource())
    .shuffle(seed=0)
    .map(normalize)
    .batch(32, drop_remainder=True)
    .repeat()
)
params = {"w1": jnp.zeros((16, 32)), "w2": jnp.zeros((32, 2))}


@jax.jit
def train_step(
    params: dict[str, jax.Array], batch: dict[str, jax.Array]
) -> tuple[dict[str, jax.Array], jax.Array]:
    def loss_fn(p: dict[str, jax.Array]) -> jax.Array:
        logits = jnp.tanh(batch["x"] @ p["w1"]) @ p["w2"]
        return -jnp.mean(jax.nn.log_softmax(logits)[jnp.arange(32), batch["y"]])

    loss, grads = jax.value_and_grad(loss_fn)(params)
    return jax.tree.map(lambda p, g: p - 0.1 * g, params, grads), loss


for step, batch in enumerate(dataset.to_iter_dataset()):
    if step == args.steps_before:
        break
    params, loss = train_step(params, batch)

loader = dataset.to_iter_dataset().mp_prefetch(grain.MultiprocessingOptions(num_workers=2))
for step, batch in enumerate(loader):
    if step == args.steps:
        break
    params, loss = train_step(params, batch)
print("final loss", float(loss))
