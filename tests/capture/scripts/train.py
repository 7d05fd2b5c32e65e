"""Test script: a tiny JAX + Grain training run, configured by its arguments."""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import pathlib
import signal
import subprocess
import sys


def square(x: int) -> int:
    return x * x


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--delay-ms", type=float, default=0.0)
    parser.add_argument("--workers", type=int, default=0)
    parser.add_argument("--annotate", action="store_true")
    parser.add_argument("--sync", action="store_true")
    parser.add_argument("--crash-at", type=int, default=-1)
    parser.add_argument("--exit-at", type=int, default=-1)
    parser.add_argument("--exit-code", type=int, default=3)
    parser.add_argument("--hang-at", type=int, default=-1)
    parser.add_argument("--os-exit", action="store_true", help="--exit-at by os._exit")
    parser.add_argument("--marker", default="")
    parser.add_argument("--facts", default="")
    parser.add_argument("--mp-check", action="store_true")
    parser.add_argument(
        "--grandchild", default="", help="start `sleep` deaf to Ctrl-C, its pid to this file"
    )
    parser.add_argument("--ignore-sigterm", action="store_true")
    args = parser.parse_args()

    if args.ignore_sigterm:
        signal.signal(signal.SIGTERM, lambda signum, frame: print("SIGTERM ignored", flush=True))
    if args.grandchild:
        # As a shell's background job: SIGINT ignored, so a terminal's Ctrl-C does not end it.
        sleeper = subprocess.Popen(["sh", "-c", "trap '' INT; exec sleep 1000"])
        pathlib.Path(args.grandchild).write_text(str(sleeper.pid))

    if args.facts:
        facts = {
            "name": __name__,
            "argv": sys.argv,
            "path0": sys.path[0],
            "cwd": str(pathlib.Path.cwd()),
            "stdin": sys.stdin.readline().strip(),
            "env": os.environ.get("TI_TEST_ENV"),
        }
        if args.mp_check:
            with multiprocessing.get_context("spawn").Pool(1) as pool:
                facts["spawn"] = pool.map(square, [2, 3])
            with multiprocessing.get_context("fork").Pool(1) as pool:
                facts["fork"] = pool.map(square, [4])
        pathlib.Path(args.facts).write_text(json.dumps(facts))

    # Grain's mp_prefetch workers read absl flags.
    from absl import flags

    flags.FLAGS.mark_as_parsed()
    import common

    loss = common.train(
        steps=args.steps,
        delay_s=args.delay_ms / 1000,
        workers=args.workers,
        annotate=args.annotate,
        sync=args.sync,
        crash_at=args.crash_at,
        exit_at=args.exit_at,
        exit_code=args.exit_code,
        hang_at=args.hang_at,
        marker=args.marker,
        os_exit=args.os_exit,
    )
    print(f"final loss {loss:.4f}")


if __name__ == "__main__":
    main()
