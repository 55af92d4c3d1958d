"""A plan as terminal text: a row per engine, the total against the cluster, a node map."""

from __future__ import annotations

from areal_alloc.cli.node_map import node_map_lines
from areal_alloc.estimate.memory import readable_bytes
from areal_alloc.format import describe_dims
from areal_alloc.limits import counted
from areal_alloc.plan import Plan

__all__ = [
    "describe_dims",
    "host_lines",
    "not_estimated_lines",
    "render_plan",
    "table",
]


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
            f"{title}: {counted(plan.n_nodes, 'node')} × {counted(plan.n_gpus_per_node, 'GPU')} "
            f"= {counted(plan.capacity, 'GPU')}"
        )
    rows = [["engine", "backend", "dims", "world", "instances", "scheduling", "GPUs", "note"]]
    for e in plan.engines:
        a = e.allocation
        s = a.scheduling_strategy
        rows.append(
            [
                e.key,
                e.spec,
                describe_dims(a.parallel),
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
        lines.append(
            f"total: {counted(plan.total_gpus, 'GPU')} of layout (not checked: CPU-only run)"
        )
    else:
        free = plan.capacity - plan.total_gpus
        lines.append(
            f"total: {plan.total_gpus} of {counted(plan.capacity, 'GPU')} used, {free} free"
        )
        lines.extend(node_map_lines(plan))
    lines.extend(_memory_table(plan))
    lines.extend(_pace_lines(plan))
    lines.extend(host_lines(plan))
    for assumption in plan.assumptions:
        lines.append(f"assumed: {assumption}")
    for warning in plan.warnings:
        lines.append(f"warning: {warning}")
    return "\n".join(lines)


def not_estimated_lines(plan: Plan) -> list[str]:
    """One line per engine whose model was named but not found (printed even when quiet)."""
    return [f"{e.key} not estimated: {e.not_estimated}" for e in plan.engines if e.not_estimated]


def _memory_table(plan: Plan) -> list[str]:
    engines = [e for e in plan.engines if e.memory is not None or e.not_estimated]
    if not engines:
        return []
    gpu = f"{plan.gpu}, {readable_bytes(plan.gpu_memory)}" if plan.gpu_memory else "no GPU named"
    if plan.gpu_memory and plan.gpu_origin:
        gpu += f", {plan.gpu_origin}"  # from --gpu, detected by nvidia-smi, from cluster.gpu
    # the peak phase (memory.PHASES) sets "per GPU"; its largest term says what to change
    rows = [["engine", "per GPU", "fits", "peak phase", "largest term", "KV cache per instance"]]
    for e in plan.engines:
        m = e.memory
        if m is None:
            if e.not_estimated:
                rows.append(
                    [e.key, "not estimated", "-", "-", "(model not found: see warning)", ""]
                )
            continue
        fits = {"fits": "yes", "at the edge": "EDGE", "does not fit": "NO", None: "-"}[m.verdict]
        kv = ""
        if m.kv_cache is not None:  # its bytes per token: explain, and the plan's JSON
            kv = (
                f"{m.kv_cache.bytes_per_token:,} B/token"
                if m.kv_cache.tokens is None
                else f"{m.kv_cache.tokens:,} tokens = {m.kv_cache.sequences:,} × "
                f"{m.kv_cache.sequence_length:,}"
            )
        rows.append(
            [
                e.key,
                readable_bytes(m.total),
                fits,
                m.phase or "-",
                f"{m.largest.name} {readable_bytes(m.largest.bytes)}",
                kv,
            ]
        )
    return [
        "",
        f"memory per GPU (estimate; {gpu}; every term: areal-alloc explain SPEC --model M):",
        *("  " + line for line in table(rows)),
    ]


def _pace_lines(plan: Plan) -> list[str]:
    pace = plan.pace
    if pace is None:
        return []
    training = [e for e in pace.engines if e.key != "rollout"]
    parts = " + ".join(f"{e.key} {e.seconds:.3g} s" for e in training)
    lines = ["", f"pace per RL step (estimate; {pace.sequences:,} sequences):"]
    if pace.generate_seconds:
        lines.append(f"  rollout   {pace.generate_seconds:.3g} s generating")
    lines.append(f"  training  {pace.train_seconds:.3g} s ({parts})")
    if pace.host_text:
        lines.append(f"  host      {pace.host_text}")
    for term in pace.step_terms:  # the weight update, a colocated step's offload/onload
        lines.append(f"  {term.name}  {term.seconds:.3g} s ({term.formula})")
    lines.append(f"  step      {pace.step_seconds:.3g} s {pace.mode}")
    lines.append(f"  {pace.advice}")
    if pace.calibration:
        lines.append(f"  calibrated: {pace.calibration}")
    return lines


def host_lines(plan: Plan) -> list[str]:
    """Host memory and CPUs per node, term by term (``areal_alloc.estimate.host``): shown
    when the run asks a scheduler for CPUs and memory or keeps something in host memory, or
    when a host figure is given (a detected one alone, this machine's, adds nothing)."""
    host = plan.host
    if host is None:
        return []
    given = [s for s in (host.memory, host.cpus) if s is not None and not s.detected]
    if not host.terms and not given:
        return []
    figures = []
    if host.memory is not None:
        figures.append(f"{readable_bytes(host.memory.value)} {host.memory.origin}")
    if host.cpus is not None:
        figures.append(f"{host.cpus.value:,} CPUs {host.cpus.origin}")
    where = f"scheduler.type={host.scheduler}" if host.scheduler else "scheduler.type not set"
    lines = [
        "",
        f"host per node ({where}; "
        + ("; ".join(figures) if figures else "no host figure: give --host-memory-gib")
        + "):",
    ]
    if not host.terms:
        lines.append("  nothing asked of a scheduler or kept in host memory is estimated")
        return lines
    rows = [["nodes", "term", "amount", "formula"]]
    for group in host.groups:
        where = group.label.removeprefix("nodes ").removeprefix("node ")
        for term in group.terms:
            amount = f"{term.amount:,} CPUs" if term.kind == "cpus" else readable_bytes(term.amount)
            phases = f" [{', '.join(term.phases)}]" if 0 < len(term.phases) < 3 else ""
            rows.append([where, term.name, amount, term.formula + phases])
        summary = []
        if group.of("request"):
            asked = f"asked {readable_bytes(group.total('request'))}"
            if host.ray_memory is not None:
                asked += f" of Ray's {readable_bytes(host.ray_memory)}"
            elif host.memory is not None:
                asked += f" of {readable_bytes(host.memory.value)}"
            summary.append(asked)
        if group.of("cpus"):
            summary.append(
                f"{group.total('cpus'):,}"
                + (f" of {host.cpus.value:,}" if host.cpus is not None else "")
                + " CPUs"
            )
        if group.of("memory"):
            phase, peak = group.peak
            summary.append(
                f"in use {readable_bytes(peak)} ({phase})"
                + (f" of {readable_bytes(host.memory.value)}" if host.memory is not None else "")
            )
        rows.append([where, "total", "", "; ".join(summary)])
    lines.extend("  " + line for line in table(rows))
    return lines
