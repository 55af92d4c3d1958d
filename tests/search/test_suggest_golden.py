"""Golden proposals on the reference's own example sizes (issue 29, item 5): for each, the
split and layouts ``suggest`` proposes on H100-80GB nodes, and why an expert would run it.

The runs' shapes are the reference's examples at areal-project/AReaL@
cbff54d645d2cd8ee1f1c358a82f3f473588433d (train_dataset.batch_size, gconfig.n_samples,
gconfig.max_new_tokens, train_dataset.max_length as the prompt), at the GPU counts issue 29
names; every other setting is the reference's default (no gradient checkpointing, the
actor and a colocated ref, asynchronous: max_head_offpolicyness > 0 in every example).
A change of the estimates that moves a proposal fails here: say why in the change.
"""

from __future__ import annotations

import json

import pytest

from areal_alloc.cli import main
from areal_alloc.model import ModelAllocation

GOLDEN = [
    pytest.param(
        # examples/math/gsm8k_grpo.yaml: Qwen2.5-1.5B-Instruct, batch 256 × 4 samples,
        # 1,024 new tokens (its own cluster: 1 node)
        [
            "--model",
            "Qwen2.5-1.5B",
            "--gpus",
            "16",
            "--batch-size",
            "256",
            "--n-samples",
            "4",
            "--prompt-len",
            "1024",
            "--gen-len",
            "1024",
            "--train-backend",
            "fsdp",
        ],
        # a node each: the rollout cannot go below one node. Training without gradient
        # checkpointing (the reference's default) at 32,768-token micro-batches keeps the
        # Hugging Face layer's activations of 2,048-token sequences: c2 halves them to fit
        # 80 GB, inside the node (Ulysses over 2 GPUs)
        ("sglang:d4t2", 8, "fsdp:d4c2", 8, 0),
        "the rollout cannot give up a node (8 GPUs)",
        id="Qwen2.5-1.5B on 16",
    ),
    pytest.param(
        # examples/tau2/config_8b_airline.yaml: Qwen3-8B on archon, batch 30 × 8 samples,
        # 8,192 new tokens (its own cluster: 3 nodes)
        [
            "--model",
            "Qwen3-8B",
            "--gpus",
            "64",
            "--batch-size",
            "30",
            "--n-samples",
            "8",
            "--prompt-len",
            "1024",
            "--gen-len",
            "8192",
            "--train-backend",
            "archon",
        ],
        # 240 sequences in flight: six t8 servers hold 40 each, and decoding, bound by the
        # weights each GPU reads per step, reads an eighth of them per GPU; training of
        # 9,216-token sequences on two nodes with c4 inside each; the two sides balance
        ("sglang:d6t8", 48, "archon:d4c4", 16, 0),
        "balanced",
        id="Qwen3-8B on 64",
    ),
    pytest.param(
        # examples/dte/gsm8k_grpo_qwen3_30b_a3b.yaml: batch 8 × 4 samples, 2,048 new tokens
        [
            "--model",
            "Qwen3-30B-A3B",
            "--gpus",
            "32",
            "--batch-size",
            "8",
            "--n-samples",
            "4",
            "--prompt-len",
            "1024",
            "--gen-len",
            "2048",
        ],
        # 32 sequences: two t8 servers; training needs two nodes for the model's states
        # (61 GB of bf16 weights, float32 main params and Adam: p4 t4 e2), so no node can
        # move to the rollout even though training is far faster
        ("sglang:d2t8", 16, "megatron:d1p4t4e2", 16, 0),
        "no split with a node (8 GPUs) more for rollout fits",
        id="Qwen3-30B-A3B on 32",
    ),
    pytest.param(
        # examples/tau2/config_30b_moe_airline.yaml: batch 16 × 8 samples, 8,192 new tokens
        [
            "--model",
            "Qwen3-30B-A3B",
            "--gpus",
            "64",
            "--batch-size",
            "16",
            "--n-samples",
            "8",
            "--prompt-len",
            "1024",
            "--gen-len",
            "8192",
        ],
        # 128 sequences on six t8 servers; training on two nodes, context parallel c8
        # inside a node (1,152 tokens a rank of 9,216-token sequences hide the KV ring over
        # NVLink) and experts over e4
        ("sglang:d6t8", 48, "megatron:d1p2c8e4", 16, 0),
        "no split with a node (8 GPUs) more for rollout fits",
        id="Qwen3-30B-A3B on 64",
    ),
    pytest.param(
        # examples/tau2/config_235b_moe_airline.yaml: batch 16 × 16 samples, 8,192 new tokens
        [
            "--model",
            "Qwen3-235B-A22B",
            "--gpus",
            "512",
            "--batch-size",
            "16",
            "--n-samples",
            "16",
            "--prompt-len",
            "1024",
            "--gen-len",
            "8192",
        ],
        # generation is the step (a 235B model decodes slowly): 46 t8 servers, about five
        # sequences each; training takes the 18 nodes its states need (p18 of 94 layers,
        # c8 inside a node, e8), and a node more or less for the rollout leaves the step
        ("sglang:d46t8", 368, "megatron:d1p18c8e8", 144, 0),
        "the split is the best on whole nodes",
        id="Qwen3-235B-A22B on 512",
    ),
]


@pytest.mark.parametrize(("args", "expected", "reason"), GOLDEN)
def test_the_proposal_an_expert_would_run(
    args: list[str],
    expected: tuple[str, int, str, int, int],
    reason: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["suggest", *args, "--gpu", "H100-80GB", "--top", "1", "--json"]) == 0
    found = json.loads(capsys.readouterr().out)
    best = (found["proposals"] if isinstance(found, dict) else found)[0]
    rollout, actor = best["rollout"], best["actor"]
    assert (
        rollout["backend"],
        rollout["gpus"],
        actor["backend"],
        actor["gpus"],
        best["free_gpus"],
    ) == expected
    assert reason in best["advice"]
    # every proposal keeps the bounds: no more instances than sequences, tensor parallel
    # inside a node
    sequences = int(args[args.index("--batch-size") + 1]) * int(args[args.index("--n-samples") + 1])
    assert int(rollout["backend"].split(":d")[1].split("t")[0]) <= sequences
    for spec in (rollout["backend"], actor["backend"]):
        t = ModelAllocation.from_str(spec).parallel.tp_size
        assert t <= 8, spec  # H100-80GB nodes of 8 GPUs
