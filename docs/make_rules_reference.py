"""Write the rules tables and the thresholds' registry into docs/causes.md.

The tables are generated from the code (``traceinspect/analysis/rules.py``'s ``RULES`` and
isolate's ``ISOLATE_RULES``, ``traceinspect/thresholds.py``), between the ``<!-- rules:begin
-->`` / ``<!-- rules:end -->`` and ``<!-- thresholds:begin -->`` / ``<!-- thresholds:end
-->`` markers, so the page cannot fall behind them (``tests/test_docs.py`` checks it). Run:
``python docs/make_rules_reference.py``.
"""

from __future__ import annotations

import re
from pathlib import Path

from traceinspect import thresholds
from traceinspect.analysis.rules import ISOLATE_RULES, rules_table

PAGE = Path(__file__).parent / "causes.md"


def _share(value: float) -> str:
    return "any" if value == 0 else f"{value:.0%}"


def rules_block() -> str:
    lines = [
        "| # | rule | cause | verdict | from | must beat the idle causes but the host's "
        "(by over `TIED`) | replaces only | meaning |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for i, row in enumerate(rules_table(), start=1):
        over = ", ".join(f"`{v}`" for v in row["over"]) if row["over"] else "any verdict"
        verdict = row["verdict"]
        lines.append(
            f"| {i} | `{row['rule']}` | `{row['cause']}` | "
            f"{verdict if ' ' in verdict else f'`{verdict}`'} | {_share(row['threshold'])} | "
            f"{'yes' if row['beats_idle'] else 'no'} | {over} | {row['meaning']} |"
        )
    return "\n".join([*lines, "", *_isolate_lines()])


def _isolate_lines() -> list[str]:
    """isolate's own table, read the same way (its claims: ``analysis/rules.py``)."""
    lines = [
        "`traceinspect isolate` decides from its three timings (`T` the step with free input, "
        "`L` the loader alone, `R` the real step) by its own table, `ISOLATE_RULES`, read the "
        "same way: the first row whose checks all pass names the verdict, and `isolate --json` "
        "records it as `decided_by` (claims: `loader` L / T, `real` R / T, `reads` the wait in "
        "reads of device values / T, `next` the wait in `next()` / (R - T), `cores` R / "
        "(T + the workers' CPU per batch over the free cores), `disagree` the next best runs "
        "read another verdict; [the rule](isolate.md#the-rule)).",
        "",
        "| # | rule | cause | verdict | when | meaning |",
        "|---|---|---|---|---|---|",
    ]
    for i, row in enumerate(ISOLATE_RULES, start=1):
        tests = " and ".join(f"`{t}`" for t in row.checks) or "otherwise"
        lines.append(
            f"| {i} | `{row.id}` | `{row.cause}` | `{row.verdict}` | {tests} | {row.meaning} |"
        )
    return lines


def _meanings() -> dict[str, str]:
    """Each threshold's ``#:`` comment in thresholds.py, joined into one line."""
    source = Path(thresholds.__file__).read_text(encoding="utf-8").splitlines()
    out: dict[str, str] = {}
    comment: list[str] = []
    for line in source:
        if line.startswith("#:"):
            comment.append(line[2:].strip())
            continue
        m = re.match(r"([A-Z_]+): Final = ", line)
        if m and comment:
            out[m.group(1)] = " ".join(comment)
        comment = []
    return out


def thresholds_block() -> str:
    meanings = _meanings()
    lines = ["| name | value | meaning, and where it was measured |", "|---|---|---|"]
    for name, value in thresholds.REGISTRY.items():
        lines.append(f"| `{name}` | {value:g} | {meanings.get(name, '')} |")
    for name, ns in thresholds.TIMES_NS.items():
        lines.append(f"| `{name}` | {ns / 1e6:g} ms | {meanings.get(name, '')} |")
    return "\n".join(lines)


def render(page: str) -> str:
    """``page`` with both blocks rewritten."""
    for name, block in (("rules", rules_block()), ("thresholds", thresholds_block())):
        begin, end = f"<!-- {name}:begin -->", f"<!-- {name}:end -->"
        head, found, rest = page.partition(begin)
        if not found:
            raise SystemExit(f"{PAGE}: no {begin} marker")
        _, found, tail = rest.partition(end)
        if not found:
            raise SystemExit(f"{PAGE}: no {end} marker")
        page = f"{head}{begin}\n{block}\n{end}{tail}"
    return page


if __name__ == "__main__":
    PAGE.write_text(render(PAGE.read_text(encoding="utf-8")), encoding="utf-8")
