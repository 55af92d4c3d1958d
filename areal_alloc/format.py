"""The one canonical formatter: models back to strings that parse to equal models.

Dimensions are written in the order d, p, t, c, e: ``d`` always, other sizes
of 1 left out (``vllm:d1t4``). A layout whose experts have their own tensor-parallel
size is written in the hybrid form ``BACKEND:(attn:…|ffn:…)``, with ``d`` on
both sides, so expert tensor parallelism is never lost.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from areal_alloc.model import ModelAllocation, ParallelStrategy

__all__ = ["format_allocation", "format_layout", "format_spec"]


def _dims(pairs: tuple[tuple[str, int], ...], keep: str = "") -> str:
    return "".join(f"{letter}{size}" for letter, size in pairs if size != 1 or letter in keep)


def format_layout(parallel: ParallelStrategy) -> str:
    """The dimensions part of the canonical string: ``d4t2`` or ``(attn:…|ffn:…)``."""
    p = parallel
    if p.is_hybrid:
        attn = _dims((("d", p.dp_size), ("p", p.pp_size), ("t", p.tp_size), ("c", p.cp_size)), "d")
        ffn = _dims(
            (("d", p.expert_mesh_dp_size), ("p", p.pp_size), ("t", p.etp_size), ("e", p.ep_size)),
            "d",
        )
        return f"(attn:{attn}|ffn:{ffn})"
    return _dims(
        (("d", p.dp_size), ("p", p.pp_size), ("t", p.tp_size), ("c", p.cp_size), ("e", p.ep_size)),
        "d",
    )


def format_spec(backend: str, parallel: ParallelStrategy) -> str:
    """``backend:dims`` without a name: what an engine's ``backend`` field holds."""
    return f"{backend}:{format_layout(parallel)}"


def format_allocation(allocation: ModelAllocation) -> str:
    """``backend[name]:dims``, e.g. ``fsdp[actor]:d4t2``."""
    if not allocation.name:
        return format_spec(allocation.backend, allocation.parallel)
    return f"{allocation.backend}[{allocation.name}]:{format_layout(allocation.parallel)}"
