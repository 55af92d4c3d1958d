"""One engine's memory as text: its terms, its phases, its verdict against the GPU and where
the GPU's capacity comes from; a pipeline's layers per stage."""

from __future__ import annotations

from areal_alloc.catalogue import GPU, device_total
from areal_alloc.cli.render import table
from areal_alloc.estimate.memory import MemoryEstimate, readable_bytes
from areal_alloc.estimate.pipeline_split import LISTED_RANK_STAGES, PipelineSplit

__all__ = ["capacity_line", "pipeline_lines", "render_memory", "verdict_text"]


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
