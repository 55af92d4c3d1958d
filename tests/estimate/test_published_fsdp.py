"""The FSDP step-time estimate against published measurements: shown, not asserted.

Source: MosaicML's MPT training benchmarks, mosaicml/llm-foundry commit 4952183768
(2024-04-22), ``scripts/train/benchmarking/README.md``: measured tokens per second per GPU
of PyTorch FSDP runs with their GPU count, micro-batch, global batch, sequence length,
sharding strategy and activation checkpointing. The models' shapes are their training
configs, ``scripts/train/yamls/pretrain/mpt-{1b,3b,7b,13b,30b}.yaml`` (commit cc8351c4d7,
2024-05-08): ``d_model``, ``n_heads``, ``n_layers``, ``expansion_ratio: 4``,
``vocab_size: 50368``. The benchmark's parameter counts include a learned position
embedding of ``SeqLen × d_model`` (the count grows by exactly that with the sequence
length), which we add for the count check and which does no matmul work.

Which rows: every row of the tables "H100 80GB BF16 (Large Scale, >= 128 GPUs)",
"H100 80GB BF16" and "A100 80GB with 1600 Gbps node-node interconnect (RoCE)" for the
1b–30b models with ``FULL_SHARD`` and ``amp_bf16``: the reference's FSDP engine shards
fully (``SHARD_GRAD_OP`` rows are another algorithm), 70b uses another precision mode,
and A100 40GB has no cited speeds in our catalogue. 1600 Gbps per 8-GPU node is our
default of 200 Gb/s per GPU; the H100 tables state no network, so the default stands.

Nothing here is tuned: the estimate runs on the defaults, with the attention kernel each
run used (``inputs.attn_impl``: ``triton``, FlashAttention-1's Triton port, at half
FlashAttention-2's speed; llm-foundry's submit_benchmarks.py default at the commit that
published the tables). The errors are largest where the measured efficiency is far from
our one GEMM constant (short sequences on A100, where the estimate is slow). So the
comparison is shown in docs/accuracy.md, not asserted; what is asserted is that the
shapes are the benchmark's (parameter counts) and that docs/accuracy.md shows this run.

The rows and the shapes are read from ``benchmarks/measurements.json`` (source
``llm-foundry-mpt`` and its ``models``), the one data file ``benchmarks/accuracy.py``
reads too.
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any, NamedTuple

import pytest

from areal_alloc.architecture import Architecture
from benchmarks.measured import architecture as data_architecture
from benchmarks.measured import compare, load, rows

DATA = load()  # benchmarks/measurements.json, source "llm-foundry-mpt"


class Run(NamedTuple):
    """One row of the benchmark README (commit 4952183768), as published."""

    gpu: str
    model: str  # the data file's model id, mosaicml/mpt-…
    seq: int
    gpus: int
    micro_batch: int
    grad_accum: int
    global_batch: int
    checkpointing: bool
    tokens_per_gpu: float  # "Throughput (T/s/GPU)"
    params: int  # "NumParams"
    id: str  # the data file's row


def _run(row: dict[str, Any]) -> Run:
    i = row["inputs"]
    return Run(
        i["gpu"],
        i["model"],
        i["seq_len"],
        i["gpus"],
        i["micro_batch"],
        i["grad_accum"],
        i["global_batch"],
        i["activation_checkpointing"] == "full",
        row["measured"]["value"],
        i["num_params_published"],
        row["id"],
    )


RUNS = tuple(_run(row) for row in rows(DATA, "train_tps", "llm-foundry-mpt"))


def architecture(model: str) -> Architecture:
    """mpt-*.yaml (commit cc8351c4d7) as the data file's ``models`` section holds it."""
    return data_architecture(DATA, model)


def estimated_tokens_per_gpu(run: Run) -> float:
    """The row through ``benchmarks/measured.py``'s adapter (one home for how a row is
    estimated: the run's GPU and node, its batch, recomputation and attention kernel)."""
    (row,) = (r for r in rows(DATA, "train_tps", "llm-foundry-mpt") if r["id"] == run.id)
    estimate = compare(DATA, row).estimate
    assert estimate is not None, run
    return estimate


def _id(run: Run) -> str:
    return f"{run.gpu}-{run.model.removeprefix('mosaicml/mpt-')}-{run.seq}-{run.gpus}"


@pytest.mark.parametrize("run", RUNS, ids=[_id(r) for r in RUNS])
def test_our_shape_is_the_benchmarks(run: Run) -> None:
    hidden = architecture(run.model).hidden_size
    ours = architecture(run.model).parameters.total + run.seq * hidden  # + position embedding
    assert abs(ours / run.params - 1) < 0.001, (ours, run.params)


BUCKETS = ("≤ 4k", "8k–16k", "32k–64k")


def _bucket(seq: int) -> str:
    return BUCKETS[0] if seq <= 4096 else (BUCKETS[1] if seq <= 16384 else BUCKETS[2])


def _percent(fraction: float) -> str:
    rounded = round(fraction * 100)
    return f"{rounded:+d} %" if rounded else "0 %"


def summary_table() -> str:
    """The README's summary: ``python tests/estimate/test_published_fsdp.py``."""
    groups: dict[tuple[str, str], list[float]] = {}
    for run in RUNS:
        error = estimated_tokens_per_gpu(run) / run.tokens_per_gpu - 1
        groups.setdefault((run.gpu, _bucket(run.seq)), []).append(error)
    lines = [
        "| GPU | sequence | runs | within ±15 % | median error | range |",
        "|---|---|---:|---:|---:|---|",
    ]
    for gpu, bucket in sorted(groups, key=lambda key: (key[0], BUCKETS.index(key[1]))):
        errors = groups[gpu, bucket]
        lines.append(
            f"| {gpu} | {bucket} | {len(errors)} | {sum(abs(e) <= 0.15 for e in errors)} "
            f"| {_percent(statistics.median(errors))} | {_percent(min(errors))} … "
            f"{_percent(max(errors))} |"
        )
    return "\n".join(lines)


def test_the_docs_show_this_comparison() -> None:
    readme = (Path(__file__).parents[2] / "docs" / "accuracy.md").read_text(encoding="utf-8")
    assert summary_table() in readme


if __name__ == "__main__":
    print(summary_table())
