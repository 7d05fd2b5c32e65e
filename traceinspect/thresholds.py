"""The thresholds the decision and the counterfactual compare against: one registry.

Each is ``NAME = value`` with what it means and where it was measured. The rules table
(``analysis/rules.py``), the floors (``analysis/counterfactual.py``) and the notes read them
from here, and ``docs/causes.md``'s threshold table is generated from this module
(``tests/test_docs.py`` checks it is current). Light: no numpy, no pandas.
"""

from __future__ import annotations

from typing import Final

#: A cause's share of step time from which it matters (XProf's band): it can name the
#: verdict, and its advice is given.
MATTERS: Final = 0.05
#: How much slower the profiler ran the window's steps than the run's own before the analysis
#: says that it scaled its expected steps to the run's pace: under 1% the scaling moves an
#: expected step of the family's loops (10-20 ms) by under 0.2 ms, less than those steps vary
#: between captures (a GPU capture's stall, 0.1%: the note said nothing a reader could use).
PACE_SAID: Final = 0.01
#: A cause's share of step time from which it dominates (XProf's band). An inferred figure
#: (the loop's CPU over the cores) names the verdict only from here: a Flax NNX loop's own
#: 1.3-1.7 ms of Python a step came out at 5-6% and flipped its verdict from one capture to
#: the next; the family's 10 ms of CPU a step, 35%.
DOMINATES: Final = 0.20
#: Two causes' shares of step time within this fraction of each other are the same within a
#: capture's noise: a run-level cause (a recurring stall, a callback, the loop's CPU) names the
#: verdict over the window's largest idle cause only where it is larger by more, when the
#: two name different verdicts (one that names the window's own verdict says it more
#: precisely, and needs only the larger share). The family's
#: per-step read with a 250 ms checkpoint every 40 steps, 900 steps, 3 default captures: the
#: read 0.330-0.333 of step time, the checkpoint 0.325-0.332, and the verdict flipped in 1
#: of 3 (sync-bound, host-bound, sync-bound).
TIED: Final = 0.05
#: A step within this factor of the best counts as keeping up: the tolerance that defines
#: the measured knee (the smallest worker count within 10% of the best step). Workers that
#: deliver within it are enough; host work after a read within it of the device's step would
#: not hold the device back without the read.
KNEE_TOLERANCE: Final = 1.10
#: Sync-bound means the loop reads a device value every step: the sync names the verdict
#: only when its idle time recurs in at least this share of the steps. A read every N steps
#: (logging every N steps, as MaxText recommends) idles the device once per N steps: a cost
#: worth a note (scenario family: reading every 10th step costs no measurable time,
#: sample_traces/scenarios/family/MEASUREMENTS.md).
SYNC_RECURS: Final = 0.5
#: A loop "reads every step" (its steps run read, own work and the device's one after
#: another, so the read floor paces it) when a blocking read starts in this share of its
#: steps.
READS_EVERY_STEP: Final = 0.9
#: The low tail of a read-every-step loop's serial part (its step less its wait for input)
#: stands for the step it runs at with its input free. Scenario family's starved loops (one
#: waiting worker, 40 ms a batch, a per-step read), against the loop run with enough
#: workers: on an H200 the median read 10.7 ms and the 10th percentile 10.3-10.5 against
#: 9.96-10.1 timed; on the 2-core CPU machine the median read 0-40% high (13.3-14.4 against
#: 10.1-10.3) and the 10th percentile within 12% (6 of 6 captures).
READ_FLOOR_QUANTILE: Final = 0.1
#: A host callback during which the device idles for at least this share of the callback's
#: time (a GPU) holds the whole step: without it, the step is the device's work.
CALLBACK_ALONE: Final = 0.9
#: Idle time with the device's next program already dispatched (the runtime's latency)
#: gets a note from this share of step time.
RUNTIME_NOTE: Final = 0.01
#: The share of the device's work outside the analysed steps from which the window is said
#: to miss it (the host ran ahead, or the clocks are skewed).
OUTSIDE_NOTE: Final = 0.5

#: Every threshold, by name: what the docs' table lists.
REGISTRY: Final[dict[str, float]] = {
    "MATTERS": MATTERS,
    "DOMINATES": DOMINATES,
    "KNEE_TOLERANCE": KNEE_TOLERANCE,
    "SYNC_RECURS": SYNC_RECURS,
    "TIED": TIED,
    "READS_EVERY_STEP": READS_EVERY_STEP,
    "READ_FLOOR_QUANTILE": READ_FLOOR_QUANTILE,
    "CALLBACK_ALONE": CALLBACK_ALONE,
    "RUNTIME_NOTE": RUNTIME_NOTE,
    "OUTSIDE_NOTE": OUTSIDE_NOTE,
}

#: Other processes keeping at least this share of the machine's cores busy over the traced
#: window (capture's ``machine_load``: the machine's busy CPU time less the script's and its
#: workers') size the worker count for the cores they left the script (the machine's less
#: theirs, to the nearest core) and get a note: below it the count is sized as on a quiet
#: machine. isolate reruns a busy phase from the same bound (``isolate/timing.py``'s BUSY_OTHERS):
#: on this project's shared 2-core machine quiet windows measured 0.01-0.14 cores of others'
#: work, windows beside one busy loop 0.95-1.02 (capture's half-second windows of
#: tests/capture/test_machine_load.py: 0.00-0.04 quiet, 1.05-1.12 beside one).
OTHERS_LOAD: Final = 0.15
REGISTRY["OTHERS_LOAD"] = OTHERS_LOAD

# --- traceinspect isolate: its table (``analysis/rules.py``'s ISOLATE_RULES) reads these ---
#: isolate: a figure slower than another by more than this factor counts (the loader alone against
#: the step with free input T, the real step against T). A cause is called only when it costs more
#: than one run's figures scatter on a shared machine: on the scenario family, before choosing (3
#: sessions x 3 repeats, sample_traces/scenarios/family/isolate_tolerance.json), runs with no cause
#: gave R / T 0.96-1.11 (the knee's 10% called 2 of 9 host-bound), the causes R / T 1.28-1.82 (a
#: float(loss) each step; 1.28 with another job on the machine throughout) and L / T 2.6-5.4 (one
#: worker waiting 40 ms a batch); no finer than the target step's own accuracy (within 20% of the
#: same model on synthetic data). Its excess over 1 is the reads' margin: a loop that waits less
#: than 20% of T per step in reads of device values is not held by a sync.
ISOLATE_TOLERANCE: Final = 1.20
#: isolate: a slower real step whose loop waits in Grain next() less than this share of the
#: loss (R - T) per step does not lose it on its own thread: the pipeline's work beside the
#: step competes for the cores (the family's 16 read threads: 0.1 ms a step in next(), the
#: real step 1.19-1.26x T; moved into 1-6 workers the loop ran 9.8-12.2 ms against 8.8).
ISOLATE_NEXT_SHARE: Final = 0.5

REGISTRY["ISOLATE_TOLERANCE"] = ISOLATE_TOLERANCE
REGISTRY["ISOLATE_NEXT_SHARE"] = ISOLATE_NEXT_SHARE

# --- the input pipeline on the training process's read threads ---
#: Read threads whose CPU time adds up to at least this many cores, on average over the
#: window, hold the GIL (or a core) most of the time: the pipeline computes, in Python, even
#: where each thread is on a CPU only a small share of its time (they take turns holding the
#: GIL: Grain's 16 default read threads running a Python map were each on a CPU 6% of their
#: time, 1.04 cores together, and paced the loop, a 2-core machine). Half the one core the
#: GIL allows Python: the training thread then waits for it as long as it runs. Below it
#: the threads mostly wait on reads.
GIL_HELD: Final = 0.5

REGISTRY["GIL_HELD"] = GIL_HELD

# --- the analysis's comparisons name their numbers (tests/test_model.py checks none is bare) ---
#: The host's-work advice names the loop's own code (where it sits in the step, what the
#: stack sampler saw) when at least this share of the host's idle time is spent in it: most
#: of it, a half (chosen, not measured).
LOOP_CODE_MOST: Final = 0.5
#: A gap's evidence gets a line for the loop's own code, or for the runtime's latency (the
#: device's next program already dispatched), from this share of the gap on: a launch
#: latency of a few us in a gap of ms is not worth a line (chosen, not measured).
GAP_LINE_SHARE: Final = 0.1
#: The runtime's latency is said first among a gap's evidence from this share of the gap
#: on: most of it, when the host's events are beside the point (chosen, not measured).
GAP_LINE_FIRST: Final = 0.5
#: A worker's time waiting for a core is said beside its time on one from this share on:
#: below it the share prints as 0% (chosen, not measured).
CORE_WAIT_NOTE: Final = 0.005
#: A recurring stall is looked for only when at least this share of the steps (but the
#: first ones, which compile) are timed from the completion stamps of a step and the one
#: before it: half (chosen, not measured).
STAMPED_SHARE: Final = 0.5
#: The completion stamps come in bunches (stamped late, by a thread that waited for the GIL)
#: when at least this share of them came within a ``STALL_FACTOR``-th of the host's typical
#: step of the one before. Measured on the sidecars kept from sessions 11-15: 106 captures
#: of the family, its habits, the frameworks and the GPU samples had 0-7% of them; Grain's
#: tutorial loop (16 read threads) 16-39%; the family's ``gc.collect()`` every 12 steps
#: 41-56% on 3.12 + jax 0.12, where a median (half) put 5 of 15 captures on the stamps and
#: found the collections every 24 or 36 steps, or none. A quarter lies between.
BUNCHED_SHARE: Final = 0.25
#: A recurring stall during which other programs ran is an evaluation when the device idled
#: less than this share of the stalled steps' time, busy with them the rest (chosen, not
#: measured).
EVALUATION_IDLE: Final = 0.5
#: ... and only when those programs' device work took at least this share of what an
#: occurrence cost, in most occurrences: an evaluation's forward passes are real work (the
#: family's 5 batches scored on the host: 22-28% of each 54-60 ms occurrence, 5 of 5), a
#: metrics computation's element-wise programs are not (Flax NNX's ``metrics.compute()``
#: beside every Orbax save: 12 calls, 0 ms on the device's lines, 10 of 10 occurrences;
#: they run inline on the calling thread). A twentieth: 4x under the evaluation's least.
EVALUATION_WORK: Final = 0.05
#: An evaluation stall is host-bound (its results scored on the host while the device waits)
#: when the loop's own code took at least this share of what an occurrence cost, else
#: device-bound: most of it, a half (chosen, not measured; the family's evaluation of 5
#: batches each scored by a 25 ms sort on the host: 6-8 of 10 sampler looks in the scoring).
EVALUATION_HOST: Final = 0.5

# --- what a recurring stall is (analysis/stall_kinds.py) ---
#: A recurring stall is garbage collection when, in at least ``PERIOD_AGREEMENT`` of its
#: occurrences, Python's collections (capture's ``run_events``) took this share of what the
#: occurrence cost: most of it, a half (chosen, not measured; the family's gc.collect()
#: over a million objects every 12 steps: ~0.2 s, all of the stall).
GC_STALL_SHARE: Final = 0.5
#: A recurring stall is remote logging when at least this share of the stack sampler's looks
#: inside its occurrences were in a network library (socket, ssl, http, urllib, requests,
#: grpc): most of them, a half (chosen, not measured).
NETWORK_LOOKS: Final = 0.5

REGISTRY["GC_STALL_SHARE"] = GC_STALL_SHARE
REGISTRY["NETWORK_LOOKS"] = NETWORK_LOOKS
REGISTRY["LOOP_CODE_MOST"] = LOOP_CODE_MOST
REGISTRY["GAP_LINE_SHARE"] = GAP_LINE_SHARE
REGISTRY["GAP_LINE_FIRST"] = GAP_LINE_FIRST
REGISTRY["CORE_WAIT_NOTE"] = CORE_WAIT_NOTE
REGISTRY["STAMPED_SHARE"] = STAMPED_SHARE
REGISTRY["BUNCHED_SHARE"] = BUNCHED_SHARE
REGISTRY["EVALUATION_IDLE"] = EVALUATION_IDLE
REGISTRY["EVALUATION_WORK"] = EVALUATION_WORK
REGISTRY["EVALUATION_HOST"] = EVALUATION_HOST

#: Device work that starts after the traced steps, no later than this (ns) after the last
#: one ended, means the host dispatched every traced step before the device ran them (the
#: error asks for more steps); later than this, the host's and the device's clocks are
#: taken to be skewed (chosen, not measured).
HOST_AHEAD_NS: Final = 1_000_000_000
#: The read named as a recurring stall's (a checkpoint's site) may have ended up to this
#: long (ns) before the stall's longest idle period began, as the sync rule's 2 ms lets a
#: read end after it (attribution's SYNC_WAKE_TOLERANCE_NS; chosen, not measured).
STALL_READ_EARLY_NS: Final = 2_000_000

#: The thresholds that are times, by name, in ns: the docs' table lists them after REGISTRY.
TIMES_NS: Final[dict[str, int]] = {
    "HOST_AHEAD_NS": HOST_AHEAD_NS,
    "STALL_READ_EARLY_NS": STALL_READ_EARLY_NS,
}
