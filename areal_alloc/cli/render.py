"""A plan as terminal text: a row per engine, the total against the cluster, a node map."""

from __future__ import annotations

from areal_alloc.catalogue import GPU, device_total
from areal_alloc.estimate.memory import MemoryEstimate, readable_bytes
from areal_alloc.estimate.pipeline_split import LISTED_RANK_STAGES, PipelineSplit
from areal_alloc.format import describe_dims
from areal_alloc.limits import counted
from areal_alloc.plan import Plan
from areal_alloc.report._grid import MAX_ROWS, Cell, Gap, map_rows

__all__ = [
    "describe_dims",
    "host_lines",
    "not_estimated_lines",
    "pipeline_lines",
    "render_memory",
    "render_plan",
    "symbols",
    "table",
]

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
        lines.extend(_node_map(plan))
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


def pipeline_lines(split: PipelineSplit) -> list[str]:
    """``explain``'s layers per pipeline rank: each listed rank's share
    (:meth:`PipelineSplit.describe`), the ranks left out counted as the rank-group table
    counts its groups (``… (N more)``)."""
    where = "; virtual stage i runs on rank i mod p" if split.vpp > 1 else ""
    lines = [f"pipeline stages ({split.rule}{where}):"]
    listed = split.listed_ranks()
    for n, rank in enumerate(listed):
        if n and rank != listed[n - 1] + 1:
            lines.append(f"  … ({rank - listed[n - 1] - 1:,} more)")
        lines.append(f"  rank {rank}: {split.describe(rank, LISTED_RANK_STAGES)}")
    return lines


def render_memory(estimate: MemoryEstimate, title: str) -> str:
    """Every term of one estimate with its formula, then the total against the GPU."""
    rows = [[t.name, readable_bytes(t.bytes), t.formula] for t in estimate.terms]
    lines = [title, *("  " + line for line in table(rows))]
    if estimate.kv_cache is not None:
        kv = estimate.kv_cache
        lines.append(f"  KV bytes per token per GPU: {kv.bytes_per_token:,} = {kv.formula}")
        if kv.tokens is not None:
            lines.append(
                f"  KV cache: {kv.tokens:,} tokens = {kv.sequences:,} sequences of "
                f"{kv.sequence_length:,} tokens"
                + (f" (the run keeps {kv.concurrency:,} in flight)" if kv.concurrency else "")
            )
    lines.extend(_phase_lines(estimate))
    total = f"  total {readable_bytes(estimate.total)} per GPU"
    if estimate.capacity is not None:
        total += f" of {readable_bytes(estimate.capacity)}: {verdict_text(estimate)}"
    lines.append(total)
    lines.extend(f"  assumed: {a}" for a in estimate.assumptions)
    return "\n".join(lines)


def verdict_text(estimate: MemoryEstimate) -> str:
    """``37.4 GiB free``, ``AT THE EDGE (…)`` or ``DOES NOT FIT`` (estimate.margin)."""
    verdict = estimate.verdict
    headroom = estimate.headroom or 0
    if verdict == "fits":
        return f"{readable_bytes(headroom)} free"
    if verdict == "does not fit":
        return "DOES NOT FIT"
    error = estimate.error
    if estimate.kv_cache is not None and not estimate.term("colocated"):
        return (
            f"AT THE EDGE: the KV cache holds {estimate.kv_cache.tokens or 0:,} tokens, within "
            f"the KV estimate's measured error (±{error.percent}) of one "
            f"{estimate.kv_cache.sequence_length:,}-token sequence"
        )
    side = (
        f"{readable_bytes(headroom)} free"
        if headroom >= 0
        else f"over by {readable_bytes(-headroom)}"
    )
    return (
        f"AT THE EDGE ({side}, within the estimate's measured error "
        f"{estimate.edge_error}: it may not fit)"
    )


def capacity_line(gpu: GPU) -> str:
    """Where a catalogue GPU's capacity comes from: what it reports to torch, or (flagged)
    its nameplate where no reported figure could be cited (catalogue.REPORTED_GIB)."""
    total = device_total(gpu)
    what = "what it reports to torch" if total.reported else "its nameplate, not what it reports"
    size = readable_bytes(total.gib * (1 << 30))
    return f"  capacity: {size} per {gpu.name}, {what} ({total.source})"


def _phase_lines(estimate: MemoryEstimate) -> list[str]:
    """Each phase the engine goes through with its bytes and its terms (those that
    differ from the peak's, with their own bytes); nothing for a single phase."""
    if len(estimate.phases) < 2:
        return []
    sizes = estimate.phase_bytes
    peak = set(estimate.terms)
    rows = [
        [
            p.name,
            readable_bytes(sizes[p.name]),
            " + ".join(
                t.name if t in peak else f"{t.name} {readable_bytes(t.bytes)}" for t in p.terms
            ),
        ]
        for p in estimate.phases
    ]
    return [
        f"  phases (the terms above are the peak, {estimate.phase}):",
        *("    " + line for line in table(rows)),
    ]


#: Node rows drawn at most; beyond it the middle of the map is summarised (the report's
#: bound: both draw the rows of :func:`areal_alloc.report._grid.map_rows`).
MAX_MAP_ROWS = MAX_ROWS
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


def _node_map(plan: Plan) -> list[str]:
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
