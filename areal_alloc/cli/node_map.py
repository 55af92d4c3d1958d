"""The plan's node map: one column per GPU, one row per node (or a run of alike nodes), each
engine's letter where it runs."""

from __future__ import annotations

from areal_alloc.plan import Plan
from areal_alloc.report._grid import MAX_ROWS, Cell, Gap, map_rows

#: Node rows drawn at most; beyond it the middle of the map is summarised (the report's
#: bound: both draw the rows of :func:`areal_alloc.report._grid.map_rows`).
MAX_MAP_ROWS = MAX_ROWS

FREE = "·"


def symbols(keys: list[str]) -> dict[str, str]:
    """One distinct capital letter per engine: rollout R, teacher T, actor A, critic C, ref E."""
    taken: set[str] = set()
    out: dict[str, str] = {}
    for key in keys:
        for char in key.upper() + "XYZWQ":
            if char.isalpha() and char not in taken:
                out[key] = char
                taken.add(char)
                break
    return out


__all__ = ["FREE", "MAX_MAP_COLUMNS", "MAX_MAP_ROWS", "node_map_lines", "symbols"]


#: GPUs per node drawn as columns at most.
MAX_MAP_COLUMNS = 64


def _letter(cell: Cell, symbol: dict[str, str]) -> str:
    """A GPU as the map writes it: its engine's letter, lower-case on every other one of
    the engine's own inference instances (``R R R R r r r r``), ``·`` when free."""
    if cell.key is None:
        return FREE
    letter = symbol[cell.key]
    if cell.instance is not None and cell.server == cell.key and cell.instance % 2:
        return letter.lower()
    return letter


def _rows(plan: Plan, symbol: dict[str, str]) -> list[tuple[int, int, str]]:
    """``(first node, last node, cells)``, or ``(-1, -1, summary)`` for a cut middle.

    The rows are the report's (one home for which nodes look alike): a small map draws
    every node and merges identical ones, a large one draws the nodes where an owner
    changes, and past :data:`MAX_MAP_ROWS` rows the middle is one line.
    """
    rows: list[tuple[int, int, str]] = []
    for row in map_rows(plan.to_dict()):
        if isinstance(row, Gap):
            rows.append((-1, -1, f"… {row.nodes} more nodes in {row.rows} rows …"))
        else:
            rows.append((row.first, row.last, " ".join(_letter(c, symbol) for c in row.cells)))
    return rows


def _node_label(first: int, last: int) -> str:
    if first == last:
        return f"node {first}"
    return f"nodes {first}–{last}"


def _where(ranges: list[tuple[int, int]]) -> str:
    parts: list[str] = []
    for first, last in ranges:
        if last - first == 1:
            parts += [f"node {first}", f"node {last}"]
        elif first == last:
            parts.append(f"node {first}")
        else:
            parts.append(f"nodes {first}–{last}")
    return ", ".join(parts)


def node_map_lines(plan: Plan) -> list[str]:
    """One row per node, one column per GPU; inference instances alternate case (R r R r).

    Consecutive nodes that look alike share one row (``nodes 2–31``).
    """
    per_node = plan.n_gpus_per_node
    symbol = symbols([p.key for p in plan.placements])
    lines = [""]
    if per_node > MAX_MAP_COLUMNS:
        lines.append(
            f"node map omitted: {per_node} GPUs per node are too many columns to draw "
            f"(at most {MAX_MAP_COLUMNS})"
        )
    else:
        rows = _rows(plan, symbol)
        labels = [_node_label(first, last) if first >= 0 else "" for first, last, _ in rows]
        width = max(8, *(len(label) + 2 for label in labels))
        lines.append(f"node map (one column per GPU, {FREE} free):")
        header = " ".join(str(g % 10) for g in range(per_node))
        lines.append(f"  {'GPU':<{width}}{header}")
        for label, (_, _, cells) in zip(labels, rows, strict=True):
            lines.append(f"  {label:<{width}}{cells}".rstrip())
    lines.append("")
    for placement in plan.placements:
        engine = plan[placement.key]
        a = engine.allocation
        letter = symbol[placement.key]
        if a.is_inference and a.n_instances > 1:
            letter = f"{letter}/{letter.lower()}"
            gpus = "GPU" if a.instance_size == 1 else "GPUs"
            what = f"{a.n_instances} instances of {a.instance_size} {gpus}"
            extra = f", {what}"
        else:
            extra = ""
        if placement.shared_with:
            extra += f" + {', '.join(placement.shared_with)} (colocated)"
        where = _where(placement.nodes(per_node))
        lines.append(f"  {letter} = {placement.key} {engine.spec}{extra}  ({where})")
    return lines
