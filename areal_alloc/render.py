"""A plan as terminal text: a row per engine, the total against the cluster, a node map."""

from __future__ import annotations

from areal_alloc.model import ModelAllocation
from areal_alloc.plan import Plan

__all__ = ["describe_dims", "render_plan", "symbols", "table"]

FREE = "·"


def describe_dims(allocation: ModelAllocation) -> str:
    """``d4 t2``, or ``attn d4 p2 t2 c2 | ffn d2 p2 t4 e2`` for a hybrid layout."""
    p = allocation.parallel
    if p.is_hybrid:
        return (
            f"attn d{p.dp_size} p{p.pp_size} t{p.tp_size} c{p.cp_size} | "
            f"ffn d{p.expert_mesh_dp_size} p{p.pp_size} t{p.etp_size} e{p.ep_size}"
        )
    pairs = [("d", p.dp_size), ("p", p.pp_size), ("t", p.tp_size), ("c", p.cp_size)]
    pairs.append(("e", p.ep_size))
    shown = [f"{k}{v}" for k, v in pairs if v != 1 or k == "d"]
    return " ".join(shown)


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


def table(rows: list[list[str]]) -> list[str]:
    """Left-aligned columns, two spaces apart, trailing spaces trimmed."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return [
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
        for row in rows
    ]


def render_plan(plan: Plan, title: str = "allocation plan") -> str:
    lines: list[str] = []
    if plan.cpu_only:
        lines.append(f"{title}: CPU-only run (cluster.n_gpus_per_node=0): no GPU capacity check")
    else:
        lines.append(
            f"{title}: {plan.n_nodes} node{'s' if plan.n_nodes != 1 else ''} × "
            f"{plan.n_gpus_per_node} GPUs = {plan.capacity} GPUs"
        )
    rows = [["engine", "backend", "dims", "world", "instances", "scheduling", "GPUs", "note"]]
    for e in plan.engines:
        a = e.allocation
        s = a.scheduling_strategy
        rows.append(
            [
                e.key,
                e.spec,
                describe_dims(a),
                str(a.parallel.world_size),
                f"{a.n_instances} × {a.instance_size}" if a.is_inference else "-",
                f"colocated → {s.target}" if s.is_colocated else "separate",
                str(e.gpus),
                e.note or "",
            ]
        )
    lines.append("")
    lines.extend("  " + line for line in table(rows))
    lines.append("")
    if plan.cpu_only:
        lines.append(f"total: {plan.total_gpus} GPUs of layout (not checked: CPU-only run)")
    else:
        free = plan.capacity - plan.total_gpus
        lines.append(f"total: {plan.total_gpus} of {plan.capacity} GPUs used, {free} free")
        lines.extend(_node_map(plan))
    for warning in plan.warnings:
        lines.append(f"warning: {warning}")
    return "\n".join(lines)


def _node_map(plan: Plan) -> list[str]:
    """One row per node, one column per GPU; inference instances alternate case (R r R r)."""
    per_node = plan.n_gpus_per_node
    symbol = symbols([p.key for p in plan.placements])
    owner: dict[int, str] = {}
    for placement in plan.placements:
        allocation = plan[placement.key].allocation
        size = allocation.instance_size if allocation.is_inference else len(placement.gpus)
        for index, gpu in enumerate(placement.gpus):
            letter = symbol[placement.key]
            owner[gpu] = letter.lower() if (index // size) % 2 else letter
    lines = ["", f"node map (one column per GPU, {FREE} free):"]
    header = " ".join(str(g % 10) for g in range(per_node))
    lines.append(f"  {'GPU':<8}{header}")
    for node in range(plan.n_nodes):
        cells = [owner.get(node * per_node + g, FREE) for g in range(per_node)]
        lines.append(f"  {'node ' + str(node):<8}{' '.join(cells)}")
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
        nodes = sorted({g // per_node for g in placement.gpus})
        where = ", ".join(f"node {n}" for n in nodes)
        lines.append(f"  {letter} = {placement.key} {engine.spec}{extra}  ({where})")
    return lines
