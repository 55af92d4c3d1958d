"""One layout as ``explain`` shows it: its parts, world size and rank groups, as text
(:func:`layout_text`) or as the JSON's fields (:func:`layout_json`)."""

from __future__ import annotations

from collections.abc import Sequence

from areal_alloc.cli.render import table
from areal_alloc.errors import AllocationError, AllocationValidationError
from areal_alloc.format import layout_parts
from areal_alloc.limits import counted
from areal_alloc.model import ModelAllocation
from areal_alloc.rankgroups import (
    JSON_MAX_RANKS,
    listed_rank_groups,
    order_refusal,
    summarize_rank_groups,
)

__all__ = ["TEXT_MAX_GROUPS", "layout_json", "layout_text"]


#: Groups the text of ``explain`` lists per kind at most: a larger ``--groups`` is cut to
#: it, and the output says how many were left out (each group is shown in one short form,
#: so the text stays a few hundred KB at most).
TEXT_MAX_GROUPS = 256


def layout_text(spec: str, order: str, show: int) -> tuple[str, AllocationError | None]:
    """``explain``'s text of a layout: its parts, world size, experts and canonical form,
    and the first of its rank groups per kind in ``order`` (``show`` per kind, at most
    :data:`TEXT_MAX_GROUPS`); the refusal megatron-core would raise for the order, if any."""
    alloc = ModelAllocation.from_str(spec)
    p = alloc.parallel
    lines = [f"{alloc}  ({alloc.backend}, {'inference' if alloc.is_inference else 'training'})"]
    parts = layout_parts(p, meshes=not alloc.is_inference)
    if len(parts) > 1:
        rows = [["part", "d", "p", "t", "c", "e", "GPUs"]]
        for part in parts:
            sizes = part.sizes
            rows.append(
                [str(part.label)]
                + [str(sizes[k]) if k in sizes else "-" for k in "dptce"]
                + [str(p.world_size)]
            )
    else:
        sizes = parts[0].sizes
        rows = [
            ["d", "p", "t", "c", "e", "GPUs"],
            [*(str(sizes[k]) for k in "dptce"), str(p.world_size)],
        ]
    lines.append("")
    lines.extend("  " + row for row in table(rows))
    lines.append("")
    lines.append(
        f"world size: d{p.dp_size}·t{p.tp_size}·p{p.pp_size}·c{p.cp_size} = "
        f"{counted(p.world_size, 'GPU')}"
    )
    if alloc.is_inference:
        lines.append(
            f"inference: {alloc.n_instances} server instance(s) of t{p.tp_size}·p{p.pp_size} = "
            f"{counted(alloc.instance_size, 'GPU')} each"
        )
        return "\n".join(lines), None
    if p.ep_size > 1 or p.etp_size > 1:
        lines.append(
            f"experts: expert model-parallel size p{p.pp_size}·etp{p.etp_size}·e{p.ep_size} = "
            f"{p.expert_model_parallel_size}, expert data parallel {p.expert_mesh_dp_size} "
            f"(world / {p.expert_model_parallel_size})"
        )
    lines.append(f"canonical: {alloc.spec}")
    lines.append("")
    refusal = order_refusal(p, order)  # an order that is no order raises here
    if refusal is not None:
        lines.append(f"rank groups: megatron-core refuses this layout in order {order}")
        return "\n".join(lines), AllocationValidationError(refusal)
    summaries = summarize_rank_groups(alloc, order, limit=min(show, TEXT_MAX_GROUPS))
    lines.append(f"rank groups (Megatron order {order}; the first name varies fastest):")
    rows = [["group", "size", "count", "first groups"]]
    for summary in summaries:
        shown = " ".join(_short(g) for g in summary.first)
        more = f" … ({summary.omitted:,} more)" if summary.omitted else ""
        rows.append([summary.name, str(summary.size), f"{summary.count:,}", shown + more])
    lines.extend("  " + row for row in table(rows))
    if show > TEXT_MAX_GROUPS:
        cut = sum(min(show, s.count) - len(s.first) for s in summaries)
        if cut:
            lines.append(
                f"--groups {show:,}: the text lists at most {TEXT_MAX_GROUPS} groups per kind, "
                f"so {cut:,} of the groups asked for are left out; --json lists every group "
                f"up to {JSON_MAX_RANKS:,} ranks per kind"
            )
    return "\n".join(lines), None


def _short(group: Sequence[int]) -> str:
    if len(group) > 8:
        return "[" + ", ".join(map(str, group[:4])) + f", … {group[-1]}]"
    return "[" + ", ".join(map(str, group)) + "]"


def layout_json(alloc: ModelAllocation, order: str, groups: int | None) -> dict[str, object]:
    """The layout's fields of ``explain --json``: its sizes, parts and rank groups in
    ``order`` (``groups`` per kind; None: every group, up to JSON_MAX_RANKS ranks a kind)."""
    p = alloc.parallel
    listed, counts = listed_rank_groups(alloc, order, limit=groups)
    return {
        "spec": str(alloc),
        "backend": alloc.backend,
        "world_size": p.world_size,
        "dp": p.dp_size,
        "tp": p.tp_size,
        "pp": p.pp_size,
        "cp": p.cp_size,
        "ep": p.ep_size,
        "etp": p.etp_size,
        "edp": p.expert_mesh_dp_size,
        "order": order,
        "parts": [
            {"part": part.label, **part.sizes}
            for part in layout_parts(p, meshes=not alloc.is_inference)
        ],
        "rank_groups": listed,
        "rank_group_counts": counts,
    }
