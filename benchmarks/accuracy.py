"""Our estimates against published measurements (``benchmarks/measurements.json``).

Run: python benchmarks/accuracy.py [--kind KIND] [--json | --markdown]

Each row of the data file goes through the package's own estimate functions
(``benchmarks/measured.py`` builds its inputs into them) and is printed with the measured
value and the error; a row the estimator cannot express is listed as not compared, with
the reason. Then the median and worst absolute error of each kind beside issue 17's goals.
``--markdown`` prints only that summary, as the README's "Accuracy" table.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script

from benchmarks.measured import (
    GOALS,
    KINDS,
    RL_STEP_RULE,
    Compared,
    Summary,
    compare_all,
    load,
    summary,
)


def _number(value: float) -> str:
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    return f"{value:.3g}" if abs(value) < 10 else f"{value:,.1f}"


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{value:.1%}"


def _beyond_goal(result: Compared) -> bool:
    """A compared row whose error alone misses its kind's worst-error goal."""
    goal = GOALS.get(result.kind)
    if goal is None or goal.worst is None or result.error is None:
        return False
    return abs(result.error) > goal.worst


def _table(rows: list[list[str]]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]


def markdown(summaries: list[Summary]) -> str:
    lines = [
        "| kind | rows compared | not compared | median error | worst error | goal | met |",
        "|---|---:|---:|---:|---:|---|---|",
    ]
    for s in summaries:
        met = "-" if s.met is None else ("met" if s.met else "not met")
        lines.append(
            f"| {s.kind} | {s.compared} | {s.not_compared} | {_percent(s.median)} "
            f"| {_percent(s.worst)} | {s.goal.text() if s.goal else '-'} | {met} |"
        )
    return "\n".join(lines)


def text(results: list[Compared], summaries: list[Summary]) -> str:
    compared = [r for r in results if r.estimate is not None]
    skipped = [r for r in results if r.estimate is None]
    rows = [["id", "kind", "inputs", "estimate", "measured", "unit", "error"]]
    for r in compared:
        rows.append(
            [
                r.id,
                r.kind,
                r.inputs,
                _number(r.estimate or 0.0),
                _number(r.measured),
                r.unit,
                f"{r.error or 0.0:+.1%}",
            ]
        )
    out = _table(rows)
    beyond = [r for r in compared if _beyond_goal(r)]
    if beyond:
        out += ["", "beyond the kind's worst-error goal, with the estimate's terms:"]
        for r in beyond:
            shown = [t for t in r.terms if not t.get("hidden")]
            terms = ", ".join(f"{t['name']} {_number(float(str(t['seconds'])))} s" for t in shown)
            terms = terms or "no terms listed for this kind"
            out.append(f"  {r.id} ({r.error or 0.0:+.1%}): {terms}")
    notes = [f"  {r.id}: {r.note}" for r in compared if r.note]
    if any(r.kind == "rl_step" for r in compared):
        notes.append(f"  {RL_STEP_RULE}")
    if notes:
        out += ["", "assumed:", *notes]
    if skipped:
        out += ["", f"not compared ({len(skipped)}):"]
        out += [f"  {r.id} ({r.kind}): {r.reason}" for r in skipped]
    head = [["kind", "compared", "not compared", "median |error|", "worst |error|", "goal", ""]]
    for s in summaries:
        met = "-" if s.met is None else ("met" if s.met else "NOT MET")
        head.append(
            [
                s.kind,
                str(s.compared),
                str(s.not_compared),
                _percent(s.median),
                _percent(s.worst),
                s.goal.text() if s.goal else "-",
                met,
            ]
        )
    out += ["", *_table(head)]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kind", choices=KINDS, help="only the rows of one kind")
    parser.add_argument("--json", action="store_true", help="rows and summary as JSON")
    parser.add_argument(
        "--markdown", action="store_true", help="only the per-kind summary, as a Markdown table"
    )
    parser.add_argument(
        "--data", type=Path, default=None, help="another data file of the same schema"
    )
    ns = parser.parse_args(argv)
    data = load(ns.data) if ns.data else load()
    results = compare_all(data, ns.kind)
    summaries = summary(results)
    if ns.json:
        print(
            json.dumps(
                {
                    "rows": [r.to_dict() for r in results],
                    "summary": [s.to_dict() for s in summaries],
                },
                indent=1,
            )
        )
    elif ns.markdown:
        print(markdown(summaries))
    else:
        print(text(results, summaries))
    return 0


if __name__ == "__main__":
    try:
        code = main()
        sys.stdout.flush()
    except BrokenPipeError:  # the reader left (| head): as the Python docs advise
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        code = 1
    raise SystemExit(code)
