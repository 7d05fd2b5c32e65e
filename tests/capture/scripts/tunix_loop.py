"""A tiny Flax NNX language model trained by Tunix's ``PeftTrainer`` on a Grain pipeline.

What a Tunix user writes from its PEFT docs, with a model small enough for a CPU: an NNX
decoder (token embedding, causal self-attention and MLP blocks, a vocabulary head) whose
call takes ``(tokens, positions, cache, attention_mask)`` and returns ``(logits, cache)`` as
Tunix's default loss expects; a ``TrainingConfig`` (``eval_every_n_steps``, ``max_steps``,
``MetricsLoggerOptions`` writing TensorBoard events to a scratch folder); the trainer built
with ``optax.adamw`` and ``with_gen_model_input_fn`` (positions and the causal mask from the
padding mask, ``tunix.sft.utils``), then ``trainer.train(train_ds, eval_ds)``. The training
set is a Grain ``MapDataset`` (source of text records, a per-record Python ``Tokenize`` map
building ``TrainingInput``, batch, read threads, ``mp_prefetch`` worker processes); the
evaluation set a small batched ``MapDataset``. Everything runs offline: the text is made
here, the tokenizer is a byte-level one written in Python. Flags:

- ``--layers L``, ``--width D``, ``--batch B``, ``--seq S``: the model and the batch;
- ``--tokenize-passes N``: each record is tokenized N times over (0: once; each pass is
  pure Python over the record's characters);
- ``--workers N``: ``mp_prefetch`` worker processes (0: the pipeline runs in the loop's
  process, on its read thread);
- ``--prebuilt``: one batch made before training, given again every step: the device's
  step alone, for the truth;
- ``--eval-every N``: ``eval_every_n_steps`` (100; the evaluation set is 2 batches);
- ``--stats-json -``: print one JSON line with every step's host start time (and, last, the
  end of training, every step's loss back), so the step time can be measured without any
  profiler.

Run it by hand with::

    python tests/capture/scripts/tunix_loop.py --steps 200
"""

from __future__ import annotations

import argparse
import itertools
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import grain
import jax
import numpy as np
import optax
from absl import flags
from flax import nnx
from tunix.sft import hooks, peft_trainer  # type: ignore[import-not-found, unused-ignore]
from tunix.sft import utils as sft_utils  # type: ignore[import-not-found, unused-ignore]

VOCAB = 256  # bytes
PAD = 0
POOL = 128  # distinct records; the source cycles through them
WORDS = ("jax", "grain", "tunix", "flax", "orbax", "step", "batch", "device", "host", "trace")


class Texts(grain.sources.RandomAccessDataSource):  # type: ignore[misc]
    """Short sentences made from a fixed vocabulary, as a text file's lines would give them."""

    def __init__(self, n: int, seq: int) -> None:
        self._n = n
        rng = np.random.default_rng(0)
        self._lines = [
            " ".join(WORDS[w] for w in rng.integers(0, len(WORDS), seq // 4)) for _ in range(POOL)
        ]

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, i: int) -> str:
        return self._lines[i % POOL]


class Tokenize(grain.transforms.Map):  # type: ignore[misc]
    """Bytes to token ids in Python, padded to ``seq``, as Tunix's ``TrainingInput``;
    ``passes`` extra passes over the characters stand for a slower tokenizer."""

    def __init__(self, seq: int, passes: int) -> None:
        self._seq = seq
        self._passes = passes

    def map(self, line: str) -> Any:
        ids = [ord(c) % VOCAB or 1 for c in line]
        for _ in range(self._passes):
            ids = [(i * 31 + 7) % (VOCAB - 1) + 1 for i in ids]
        ids = ids[: self._seq] + [PAD] * max(0, self._seq - len(ids))
        tokens = np.asarray(ids, dtype=np.int32)
        return peft_trainer.TrainingInput(input_tokens=tokens, input_mask=tokens != PAD)


def make_datasets(args: argparse.Namespace) -> tuple[Any, Any]:
    n = (args.steps + 64) * args.batch
    train_ds = (
        grain.MapDataset.source(Texts(n, args.seq))
        .map(Tokenize(args.seq, args.tokenize_passes))
        .batch(args.batch, drop_remainder=True)
        .to_iter_dataset(grain.ReadOptions(num_threads=1, prefetch_buffer_size=4))
    )
    if args.workers and not args.prebuilt:
        train_ds = train_ds.mp_prefetch(grain.MultiprocessingOptions(num_workers=args.workers))
    eval_ds = (
        grain.MapDataset.source(Texts(2 * args.batch, args.seq))
        .map(Tokenize(args.seq, 0))
        .batch(args.batch, drop_remainder=True)
    )
    return train_ds, eval_ds


class Block(nnx.Module):  # type: ignore[misc]
    def __init__(self, width: int, rngs: nnx.Rngs) -> None:
        self.norm1 = nnx.RMSNorm(width, rngs=rngs)
        self.attn = nnx.MultiHeadAttention(
            num_heads=4, in_features=width, decode=False, use_bias=False, rngs=rngs
        )
        self.norm2 = nnx.RMSNorm(width, rngs=rngs)
        self.up = nnx.Linear(width, 4 * width, rngs=rngs)
        self.down = nnx.Linear(4 * width, width, rngs=rngs)

    def __call__(self, x: jax.Array, mask: jax.Array) -> jax.Array:
        x = x + self.attn(self.norm1(x), mask=mask[:, None, :, :])
        return x + self.down(nnx.gelu(self.up(self.norm2(x))))


class TinyDecoder(nnx.Module):  # type: ignore[misc]
    def __init__(self, layers: int, width: int, seq: int, rngs: nnx.Rngs) -> None:
        self.embed = nnx.Embed(VOCAB, width, rngs=rngs)
        self.position = nnx.Embed(seq, width, rngs=rngs)
        self.blocks = nnx.List([Block(width, rngs) for _ in range(layers)])
        self.norm = nnx.RMSNorm(width, rngs=rngs)
        self.head = nnx.Linear(width, VOCAB, rngs=rngs)

    def __call__(
        self,
        tokens: jax.Array,
        positions: jax.Array,
        cache: Any,
        attention_mask: jax.Array,
    ) -> tuple[jax.Array, Any]:
        x = self.embed(tokens) + self.position(positions)
        for block in self.blocks:
            x = block(x, attention_mask)
        return self.head(self.norm(x)), cache


def gen_model_input_fn(x: Any) -> dict[str, jax.Array]:
    pad_mask = x.input_tokens != PAD
    return {
        "input_tokens": x.input_tokens,
        "input_mask": x.input_mask,
        "positions": sft_utils.build_positions_from_mask(pad_mask),
        "attention_mask": sft_utils.make_causal_attn_mask(pad_mask),
    }


class StepTimes(hooks.TrainingHooks):  # type: ignore[misc]
    """The host start time of every training step (``on_train_step_start``) and, last, the
    end of training (``on_train_end``: after the trainer waited for its steps' losses,
    before it closes its loggers)."""

    def __init__(self) -> None:
        self.starts: list[float] = []

    def on_train_start(self, train_ctx: Any) -> None:
        pass

    def on_train_end(self, train_ctx: Any) -> None:
        self.starts.append(time.perf_counter())

    def on_train_step_start(self, train_ctx: Any) -> None:
        self.starts.append(time.perf_counter())

    def on_train_step_end(self, train_ctx: Any, train_step: int, train_loss: Any) -> None:
        pass

    def on_eval_step_start(self, train_ctx: Any) -> None:
        pass

    def on_eval_step_end(self, train_ctx: Any, eval_loss: Any) -> None:
        pass


def train(args: argparse.Namespace, scratch: Path) -> list[float]:
    """Train ``args.steps`` steps; return each step's host start time (perf_counter, s) and,
    last, the time the trainer had every step's loss."""
    model = TinyDecoder(args.layers, args.width, args.seq, nnx.Rngs(0))
    config = peft_trainer.TrainingConfig(
        eval_every_n_steps=args.eval_every,
        max_steps=args.steps,
        metrics_logging_options=peft_trainer.MetricsLoggerOptions(
            log_dir=str(scratch / "metrics"), flush_every_n_steps=20
        ),
    )
    trainer = peft_trainer.PeftTrainer(model, optax.adamw(1e-3), config)
    trainer = trainer.with_gen_model_input_fn(gen_model_input_fn)
    times = StepTimes()
    trainer.with_training_hooks(times)
    train_ds, eval_ds = make_datasets(args)
    if args.prebuilt:
        # One batch made before training, given again every step: the device's step alone.
        train_ds = itertools.repeat(next(iter(train_ds)), args.steps)
    trainer.train(train_ds, eval_ds)
    return times.starts


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--width", type=int, default=128)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--seq", type=int, default=64)
    parser.add_argument("--tokenize-passes", type=int, default=0, help="Python passes a record")
    parser.add_argument("--workers", type=int, default=1, help="mp_prefetch worker processes")
    parser.add_argument("--eval-every", type=int, default=100, help="eval_every_n_steps")
    parser.add_argument("--prebuilt", action="store_true", help="one batch, given again every step")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--stats-json", help="write step start times as JSON ('-': stdout)")
    return parser


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    flags.FLAGS.mark_as_parsed()  # Grain's worker processes read absl flags
    scratch = Path(tempfile.mkdtemp(prefix="tunix_loop_"))
    try:
        starts = train(args, scratch)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    if args.stats_json:
        text = json.dumps({"args": vars(args), "starts_s": starts})
        if args.stats_json == "-":
            print(text)
        else:
            Path(args.stats_json).write_text(text + "\n", encoding="utf-8")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
