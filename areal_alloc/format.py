"""A layout's printed parts, and the one canonical formatter built on them.

:func:`layout_parts` is the single decomposition of a layout into what gets
printed: one plain part, or an ``attn`` and an ``ffn`` part. The canonical
string, the plan's dims column and ``explain`` (text and JSON) all read it.

Canonical strings write dimensions in the order d, p, t, c, e: ``d`` always,
other sizes of 1 left out (``vllm:d1t4``). A layout whose experts have their own
tensor-parallel size is written in the hybrid form ``BACKEND:(attn:…|ffn:…)``,
with ``d`` on both sides, so expert tensor parallelism is never lost; it parses
back to an equal object.
"""

from __future__ import annotations

from typing import NamedTuple

from areal_alloc.strategy import ParallelStrategy

__all__ = [
    "LayoutPart",
    "describe_dims",
    "format_allocation",
    "format_layout",
    "format_spec",
    "layout_parts",
]


class LayoutPart(NamedTuple):
    """One printed part of a layout: ``attn``, ``ffn`` or the whole (label None).

    A named tuple, not a dataclass: layout searches build one per candidate.
    """

    label: str | None
    dims: tuple[tuple[str, int], ...]  # (letter, size) in print order, sizes of 1 included

    def written(self, keep: str = "d") -> str:
        """``d4t2``: the sizes other than 1, and the letters in ``keep`` always."""
        return "".join([f"{k}{v}" for k, v in self.dims if v != 1 or k in keep])

    @property
    def sizes(self) -> dict[str, int]:
        return dict(self.dims)


def layout_parts(parallel: ParallelStrategy, meshes: bool = False) -> tuple[LayoutPart, ...]:
    """The printed parts of ``parallel``.

    Canonically a layout is hybrid (attn and ffn parts) when its experts have their
    own tensor-parallel size. With ``meshes=True`` any layout with experts is
    shown as the two meshes Megatron builds: attention (d, p, t, c) and experts
    (expert-mesh d, p, expert t, e).
    """
    p = parallel
    if p.is_hybrid or (meshes and p.ep_size > 1):
        return (
            LayoutPart(
                "attn",
                (("d", p.dp_size), ("p", p.pp_size), ("t", p.tp_size), ("c", p.cp_size)),
            ),
            LayoutPart(
                "ffn",
                (
                    ("d", p.expert_mesh_dp_size),
                    ("p", p.pp_size),
                    ("t", p.etp_size),
                    ("e", p.ep_size),
                ),
            ),
        )
    return (
        LayoutPart(
            None,
            (
                ("d", p.dp_size),
                ("p", p.pp_size),
                ("t", p.tp_size),
                ("c", p.cp_size),
                ("e", p.ep_size),
            ),
        ),
    )


def format_layout(parallel: ParallelStrategy) -> str:
    """The dimensions part of the canonical string: ``d4t2`` or ``(attn:…|ffn:…)``."""
    parts = layout_parts(parallel)
    if len(parts) == 1:
        return parts[0].written()
    return "(" + "|".join(f"{part.label}:{part.written()}" for part in parts) + ")"


def format_spec(backend: str, parallel: ParallelStrategy) -> str:
    """``backend:dims`` without a name: what an engine's ``backend`` field holds."""
    return f"{backend}:{format_layout(parallel)}"


def format_allocation(backend: str, name: str | None, parallel: ParallelStrategy) -> str:
    """``backend[name]:dims``, e.g. ``fsdp[actor]:d4t2``."""
    if not name:
        return format_spec(backend, parallel)
    return f"{backend}[{name}]:{format_layout(parallel)}"


def describe_dims(parallel: ParallelStrategy) -> str:
    """``d4 t2``, or ``attn d4 p2 t2 c2 | ffn d2 p2 t4 e2``: every size of a hybrid part."""
    parts = layout_parts(parallel)
    if len(parts) == 1:
        return " ".join(f"{k}{v}" for k, v in parts[0].dims if v != 1 or k == "d")
    return " | ".join(
        f"{part.label} " + " ".join(f"{k}{v}" for k, v in part.dims) for part in parts
    )
