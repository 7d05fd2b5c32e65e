"""Write the generated parts of docs/verdicts.md: the list of verdicts, and for each the rules
that name it (with their thresholds) and an example from a bundled trace.

The verdicts are every one the code can return: the vocabulary's (``traceinspect/
vocabulary.py``'s ``Verdict``), those the decision tables name (``analysis/rules.py``'s
``RULES`` and isolate's ``ISOLATE_RULES``), a recurring stall's (``analysis/detectors.py``'s
``STALL_VERDICT``) and a multi-host run's own (:data:`POD_VERDICTS`, checked against
``analysis/pod_advice.py``'s ``pod_verdict`` by tests/test_docs.py). Each needs a section of
the page, ``## `VERDICT```, with its meaning and the first thing to try, written by hand,
and the markers ``<!-- verdict:VERDICT:begin -->`` / ``<!-- verdict:VERDICT:end -->`` this
script fills; the list goes between ``<!-- verdicts:begin -->`` and ``<!-- verdicts:end
-->``. A verdict without its section stops the script (and fails tests/test_docs.py). The
examples are ``traceinspect analyze`` run on a trace of ``sample_traces/`` whose manifest
expects that verdict (tests/test_readme.py runs them again). Run:
``python docs/make_verdicts.py``.
"""

from __future__ import annotations

import json
import typing
from pathlib import Path

from click.testing import CliRunner

from traceinspect import thresholds
from traceinspect.analysis import straggler
from traceinspect.analysis.detectors import STALL_VERDICT
from traceinspect.analysis.rules import ISOLATE_RULES, RULES, Rule
from traceinspect.cli import main
from traceinspect.vocabulary import VERDICTS, Verdict

DOCS = Path(__file__).parent
PAGE = DOCS / "verdicts.md"
REPO = DOCS.parent
MANIFEST = REPO / "sample_traces" / "manifest.json"

#: The verdicts only a multi-host run's decision names (``pod_verdict``), by its rule.
POD_VERDICTS = {"straggler": "straggler", "error": "no_host"}
#: The bundled trace each verdict's example reads, where the first of the manifest's is not
#: the clearest (each must be one the manifest expects that verdict of).
EXAMPLES = {
    "input-bound": "scenarios/input_bound",
    "sync-bound": "scenarios/sync_bound",
    "compile-bound": "scenarios/recompiling",
    "host-bound": "scenarios/op_by_op/steps40",
    "device-bound": "scenarios/healthy",
    "straggler": "pod/straggler",
}
_TABLE = "causes.md#verdict"


def verdicts() -> list[str]:
    """Every verdict the code can return, the vocabulary's first."""
    found = [str(v) for v in typing.get_args(Verdict)]
    found += [str(r.verdict) for r in (*RULES, *ISOLATE_RULES) if r.verdict]
    found += [*STALL_VERDICT.values(), *POD_VERDICTS]
    return list(dict.fromkeys(found))


def _share(value: float) -> str:
    """A threshold as the registry names it, with its value."""
    for name in ("MATTERS", "DOMINATES"):
        if thresholds.REGISTRY[name] == value:
            return f"`{name}` ({value:.0%})"
    return f"{value:.0%}"


def _row(rule: Rule) -> str:
    return f"rule `{rule.id}` (row {RULES.index(rule) + 1} of [the table]({_TABLE}))"


def _conditions(rule: Rule) -> str:
    if rule.cause == "device":
        return "when no row above it fires"
    said = [f"from {_share(rule.threshold)} of step time" if rule.threshold else "at any share"]
    if rule.beats_idle:
        said.append("larger than every cause of idle time but the host's")
    if rule.over:
        said.append("only where the idle time alone reads " + " or ".join(rule.over))
    return ", ".join(said)


def named_by(verdict: str) -> list[str]:
    """The rules that can name ``verdict``, one sentence each."""
    lines = []
    for rule in RULES:
        if rule.cause == "stall":
            kinds = [k for k, v in STALL_VERDICT.items() if v == verdict]
            if kinds:
                lines.append(
                    f"{_row(rule)}, a stall that is {', '.join(f'`{k}`' for k in kinds)}: "
                    f"{rule.meaning}; {_conditions(rule)}."
                )
        elif rule.cause == "idle":
            causes = [str(c) for c, v in VERDICTS.items() if v == verdict]
            for cause in causes:
                recurs = ""
                if cause == "sync":
                    recurs = (
                        f", and only when that idle time recurs in at least "
                        f"{thresholds.SYNC_RECURS:.0%} of the steps (`SYNC_RECURS`)"
                    )
                lines.append(
                    f"{_row(rule)}, when `{cause}` is the known cause of idle time with the "
                    f"largest share: {_conditions(rule)}{recurs}."
                )
        elif rule.verdict == verdict:
            lines.append(f"{_row(rule)}: {rule.meaning}; {_conditions(rule)}.")
    for rule in ISOLATE_RULES:
        if rule.verdict == verdict:
            when = " and ".join(f"`{c}`" for c in rule.checks) or "no row above it fires"
            lines.append(
                f"`traceinspect isolate`, rule `{rule.id}` ([its table]({_TABLE})): "
                f"{rule.meaning}; when {when}."
            )
    if verdict == "straggler":
        lines.append(
            "a multi-host run's rule `straggler` ([Multi-host runs](multi-host.md#the-straggler)): "
            "one host's device idles for input longest in more than "
            f"{straggler.MAJORITY:.0%} of the aligned steps, that idle time is at least "
            f"{_share(thresholds.MATTERS)} of its step and {straggler.DISTINCT:g} times any "
            "other host's; confirmed when the other hosts spend longer in collectives than it "
            f"does by at least {straggler.EXPLAINS:.0%} of its input idle time (without "
            "collectives in the traces, a starved host that is also the slowest is named, "
            "unconfirmed)."
        )
    if verdict == "error":
        lines.append(
            "a multi-host run's rule `no_host`: not one host's trace could be analysed, yet the "
            "hosts' capture sidecars give findings, which are printed under this verdict "
            "(without findings, `analyze` ends with an error instead); each host's error is "
            "in its row of `hosts_table`."
        )
    return lines


def example_trace(verdict: str) -> str | None:
    """The bundled trace (its path under ``sample_traces/``) whose analysis shows
    ``verdict``: :data:`EXAMPLES`', else the manifest's first expected to give it."""
    expected = {
        t["path"].removesuffix(".xplane.pb"): t.get("verdict")
        for t in json.loads(MANIFEST.read_text(encoding="utf-8"))["traces"]
    }
    name = EXAMPLES.get(verdict) or next((p for p, v in expected.items() if v == verdict), None)
    if name is not None and expected.get(name) != verdict:
        raise ValueError(f"{MANIFEST}: {name} is not expected to be {verdict}")
    return name


def example(verdict: str) -> str:
    """``traceinspect analyze`` on a bundled trace the manifest expects ``verdict`` of: its
    first lines (the verdict and the rule that named it), or a sentence saying there is none."""
    name = example_trace(verdict)
    if name is None:
        return "No bundled trace ends in this verdict."
    path = f"sample_traces/{name}"
    result = CliRunner().invoke(main, ["analyze", str(REPO / path)])
    if result.exit_code != 0:
        raise ValueError(f"traceinspect analyze {path} failed: {result.output}")
    shown = result.stdout.split("\n\n", 1)[0].splitlines()
    return "\n".join(["```console", f"$ traceinspect analyze {path}", *shown, "...", "```"])


def verdicts_block() -> str:
    lines = ["| verdict | named by | example |", "|---|---|---|"]
    for verdict in verdicts():
        rules = [r.id for r in RULES if verdict in _rule_verdicts(r)]
        rules += [f"isolate: {r.id}" for r in ISOLATE_RULES if r.verdict == verdict]
        rules += [rule for v, rule in POD_VERDICTS.items() if v == verdict]
        shown = ", ".join(f"`{r}`" for r in dict.fromkeys(rules))
        trace = example_trace(verdict)
        lines.append(
            f"| [`{verdict}`](#{verdict}) | {shown} | "
            f"{f'`sample_traces/{trace}`' if trace else 'none bundled'} |"
        )
    return "\n".join(lines)


def _rule_verdicts(rule: Rule) -> set[str]:
    if rule.cause == "stall":
        return set(STALL_VERDICT.values())
    if rule.cause == "idle":
        return {str(v) for v in VERDICTS.values()}
    return {str(rule.verdict)}


def verdict_block(verdict: str) -> str:
    items = "\n".join(f"- {line}" for line in named_by(verdict))
    return f"**Named by**\n\n{items}\n\n**Example**\n\n{example(verdict)}"


def _fill(page: str, name: str, block: str) -> str:
    begin, end = f"<!-- {name}:begin -->", f"<!-- {name}:end -->"
    head, found, rest = page.partition(begin)
    _, found_end, tail = rest.partition(end)
    if not found or not found_end:
        raise ValueError(f"{PAGE.name}: no {begin} ... {end} markers")
    return f"{head}{begin}\n{block}\n{end}{tail}"


def render(page: str) -> str:
    """``page`` with the list and every verdict's generated part rewritten; a verdict with no
    section of its own is an error."""
    missing = [v for v in verdicts() if f"\n## `{v}`\n" not in page]
    if missing:
        raise ValueError(
            f"{PAGE.name} has no section for {', '.join(missing)}: add '## `VERDICT`' with its "
            "meaning and the first thing to try, and the markers <!-- verdict:VERDICT:begin "
            "--> <!-- verdict:VERDICT:end -->"
        )
    page = _fill(page, "verdicts", verdicts_block())
    for verdict in verdicts():
        page = _fill(page, f"verdict:{verdict}", verdict_block(verdict))
    return page


if __name__ == "__main__":
    try:
        PAGE.write_text(render(PAGE.read_text(encoding="utf-8")), encoding="utf-8")
    except ValueError as exc:
        raise SystemExit(str(exc)) from None
    print(f"Wrote {PAGE}")
