"""The reference's own example experiments: what it starts passes `check`; what it refuses does not.

Each file under tests/data/reference/ holds the facts of one of the reference's example
YAMLs (areal-project/AReaL ``examples/…`` at cbff54d645d2cd8ee1f1c358a82f3f473588433d): its
model, layouts, cluster and memory-relevant settings, values only, interpolations resolved.
The GPU is the one the reference's docs name for it: examples/math/README.md ("Devices: 8
Nvidia H800 GPUs"), docs/en/tutorial/installation.md ("GPU: 8x H800 per node") for the
others but the tau2 8B example (the H200 of the tau2 team's model card),
examples/skypilot/README.md (``accelerators: A100:8``, SkyPilot's A100 being the 40 GB one)
for the SkyPilot example; None where the docs name none for a model this large.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from areal_alloc.cli import main
from areal_alloc.experiment import REFERENCE_COMMIT

#: these experiments name the GPU or the model with areal-alloc's own keys (cluster.gpu,
#: model_shape), which the reference's loader refuses: the strict-key check is off here
#: (tests/cli/test_reference_keys.py tests it)
pytestmark = pytest.mark.usefixtures("reference_off")


DATA = Path(__file__).resolve().parent.parent / "data" / "reference"

MATH_README = "examples/math/README.md"
INSTALL = "docs/en/tutorial/installation.md"
TAU2_CARD = "huggingface.co/inclusionAI/AReaL-SEA-235B-A22B (80 H200 GPUs, 10 nodes)"

# fact file -> (GPU the docs name, where)
STARTS: list[tuple[str, str | None, str]] = [
    ("math__gsm8k_grpo.yaml", "H800", MATH_README),  # Qwen2.5-1.5B, sglang:d4 + fsdp:d4
    ("math__gsm8k_grpo_megatron.yaml", "H800", MATH_README),  # megatron:d4
    ("math__gsm8k_ppo.yaml", "H800", MATH_README),  # critic and ref colocated on the actor
    ("math__gsm8k_ppo_megatron.yaml", "H800", MATH_README),
    ("math__gsm8k_grpo_lora.yaml", "H800", MATH_README),  # FSDP LoRA, weight_update_mode disk
    ("math__gsm8k_grpo_megatron_lora.yaml", "H800", MATH_README),  # Megatron LoRA on vLLM
    # Qwen3-30B-A3B-Base on megatron:(attn:d1p6t1c1|ffn:d1p6t1e1): not in the catalogue
    ("math__gsm8k_grpo_megatron_lora_moe.yaml", "H800", MATH_README),
    # sglang colocated on a megatron actor, awex with the v1 controllers, enable_offload
    ("math__gsm8k_grpo_awex_colocate.yaml", "H800", MATH_README),
    ("math__gsm8k_sft.yaml", "H800", MATH_README),  # no rollout: the SFT trainer
    # a 14B teacher served by vllm:d1t2 (teacher.engine_type rollout)
    ("distillation__gsm8k_grpo_distill_mode_rolloutEngine.yaml", "H800", INSTALL),
    ("distillation__gsm8k_grpo_distill_mode_trainEngine.yaml", "H800", INSTALL),  # fsdp:d1t4
    # Qwen3-30B-A3B, awex with the v2 controllers and separate engines
    ("dte__gsm8k_grpo_qwen3_30b_a3b.yaml", "H800", INSTALL),
    ("tau2__config_30b_moe_airline.yaml", "H800", INSTALL),  # slurm, 8 nodes
    # Qwen3-235B-A22B, 94 layers over p12: the reference's Megatron engine splits them
    # unevenly; no doc names its GPU (our estimate puts the actor over 80 GB)
    ("tau2__config_235b_moe_airline.yaml", None, "no GPU named"),
    # batch 30 over archon:d8: 240 trajectories split evenly (only the SPMD launchers refuse 30).
    # The archon engine's default per-op checkpointing (archon.ac_mode selective, option op)
    # keeps ~58 KiB per token and layer: at 32,768 padded tokens per micro-batch
    # (pad_to_maximum) the actor needs about 112 GiB, over an H800. The tau2 team's GPU is
    # the H200: "All RL training is conducted using the AReaL framework on 80 H200 GPUs
    # (10 nodes)" (huggingface.co/inclusionAI/AReaL-SEA-235B-A22B, the tau2 paper's model;
    # 10 nodes × 8 is the 235B example's cluster)
    ("tau2__config_8b_airline.yaml", "H200", TAU2_CARD),
    ("skypilot__gsm8k_grpo_ray.yaml", "A100-40GB", "examples/skypilot/README.md"),
    ("vlm__clevr_count_70k_grpo.yaml", "H800", INSTALL),  # sglang:d1 + fsdp:d7, batch 28
    ("search_agent__tongyi_deepresearch__config.yaml", "H800", INSTALL),  # megatron:d2p2
    ("hermes__config.yaml", "H800", INSTALL),  # v2 controllers, 2 GPUs
    # sglang:d2t8 colocated on a two-node megatron MoE actor (awex, slurm)
    ("vlm__qwen3_5_35b_a3b_megatron_geometry3k_grpo_awex_colocate.yaml", "H800", INSTALL),
]

# fact file -> the start of our message; the reference's own reason in the comment
REFUSED: list[tuple[str, str]] = [
    # no engine has a backend: the reference's loader stops on the mandatory actor.backend
    # (TrainEngineConfig.backend = MISSING, areal/api/cli_args.py); only the SPMD launchers
    # still read allocation_mode
    (
        "scaffolding__gsm8k_rlvr_scaffolding.yaml",
        "areal-alloc check: allocation_mode='sglang:d1+d1' is deprecated: the single-controller "
        "scheduler ignores it",
    ),
    (
        "terminal_bench__config_tb_sglang.yaml",
        "areal-alloc check: allocation_mode='sglang:d2p1t2+d2p1t1c2' is deprecated: the "
        "single-controller scheduler ignores it",
    ),
    # its comment says "2 for rollout, 2 for actor", but sglang:d4t8 and the actor take 4 nodes
    # each: the reference's Slurm scheduler asks for 8 whole nodes of a 4-node cluster
    (
        "swe__qwen3_30b_a3b_grpo.yaml",
        "areal-alloc check: the engines need 64 GPUs but the cluster has cluster.n_nodes=4 × "
        "cluster.n_gpus_per_node=8 = 32",
    ),
]


def _check(name: str, gpu: str | None) -> list[str]:
    # the GPU from the flag: the experiment stays as the reference's loader reads it
    flags = ["--gpu", gpu] if gpu else ["--on-memory", "off"]
    return ["check", "--quiet", *flags, str(DATA / name)]


@pytest.mark.parametrize(("name", "gpu", "docs"), STARTS)
def test_check_passes_what_the_reference_starts(
    name: str, gpu: str | None, docs: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(_check(name, gpu))
    err = capsys.readouterr().err
    assert code == 0, err
    # what is said is only what could not be estimated, never a refusal
    assert all("not estimated" in line for line in err.splitlines()), err


@pytest.mark.parametrize(("name", "message"), REFUSED)
def test_check_refuses_what_the_reference_refuses(
    name: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(_check(name, "H800")) == 1
    assert capsys.readouterr().err.startswith(message)


def test_every_fact_file_names_its_example_and_the_snapshot() -> None:
    names = sorted(p.name for p in DATA.glob("*.yaml"))
    assert names == sorted([n for n, *_ in STARTS] + [n for n, _ in REFUSED])
    assert len(STARTS) >= 12
    for name in names:
        first = (DATA / name).read_text(encoding="utf-8").splitlines()[0]
        example = "examples/" + name.removesuffix(".yaml").replace("__", "/") + ".yaml"
        assert first == (f"# Facts read from areal-project/AReaL {example} at {REFERENCE_COMMIT}:")
