"""The step-time estimate against published measurements, with our defaults untouched.

Source of the measurements: the weak-scaling table of Narayanan et al. 2021, "Efficient
Large-Scale Language Model Training on GPU Clusters Using Megatron-LM" (arXiv:2104.04473), as
published in Megatron-LM's README: NVIDIA/Megatron-LM commit 50a4b5fa02 ("Release fixes",
2021-04-08), ``images/cases_april2021.png``, which the README shows with this text: "All models
use a vocabulary size of 51,200 and a sequence length of 2048 … the FLOPs are measured for
end-to-end training, i.e., includes all operations including data loading, optimization, and
even logging." The README of commit f2e5db402c^ adds: "Each cluster node has 8 NVIDIA 80GB A100
GPUs."

The table gives "achieved teraFLOP/s per GPU". They are counted with the paper's Eq. 3 (§5.1),
F = 96·B·s·l·h²·(1 + s/(6h) + V/(16·l·h)), where 96 = 24 × 4 for a step with activation
recomputation: the formula and its factor are quoted in bigcode-project/Megatron-LM PR #33
("General TFLOPs formula (borrowed from Equation 3 in Section 5.1 of
https://arxiv.org/pdf/2104.04473.pdf). The factor of 4 is when used with activation
check-pointing") and its V/(16·l·h) term in NVIDIA/Megatron-LM PR #995 ("consistent with the
Megatron-LM PTD-P paper's formula"). So a row's measured step time is F / (TFLOP/s × GPUs), and
our estimate of the same step gives our TFLOP/s as F / (our seconds × GPUs).

Which rows we test: the table gives the model-parallel size t·p, and the README of commit
2d767f4886 (2022-01-26) explains it: "For numbers larger than 8, typically tensor parallel of
size 8 was used. So, for example, the 145B model reports the total model parallel size of 64,
which means that this setup used TP=8 and PP=8." Up to 8 (one DGX node) we take it as tensor
parallelism inside the node, an assumption printed in the README table; those four rows need no
more and are tested within ±15 %, except the rows in ``KNOWN_MISSES``, which are recorded as
strict expected failures with their reason. Above 8 the layout is t8·p(m/8), but the
micro-batch size and the interleaving, which set the pipeline bubble, are not published: those
rows are estimated with one sequence per micro-batch and no interleaving (the smallest bubble of
the 1F1B schedule) and shown in the README, not asserted. Attention heads are not in the table
either; for multi-head attention they change no FLOP and no communication in the estimate, so we
use head size 128.

The rows are read from ``benchmarks/measurements.json`` (source ``megatron-lm-weak-scaling``,
the models from its ``models`` section), the one data file ``benchmarks/accuracy.py`` reads.

Not compared, because no citable copy was found here: the paper's (t, p) comparisons for the
162.2B model and its other orderings, and the iteration times of Korthikanti et al. 2022.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import pytest

from areal_alloc.architecture import Architecture
from areal_alloc.catalogue import find_gpu
from areal_alloc.estimate.speed import StepEstimate
from areal_alloc.estimate.speed_training import training_step
from areal_alloc.estimate.system import Hardware
from areal_alloc.model import ModelAllocation
from benchmarks.measured import load, paper_flops, rows

Cli = Callable[..., "subprocess.CompletedProcess[str]"]  # the `cli` fixture (conftest)

DATA = load()  # benchmarks/measurements.json, source "megatron-lm-weak-scaling"
SEQ = 2_048  # README (commit 50a4b5fa02): "a sequence length of 2048"
GPUS_PER_NODE = 8  # README (commit f2e5db402c^): "8 NVIDIA 80GB A100 GPUs" per node
TOLERANCE = 0.15  # issue 11: "within ±15 % for every row whose configuration we can express"


class Row(NamedTuple):
    """One row of ``images/cases_april2021.png`` (Megatron-LM commit 50a4b5fa02), as published."""

    name: str
    model: str  # the data file's model id, megatron-gpt-…
    hidden: int
    layers: int
    billions: float  # "Number of parameters (billion)"
    model_parallel: int  # "Model-parallel size" (t·p)
    gpus: int
    batch: int
    tflops: float  # "Achieved teraFLOP/s per GPU"


def _row(row: dict[str, Any]) -> Row:
    i = row["inputs"]
    config = DATA["models"][i["model"]]["config"]
    # the quote is the table's row: "145B | hidden 12288 | layers 80 | 145.6B | …"
    billions = float(row["quote"].split(" | ")[3].removesuffix("B"))
    return Row(
        i["model"].removeprefix("megatron-gpt-"),
        i["model"],
        config["hidden_size"],
        config["num_hidden_layers"],
        billions,
        i["model_parallel"],
        i["gpus"],
        i["global_batch"],
        row["measured"]["value"],
    )


WEAK_SCALING = tuple(_row(r) for r in rows(DATA, "train_tps", "megatron-lm-weak-scaling"))

#: Rows whose layout the source gives completely (model parallelism inside one node).
EXPRESSIBLE = tuple(row for row in WEAK_SCALING if row.model_parallel <= GPUS_PER_NODE)
#: README (commit 2d767f4886): "For numbers larger than 8, typically tensor parallel of size 8"
TP_ABOVE_ONE_NODE = 8
#: Rows outside ±15 %, and why: recorded, not hidden (strict: a change that brings one
#: within 15 % fails here until it is moved back among the passing rows).
#: Rows outside ±15 % with their reason (strict expected failures). The 1.7B row (h = 2304,
#: 44 % of peak in the table) passes since the element-wise kernels' HBM time, which grows
#: with h while the GEMMs' grows with h², is a term (areal_alloc/estimate/speed.py).
KNOWN_MISSES: dict[str, str] = {}


def gpt_config(row: Row) -> dict[str, object]:
    """The GPT of a row as a config.json (the data file's ``models``): GeLU MLP of 4h, tied
    embeddings, head size 128."""
    return dict(DATA["models"][row.model]["config"])


def layout(row: Row) -> ModelAllocation:
    m = row.model_parallel
    t = m if m <= GPUS_PER_NODE else TP_ABOVE_ONE_NODE
    p = m // t
    return ModelAllocation.from_str(f"megatron:d{row.gpus // m}p{p}t{t}")


def estimate(row: Row) -> StepEstimate:
    hardware = Hardware.from_gpu(find_gpu("A100-80GB"), GPUS_PER_NODE)
    return training_step(
        "megatron",
        Architecture.from_mapping(gpt_config(row), source=row.name),
        layout(row).parallel,
        hardware,
        tokens_per_step=row.batch * SEQ,
        tokens_per_micro_batch=SEQ,
        sequence_length=SEQ,
        recompute="full",
    )


def predicted_tflops(row: Row, seconds: float) -> float:
    """Eq. 3 of arXiv:2104.04473 (``benchmarks.measured.paper_flops``) over our seconds."""
    arch = Architecture.from_mapping(gpt_config(row), source=row.name)
    return paper_flops(arch, row.batch, SEQ) / (seconds * row.gpus * 1e12)


@pytest.mark.parametrize(
    ("name", "backend"),
    [
        ("1.7B", "megatron:d32"),
        ("18B", "megatron:d32t8"),
        ("145B", "megatron:d24p8t8"),  # the README's own example: "TP=8 and PP=8"
        ("530B", "megatron:d9p35t8"),
    ],
)
def test_the_layouts_follow_the_readme(name: str, backend: str) -> None:
    (row,) = [row for row in WEAK_SCALING if row.name == name]
    assert str(layout(row)) == backend
    assert layout(row).parallel.world_size == row.gpus


@pytest.mark.parametrize("row", WEAK_SCALING, ids=[row.name for row in WEAK_SCALING])
def test_our_parameter_count_matches_the_table(row: Row) -> None:
    # the table rounds to 0.1B and counts learned position embeddings and biases, which a
    # Hugging Face-style GPT config here leaves out: within 5 %
    total = Architecture.from_mapping(gpt_config(row)).parameters.total / 1e9
    assert abs(total / row.billions - 1) <= 0.05, (row.name, total)


@pytest.mark.parametrize(
    "row",
    [
        pytest.param(
            row,
            id=row.name,
            marks=[pytest.mark.xfail(strict=True, reason=KNOWN_MISSES[row.name])]
            if row.name in KNOWN_MISSES
            else [],
        )
        for row in EXPRESSIBLE
    ],
)
def test_achieved_tflops_within_15_percent(row: Row) -> None:
    ours = predicted_tflops(row, estimate(row).seconds)
    assert abs(ours / row.tflops - 1) <= TOLERANCE, (row.name, ours, row.tflops)


def test_a_user_gets_the_same_estimate_from_the_command_line(cli: Cli, tmp_path: Path) -> None:
    row = EXPRESSIBLE[-1]  # 18B on megatron:d32t8
    config = tmp_path / "config.json"
    config.write_text(json.dumps(gpt_config(row)), encoding="utf-8")
    result = cli(
        "layouts", "megatron", str(row.gpus), "--model", str(config), "--gpu", "A100-80GB",
        "--rank", "--json", "--tokens", str(SEQ), "--tokens-per-step", str(row.batch * SEQ),
        "--seq-len", str(SEQ), "--recompute", "full", "--gpus-per-node", str(GPUS_PER_NODE),
        "--max-tp", str(row.model_parallel), "--max-pp", "1", "--max-cp", "1",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    (entry,) = [e for e in json.loads(result.stdout) if e["backend"] == str(layout(row))]
    assert entry["step_seconds"] == pytest.approx(estimate(row).seconds, rel=1e-9)
    assert abs(predicted_tflops(row, entry["step_seconds"]) / row.tflops - 1) <= TOLERANCE


def comparison_table() -> str:
    """The README's table: ``python tests/estimate/test_published_measurements.py``."""
    lines = [
        "| model | layout (GPUs) | published TFLOP/s per GPU | estimated | error | largest terms |",
        "|---|---|---:|---:|---:|---|",
    ]
    for row in WEAK_SCALING:
        step = estimate(row)
        ours = predicted_tflops(row, step.seconds)
        terms = ", ".join(
            f"{term.name} {term.seconds:.2f} s"
            for term in sorted(step.terms, key=lambda t: -t.seconds)[:3]
        )
        tested = "" if row in EXPRESSIBLE else " (shown, not tested)"
        if row.name in KNOWN_MISSES:
            tested = " (outside ±15 %: recorded)"
        lines.append(
            f"| {row.name} | `{layout(row)}` ({row.gpus}) | {row.tflops} | {ours:.1f} "
            f"| {(ours / row.tflops - 1) * 100:+.1f} %{tested} | {terms} |"
        )
    return "\n".join(lines)


def test_the_docs_show_this_comparison() -> None:
    readme = (Path(__file__).parents[2] / "docs" / "accuracy.md").read_text(encoding="utf-8")
    assert comparison_table() in readme


if __name__ == "__main__":
    print(comparison_table())
