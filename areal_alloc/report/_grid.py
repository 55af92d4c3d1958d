"""The cluster map of a plan's JSON dict: node rows of GPU cells, alike nodes merged.

The rows follow the text node map (``areal_alloc.cli.render``): a small cluster
(at most :data:`MAX_ROWS` nodes) draws every node and merges only identical
neighbours; a larger one draws the nodes where an owner changes and merges the
rest, so 131,072 nodes take a dozen rows; past :data:`MAX_ROWS` rows the middle is
summarised in one row. A node wider than :data:`MAX_COLUMNS` GPUs is drawn as runs
of GPUs with one owner instead of one cell per GPU. So the map never holds more
than ``MAX_ROWS × MAX_COLUMNS`` cells, whatever the plan.
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["MAX_COLUMNS", "MAX_ROWS", "Cell", "Gap", "Row", "map_rows"]

#: Node rows drawn at most; beyond it the middle of the map is one summary row.
MAX_ROWS = 40
#: GPUs of a node drawn one cell each at most; a wider node is drawn as runs of one owner.
MAX_COLUMNS = 64
#: Rows kept at the end of a map that is cut.
_TAIL = 10


@dataclass(frozen=True, slots=True)
class _Piece:
    """GPUs ``[start, stop)`` with one owner (``None``: free)."""

    start: int
    stop: int
    key: str | None
    offset: int = 0  # GPUs of the same placement before ``start``
    size: int = 0  # an inference instance's GPUs; 0: no instances here
    server: str | None = None  # the inference engine of those instances (it, or a sharer)


@dataclass(frozen=True, slots=True)
class Cell:
    """One GPU column of a row (or, on a wide node, a run of ``width`` GPUs)."""

    gpu: int  # its first GPU within the node
    width: int  # GPUs it stands for
    key: str | None  # the placed engine, None when free
    instance: int | None = None  # an inference instance's index, counted from 0
    server: str | None = None  # that instance's engine: ``key``, or one colocated on it


@dataclass(frozen=True, slots=True)
class Row:
    """Nodes ``first``–``last`` (inclusive), alike, drawn as the cells of node ``first``."""

    first: int
    last: int
    cells: tuple[Cell, ...]

    @property
    def label(self) -> str:
        return (
            f"node {self.first}" if self.first == self.last else f"nodes {self.first}–{self.last}"
        )


@dataclass(frozen=True, slots=True)
class Gap:
    """The middle of a cut map: ``nodes`` nodes in ``rows`` rows, not drawn."""

    nodes: int
    rows: int

    @property
    def label(self) -> str:
        return f"… {self.nodes:,} more nodes in {self.rows:,} rows …"


def _pieces(plan: Mapping[str, Any]) -> list[_Piece]:
    sizes = {
        e["key"]: e["instance_size"] or 0
        for e in plan["engines"]
        if isinstance(e.get("instance_size"), int)
    }
    owned: list[_Piece] = []
    for placement in plan["placements"]:
        key = placement["key"]
        # its own instances, or those of an inference engine colocated on its GPUs
        servers = [k for k in (key, *placement["shared_with"]) if sizes.get(k)]
        server = servers[0] if servers else None
        size = sizes[server] if server else 0
        offset = 0
        for run in placement["gpu_ranges"]:
            start, stop = run["start"], run["stop"]
            owned.append(_Piece(start, stop, key, offset, size, server))
            offset += stop - start
    owned.sort(key=lambda piece: piece.start)
    capacity = plan["cluster"]["capacity"]
    pieces: list[_Piece] = []
    cursor = 0
    for piece in owned:
        if piece.start > cursor:
            pieces.append(_Piece(cursor, piece.start, None))
        pieces.append(piece)
        cursor = piece.stop
    if cursor < capacity:
        pieces.append(_Piece(cursor, capacity, None))
    return pieces


def _node_cells(
    pieces: Sequence[_Piece], starts: Sequence[int], node: int, per_node: int
) -> list[Cell]:
    cells: list[Cell] = []
    first = node * per_node
    for gpu in range(first, first + per_node):
        piece = pieces[bisect.bisect_right(starts, gpu) - 1]
        instance = (piece.offset + gpu - piece.start) // piece.size if piece.size else None
        cells.append(Cell(gpu - first, 1, piece.key, instance, piece.server))
    return cells


def _merged_columns(cells: list[Cell]) -> tuple[Cell, ...]:
    """Runs of GPUs with one owner: a wide node in a few cells (instances not told apart)."""
    runs: list[Cell] = []
    for cell in cells:
        if runs and runs[-1].key == cell.key:
            last = runs[-1]
            runs[-1] = Cell(last.gpu, last.width + 1, last.key)
        else:
            runs.append(Cell(cell.gpu, 1, cell.key))
    return tuple(runs)


def _drawn(cells: list[Cell], per_node: int) -> tuple[Cell, ...]:
    return tuple(cells) if per_node <= MAX_COLUMNS else _merged_columns(cells)


def _cases(cells: tuple[Cell, ...]) -> tuple[object, ...]:
    """A small map's row as the text map writes it: each GPU's owner, and for its own
    inference instances which case (``R R R R r r r r``), so alike nodes merge as there."""
    return tuple(
        (c.key, c.width, c.instance % 2 if c.instance is not None and c.server == c.key else None)
        for c in cells
    )


def _owner_runs(pieces: Sequence[_Piece], at: int, first: int, end: int) -> tuple[object, ...]:
    """``(owner, GPUs)`` runs of the node ``[first, end)``, from the piece ``at`` on."""
    runs: list[tuple[str | None, int]] = []
    while at < len(pieces) and pieces[at].start < end:
        piece = pieces[at]
        width = min(piece.stop, end) - max(piece.start, first)
        if runs and runs[-1][0] == piece.key:
            runs[-1] = (piece.key, runs[-1][1] + width)
        else:
            runs.append((piece.key, width))
        at += 1
    return tuple(runs)


def map_rows(plan: Mapping[str, Any]) -> list[Row | Gap]:
    """The map's rows; empty for a CPU-only plan."""
    cluster = plan["cluster"]
    per_node, n_nodes = cluster["n_gpus_per_node"], cluster["n_nodes"]
    if not per_node:
        return []
    pieces = _pieces(plan)
    starts = [piece.start for piece in pieces]
    exact = n_nodes <= MAX_ROWS  # a small map draws every node, instances told apart
    rows: list[Row] = []
    signatures: list[tuple[object, ...]] = []
    node = at = 0  # ``at``: the piece that holds the node's first GPU
    while node < n_nodes:
        first, end = node * per_node, (node + 1) * per_node
        while pieces[at].stop <= first:
            at += 1
        last = node
        if pieces[at].stop >= end and not exact:  # the whole node lies in one piece
            last = max(node, pieces[at].stop // per_node - 1)
        drawn: tuple[Cell, ...] | None = None
        if exact:
            drawn = _drawn(_node_cells(pieces, starts, node, per_node), per_node)
            signature: tuple[object, ...] = _cases(drawn)
        else:  # alike up to the instances: the owners' runs, from the pieces alone
            signature = _owner_runs(pieces, at, first, end)
        if rows and signatures[-1] == signature and rows[-1].last == node - 1:
            rows[-1] = Row(rows[-1].first, last, rows[-1].cells)
        else:
            if drawn is None:
                drawn = _drawn(_node_cells(pieces, starts, node, per_node), per_node)
            rows.append(Row(node, last, drawn))
            signatures.append(signature)
        node = last + 1
    if len(rows) <= MAX_ROWS:
        return list(rows)
    head, tail = rows[: MAX_ROWS - _TAIL], rows[-_TAIL:]
    hidden = rows[len(head) : len(rows) - _TAIL]
    gap = Gap(sum(r.last - r.first + 1 for r in hidden), len(hidden))
    return [*head, gap, *tail]
