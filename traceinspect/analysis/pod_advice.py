"""What a pod analysis says: its verdict, its recommendations and what is set up wrong
across hosts (the same data on several hosts)."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from typing import Any

import pandas as pd

from traceinspect import schema as S
from traceinspect.analysis.pod_result import HostResult, Straggler
from traceinspect.analysis.result import GRAIN_WORKER_COUNT, Analysis, Finding, Recommendation


def pod_findings(results: tuple[HostResult, ...]) -> tuple[Finding, ...]:
    """Across hosts: hosts whose loops drew the same first batches read the same data, not
    each its own slice (``same_data_on_hosts``; every host counts, analysed or not: the
    digests come from the capture sidecar); then the sidecar's own findings of each host
    that could not be analysed, named."""
    unanalysed = tuple(
        replace(f, message=f"{r.host} (not analysed; from its capture sidecar): {f.message}")
        for r in results
        if r.analysis is None
        for f in r.findings
    )
    return _same_data(results) + unanalysed


def _same_data(results: tuple[HostResult, ...]) -> tuple[Finding, ...]:
    by_digest: dict[str, list[str]] = {}
    for r in sorted(results, key=lambda r: r.host):
        for digest in set(r.batch_digests):
            by_digest.setdefault(digest, []).append(r.host)
    groups = sorted({tuple(h) for h in by_digest.values() if len(h) > 1})
    if not groups:
        return ()
    named = "; ".join(", ".join(g) for g in groups)
    return (
        Finding(
            "same_data_on_hosts",
            "warning",
            f"Hosts read the same batches: {named} drew identical first batches (capture's "
            "digest of their contents), so each host trains on the same data instead of its "
            "own slice.",
            "Shard the input by process: grain.sharding.ShardOptions(shard_index="
            "jax.process_index(), shard_count=jax.process_count()) or, for a MapDataset, "
            "ds[jax.process_index()::jax.process_count()] before shuffling and batching.",
        ),
    )


def pod_verdict(
    analyses: dict[str, Analysis], straggler: Straggler | None, table: pd.DataFrame
) -> tuple[str, str, dict[str, Any]]:
    """The pod's verdict, its sentence, and what decided it (``decided_by``): the pod's
    rule (``straggler``, ``all_hosts_agree``, ``slowest_host``, ``no_host``), the host it
    follows, and that host's own ``decided_by``."""
    if straggler is not None:
        return "straggler", straggler.message, _decided("straggler", straggler.host, analyses)
    if not analyses:
        return "error", "No host could be analysed.", _decided("no_host", None, analyses)
    counts = Counter(a.verdict for a in analyses.values())
    common, n = counts.most_common(1)[0]
    step_ms = table[S.MEDIAN_STEP_MS].astype(float)
    slowest = str(step_ms.idxmax())
    if n == len(analyses):
        return (
            common,
            f"All {n} hosts are {common}; the slowest, {slowest}, takes "
            f"{step_ms[slowest]:.2f} ms/step (median). "
            f"{analyses[slowest].summary}",
            _decided("all_hosts_agree", slowest, analyses),
        )
    spread = ", ".join(f"{v}: {c}" for v, c in counts.most_common())
    verdict = analyses[slowest].verdict
    return (
        verdict,
        f"Hosts disagree ({spread}); the slowest host, {slowest}, is {verdict}: "
        f"{analyses[slowest].summary}",
        _decided("slowest_host", slowest, analyses),
    )


def _decided(rule: str, host: str | None, analyses: dict[str, Analysis]) -> dict[str, Any]:
    decision = analyses[host].decision if host in analyses else None
    return {
        "rule": rule,
        "host": host,
        "host_decided_by": None if decision is None else decision.to_dict(),
    }


def pod_recommendations(
    analyses: dict[str, Analysis], straggler: Straggler | None
) -> tuple[Recommendation, ...]:
    """What to do, pod-wide: the straggler's own fixes first, and one worker count for
    every host (they run the same pipeline, each on its shard)."""
    recs: list[Recommendation] = []
    if straggler is not None:
        recs.append(
            Recommendation(
                "fix_straggler",
                f"Look at {straggler.host} first: every host loads its own shard "
                "(global batch / process count), so one slow pipeline sets the pace of "
                "the pod. Compare its data shard, disk or network reads and CPU load "
                "with the other hosts'.",
                host=straggler.host,
            )
        )
        own = analyses.get(straggler.host)
        if own is not None:
            recs.extend(
                replace(r, on_host=straggler.host)
                for r in own.recommendations
                if r.kind not in ("device_bound", GRAIN_WORKER_COUNT)
            )
    else:
        # No straggler: what the hosts' own analyses advise, most common first.
        by_kind: dict[str, tuple[Recommendation, list[str]]] = {}
        for h, a in analyses.items():
            for r in a.recommendations:
                if r.kind != GRAIN_WORKER_COUNT:
                    by_kind.setdefault(r.kind, (r, []))[1].append(h)
        for rec, on in sorted(by_kind.values(), key=lambda item: -len(item[1])):
            where = "every host" if len(on) == len(analyses) else ", ".join(sorted(on))
            recs.append(
                replace(rec, on_hosts=tuple(sorted(on)), message=f"({where}) {rec.message}")
            )
    workers = {
        h: r for h, a in analyses.items() for r in a.recommendations if r.kind == GRAIN_WORKER_COUNT
    }
    if workers:
        need = max(workers, key=lambda h: int(workers[h].value or 0))
        value = int(workers[need].value or 0)
        currents = {r.current for r in workers.values()}
        current = currents.pop() if len(currents) == 1 else None
        if current is not None and value <= int(current):
            message = f"Keep the Grain worker count at {current} on every host."
        else:
            message = (
                f"Set the Grain worker count to {value} on every host: {need} needs it; "
                f"{workers[need].reason}."
            )
        recs.append(
            Recommendation(
                GRAIN_WORKER_COUNT,
                message,
                value=value,
                current=current,
                host=need,
                per_host={h: int(r.value or 0) for h, r in workers.items()},
            )
        )
    return tuple(recs)
