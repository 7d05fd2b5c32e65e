"""``traceinspect isolate`` on loops that wait nowhere, while another process holds one core.

Run from the repository root (each isolate run takes 1-2 minutes on the 2-core machine)::

    python sample_traces/scenarios/family/isolate_loaded.py --out isolate_loaded-4.json
    python sample_traces/scenarios/family/isolate_loaded.py --loaded 3 --quiet 1 --plain 1

For each round, interleaved, each loop runs ``traceinspect isolate --json`` while
``python -c 'while True: pass'`` keeps one core busy (``--loaded`` rounds); then
``--quiet`` rounds with the machine left alone; then ``--plain`` rounds of the truth,
timed without traceinspect (``family_runs.truth_ms``): each loop as it is and on its one
pre-built batch (``--synthetic``). Prints a line per run (verdict, next-best verdict, the
three figures, the workers' CPU per batch, the cores others took) and writes every
isolate JSON (less its log paths) and the plain figures to ``--out`` (beside this file).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from apply_advice import run_tool  # noqa: E402
from family_runs import truth_ms  # noqa: E402
from make_family import stack  # noqa: E402

#: The loops (``--loops``, default the first two): two mp_prefetch workers making cheap
#: records (device-bound where the device does not share the host's cores: an H200 ran
#: ``light_w2`` at its step with free input), both on the margin of isolate's 20% on XLA's
#: CPU backend; then the loaded sets' loops clear of it (``isolate_loaded-2.json``, ``-3``):
#: a 45 ms step (device-bound), one waiting worker (input-bound), a per-step ``float(loss)``
#: on input that keeps up (sync-bound).
LOOPS = {
    "light_w2": ["--record", "light", "--workers", "2"],
    "none_w2": ["--record", "none", "--workers", "2", "--read-threads", "0", "--read", "none"],
    "none_w2_deep": [
        *("--record", "none", "--workers", "2", "--read-threads", "0", "--read", "none"),
        *("--hidden-layers", "12"),
    ],
    "io_w1": ["--record", "io", "--workers", "1"],
    "light_read_w0": [
        "--record",
        "light",
        "--read",
        "float",
        "--workers",
        "0",
        "--read-threads",
        "0",
    ],
}
DEFAULT_LOOPS = "light_w2,none_w2"
STEPS = 2000
PLAIN_STEPS = 400


def isolate(name: str, args: list[str]) -> dict[str, Any]:
    """``isolate --json`` of the loop (``apply_advice.run_tool``), less its command and log
    paths."""
    result = run_tool("isolate", [], args, None, name, STEPS)
    result.pop("command", None)
    for phase in result.get("phases", {}).values():
        phase.pop("log_path", None)
    return result


def line(tag: str, name: str, result: dict[str, Any]) -> str:
    if "evidence" not in result:
        return f"{tag} {name}: {result['verdict']}"
    e = result["evidence"]
    return (
        f"{tag} {name}: {result['verdict']} (next best {result['next_best_verdict']}), "
        f"target {result['target_step_ms']:.2f} loader {result['loader_batch_ms']:.2f} "
        f"real {result['real_step_ms']:.2f} ms, workers' CPU {e['workers_cpu_ms_per_batch']} "
        f"ms a batch, others {e['others_cpu_cores']} cores"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--loaded", type=int, default=3, help="rounds under the load")
    parser.add_argument("--quiet", type=int, default=2, help="rounds on the quiet machine")
    parser.add_argument("--plain", type=int, default=2, help="rounds of plain runs")
    parser.add_argument("--out", help="JSON file to write, beside this script")
    parser.add_argument(
        "--loops", default=DEFAULT_LOOPS, help=f"comma-separated, of: {', '.join(LOOPS)}"
    )
    opts = parser.parse_args()
    loops = {name: LOOPS[name] for name in opts.loops.split(",")}
    out: dict[str, Any] = {
        "what": (
            f"traceinspect isolate --json on train_family.py (--steps {STEPS}): "
            f"{opts.loaded} rounds while `python -c 'while True: pass'` held one core, "
            f"{opts.quiet} on the quiet machine, {opts.plain} of plain runs "
            f"(family_runs.truth_ms, {PLAIN_STEPS} steps), each round interleaving the loops"
        ),
        "stack": stack(),
        "started_utc": time.strftime("%Y-%m-%d %H:%M", time.gmtime()),
        "loops": {name: " ".join(args) for name, args in loops.items()},
        "loaded": {name: [] for name in loops},
        "quiet": {name: [] for name in loops},
        "plain_ms": {},
    }

    def save() -> None:
        if opts.out:
            (HERE / opts.out).write_text(json.dumps(out, indent=1) + "\n", encoding="utf-8")

    def rounds(tag: str, count: int) -> None:
        for _ in range(count):
            for name, args in loops.items():
                result = isolate(name, args)
                out[tag][name].append(result)
                print(line(tag, name, result), flush=True)
                save()

    burn = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(2)
        rounds("loaded", opts.loaded)
    finally:
        burn.kill()
        burn.wait()
    time.sleep(5)
    rounds("quiet", opts.quiet)
    for _ in range(opts.plain):
        for name, args in loops.items():
            for label, given in ((name, args), (f"{name}_synthetic", [*args, "--synthetic"])):
                ms = round(truth_ms(given, PLAIN_STEPS), 3)
                out["plain_ms"].setdefault(label, []).append(ms)
                print(f"plain {label}: {ms:.2f} ms", flush=True)
                save()


if __name__ == "__main__":
    main()
