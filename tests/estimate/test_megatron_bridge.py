"""A Megatron engine with ``megatron.bridge_type: megatron-bridge``, as the reference builds it.

areal/models/mcore/registry.py make_mcore_model (AReaL cbff54d645d2cd8ee1f1c358a82f3f473588433d,
l.425-500) builds the model from a new provider, ``bridge.to_megatron_provider(load_weights=
False)``: it sets the five recompute fields from MegatronEngineConfig whatever
``gradient_checkpointing`` says (l.444-450; mbridge gets them only with it, megatron_engine.py
l.722-729), and the reference's parameter-balanced layout, set on ``bridge.transformer_config``
(a config megatron-bridge v0.4.0 builds anew on each access, auto_bridge.py l.1279-1286), never
reaches it: megatron-core 0.17.0 splits the layers evenly (transformer_block.py l.151-153).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from areal_alloc import AllocationValidationError, validate
from areal_alloc.experiment import read_experiment
from tests.conftest import MainCli


def _actor(
    bridge: str, checkpointing: bool, megatron: dict[str, Any], backend: str = "megatron:d8"
) -> dict[str, Any]:
    return {
        "backend": backend,
        "gradient_checkpointing": checkpointing,
        "megatron": {"bridge_type": bridge, **megatron},
    }


SELECTIVE = {"recompute_granularity": "selective", "recompute_num_layers": None}

# (bridge, gradient_checkpointing, megatron section, backend, recompute read, said in the notes)
READINGS: list[tuple[str, bool, dict[str, Any], str, str, bool]] = [
    # megatron-bridge: the reference's defaults (granularity full, cli_args.py l.965) always
    ("megatron-bridge", False, {}, "megatron:d8", "full", True),
    ("megatron-bridge", True, {}, "megatron:d8", "full", False),
    ("megatron-bridge", False, SELECTIVE, "megatron:d8", "selective", True),
    # null: None to megatron-core, which recomputes nothing, for either bridge
    ("megatron-bridge", False, {"recompute_granularity": None}, "megatron:d8", "none", False),
    ("megatron-bridge", True, {"recompute_granularity": None}, "megatron:d8", "none", False),
    ("mbridge", True, {"recompute_granularity": None}, "megatron:d8", "none", False),
    # mbridge: only with gradient_checkpointing (megatron_engine.py l.722)
    ("mbridge", False, {}, "megatron:d8", "none", False),
    ("mbridge", True, {}, "megatron:d8", "full", False),
    # FSDP's checkpointing reads no megatron section, and its engine no bridge
    ("megatron-bridge", False, {}, "fsdp:d8", "none", False),
    ("megatron-bridge", True, {"recompute_granularity": None}, "fsdp:d8", "full", False),
]


@pytest.mark.parametrize(
    ("bridge", "checkpointing", "megatron", "backend", "recompute", "unasked"), READINGS
)
def test_the_recomputation_megatron_core_gets(
    bridge: str,
    checkpointing: bool,
    megatron: dict[str, Any],
    backend: str,
    recompute: str,
    unasked: bool,
) -> None:
    actor = _actor(bridge, checkpointing, megatron, backend)
    training = read_experiment({"actor": actor})["actor"].training
    assert training is not None
    assert (training.recompute, training.recompute_unasked) == (recompute, unasked)


def test_the_strict_schemas_null_is_the_default() -> None:
    # areal-alloc's strict schema leaves every field null when unset (areal_alloc.schema):
    # there null cannot mean null, and the reference's default "full" stands
    from omegaconf import OmegaConf

    from areal_alloc.schema import MegatronConfig

    megatron = OmegaConf.merge(
        OmegaConf.structured(MegatronConfig), {"bridge_type": "megatron-bridge"}
    )
    config = OmegaConf.create({"actor": {"backend": "megatron:d8"}})
    config.actor.megatron = megatron
    training = read_experiment(config)["actor"].training
    assert training is not None
    assert (training.recompute, training.recompute_unasked) == ("full", True)


def _check(main_cli: MainCli, tmp_path: Path, bridge: str, **actor: Any) -> dict[str, Any]:
    exp = tmp_path / "exp.yaml"
    extra = "".join(f"  {k}: {json.dumps(v)}\n" for k, v in actor.items())
    exp.write_text(
        "cluster: {n_nodes: 2, n_gpus_per_node: 8}\n"
        "rollout: {backend: 'sglang:d8'}\n"
        "actor:\n  backend: 'megatron:d2p4'\n  path: Qwen/Qwen3-8B\n"
        f"  megatron: {{bridge_type: {bridge}}}\n{extra}",
        encoding="utf-8",
    )
    ran = main_cli("check", str(exp), "--json")
    assert ran.returncode == 0, ran.stderr
    out: dict[str, Any] = json.loads(ran.stdout)
    return out


def _actor_of(plan: dict[str, Any]) -> dict[str, Any]:
    found: list[dict[str, Any]] = [e for e in plan["engines"] if e["key"] == "actor"]
    return found[0]


def test_megatron_bridge_splits_the_layers_evenly(main_cli: MainCli, tmp_path: Path) -> None:
    # Qwen3-8B's 36 layers over p4: megatron-core's 36 / 4 = 9 per rank
    plan = _check(main_cli, tmp_path, "megatron-bridge")
    actor = _actor_of(plan)
    split = actor["pipeline_split"]
    assert (split["rule"], split["stage_layers"]) == ("megatron-core's even split", [9, 9, 9, 9])
    assert [r["layers"] for r in split["ranks"]] == [9, 9, 9, 9]
    # the memory takes the same split: the last rank (9 layers and the 622M-parameter output
    # layer with its logits) is the most loaded; the first holds 9 layers and the embedding
    memory = actor["memory"]
    assert memory["assumptions"][0] == (
        "most-loaded GPU: pipeline rank 3 of 4, 9 of 36 layers + output layer; "
        "megatron-core's even split"
    )
    assert (
        "[pipeline rank 3 of 4: 9 of 36 layers + output layer, megatron-core's even split]"
        in (memory["terms"][0]["formula"])
    )
    # gradient_checkpointing is false, yet megatron-bridge recomputes: said with the estimate
    assert (
        "actor.gradient_checkpointing=false, but with actor.megatron.bridge_type="
        "'megatron-bridge' the reference's Megatron engine recomputes anyway: estimated with "
        "full recomputation (its megatron.recompute_granularity; null turns it off)"
    ) in plan["assumptions"]
    assert "(full recomputation)" in memory["terms"][3]["formula"]


def test_mbridge_keeps_the_references_split(main_cli: MainCli, tmp_path: Path) -> None:
    # the reference's parameter-balanced split of Qwen3-8B at p4
    # (tests/estimate/test_pipeline_split)
    plan = _check(main_cli, tmp_path, "mbridge")
    split = _actor_of(plan)["pipeline_split"]
    assert (split["rule"], split["stage_layers"]) == (
        "the reference's parameter-balanced split",
        [7, 11, 11, 7],
    )
    assert not any("recomputes anyway" in a for a in plan["assumptions"])


def test_checkpointing_or_null_says_nothing(main_cli: MainCli, tmp_path: Path) -> None:
    plan = _check(main_cli, tmp_path, "megatron-bridge", gradient_checkpointing=True)
    assert not any("recomputes anyway" in a for a in plan["assumptions"])


def _cfg(
    backend: str,
    bridge: str,
    megatron: dict[str, Any] | None = None,
    path: str = "Qwen/Qwen3-8B",
    **actor: Any,
) -> dict[str, Any]:
    """A Megatron actor of ``path`` built by ``bridge``, without gradient_checkpointing."""
    return {
        "cluster": {"n_nodes": 2, "n_gpus_per_node": 8},
        "rollout": {"backend": "vllm:d8"},
        "actor": {
            "backend": backend,
            "path": path,
            "megatron": {"bridge_type": bridge, **(megatron or {})},
            **actor,
        },
    }


# (config, the exact message) of megatron-bridge's even split
SPLIT_REFUSED: list[tuple[dict[str, Any], str]] = [
    (  # 36 // 4 = 9 per rank, which vpp 2 does not divide: GPTModelProvider.provide's assert
        # (megatron-bridge v0.4.0 gpt_provider.py l.241-245)
        _cfg("megatron:d1p4", "megatron-bridge", megatron={"virtual_pipeline_parallel_size": 2}),
        "actor.backend='megatron:d1p4' with actor.megatron.bridge_type='megatron-bridge' splits "
        "the 36 layers evenly over p4·vpp2 (megatron-bridge's provider gets no pipeline layout), "
        "and 36 // 4 = 9 layers per rank and 9 % 2 = 1 for "
        "actor.megatron.virtual_pipeline_parallel_size=2: megatron-bridge's provider asserts "
        "'Make sure the number of model chunks is the same across all pipeline stages.'; use a "
        "p that splits them evenly (p2, p3, p6, p9, p18) or set "
        "actor.megatron.virtual_pipeline_parallel_size=1 or set actor.megatron.bridge_type="
        "mbridge (the reference's parameter-balanced split)",
    ),
    (  # LoRA needs megatron-bridge: mbridge is no fix
        _cfg("megatron:d1p8", "megatron-bridge", use_lora=True),
        "actor.backend='megatron:d1p8' with actor.megatron.bridge_type='megatron-bridge' splits "
        "the 36 layers evenly over p8 (megatron-bridge's provider gets no pipeline layout), and "
        "36 % 8 = 4: megatron-core's get_num_layers_to_build asserts 'num_layers=36 should be "
        "divisible by config.pipeline_model_parallel_size=8'; use a p that splits them evenly "
        "(p2, p3, p4, p6, p9, p12, …)",
    ),
    (  # p1: the reference still hands the provider vpp 5 (registry.py l.433-435), and
        # provide() asserts 36 // 1 = 36 layers % 5 = 1 == 0; no p > 1 gives 36 // p % 5 == 0
        _cfg("megatron:d8", "megatron-bridge", megatron={"virtual_pipeline_parallel_size": 5}),
        "actor.backend='megatron:d8' with actor.megatron.bridge_type='megatron-bridge' splits "
        "the 36 layers evenly over p1·vpp5 (megatron-bridge's provider gets no pipeline layout), "
        "and 36 // 1 = 36 layers per rank and 36 % 5 = 1 for "
        "actor.megatron.virtual_pipeline_parallel_size=5: megatron-bridge's provider asserts "
        "'Make sure the number of model chunks is the same across all pipeline stages.'; set "
        "actor.megatron.virtual_pipeline_parallel_size=1 or set actor.megatron.bridge_type="
        "mbridge (the reference's parameter-balanced split)",
    ),
]


@pytest.mark.parametrize(
    ("layers", "pp", "vpp", "builds"),
    [
        (36, 1, 1, True),
        (36, 1, 3, True),  # 36 % 3 = 0
        (36, 1, 5, False),  # p1 too: provide() asserts 36 % 5 == 0
        (36, 4, 1, True),
        (36, 4, 2, False),  # 9 % 2 = 1
        (36, 8, 1, False),  # 36 % 8 = 4
        (36, 0, 1, True),  # no pipeline size given: p1
    ],
)
def test_even_split_builds(layers: int, pp: int, vpp: int, builds: bool) -> None:
    from areal_alloc.model_shape import even_split_builds

    assert even_split_builds(layers, pp, vpp) is builds


@pytest.mark.parametrize(("config", "message"), SPLIT_REFUSED)
def test_megatron_bridges_uneven_split_is_refused(config: dict[str, Any], message: str) -> None:
    with pytest.raises(AllocationValidationError) as info:
        validate(config, on_memory="off")
    assert info.value.message == message


@pytest.mark.parametrize(
    "config",
    [
        _cfg("megatron:d2p4", "megatron-bridge"),  # 9 per rank
        _cfg("megatron:d1p4", "megatron-bridge", megatron={"virtual_pipeline_parallel_size": 3}),
        _cfg("megatron:d1p8", "mbridge"),  # the reference's own split fills p8
        _cfg("megatron:d8", "megatron-bridge"),  # no pipeline
        # p1 with vpp 3: 36 % 3 = 0 (the nearest that runs to p1·vpp5)
        _cfg("megatron:d8", "megatron-bridge", megatron={"virtual_pipeline_parallel_size": 3}),
        _cfg("fsdp:d8", "megatron-bridge"),  # not a Megatron engine
    ],
)
def test_what_splits_evenly_starts(config: dict[str, Any]) -> None:
    assert validate(config, on_memory="off").warnings == ()


# megatron-bridge's provider gets the recompute fields without gradient_checkpointing, and
# provider.finalize() runs megatron-core's TransformerConfig.__post_init__ (megatron-bridge
# v0.4.0 src/megatron/bridge/models/transformer_config.py l.106-118)
RECOMPUTE_REFUSED: list[tuple[dict[str, Any], str]] = [
    (
        _cfg("megatron:d8", "megatron-bridge", megatron={"recompute_granularity": "selective"}),
        "actor.megatron.recompute_granularity='selective' with "
        "actor.megatron.recompute_num_layers=1: megatron-core's TransformerConfig raises 'When "
        "using recompute_granularity: selective recompute_num_layers must be None.' when "
        "megatron-bridge builds actor.backend='megatron:d8'; set "
        "actor.megatron.recompute_num_layers=null",
    ),
    (  # GPTModelProvider's moe_grouped_gemm False (gpt_provider.py l.179); Qwen3Bridge keeps it
        _cfg(
            "megatron:d8",
            "megatron-bridge",
            megatron=SELECTIVE | {"recompute_modules": ["moe_act"]},
        ),
        "actor.megatron.recompute_modules=['moe_act'] has 'moe_act' but "
        "actor.backend='megatron:d8' runs a dense model: megatron-bridge leaves megatron-core's "
        "moe_grouped_gemm false for it, and its TransformerConfig raises 'moe_act in "
        "recompute_modules is only supported with moe_grouped_gemm.'; drop 'moe_act' from "
        "actor.megatron.recompute_modules",
    ),
    (
        _cfg(
            "megatron:d8",
            "megatron-bridge",
            megatron=SELECTIVE | {"recompute_modules": ["mla_up_proj"]},
        ),
        "actor.megatron.recompute_modules=['mla_up_proj'] has 'mla_up_proj' but the model of "
        "actor.backend='megatron:d8' has no multi-latent attention (kv_lora_rank 0): "
        "megatron-core's TransformerConfig raises 'mla_up_proj in recompute_modules is only "
        "supported with multi_latent_attention.' when megatron-bridge builds it; drop "
        "'mla_up_proj' from actor.megatron.recompute_modules",
    ),
    (  # full granularity (the reference's default) with null layers: transformer_config.py
        # l.1339-1345 (36 layers // p4 = 9 per rank)
        _cfg("megatron:d2p4", "megatron-bridge", megatron={"recompute_num_layers": None}),
        "actor.megatron.recompute_granularity='full' with actor.megatron.recompute_num_layers="
        "null: megatron-core's TransformerConfig raises 'When using recompute_granularity: full "
        "recompute_num_layers must be between 1 and num_layers_per_pipeline_rank: 9' (36 layers "
        "// p4) when megatron-bridge builds actor.backend='megatron:d2p4'; set "
        "actor.megatron.recompute_num_layers=1 (the reference's default)",
    ),
    (  # full with a null method: l.1327-1337
        _cfg("megatron:d8", "megatron-bridge", megatron={"recompute_method": None}),
        "actor.megatron.recompute_granularity='full' with actor.megatron.recompute_method=null: "
        "megatron-core's TransformerConfig raises 'Using recompute_granularity: full so "
        'recompute_method must be "block" or "uniform"\' when megatron-bridge builds '
        "actor.backend='megatron:d8'; set actor.megatron.recompute_method=uniform (the "
        "reference's default)",
    ),
    (  # another granularity: l.1321-1326 (megatron-core's own spelling); the reader refuses it
        _cfg("megatron:d8", "megatron-bridge", megatron={"recompute_granularity": "bogus"}),
        "actor.megatron.recompute_granularity='bogus': must be full, selective or null; "
        "megatron-core's TransformerConfig raises 'When using recompute_granuarlity: bogus must "
        'be "full"or "selective".\' when megatron-bridge builds it; set '
        "actor.megatron.recompute_granularity=full",
    ),
    (  # '' is no granularity either (not None: megatron-core checks it)
        _cfg("megatron:d8", "megatron-bridge", megatron={"recompute_granularity": ""}),
        "actor.megatron.recompute_granularity='': must be full, selective or null; "
        "megatron-core's TransformerConfig raises 'When using recompute_granuarlity:  must "
        'be "full"or "selective".\' when megatron-bridge builds it; set '
        "actor.megatron.recompute_granularity=full",
    ),
    (  # another method: l.1328-1332, for any granularity
        _cfg("megatron:d8", "megatron-bridge", megatron=SELECTIVE | {"recompute_method": "all"}),
        "actor.megatron.recompute_method='all': must be block, uniform or null; megatron-core's "
        'TransformerConfig raises \'recompute_method: all must be "block" or "uniform".\' '
        "when megatron-bridge builds it; set actor.megatron.recompute_method=uniform",
    ),
    (  # megatron-bridge v0.4.0 deepseek_v3_bridge.py l.64 sets moe_shared_expert_overlap=True,
        # the reference never sets it on the provider (registry.py l.425-500), and finalize()
        # runs megatron-core's l.1399-1406
        _cfg(
            "megatron:d8e8",
            "megatron-bridge",
            megatron=SELECTIVE | {"recompute_modules": ["shared_experts"]},
            path="deepseek-ai/DeepSeek-V3",
        ),
        "actor.megatron.recompute_modules=['shared_experts'] has 'shared_experts' but the model "
        "of actor.backend='megatron:d8e8' has shared experts, for which megatron-bridge's "
        "deepseek_v3 bridge sets moe_shared_expert_overlap=True on the provider, which the "
        "reference does not override: megatron-core's TransformerConfig raises 'shared_experts "
        "recompute cannot work with --moe-shared-expert-overlap.'; drop 'shared_experts' from "
        "actor.megatron.recompute_modules",
    ),
]


@pytest.mark.parametrize(("config", "message"), RECOMPUTE_REFUSED)
def test_megatron_bridges_recompute_is_checked_without_checkpointing(
    config: dict[str, Any], message: str
) -> None:
    assert "gradient_checkpointing" not in config["actor"]
    with pytest.raises(AllocationValidationError) as info:
        validate(config, on_memory="off")
    assert info.value.message == message


@pytest.mark.parametrize(
    "config",
    [
        # null granularity: megatron-core reads no recompute field
        _cfg(
            "megatron:d8",
            "megatron-bridge",
            megatron={"recompute_granularity": None, "recompute_modules": ["moe_act"]},
        ),
        # full granularity reads neither the modules nor recompute_num_layers ≥ 1
        _cfg("megatron:d8", "megatron-bridge", megatron={"recompute_modules": ["moe_act"]}),
        # Qwen3MoEBridge sets moe_grouped_gemm=True (qwen3_moe_bridge.py l.55)
        _cfg(
            "megatron:d8",
            "megatron-bridge",
            megatron=SELECTIVE | {"recompute_modules": ["moe_act"]},
            path="Qwen/Qwen3-30B-A3B",
        ),
        # the nearest to the refused full rows: recompute_num_layers 1, method block; and
        # selective takes a null method (l.1333: only full needs one)
        _cfg("megatron:d2p4", "megatron-bridge", megatron={"recompute_num_layers": 1}),
        _cfg("megatron:d8", "megatron-bridge", megatron={"recompute_method": "block"}),
        _cfg("megatron:d8", "megatron-bridge", megatron=SELECTIVE | {"recompute_method": None}),
        # mbridge without gradient_checkpointing passes none of them (l.722)
        _cfg(
            "megatron:d8",
            "mbridge",
            megatron={"recompute_granularity": "bogus", "recompute_num_layers": None},
        ),
        # the nearest to DeepSeek-V3's refused shared_experts: core_attn only
        _cfg(
            "megatron:d8e8",
            "megatron-bridge",
            megatron=SELECTIVE | {"recompute_modules": ["core_attn"]},
            path="deepseek-ai/DeepSeek-V3",
        ),
        # Qwen3-30B-A3B has no shared expert (megatron-core checks only a model with one)
        _cfg(
            "megatron:d8",
            "megatron-bridge",
            megatron=SELECTIVE | {"recompute_modules": ["shared_experts"]},
            path="Qwen/Qwen3-30B-A3B",
        ),
        # mbridge without gradient_checkpointing passes no recompute field (l.722)
        _cfg("megatron:d8", "mbridge", megatron={"recompute_granularity": "selective"}),
    ],
)
def test_megatron_bridges_recompute_that_builds(config: dict[str, Any]) -> None:
    assert validate(config, on_memory="off").warnings == ()


def test_suggest_proposes_only_splits_the_bridge_builds() -> None:
    """An engine split evenly (megatron-bridge: execution sets layer_split "even") starts
    only where p divides the layers: suggest proposes no p that check refuses
    (megatron_bridge_splits_evenly). The reference's own split (mbridge) takes any p:
    for Qwen3-32B (64 layers) on 64 GPUs it proposes p3 and other p that do not divide 64."""
    from areal_alloc.catalogue import find_gpu, find_model
    from areal_alloc.estimate.execution import TrainingSettings
    from areal_alloc.estimate.system import Hardware
    from areal_alloc.search.split import RunShape, suggest

    gpu = find_gpu("H100-80GB")

    def stages(layer_split: str) -> set[int]:
        training = TrainingSettings(tokens_per_micro_batch=16384, layer_split=layer_split)
        proposals = suggest(
            find_model("Qwen3-32B"),
            64,
            gpu.memory_bytes,
            Hardware.from_gpu(gpu, 8),
            RunShape.of(),
            training=training,
            top=10,
        )
        return {p.actor.parallel.pp_size for p in proposals}

    assert 3 in {pp for pp in stages("areal") if 64 % pp}
    even = stages("even")
    assert even
    assert all(64 % pp == 0 for pp in even), even
