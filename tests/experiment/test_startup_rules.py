"""Every start-up rule of the reference (areal_alloc.experiment.rules.RULES): a config it
refuses, with our exact message, and the nearest config it starts.

The rules were read from areal-project/AReaL at cbff54d645d2cd8ee1f1c358a82f3f473588433d; each
row names the reference's file that raises.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from areal_alloc import AllocationValidationError, validate
from areal_alloc.experiment import REFERENCE_COMMIT
from areal_alloc.experiment.rules import RULES

#: these experiments name the GPU or the model with areal-alloc's own keys (cluster.gpu,
#: model_shape), which the reference's loader refuses: the strict-key check is off here
#: (tests/cli/test_reference_keys.py tests it)
pytestmark = pytest.mark.usefixtures("reference_off")


QWEN_7B = "deepseek-ai/DeepSeek-R1-Distill-Qwen-7B"  # 28 heads, 4 KV heads, 28 layers


def cfg(**sections: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"cluster": {"n_nodes": 2, "n_gpus_per_node": 8}}
    out.update(sections)
    return out


def colocated(backend: str, target: str = "actor") -> dict[str, Any]:
    return {"backend": backend, "scheduling_strategy": {"type": "colocation", "target": target}}


#: A Megatron LoRA actor as the reference runs it (examples/math/gsm8k_grpo_megatron_lora.yaml)
MEGATRON_LORA: dict[str, Any] = {
    "backend": "megatron:d8",
    "use_lora": True,
    "megatron": {"bridge_type": "megatron-bridge"},
}

#: selective recomputation as megatron-core takes it (recompute_num_layers null)
SELECTIVE: dict[str, Any] = {"recompute_granularity": "selective", "recompute_num_layers": None}


def _selective(megatron: dict[str, Any], path: str | None = None) -> dict[str, Any]:
    """A Megatron actor with gradient checkpointing and ``megatron`` (selective unless said)."""
    actor: dict[str, Any] = {
        "backend": "megatron:d8",
        "gradient_checkpointing": True,
        "megatron": {"recompute_granularity": "selective", **megatron},
    }
    if path is not None:
        actor["path"] = path
    return cfg(rollout={"backend": "vllm:d8"}, actor=actor)


# rule -> (config the reference refuses, our exact message, the nearest config it starts)
REFUSED: list[tuple[str, dict[str, Any], str, dict[str, Any]]] = [
    (  # areal/api/cli_args.py BaseExperimentConfig.__post_init__
        "total_train_epochs ≥ 1",
        cfg(actor={"backend": "fsdp:d4"}, total_train_epochs=0),
        "total_train_epochs=0: must be ≥ 1 (the reference's loader refuses it)",
        cfg(actor={"backend": "fsdp:d4"}, total_train_epochs=1),
    ),
    (  # areal/trainer/rl_trainer.py _init_impl: "Invalid weight update mode: …" (v1)
        "actor.weight_update_mode is disk, xccl or awex (v1)",
        cfg(
            rollout={"backend": "sglang:d8"},
            actor={"backend": "fsdp:d8", "weight_update_mode": "nccl"},
        ),
        "actor.weight_update_mode='nccl': the trainer raises 'Invalid weight update mode: "
        "nccl' (it dispatches on disk, xccl or awex: areal/trainer/rl_trainer.py _init_impl); "
        "set actor.weight_update_mode=xccl (the reference's default), disk or awex",
        cfg(  # the v2 controllers read no mode
            rollout={"backend": "sglang:d8", "_version": "v2"},
            actor={"backend": "fsdp:d8", "weight_update_mode": "nccl", "_version": "v2"},
        ),
    ),
    (  # areal/models/mcore/registry.py make_mcore_model l.528-536: no bridge, vpp > 1
        "megatron engine: virtual pipeline stages need megatron.bridge_type mbridge or "
        "megatron-bridge",
        cfg(
            rollout={"backend": "sglang:d8"},
            actor={
                "backend": "megatron:d4p2",
                "megatron": {"bridge_type": "none", "virtual_pipeline_parallel_size": 2},
            },
        ),
        "actor.megatron.bridge_type='none' with actor.megatron.virtual_pipeline_parallel_size=2: "
        "without mbridge or megatron-bridge the Megatron engine builds actor.backend="
        "'megatron:d4p2' itself and raises 'Virtual pipeline parallelism requires mbridge-backed "
        "models.' (areal/models/mcore/registry.py make_mcore_model); set actor.megatron."
        "bridge_type=mbridge (the reference's default) or megatron-bridge, or actor.megatron."
        "virtual_pipeline_parallel_size=1",
        cfg(
            rollout={"backend": "sglang:d8"},
            actor={
                "backend": "megatron:d4p2",
                "megatron": {"bridge_type": "mbridge", "virtual_pipeline_parallel_size": 2},
            },
        ),
    ),
    (  # areal/engine/fsdp_engine.py initialize: tree training with sp_size (c) > 1
        "tree training: no critic, c, archon p, megatron-bridge or chunked logits",
        cfg(
            rollout={"backend": "sglang:d8"},
            actor={"backend": "fsdp:d4c2", "enable_tree_training": True},
        ),
        "actor.enable_tree_training=true with actor.backend='fsdp:d4c2': tree training takes "
        "no context parallelism (c); the fsdp engine raises 'Tree training currently cannot be "
        "enabled with sp_size > 1.'; use c1, or turn tree training off",
        cfg(
            rollout={"backend": "sglang:d8"},
            actor={"backend": "fsdp:d8", "enable_tree_training": True},
        ),
    ),
    (  # areal/v2/weight_update/gateway/app.py: awex asks the servers for /awex/report_parallelism
        "v2 without LoRA (awex): an sglang rollout and an fsdp or megatron actor",
        cfg(
            rollout={"backend": "vllm:d8", "_version": "v2"},
            actor={"backend": "fsdp:d8", "_version": "v2"},
        ),
        "actor._version='v2' without use_lora sends weights by awex, which needs an sglang "
        "rollout, but rollout.backend='vllm:d8': the vLLM inference service has no /awex "
        "endpoints (areal/v2/weight_update/gateway/app.py asks it for /awex/report_parallelism); "
        "serve with sglang, train LoRA (disk), or use v1",
        cfg(  # LoRA goes by disk, which vLLM takes
            rollout={"backend": "vllm:d8", "_version": "v2"},
            actor={"backend": "fsdp:d8", "_version": "v2", "use_lora": True},
        ),
    ),
    (  # areal/engine/megatron_engine.py _prepare_mb_list: max(min_n_mbs, None) raises
        "megatron engine: mb_spec.n_mbs is not null",
        cfg(
            rollout={"backend": "sglang:d8"},
            actor={"backend": "megatron:d8", "mb_spec": {"n_mbs": None}},
        ),
        "actor.mb_spec.n_mbs=null: the Megatron engine's _prepare_mb_list computes "
        "max(min_n_mbs, mb_spec.n_mbs) and raises TypeError \"'>' not supported between "
        "instances of 'NoneType' and 'int'\" on the first batch of actor.backend='megatron:d8'; "
        "set actor.mb_spec.n_mbs=1 (the reference's default)",
        cfg(  # the FSDP engine hands null to seqpack, which takes it
            rollout={"backend": "sglang:d8"},
            actor={"backend": "fsdp:d8", "mb_spec": {"n_mbs": None}},
        ),
    ),
    (  # areal/api/cli_args.py TrainEngineConfig.__post_init__
        "_version is v1 or v2",
        cfg(actor={"backend": "fsdp:d4", "_version": "v3"}),
        "actor._version='v3': must be 'v1' or 'v2'",
        cfg(actor={"backend": "fsdp:d4", "_version": "v2"}),
    ),
    (  # areal/api/cli_args.py PPOActorConfig.__post_init__: ProxLogpMethod(value) raises
        "actor.prox_logp_method is a ProxLogpMethod",
        cfg(
            rollout={"backend": "sglang:d8"},
            actor={"backend": "fsdp:d8", "prox_logp_method": "reuse"},
        ),
        "actor.prox_logp_method='reuse': must be one of 'recompute', 'loglinear', 'metrics', "
        "'reuse_train_logp'",
        cfg(
            rollout={"backend": "sglang:d8"},
            actor={"backend": "fsdp:d8", "prox_logp_method": "reuse_train_logp"},
        ),
    ),
    (  # areal/api/cli_args.py PPOActorConfig.__post_init__ (ppo_n_minibatches defaults to 4)
        "actor.enable_delta_weight_update needs ppo_n_minibatches 1",
        cfg(
            rollout={"backend": "sglang:d8"},
            actor={"backend": "megatron:d8", "enable_delta_weight_update": True},
        ),
        "actor.enable_delta_weight_update=true needs actor.ppo_n_minibatches=1 (one optimizer "
        "step between weight updates), got 4: set actor.ppo_n_minibatches=1",
        cfg(
            rollout={"backend": "sglang:d8"},
            actor={
                "backend": "megatron:d8",
                "enable_delta_weight_update": True,
                "ppo_n_minibatches": 1,
            },
        ),
    ),
    (  # areal/api/cli_args.py TrainEngineConfig.__post_init__
        "fsdp.memory_efficient_load cannot init_from_scratch",
        cfg(
            actor={
                "backend": "fsdp:d8",
                "init_from_scratch": True,
                "fsdp": {"memory_efficient_load": True},
            }
        ),
        "actor.fsdp.memory_efficient_load=true loads pretrained weights, but "
        "actor.init_from_scratch=true loads none: set one of them to false",
        cfg(actor={"backend": "fsdp:d8", "fsdp": {"memory_efficient_load": True}}),
    ),
    (  # areal/trainer/rl_trainer.py _validate_cfg: colocation offloads
        "offload (colocated actor↔rollout, any engine's offload) needs enable_offload",
        cfg(
            rollout=colocated("sglang:d8"),
            actor={"backend": "fsdp:d8", "weight_update_mode": "disk"},
        ),
        "enable_offload is false but actor and rollout are colocated "
        "(rollout.scheduling_strategy.target='actor'), so the reference offloads between "
        "rollout and training and will not start without it: set enable_offload=true (the run "
        "then needs torch_memory_saver, e.g. preloaded with LD_PRELOAD)",
        cfg(
            rollout=colocated("sglang:d8"),
            actor={"backend": "fsdp:d8", "weight_update_mode": "disk"},
            enable_offload=True,
        ),
    ),
    (  # the same rule: an engine's own offload, the colocation the other way round
        "offload (colocated actor↔rollout, any engine's offload) needs enable_offload",
        cfg(
            rollout={"backend": "sglang:d8"},
            actor=colocated("fsdp:d8", "rollout") | {"weight_update_mode": "disk"},
            ref={"backend": "fsdp:d8", "offload": True},
        ),
        "enable_offload is false but actor and rollout are colocated "
        "(actor.scheduling_strategy.target='rollout') and ref.offload=true, so the reference "
        "offloads between rollout and training and will not start without it: set "
        "enable_offload=true (the run then needs torch_memory_saver, e.g. preloaded with "
        "LD_PRELOAD)",
        cfg(
            rollout={"backend": "sglang:d8"},
            actor=colocated("fsdp:d8", "rollout") | {"weight_update_mode": "disk"},
            ref={"backend": "fsdp:d8", "offload": True},
            enable_offload=True,
        ),
    ),
    (  # areal/trainer/rl_trainer.py _validate_cfg
        "colocated actor↔rollout needs actor.weight_update_mode disk or awex",
        cfg(rollout=colocated("sglang:d8"), actor={"backend": "fsdp:d8"}, enable_offload=True),
        "actor.weight_update_mode='xccl' (the reference's default) with actor and rollout "
        "colocated (rollout.scheduling_strategy.target='actor'): colocated engines update "
        "weights through disk or awex only; set actor.weight_update_mode=disk (or awex, with a "
        "megatron actor and an sglang rollout)",
        cfg(
            rollout=colocated("sglang:d8"),
            actor={"backend": "fsdp:d8", "weight_update_mode": "disk"},
            enable_offload=True,
        ),
    ),
    (  # areal/trainer/rl_trainer.py _validate_cfg (v1 awex)
        "awex needs a megatron actor",
        cfg(
            rollout={"backend": "sglang:d8"},
            actor={"backend": "fsdp:d8", "weight_update_mode": "awex"},
        ),
        "actor.weight_update_mode='awex' needs a megatron actor, but actor.backend='fsdp:d8': "
        "train with megatron:… or set actor.weight_update_mode=disk or xccl",
        cfg(
            rollout={"backend": "sglang:d8"},
            actor={"backend": "megatron:d8", "weight_update_mode": "awex"},
        ),
    ),
    (  # areal/trainer/rl_trainer.py _validate_cfg (v1 awex)
        "awex needs an sglang rollout",
        cfg(
            rollout={"backend": "vllm:d8"},
            actor={"backend": "megatron:d8", "weight_update_mode": "awex"},
        ),
        "actor.weight_update_mode='awex' needs an sglang rollout, but rollout.backend='vllm:d8': "
        "serve with sglang:… or set actor.weight_update_mode=disk or xccl",
        cfg(  # the v2 controllers never read weight_update_mode (LoRA goes by disk)
            rollout={"backend": "vllm:d8", "_version": "v2"},
            actor={
                "backend": "megatron:d8",
                "weight_update_mode": "awex",
                "_version": "v2",
                "use_lora": True,
                "megatron": {"bridge_type": "megatron-bridge"},
            },
        ),
    ),
    (  # areal/trainer/rl_trainer.py _validate_cfg (and _init_rollout)
        "vLLM cannot rollout.return_routed_experts",
        cfg(
            rollout={"backend": "vllm:d8", "return_routed_experts": True},
            actor={"backend": "fsdp:d8"},
        ),
        "rollout.return_routed_experts=true needs an sglang rollout, but "
        "rollout.backend='vllm:d8': set rollout.return_routed_experts=false or serve with sglang:…",
        cfg(
            rollout={"backend": "sglang:d8", "return_routed_experts": True},
            actor={"backend": "fsdp:d8"},
        ),
    ),
    (  # areal/trainer/rl_trainer.py _validate_cfg
        "megatron actor with use_lora cannot update an sglang rollout",
        cfg(rollout={"backend": "sglang:d8"}, actor={"backend": "megatron:d8", "use_lora": True}),
        "actor.use_lora=true with a megatron actor cannot update an sglang rollout (the "
        "reference's RL trainer refuses it): serve with vllm:…, set actor.use_lora=false, or "
        "train with fsdp:…",
        cfg(rollout={"backend": "vllm:d8"}, actor=MEGATRON_LORA),
    ),
    (  # areal/engine/megatron_engine.py MegatronEngine.__init__, line 475 at cbff54d6
        "megatron engine with use_lora needs megatron.bridge_type megatron-bridge",
        cfg(rollout={"backend": "vllm:d8"}, actor={"backend": "megatron:d8", "use_lora": True}),
        "actor.use_lora=true with actor.backend='megatron:d8' needs "
        "actor.megatron.bridge_type='megatron-bridge', got 'mbridge': the reference's Megatron "
        "engine builds LoRA through megatron-bridge only; set "
        "actor.megatron.bridge_type=megatron-bridge",
        cfg(rollout={"backend": "vllm:d8"}, actor=MEGATRON_LORA),
    ),
    (  # megatron_engine.py _build_hf_mcore_bridge → mbridge → megatron-core 0.17.0
        # TransformerConfig.__post_init__ (transformer_config.py l.1230-1232), dense or MoE
        "mbridge: megatron.moe_enable_deepep needs moe_token_dispatcher_type flex",
        cfg(
            rollout={"backend": "vllm:d8"},
            actor={"backend": "megatron:d8", "megatron": {"moe_enable_deepep": True}},
        ),
        "actor.megatron.moe_enable_deepep=true with actor.megatron.moe_token_dispatcher_type="
        "'alltoall': megatron-core's TransformerConfig raises 'DeepEP backend is only supported "
        "with flex token dispatcher.' when mbridge builds actor.backend='megatron:d8'; set "
        "actor.megatron.moe_token_dispatcher_type=flex or actor.megatron.moe_enable_deepep=false",
        cfg(
            rollout={"backend": "vllm:d8"},
            actor={
                "backend": "megatron:d8",
                "megatron": {"moe_enable_deepep": True, "moe_token_dispatcher_type": "flex"},
            },
        ),
    ),
    (  # the same __post_init__ (l.2056-2060): mbridge sets variable_seq_lengths=True
        "mbridge: no megatron.moe_token_dispatcher_type allgather",
        cfg(
            rollout={"backend": "vllm:d8"},
            actor={
                "backend": "megatron:d8",
                "megatron": {"moe_token_dispatcher_type": "allgather"},
            },
        ),
        "actor.megatron.moe_token_dispatcher_type='allgather' with actor.backend='megatron:d8': "
        "mbridge builds megatron-core's TransformerConfig with variable_seq_lengths=True, which "
        "raises 'Token dispatcher type: allgather does not support variable sequence length, "
        "please use alltoall dispatcher instead.'; set "
        "actor.megatron.moe_token_dispatcher_type=alltoall",
        cfg(  # megatron-bridge ignores it (areal/models/mcore/registry.py: alltoall)
            rollout={"backend": "vllm:d8"},
            actor={
                "backend": "megatron:d8",
                "megatron": {
                    "moe_token_dispatcher_type": "allgather",
                    "bridge_type": "megatron-bridge",
                },
            },
        ),
    ),
    (  # megatron-core 0.17.0 MoELayer.__init__ (moe/moe_layer.py l.276-300)
        "mbridge, a MoE model: megatron.moe_token_dispatcher_type is allgather, alltoall or flex",
        cfg(
            rollout={"backend": "vllm:d8"},
            actor={
                "backend": "megatron:d8",
                "path": "Qwen/Qwen3-30B-A3B",
                "megatron": {"moe_token_dispatcher_type": "all2all"},
            },
        ),
        "actor.megatron.moe_token_dispatcher_type='all2all': must be one of allgather, alltoall, "
        "flex; megatron-core's MoELayer raises 'Unsupported token dispatcher type' when mbridge "
        "builds the 128-expert layers of actor.backend='megatron:d8': set "
        "actor.megatron.moe_token_dispatcher_type=alltoall (the reference's default)",
        cfg(  # a dense model builds no MoE layer, so no dispatcher
            rollout={"backend": "vllm:d8"},
            actor={
                "backend": "megatron:d8",
                "path": "Qwen/Qwen3-8B",
                "megatron": {"moe_token_dispatcher_type": "all2all"},
            },
        ),
    ),
    (  # the same path, full granularity (the reference's default): transformer_config.py
        # l.1339-1345 needs recompute_num_layers (the model is not known here: no per-rank
        # count); a null recompute_method is refused by l.1333-1337
        # (tests/estimate/test_megatron_bridge.py)
        "full recomputation: megatron.recompute_method and recompute_num_layers are not null",
        _selective({"recompute_granularity": "full", "recompute_num_layers": None}),
        "actor.megatron.recompute_granularity='full' with actor.megatron.recompute_num_layers="
        "null: megatron-core's TransformerConfig raises 'When using recompute_granularity: full "
        "recompute_num_layers must be between 1 and num_layers_per_pipeline_rank: …' when "
        "mbridge builds actor.backend='megatron:d8'; set "
        "actor.megatron.recompute_num_layers=1 (the reference's default)",
        _selective({"recompute_granularity": "full", "recompute_num_layers": 2}),
    ),
    (  # megatron_engine.py _build_hf_mcore_bridge l.722-729 → mbridge set_extra_args →
        # megatron-core 0.17.0 TransformerConfig.__post_init__ (transformer_config.py
        # l.1346-1352); recompute_num_layers defaults to 1 (areal/api/cli_args.py l.967)
        "selective recomputation: megatron.recompute_num_layers is null",
        _selective({}),
        "actor.megatron.recompute_granularity='selective' with "
        "actor.megatron.recompute_num_layers=1: megatron-core's TransformerConfig raises 'When "
        "using recompute_granularity: selective recompute_num_layers must be None.' when mbridge "
        "builds actor.backend='megatron:d8'; set actor.megatron.recompute_num_layers=null",
        _selective({"recompute_num_layers": None}),
    ),
    (  # the same __post_init__ l.1380-1383: mbridge's qwen3.py leaves moe_grouped_gemm False
        "selective recomputation: recompute_modules moe_act needs a MoE model",
        _selective(SELECTIVE | {"recompute_modules": ["core_attn", "moe_act"]}, "Qwen/Qwen3-8B"),
        "actor.megatron.recompute_modules=['core_attn', 'moe_act'] has 'moe_act' but "
        "actor.backend='megatron:d8' runs a dense model: mbridge leaves megatron-core's "
        "moe_grouped_gemm false for it, and its TransformerConfig raises 'moe_act in "
        "recompute_modules is only supported with moe_grouped_gemm.'; drop 'moe_act' from "
        "actor.megatron.recompute_modules",
        # mbridge's qwen3moe.py sets moe_grouped_gemm=True (l.21)
        _selective(
            SELECTIVE | {"recompute_modules": ["core_attn", "moe_act"]}, "Qwen/Qwen3-30B-A3B"
        ),
    ),
    (  # l.1385-1389: only DeepSeek-V3's MLATransformerConfig has multi_latent_attention
        "selective recomputation: recompute_modules mla_up_proj needs MLA",
        _selective(SELECTIVE | {"recompute_modules": ["mla_up_proj"]}, "Qwen/Qwen3-30B-A3B"),
        "actor.megatron.recompute_modules=['mla_up_proj'] has 'mla_up_proj' but the model of "
        "actor.backend='megatron:d8' has no multi-latent attention (kv_lora_rank 0): "
        "megatron-core's TransformerConfig raises 'mla_up_proj in recompute_modules is only "
        "supported with multi_latent_attention.' when mbridge builds it; drop 'mla_up_proj' "
        "from actor.megatron.recompute_modules",
        _selective(SELECTIVE | {"recompute_modules": ["mla_up_proj"]}, "deepseek-ai/DeepSeek-V3"),
    ),
    (  # l.1399-1406: mbridge's deepseek_v3.py sets moe_shared_expert_overlap=True (l.145)
        # before the reference's moe_shared_expert_overlap (false) reaches it
        "selective recomputation: no recompute_modules shared_experts with shared experts "
        "(mbridge; megatron-bridge: DeepSeek-V2/V3, GLM-4.5, Kimi-K2)",
        _selective(
            SELECTIVE | {"recompute_modules": ["shared_experts"]}, "deepseek-ai/DeepSeek-V3"
        ),
        "actor.megatron.recompute_modules=['shared_experts'] has 'shared_experts' but the model "
        "of actor.backend='megatron:d8' has shared experts, for which mbridge sets "
        "moe_shared_expert_overlap=True before actor.megatron.moe_shared_expert_overlap is "
        "applied: megatron-core's TransformerConfig raises 'shared_experts recompute cannot "
        "work with --moe-shared-expert-overlap.'; drop 'shared_experts' from "
        "actor.megatron.recompute_modules",
        # Qwen3-30B-A3B has no shared expert: megatron-core checks only a model with one
        _selective(
            SELECTIVE
            | {"recompute_modules": ["shared_experts"], "moe_shared_expert_overlap": True},
            "Qwen/Qwen3-30B-A3B",
        ),
    ),
    (  # generate_llm_fqn_per_model_part l.148-151 (archon/pipeline_parallel.py at cbff54d6):
        # Qwen3-8B, 36 + 30 + 1 = 67 effective layers over p4 × 2 = 8 stages, 67 // 8 = 8 < 30
        "archon: the layers + embedding + output fill p × (stages per rank) virtual stages",
        cfg(
            rollout={"backend": "vllm:d8"},
            actor={
                "backend": "archon:d2p4",
                "path": "Qwen/Qwen3-8B",
                "archon": {"pp_first_stage_less_layers": 30},
            },
        ),
        "actor.backend='archon:d2p4': the archon engine splits 36 layers + 30 (embedding) + 1 "
        "(output) = 67 over p4 × 2 = 8 virtual stages (generate_llm_fqn_per_model_part): "
        "actor.archon.pp_first_stage_less_layers=30 exceeds the 8 layers per stage (67 // 8; "
        "the engine raises 'first_stage_less_layers (30) exceeds layers_per_stage (8)'); lower "
        "it",
        cfg(  # 36 + 5 + 1 = 42, 42 // 8 = 5: the largest that runs
            rollout={"backend": "vllm:d8"},
            actor={
                "backend": "archon:d2p4",
                "path": "Qwen/Qwen3-8B",
                "archon": {"pp_first_stage_less_layers": 5},
            },
        ),
    ),
    (  # registry.py make_mcore_model: megatron-bridge's new provider gets no layout, so
        # megatron-core's get_num_layers_to_build splits evenly (transformer_block.py l.151-153)
        "megatron-bridge: the layers split evenly over p (and vpp)",
        cfg(
            rollout={"backend": "vllm:d8"},
            actor={
                "backend": "megatron:d1p8",
                "path": "Qwen/Qwen3-8B",
                "megatron": {"bridge_type": "megatron-bridge"},
            },
        ),
        "actor.backend='megatron:d1p8' with actor.megatron.bridge_type='megatron-bridge' splits "
        "the 36 layers evenly over p8 (megatron-bridge's provider gets no pipeline layout), and "
        "36 % 8 = 4: megatron-core's get_num_layers_to_build asserts 'num_layers=36 should be "
        "divisible by config.pipeline_model_parallel_size=8'; use a p that splits them evenly "
        "(p2, p3, p4, p6, p9, p12, …) or set actor.megatron.bridge_type=mbridge (the "
        "reference's parameter-balanced split)",
        # mbridge's model gets the reference's layout (7 stages of 4 and one of 8 layers at p8)
        cfg(
            rollout={"backend": "vllm:d8"},
            actor={
                "backend": "megatron:d1p8",
                "path": "Qwen/Qwen3-8B",
                "megatron": {"bridge_type": "mbridge"},
            },
        ),
    ),
    (  # areal/trainer/rl_trainer.py _validate_cfg
        "actor._version equals rollout._version",
        cfg(rollout={"backend": "sglang:d8"}, actor={"backend": "fsdp:d8", "_version": "v2"}),
        "actor._version='v2' and rollout._version='v1' must match: set both to 'v1' or both "
        "to 'v2'",
        cfg(
            rollout={"backend": "sglang:d8", "_version": "v2"},
            actor={"backend": "fsdp:d8", "_version": "v2"},
        ),
    ),
    (  # areal/trainer/rl_trainer.py _init_impl: online RL counts steps, not a dataset
        "online RL: no valid_dataset, total_train_steps ≥ total_train_epochs",
        cfg(
            rollout={"backend": "sglang:d8", "agent": {"mode": "online"}},
            actor={"backend": "fsdp:d8"},
            total_train_epochs=10,
        ),
        "rollout.agent.mode='online' needs total_train_steps (each epoch runs "
        "total_train_steps // total_train_epochs steps): set total_train_steps, e.g. "
        "total_train_steps=1000",
        cfg(
            rollout={"backend": "sglang:d8", "agent": {"mode": "online"}},
            actor={"backend": "fsdp:d8"},
            total_train_epochs=10,
            total_train_steps=1000,
        ),
    ),
    (
        "online RL: no valid_dataset, total_train_steps ≥ total_train_epochs",
        cfg(
            rollout={"backend": "sglang:d8", "agent": {"mode": "online"}},
            actor={"backend": "fsdp:d8"},
            total_train_epochs=10,
            total_train_steps=3,
        ),
        "total_train_steps=3 is less than total_train_epochs=10, so an epoch of "
        "rollout.agent.mode='online' would have 3 // 10 = 0 steps: raise total_train_steps to "
        "at least 10",
        cfg(
            rollout={"backend": "sglang:d8", "agent": {"mode": "inline"}},
            actor={"backend": "fsdp:d8"},
            total_train_epochs=10,
            total_train_steps=3,
        ),
    ),
    (
        "online RL: no valid_dataset, total_train_steps ≥ total_train_epochs",
        cfg(
            rollout={"backend": "sglang:d8", "agent": {"mode": "online"}},
            actor={"backend": "fsdp:d8"},
            total_train_steps=10,
            valid_dataset={"batch_size": 8},
        ),
        "valid_dataset is set, but rollout.agent.mode='online' has no validation: remove "
        "valid_dataset (or ~valid_dataset on the command line)",
        cfg(
            rollout={"backend": "sglang:d8", "agent": {"mode": "online"}},
            actor={"backend": "fsdp:d8"},
            total_train_steps=10,
        ),
    ),
    (  # areal/utils/dataloader.py; areal/utils/seqpack.py balanced_greedy_partition
        "train_dataset.batch_size splits over the actor's data-parallel ranks",
        cfg(
            rollout={"backend": "sglang:d8"},
            actor={"backend": "fsdp:d8"},
            train_dataset={"batch_size": 12},
        ),
        "train_dataset.batch_size=12 is not a multiple of the 8 data-parallel ranks of "
        "actor.backend='fsdp:d8' (12 % 8 = 4): the reference splits each step evenly over them; "
        "set train_dataset.batch_size=16",
        cfg(  # 32, not 16: 16 / d8 = 2 per rank, fewer than the 4 minibatches (the next rule)
            rollout={"backend": "sglang:d8"},
            actor={"backend": "fsdp:d8"},
            train_dataset={"batch_size": 32},
        ),
    ),
    (  # areal/trainer/ppo/actor.py ppo_n_minibatches; megatron_engine.py min_n_mbs = 2·p;
        # areal/utils/seqpack.py ffd_allocate: 8 trajectories over d4 are 2 a rank, in 4
        # minibatches of at least 2·p2 = 4 micro-batches each: 2 < 4 × 4 = 16; 16 a rank is
        # 64 prompts of one sample over d4
        "each minibatch has a sequence for each of the actor's micro-batches",
        cfg(
            rollout={"backend": "sglang:d8"},
            actor={"backend": "megatron:d4p2"},
            train_dataset={"batch_size": 8},
        ),
        "8 trajectories a step over the 4 data-parallel ranks of actor.backend='megatron:d4p2' "
        "are 2 per rank, split into actor.ppo_n_minibatches=4 minibatches, each packed into 4 "
        "micro-batches (the Megatron engine's at least 2·p2, a multiple of p): 2 < 4 × 4 = 16, "
        "so a minibatch has fewer sequences than micro-batches and the reference's seqpack "
        "raises 'Number of values … is smaller than min_groups'; set train_dataset.batch_size=64 "
        "or more, or use fewer data-parallel ranks or minibatches",
        cfg(
            rollout={"backend": "sglang:d8"},
            actor={"backend": "megatron:d4p2", "ppo_n_minibatches": 1},
            train_dataset={"batch_size": 16},
        ),
    ),
    (  # the same rule with n_samples: 6 prompts × 3 samples = 18 trajectories over 4 ranks
        "train_dataset.batch_size splits over the actor's data-parallel ranks",
        cfg(
            rollout={"backend": "sglang:d8"},
            actor={"backend": "megatron:d4t2"},
            train_dataset={"batch_size": 6},
            gconfig={"n_samples": 3},
        ),
        "train_dataset.batch_size=6 is not a multiple of the 4 data-parallel ranks of "
        "actor.backend='megatron:d4t2' (6 % 4 = 2), nor its 18 trajectories (× "
        "gconfig.n_samples; 18 % 4 = 2): the reference splits each step evenly over them; set "
        "train_dataset.batch_size=8",
        cfg(
            rollout={"backend": "sglang:d8"},
            actor={"backend": "megatron:d4t2"},
            train_dataset={"batch_size": 8},
            gconfig={"n_samples": 3},
        ),
    ),
    (  # areal/engine/fsdp_engine.py initialize l.473-477
        "fsdp.per_layer_optim_step needs an adam optimizer",
        cfg(
            actor={
                "backend": "fsdp:d8",
                "fsdp": {"per_layer_optim_step": True},
                "optimizer": {"type": "sgd"},
            }
        ),
        "actor.fsdp.per_layer_optim_step=true with actor.optimizer.type='sgd': the FSDP engine "
        "raises \"per_layer_optim_step only supports 'adam' optimizer, got 'sgd'.\" "
        "(fsdp_engine.py l.473-477); use actor.optimizer.type=adam, or set it to false",
        cfg(
            actor={
                "backend": "fsdp:d8",
                "fsdp": {"per_layer_optim_step": True},
                "optimizer": {"type": "adam"},
            }
        ),
    ),
    (  # an actor without an optimizer section has None too (TrainEngineConfig l.1330)
        "fsdp.per_layer_optim_step needs an adam optimizer",
        cfg(actor={"backend": "fsdp:d8", "fsdp": {"per_layer_optim_step": True}}),
        "actor.fsdp.per_layer_optim_step=true on an engine without an optimizer: the FSDP "
        "engine's initialize reads its optimizer's type and raises AttributeError ('NoneType' "
        "object has no attribute 'type'); set it to false",
        cfg(
            actor={
                "backend": "fsdp:d8",
                "fsdp": {"per_layer_optim_step": True},
                "optimizer": {"type": "adam"},
            }
        ),
    ),
    (  # the same rule on a ref, which has no optimizer: its initialize reads None.type
        "fsdp.per_layer_optim_step needs an adam optimizer",
        cfg(
            rollout={"backend": "sglang:d4"},
            actor={"backend": "fsdp:d4"},
            ref={"backend": "fsdp:d4", "fsdp": {"per_layer_optim_step": True}},
        ),
        "ref.fsdp.per_layer_optim_step=true on an engine without an optimizer: the FSDP "
        "engine's initialize reads its optimizer's type and raises AttributeError ('NoneType' "
        "object has no attribute 'type'); set it to false",
        cfg(
            rollout={"backend": "sglang:d4"},
            actor={"backend": "fsdp:d4"},
            ref={"backend": "fsdp:d4"},
        ),
    ),
    (  # areal/infra/launcher/sglang_server.py; areal/infra/scheduler/ray.py _build_node_plan
        "an inference server wider than a node spans whole nodes",
        cfg(rollout={"backend": "sglang:d1t12"}, actor={"backend": "fsdp:d4"}),
        "rollout.backend='sglang:d1t12': one sglang instance spans t12·p1 = 12 GPUs, more than "
        "cluster.n_gpus_per_node=8 and not whole nodes (12 % 8 = 4); a server wider than a node "
        "takes whole nodes: use 8 or 16 GPUs per instance",
        cfg(
            rollout={"backend": "sglang:d1t16"},
            actor={"backend": "fsdp:d4"},
            cluster={"n_nodes": 3, "n_gpus_per_node": 8},
        ),
    ),
    (  # areal/infra/scheduler/slurm.py _generate_sbatch_script
        "scheduler.type slurm: each engine takes whole nodes",
        cfg(
            rollout={"backend": "sglang:d6"},
            actor={"backend": "fsdp:d8"},
            scheduler={"type": "slurm"},
        ),
        "rollout.backend='sglang:d6' takes 6 GPUs, but scheduler.type='slurm' allocates whole "
        "nodes of cluster.n_gpus_per_node=8 (6 % 8 = 6): use a multiple of 8 GPUs, or "
        "scheduler.type=local or ray",
        cfg(
            rollout={"backend": "sglang:d6"},
            actor={"backend": "fsdp:d8"},
            scheduler={"type": "local"},
        ),
    ),
    (  # areal/infra/scheduler/local.py create_workers: replicas = rollout d vs actor world size
        "scheduler.type local: a colocated rollout has one worker per target GPU",
        cfg(
            rollout=colocated("sglang:d2t2"),
            actor={"backend": "fsdp:d4", "weight_update_mode": "disk"},
            enable_offload=True,
            scheduler={"type": "local"},
        ),
        "rollout.backend='sglang:d2t2' colocated with actor.backend='fsdp:d4' under "
        "scheduler.type='local': the rollout asks for one worker per instance (2 instances of "
        "t2·p1 = 2 GPUs) and actor has one per GPU (4), and the local scheduler raises "
        "'Colocated role must have same replica count as target (2 != 4)'; use instances of one "
        "GPU (sglang:d4), or scheduler.type=ray",
        cfg(  # the ray scheduler groups the workers that reuse all the actor's GPUs
            rollout=colocated("sglang:d2t2"),
            actor={"backend": "fsdp:d4", "weight_update_mode": "disk"},
            enable_offload=True,
            scheduler={"type": "ray"},
        ),
    ),
    (  # areal/engine/fsdp_engine.py _create_optimizer: assert type in adam/adam_bf16/sgd
        "fsdp engine: optimizer.type is adam, adam_bf16 or sgd",
        cfg(
            rollout={"backend": "sglang:d8"},
            actor={"backend": "fsdp:d8", "optimizer": {"type": "adamw"}},
        ),
        "actor.optimizer.type='adamw' with actor.backend='fsdp:d8': the FSDP engine asserts "
        "'Only adam/adam_bf16/sgd optimizer is supported in this engine.' (fsdp_engine.py "
        "_create_optimizer); set actor.optimizer.type=adam (the reference's default), adam_bf16 "
        "or sgd",
        cfg(
            rollout={"backend": "sglang:d8"},
            actor={"backend": "fsdp:d8", "optimizer": {"type": "adam_bf16"}},
        ),
    ),
    (  # areal/engine/megatron_engine.py _create_optimizer: assert type in adam/sgd
        "megatron engine: optimizer.type is adam, adam_bf16 (as adam) or sgd",
        cfg(
            rollout={"backend": "sglang:d8"},
            actor={"backend": "megatron:d8", "optimizer": {"type": "adamw"}},
        ),
        "actor.optimizer.type='adamw' with actor.backend='megatron:d8': the Megatron engine "
        "asserts 'Only AdamW/sgd optimizer is supported in this engine.' (megatron_engine.py "
        "_create_optimizer; adam_bf16 it turns into adam first); set actor.optimizer.type=adam "
        "(the reference's default), adam_bf16 or sgd",
        cfg(  # _normalize_adam_bf16_config makes it adam before the assert
            rollout={"backend": "sglang:d8"},
            actor={"backend": "megatron:d8", "optimizer": {"type": "adam_bf16"}},
        ),
    ),
    (  # areal/experimental/engine/archon_utils.py create_optimizer: adam or sgd, else raises
        "archon engine: optimizer.type is adam or sgd",
        cfg(
            rollout={"backend": "sglang:d8"},
            actor={"backend": "archon:d8", "optimizer": {"type": "adam_bf16"}},
        ),
        "actor.optimizer.type='adam_bf16' with actor.backend='archon:d8': the archon engine "
        "raises 'Unsupported optimizer type: adam_bf16' (archon_utils.py create_optimizer); set "
        "actor.optimizer.type=adam (the reference's default) or sgd",
        cfg(
            rollout={"backend": "sglang:d8"},
            actor={"backend": "archon:d8", "optimizer": {"type": "sgd"}},
        ),
    ),
    (  # areal/experimental/engine/archon_engine.py __init__: _validate_model_type
        "archon: the model's type is one archon builds",
        cfg(
            rollout={"backend": "sglang:d8"},
            actor={"backend": "archon:d8", "path": "meta-llama/Llama-3.1-8B"},
        ),
        "actor.backend='archon:d8' runs a model of type 'llama', which the archon engine does "
        "not build: it raises \"Archon Engine does not support model type 'llama'. Supported "
        "model types: qwen2, qwen3, qwen3_5, qwen3_5_moe, qwen3_5_moe_text, qwen3_5_text, "
        'qwen3_moe." (archon_engine.py _validate_model_type); train it with fsdp:… or '
        "megatron:…, or use a model of one of those types",
        cfg(
            rollout={"backend": "sglang:d8"},
            actor={"backend": "fsdp:d8", "path": "meta-llama/Llama-3.1-8B"},
        ),
    ),
    (  # areal/experimental/models/archon/parallel_dims.py: etp=1 borrows e from d × c × t
        "archon: etp is 1 or t, and e is a multiple of c (etp=t) or of c·t (etp=1)",
        cfg(
            rollout={"backend": "sglang:d8"},
            actor={"backend": "archon:d2t4e2", "path": "Qwen/Qwen3-30B-A3B"},
        ),
        "actor.backend='archon:d2t4e2': e2 is not a multiple of c1·t4 = 4 (2 % 4 = 2), and the "
        "archon engine raises 'When etp=1, ep must be divisible by cp * tp, got ep=2, cp=1, "
        "tp=4'; use an expert parallel size this mesh takes (e4, e8)",
        cfg(  # etp = t: e borrows from d × c only
            rollout={"backend": "sglang:d8"},
            actor={"backend": "archon:(attn:d2t4|ffn:e2t4)", "path": "Qwen/Qwen3-30B-A3B"},
        ),
    ),
    (  # areal/experimental/engine/archon_utils.py prepare_training_config: PP with weight tying
        "archon p > 1: the model does not tie its embeddings",
        cfg(
            rollout={"backend": "sglang:d8"},
            actor={"backend": "archon:d4p2", "path": "Qwen/Qwen2.5-1.5B"},
        ),
        "actor.backend='archon:d4p2' pipelines over p2 a model with tie_word_embeddings=true, "
        "and the archon engine raises 'Pipeline Parallelism (PP=2) is not supported with weight "
        "tying (tie_word_embeddings=True).' (archon_utils.py prepare_training_config): use p1, "
        "or a model without weight tying",
        cfg(
            rollout={"backend": "sglang:d8"},
            actor={"backend": "archon:d4p2", "path": "Qwen/Qwen2.5-7B"},
        ),
    ),
]


@pytest.mark.parametrize(("rule", "config", "message", "runs"), REFUSED)
def test_the_reference_refuses_it_and_so_do_we(
    rule: str, config: dict[str, Any], message: str, runs: dict[str, Any]
) -> None:
    assert rule in {r.name for r in RULES}
    with pytest.raises(AllocationValidationError) as info:
        validate(config, on_memory="off")
    assert info.value.message == message
    validate(runs, on_memory="off")  # the nearest config the reference starts


def test_every_rule_has_a_row_and_a_source() -> None:
    assert {r.name for r in RULES} == {row[0] for row in REFUSED}
    for rule in RULES:
        assert rule.source.startswith("areal/"), rule
    assert REFERENCE_COMMIT == "cbff54d645d2cd8ee1f1c358a82f3f473588433d"


def test_reuse_train_logp_is_one_minibatch_as_the_reference_forces_it() -> None:
    # PPOActorConfig.__post_init__ sets ppo_n_minibatches = 1 under reuse_train_logp (with a
    # warning) before it checks the delta update (areal/api/cli_args.py l.1911-1930, cbff54d6)
    actor = {
        "backend": "megatron:d8",
        "enable_delta_weight_update": True,
        "prox_logp_method": "reuse_train_logp",
    }
    validate(cfg(rollout={"backend": "sglang:d8"}, actor=actor), on_memory="off")
    with pytest.raises(AllocationValidationError, match=r"got 4: set actor\.ppo_n_minibatches=1$"):
        validate(
            cfg(rollout={"backend": "sglang:d8"}, actor={**actor, "prox_logp_method": "metrics"}),
            on_memory="off",
        )


def test_tree_training_packs_before_the_megatron_engines_count() -> None:
    # megatron_engine.py l.2677-2698: the tree batch returns before max(min_n_mbs, n_mbs)
    validate(
        cfg(
            rollout={"backend": "sglang:d8"},
            actor={
                "backend": "megatron:d8",
                "enable_tree_training": True,
                "mb_spec": {"n_mbs": None, "max_tokens_per_mb": 8192},
            },
        ),
        on_memory="off",
    )


@pytest.mark.parametrize(
    ("engine", "message"),
    [
        (
            {"backend": "megatron:d4c2"},
            "actor.enable_tree_training=true with actor.backend='megatron:d4c2': tree training "
            "takes no context parallelism (c); the megatron engine asserts 'Context "
            "parallelism is not supported in tree training.'; use c1, or turn tree training off",
        ),
        (
            {"backend": "archon:d4p2"},
            "actor.enable_tree_training=true with actor.backend='archon:d4p2': tree training "
            "takes no pipeline or context parallelism (p, c); the archon engine raises 'Tree "
            "training with pipeline parallelism (pp > 1) or context parallelism (cp > 1) is "
            "currently not supported.'; use c1 and p1, or turn tree training off",
        ),
        (
            {"backend": "archon:d8", "is_critic": True},
            "actor.enable_tree_training=true with actor.backend='archon:d8' and "
            "actor.is_critic=true: the archon engine raises 'Tree training with critic model is "
            "not supported yet.'; turn tree training off for the critic",
        ),
        (
            {"backend": "megatron:d8", "megatron": {"enable_chunked_logits": True}},
            "actor.enable_tree_training=true with actor.backend='megatron:d8' and "
            "actor.megatron.enable_chunked_logits=true: the Megatron engine raises 'AReaL LM "
            "Head does not support tree training' (megatron_engine.py l.211-222); turn one of "
            "them off",
        ),
        (  # FSDP meets c at initialize, the critic only at its first batch
            {"backend": "fsdp:d4c2", "is_critic": True},
            "actor.enable_tree_training=true with actor.backend='fsdp:d4c2': tree training takes "
            "no context parallelism (c); the fsdp engine raises 'Tree training currently cannot "
            "be enabled with sp_size > 1.'; use c1, or turn tree training off",
        ),
        (
            {"backend": "fsdp:d8", "is_critic": True},
            "actor.enable_tree_training=true with actor.backend='fsdp:d8' and "
            "actor.is_critic=true: the fsdp engine raises 'Tree training with critic model is "
            "not supported yet.'; turn tree training off for the critic",
        ),
        (
            {"backend": "megatron:d8", "megatron": {"bridge_type": "megatron-bridge"}},
            "actor.enable_tree_training=true with actor.backend='megatron:d8' and "
            "actor.megatron.bridge_type='megatron-bridge': the Megatron engine raises 'Tree "
            "training is not supported with bridge_type='megatron-bridge'.' (megatron_engine.py "
            "l.778-783); use mbridge, or turn tree training off",
        ),
    ],
)
def test_tree_training_refusals_of_each_engine(engine: dict[str, Any], message: str) -> None:
    config = cfg(rollout={"backend": "sglang:d8"}, actor={**engine, "enable_tree_training": True})
    with pytest.raises(AllocationValidationError) as info:
        validate(config, on_memory="off")
    assert info.value.message == message


def test_v2_awex_has_training_adapters_for_fsdp_and_megatron_only() -> None:
    config = cfg(
        rollout={"backend": "sglang:d8", "_version": "v2"},
        actor={"backend": "archon:d8", "_version": "v2"},
    )
    with pytest.raises(AllocationValidationError) as info:
        validate(config, on_memory="off")
    assert info.value.message == (
        "actor._version='v2' without use_lora sends weights by awex, which has training "
        "adapters for fsdp and megatron only, but actor.backend='archon:d8': the worker raises "
        "'Unsupported engine type for weight update' (areal/v2/training_service/worker/awex.py); "
        "train with fsdp or megatron, or use v1"
    )
    config["actor"]["backend"] = "megatron:d8"
    validate(config, on_memory="off")


def test_the_tree_refusal_the_megatron_engine_meets_first_is_said() -> None:
    # the chunked-logits LM head refuses in the constructor (megatron_engine.py l.343-347),
    # before initialize builds megatron-bridge (l.778-783)
    actor = {
        "backend": "megatron:d8",
        "enable_tree_training": True,
        "megatron": {"bridge_type": "megatron-bridge", "enable_chunked_logits": True},
    }
    with pytest.raises(AllocationValidationError, match="AReaL LM Head does not support tree"):
        validate(cfg(rollout={"backend": "vllm:d8"}, actor=actor), on_memory="off")


def test_the_critics_minibatches_fill_their_micro_batches_too() -> None:
    # critic.py l.63-66 splits the critic's share into its own ppo_n_minibatches: 64 prompts
    # of one sample over the critic's d8 are 8 a rank, fewer than 16 minibatches of one
    # micro-batch each (mb_spec.n_mbs 1); 8 minibatches fit
    config = cfg(
        rollout={"backend": "sglang:d8"},
        actor={"backend": "fsdp:d8", "ppo_n_minibatches": 1},
        critic={"backend": "fsdp:d8", "is_critic": True, "ppo_n_minibatches": 16},
        train_dataset={"batch_size": 64},
        scheduler={"type": "local"},
        cluster={"n_nodes": 3, "n_gpus_per_node": 8},
    )
    with pytest.raises(AllocationValidationError) as info:
        validate(config, on_memory="off")
    assert info.value.message.startswith(
        "64 trajectories a step over the 8 data-parallel ranks of critic.backend='fsdp:d8' are 8 "
        "per rank, split into critic.ppo_n_minibatches=16 minibatches, each packed into 1 "
        "micro-batch (critic.mb_spec.n_mbs): 8 < 16 × 1 = 16"
    )
    config["critic"]["ppo_n_minibatches"] = 8
    validate(config, on_memory="off")


def test_a_refs_forward_packs_the_whole_share_into_its_micro_batches() -> None:
    # the ref's compute_logp goes through the Megatron engine's _prepare_mb_list: at p2 at
    # least 2·p = 4 micro-batches (megatron_engine.py l.2705-2716), so 8 trajectories over
    # the ref's d4 (2 a rank) raise in seqpack; the actor trains one minibatch on d8 fine
    config = cfg(
        rollout={"backend": "sglang:d8"},
        actor={"backend": "fsdp:d8", "ppo_n_minibatches": 1, "kl_ctl": 0.1},
        ref={"backend": "megatron:d4p2"},
        train_dataset={"batch_size": 8},
        scheduler={"type": "local"},
        cluster={"n_nodes": 3, "n_gpus_per_node": 8},
    )
    with pytest.raises(AllocationValidationError) as info:
        validate(config, on_memory="off")
    assert info.value.message == (
        "8 trajectories a step over the 4 data-parallel ranks of ref.backend='megatron:d4p2' are "
        "2 per rank, which its forward packs into 4 micro-batches (the Megatron engine's at "
        "least 2·p2, a multiple of p): 2 < 4, so the reference's seqpack raises 'Number of "
        "values … is smaller than min_groups'; set train_dataset.batch_size=16 or more, or use "
        "fewer data-parallel ranks"
    )
    config["train_dataset"]["batch_size"] = 16
    validate(config, on_memory="off")


def test_archons_minibatches_need_a_sequence_for_each_of_its_stages() -> None:
    # archon_engine.py l.1209-1221: each train_batch at p > 1 needs at least p × stages
    # sequences (Interleaved1F1B's default 2 stages a rank: 2 × 2 = 4); 16 trajectories
    # over d2 are 8 a rank, 4 minibatches of 2 < 4; with 2 minibatches, 4 each, it starts
    actor = {"backend": "archon:d2p2", "ppo_n_minibatches": 4}
    config = cfg(
        rollout={"backend": "sglang:d4"},
        actor=actor,
        train_dataset={"batch_size": 16},
    )
    with pytest.raises(AllocationValidationError) as info:
        validate(config, on_memory="off")
    assert info.value.message == (
        "16 trajectories a step over the 2 data-parallel ranks of actor.backend='archon:d2p2' "
        "are 8 per rank, split into actor.ppo_n_minibatches=4 minibatches, each packed into 4 "
        "micro-batches (the archon engine's at least p2 × 2 stages): 8 < 4 × 4 = 16, so a "
        "minibatch has fewer sequences than micro-batches and the archon engine raises "
        "'Pipeline parallelism requires at least 4 sequences'; set train_dataset.batch_size=32 "
        "or more, or use fewer data-parallel ranks or minibatches"
    )
    config["actor"]["ppo_n_minibatches"] = 2
    validate(config, on_memory="off")


def test_rules_apply_in_the_reference_order() -> None:
    # enable_offload is checked before weight_update_mode in _validate_cfg
    config = cfg(rollout=colocated("sglang:d8"), actor={"backend": "fsdp:d8"})
    with pytest.raises(AllocationValidationError, match=r"^enable_offload is false"):
        validate(config, on_memory="off")


def test_v1_awex_hands_over_itself_no_enable_offload() -> None:
    # rl_trainer: _is_v1_awex_colocate turns the rollout's and actor's offload off
    plan = validate(
        cfg(
            rollout=colocated("sglang:d1t8"),
            actor={"backend": "megatron:d8", "weight_update_mode": "awex", "offload": True},
        ),
        on_memory="off",
    )
    assert plan.total_gpus == 8


def test_an_sft_config_has_no_rl_trainer_rules() -> None:
    # no rollout: the SFT trainer runs, _validate_cfg does not (the engine's own rule does)
    plan = validate(cfg(actor={**MEGATRON_LORA, "offload": True}))
    assert plan.total_gpus == 8


@pytest.mark.parametrize("backend", ["fsdp:d8", "megatron:d8"])
def test_an_sft_step_is_one_optimizer_step_over_the_whole_batch(backend: str) -> None:
    # LMEngine._train_lm: one train_batch over the whole batch (areal/trainer/sft/lm_engine.py
    # l.27-34 at cbff54d6); no ppo_n_minibatches splits it, so 8 sequences fill d8's ranks
    # (a PPO actor's default 4 minibatches would leave 8 / 8 / 4 < 1 a minibatch)
    from areal_alloc.experiment.read import read_experiment

    config = cfg(actor={"backend": backend}, train_dataset={"batch_size": 8})
    validate(config, on_memory="off")
    startup = read_experiment(config).startup
    assert (startup.minibatches_of("actor"), startup.minibatches_of("critic")) == (1, 1)
    # with a rollout the same batch is a PPO actor's, split into 4 minibatches
    rl = cfg(rollout={"backend": "sglang:d8"}, actor={"backend": backend})
    assert read_experiment(rl).startup.minibatches_of("actor") == 4


def test_an_sft_step_still_packs_its_share_into_the_engines_micro_batches() -> None:
    # the Megatron engine at p2 packs a rank's 2 sequences into at least 2·p = 4 micro-batches
    config = cfg(actor={"backend": "megatron:d4p2"}, train_dataset={"batch_size": 8})
    with pytest.raises(AllocationValidationError) as info:
        validate(config, on_memory="off")
    assert info.value.message == (
        "8 sequences a step over the 4 data-parallel ranks of actor.backend='megatron:d4p2' "
        "are 2 per rank, which its step packs into 4 micro-batches (the Megatron engine's at "
        "least 2·p2, a multiple of p): 2 < 4, so the reference's seqpack raises 'Number of "
        "values … is smaller than min_groups'; set train_dataset.batch_size=16 or more, or use "
        "fewer data-parallel ranks"
    )


@pytest.mark.parametrize(
    ("sections", "unit"),
    [
        # RWConfig requires actor.is_critic (cli_args.py l.3287-3293); DPOConfig has a ref
        # beside the actor. Both engines pack a chosen/rejected pair whole (mb_spec.granularity
        # = 2: megatron_engine.py l.3093, fsdp_engine.py l.2414-2418), so a micro-batch needs
        # a pair, not a sequence
        ({"actor": {"backend": "megatron:d4p2", "is_critic": True}}, "chosen/rejected pairs"),
        (
            {"actor": {"backend": "megatron:d4p2"}, "ref": {"backend": "megatron:d4p2"}},
            "chosen/rejected pairs",
        ),
        ({"actor": {"backend": "megatron:d4p2"}}, "sequences"),  # SFT
    ],
)
def test_rw_and_dpo_pack_pairs(sections: dict[str, Any], unit: str) -> None:
    # 8 items over d4: 2 a rank, fewer than p2's 2·p = 4 micro-batches; 16 fill them
    from areal_alloc.experiment.read import read_experiment

    config = cfg(train_dataset={"batch_size": 8}, **sections)
    startup = read_experiment(config).startup
    assert (startup.rl, startup.pairs) == (False, unit != "sequences")
    with pytest.raises(AllocationValidationError) as info:
        validate(config, on_memory="off")
    assert info.value.message.startswith(
        f"8 {unit} a step over the 4 data-parallel ranks of actor.backend='megatron:d4p2' are "
        f"2 per rank, which its step packs into 4 micro-batches"
    )
    assert "set train_dataset.batch_size=16 or more" in info.value.message
    validate(cfg(train_dataset={"batch_size": 16}, **sections), on_memory="off")


def test_the_batch_the_single_controller_splits_warns_of_the_spmd_launchers() -> None:
    # 12 prompts × 4 samples = 48 trajectories split 6 per rank; only the SPMD dataloader refuses 12
    plan = validate(
        cfg(
            rollout={"backend": "sglang:d8"},
            actor={"backend": "fsdp:d8"},
            train_dataset={"batch_size": 12},
            gconfig={"n_samples": 4},
        ),
        on_memory="off",
    )
    assert plan.warnings == (
        "train_dataset.batch_size=12 is not a multiple of the 8 data-parallel ranks of "
        "actor.backend='fsdp:d8': the single-controller trainer splits its 48 trajectories "
        "evenly, but the legacy SPMD launchers (areal.infra.launcher.local/ray/slurm) refuse it "
        "in their dataloader (areal/utils/dataloader.py)",
    )
    # with dynamic_bs the step's count varies: only the SPMD launchers' rule is certain
    plan = validate(
        cfg(
            rollout={"backend": "sglang:d8"},
            actor={"backend": "fsdp:d8"},
            train_dataset={"batch_size": 12},
            dynamic_bs=True,
        ),
        on_memory="off",
    )
    assert len(plan.warnings) == 1


def _budget_warning(budget: int, made: str, longest: int) -> str:
    key = "actor.mb_spec.max_tokens_per_mb"
    return (
        f"{key}={budget} is below the longest sequence of one turn, {made} = {longest:,} "
        f"tokens: a step with a sequence over {budget:,} stops the run in seqpack (a value "
        f"over its capacity {budget}, areal/utils/seqpack.py); set {key}={longest} or more"
    )


@pytest.mark.parametrize(
    ("budget", "dataset", "gconfig", "rollout", "expected"),
    [
        # the reference's own examples/math/gsm8k_grpo_awex_colocate.yaml: actor 1,024
        (
            1024,
            {"max_length": 1024},
            {"max_new_tokens": 256},
            True,
            [
                _budget_warning(
                    1024, "train_dataset.max_length 1,024 + gconfig.max_new_tokens 256", 1280
                )
            ],
        ),
        (1280, {"max_length": 1024}, {"max_new_tokens": 256}, True, []),  # exactly fits
        (  # no prompt bound: a completion alone must fit
            1024,
            {},
            {"max_new_tokens": 2048},
            True,
            [
                _budget_warning(
                    1024,
                    "gconfig.max_new_tokens 2,048 (train_dataset.max_length unset: a "
                    "completion alone)",
                    2048,
                )
            ],
        ),
        (  # examples/swe/qwen3_30b_a3b_grpo.yaml: max_tokens 131,071 caps 32,768 + 131,071
            131072,
            {"max_length": 32768},
            {"max_new_tokens": 131071, "max_tokens": 131071},
            True,
            [],
        ),
        (  # the reference's default max_tokens 32,768 caps it
            16384,
            {"max_length": 4096},
            {"max_new_tokens": 32768},
            True,
            [
                _budget_warning(
                    16384,
                    "gconfig.max_tokens 32,768 (the cap on train_dataset.max_length 4,096 + "
                    "gconfig.max_new_tokens 32,768)",
                    32768,
                )
            ],
        ),
        (  # a prompt as long as max_tokens has nothing left to generate
            None,
            {"max_length": 8192},
            {"max_new_tokens": 1024, "max_tokens": 8192},
            True,
            [
                "train_dataset.max_length=8192 is not below gconfig.max_tokens 8,192 (prompt "
                "and completion together): a prompt of 8,192 tokens or more leaves no token to "
                "generate, and the rollout raises 'max_new_tokens (…) is non-positive!' "
                "(areal/infra/remote_inf_engine.py); set gconfig.max_tokens above it or lower "
                "train_dataset.max_length"
            ],
        ),
        (  # SFT, RW, DPO (no rollout): the dataset's sequences (pairs for RW and DPO)
            1024,
            {"max_length": 2048},
            {"max_new_tokens": 4096},
            False,
            [
                "actor.mb_spec.max_tokens_per_mb=1024 is below train_dataset.max_length 2,048, "
                "the longest sequence the dataset keeps: a step with a sequence over 1,024 "
                "stops the run in seqpack (a value over its capacity 1024, "
                "areal/utils/seqpack.py); set actor.mb_spec.max_tokens_per_mb=2048 or more"
            ],
        ),
        (None, {"max_length": 1024}, {"max_new_tokens": 256}, True, []),  # by count
    ],
)
def test_a_budget_below_the_longest_sequence_warns(
    budget: int | None,
    dataset: dict[str, Any],
    gconfig: dict[str, Any],
    rollout: bool,
    expected: list[str],
) -> None:
    actor: dict[str, Any] = {"backend": "fsdp:d8"}
    if budget is not None:
        actor["mb_spec"] = {"max_tokens_per_mb": budget}
    engines: dict[str, Any] = {"actor": actor}
    if rollout:
        engines["rollout"] = {"backend": "sglang:d8"}
    config = cfg(train_dataset={"batch_size": 64, **dataset}, gconfig=gconfig, **engines)
    warnings = validate(config, on_memory="off").warnings
    found = [w for w in warnings if "longest sequence" in w or "gconfig.max_tokens" in w]
    assert found == expected


@pytest.mark.parametrize(
    ("scheduler", "warned"),
    [({"type": "k8s"}, True), ({"type": "Local"}, True), ({"type": "ray"}, False), ({}, False)],
)
def test_an_unknown_scheduler_type_warns(scheduler: dict[str, Any], warned: bool) -> None:
    # rl_trainer.py _init_scheduler raises for it; the SPMD launchers never read it
    plan = validate(
        cfg(rollout={"backend": "sglang:d8"}, actor={"backend": "fsdp:d8"}, scheduler=scheduler),
        on_memory="off",
    )
    found = [w for w in plan.warnings if w.startswith("scheduler.type=")]
    kind = scheduler.get("type")
    assert found == (
        [
            f"scheduler.type={kind!r}: the single-controller trainers (python3 train.py) raise "
            f"NotImplementedError('Unknown scheduler type: {kind}') in _init_scheduler "
            "(areal/trainer/rl_trainer.py, sft_trainer.py, rw_trainer.py, dpo_trainer.py); "
            "only the legacy SPMD launchers (areal.infra.launcher.*) do not read it: set "
            "scheduler.type=local, ray or slurm"
        ]
        if warned
        else []
    )


def test_a_server_of_at_most_a_node_is_placed_on_a_node_it_does_not_divide() -> None:
    # one 2-GPU server per 3-GPU node: n_gpus_per_node // gpus_per_server servers a node
    plan = validate(
        {
            "cluster": {"n_nodes": 2, "n_gpus_per_node": 3},
            "rollout": {"backend": "sglang:d2t2"},
            "actor": {"backend": "fsdp:d1"},
        },
        on_memory="off",
    )
    assert [p.runs for p in plan.placements] == [((0, 2), (3, 5)), ((5, 6),)]
    # three such servers need three 3-GPU nodes, though 6 GPUs would hold their 6
    with pytest.raises(AllocationValidationError) as info:
        validate(
            {
                "cluster": {"n_nodes": 2, "n_gpus_per_node": 3},
                "rollout": {"backend": "sglang:d3t2"},
            },
            on_memory="off",
        )
    assert info.value.message == (
        "rollout.backend='sglang:d3t2' does not fit: placed after the engines before it "
        "(inference instances kept within nodes) it would end at GPU 8, past the cluster's "
        "2 × 3 = 6"
    )


# --- shapes: wherever the model is known, for every engine ---------------------------------

# config -> exact message
SHAPES: list[tuple[dict[str, Any], str]] = [
    (  # a catalogue name in actor.path: the rollout serves the actor's model
        cfg(rollout={"backend": "sglang:d1t8"}, actor={"backend": "fsdp:d4", "path": QWEN_7B}),
        f"rollout.backend='sglang:d1t8' does not fit the model (actor.path={QWEN_7B!r}): "
        "num_attention_heads=28 is not divisible by tensor parallel size t8: 28 % 8 = 4",
    ),
    (  # the rollout's own model: vllm.model
        cfg(
            rollout={"backend": "vllm:d1t8"},
            actor={"backend": "fsdp:d4", "path": "/nowhere/my-model"},
            vllm={"model": QWEN_7B},
        ),
        f"rollout.backend='vllm:d1t8' does not fit the model (vllm.model={QWEN_7B!r}): "
        "num_attention_heads=28 is not divisible by tensor parallel size t8: 28 % 8 = 4",
    ),
    (  # sglang.model_path, read as the catalogue's name from a cluster path
        cfg(
            rollout={"backend": "sglang:d1t8"},
            actor={"backend": "fsdp:d4"},
            sglang={"model_path": "/storage/models/DeepSeek-R1-Distill-Qwen-7B"},
        ),
        "rollout.backend='sglang:d1t8' does not fit the model "
        "(sglang.model_path='/storage/models/DeepSeek-R1-Distill-Qwen-7B', read as the "
        "catalogue's DeepSeek-R1-Distill-Qwen-7B): num_attention_heads=28 is not divisible by "
        "tensor parallel size t8: 28 % 8 = 4",
    ),
    (
        cfg(rollout={"backend": "sglang:d4"}, actor={"backend": "fsdp:d1t8", "path": QWEN_7B}),
        f"actor.backend='fsdp:d1t8' does not fit the model (actor.path={QWEN_7B!r}): "
        "num_attention_heads=28 is not divisible by tensor parallel size t8: 28 % 8 = 4; "
        "num_key_value_heads=4 is not divisible by tensor parallel size t8: 4 % 8 = 4",
    ),
    (  # the teacher runs its own model, served through teacher.rollout
        cfg(
            rollout={"backend": "sglang:d4"},
            actor={"backend": "fsdp:d4", "path": "Qwen/Qwen3-0.6B"},
            teacher={"path": QWEN_7B, "rollout": {"backend": "sglang:d1t8"}},
            cluster={"n_nodes": 2, "n_gpus_per_node": 8},
        ),
        f"teacher.rollout.backend='sglang:d1t8' does not fit the model (teacher.path={QWEN_7B!r}): "
        "num_attention_heads=28 is not divisible by tensor parallel size t8: 28 % 8 = 4",
    ),
    (  # a teacher server without a path loads sglang.model_path (_init_teacher_rollout)
        cfg(
            rollout={"backend": "sglang:d4"},
            actor={"backend": "fsdp:d4", "path": "Qwen/Qwen3-0.6B"},
            sglang={"model_path": QWEN_7B},
            teacher={"rollout": {"backend": "sglang:d1t8"}},
        ),
        f"teacher.rollout.backend='sglang:d1t8' does not fit the model "
        f"(sglang.model_path={QWEN_7B!r}): num_attention_heads=28 is not divisible by tensor "
        "parallel size t8: 28 % 8 = 4",
    ),
    (  # vpp from the reference's key: 20 layers cannot fill p16 × vpp2 = 32 stages
        cfg(
            actor={
                "backend": "megatron:d1p16",
                "model_shape": {"num_layers": 20},
                "megatron": {"virtual_pipeline_parallel_size": 2},
            }
        ),
        "actor.backend='megatron:d1p16' does not fit the model (actor.model_shape): "
        "num_layers=20 cannot fill p16·vpp2 = 32 pipeline stages: every stage but the first and "
        "last needs a layer, so at least 30 layers",
    ),
    (  # FSDP's Ulysses patch: the heads over c (areal/models/transformers/ulyssess_patch.py)
        cfg(actor={"backend": "fsdp:d1c8", "path": "Qwen/Qwen2.5-1.5B"}),
        "actor.backend='fsdp:d1c8' does not fit the model (actor.path='Qwen/Qwen2.5-1.5B'): "
        "num_attention_heads=12 is not divisible by context parallel size c8: 12 % 8 = 4, and "
        "the FSDP engine's Ulysses patch raises 'num_attention_heads 12 must be divisible by "
        "ulysses_sp_size 8'; use a context parallel size the heads take (c2, c4, c6, c12)",
    ),
    (
        cfg(actor={"backend": "fsdp:d1c8", "path": QWEN_7B}),
        f"actor.backend='fsdp:d1c8' does not fit the model (actor.path={QWEN_7B!r}): "
        "num_attention_heads=28 is not divisible by context parallel size c8: 28 % 8 = 4, and "
        "the FSDP engine's Ulysses patch raises 'num_attention_heads 28 must be divisible by "
        "ulysses_sp_size 8'; use a context parallel size the heads take (c2, c4, c28)",
    ),
    (  # 24 heads, 3 KV heads: c4 divides the heads; 3 and 4 neither divides the other
        cfg(
            actor={
                "backend": "fsdp:d2c4",
                "model_shape": {"num_attention_heads": 24, "num_key_value_heads": 3},
            }
        ),
        "actor.backend='fsdp:d2c4' does not fit the model (actor.model_shape): "
        "num_key_value_heads=3 and context parallel size c4: neither divides the other "
        "(3 % 4 = 3, 4 % 3 = 1), and the FSDP engine's Ulysses patch raises "
        "'num_key_value_heads 3 must be divisible by ulysses_sp_size 4 or vice versa.'; use a "
        "context parallel size the heads take (c3, c6, c12, c24)",
    ),
    (  # archon: the heads after tensor parallelism (archon/utils.py validate_cp_constraints)
        cfg(actor={"backend": "archon:d1t2c4", "path": QWEN_7B}),
        f"actor.backend='archon:d1t2c4' does not fit the model (actor.path={QWEN_7B!r}): 14 "
        "attention heads after t2 are not divisible by context parallel size c4: 14 % 4 = 2, "
        "and the archon engine raises 'q_heads after TP (14) must be divisible by cp_size (4)'; "
        "use a context parallel size the heads take (c2, c14)",
    ),
    (  # archon, 24 heads and 6 KV heads: c4 divides the heads, not the KV heads
        cfg(
            actor={
                "backend": "archon:d2c4",
                "model_shape": {"num_attention_heads": 24, "num_key_value_heads": 6},
            }
        ),
        "actor.backend='archon:d2c4' does not fit the model (actor.model_shape): 6 KV heads are "
        "not divisible by context parallel size c4: 6 % 4 = 2, and the archon engine raises "
        "'kv_heads after TP (6) must be divisible by cp_size (4)'; use a context parallel size "
        "the heads take (c2, c3, c6, c12, c24)",
    ),
]


@pytest.mark.parametrize(("config", "message"), SHAPES)
def test_shapes_are_checked_wherever_the_model_is_known(
    config: dict[str, Any], message: str
) -> None:
    with pytest.raises(AllocationValidationError) as info:
        validate(config, on_memory="off")
    assert info.value.message == message


# configs the reference starts, with a model it knows
SHAPES_THAT_RUN = [
    # 28 layers over p8: the reference's Megatron engine splits them unevenly
    cfg(rollout={"backend": "sglang:d1t4"}, actor={"backend": "megatron:d1p8", "path": QWEN_7B}),
    # 80 layers over p16 × vpp2 = 32 stages (areal/engine/megatron_utils/pipeline_parallel.py)
    cfg(
        actor={
            "backend": "megatron:d1p16",
            "path": "meta-llama/Llama-3.1-70B",
            "megatron": {"virtual_pipeline_parallel_size": 2},
        }
    ),
    # t4 shards 28 heads and 4 KV heads
    cfg(rollout={"backend": "vllm:d2t4"}, actor={"backend": "fsdp:d2t4", "path": QWEN_7B}),
    # a vLLM rollout serves vllm.model, never sglang.model_path
    cfg(
        rollout={"backend": "vllm:d1t8"},
        actor={"backend": "fsdp:d4", "path": "Qwen/Qwen3-8B"},
        sglang={"model_path": QWEN_7B},
    ),
    # a model this machine does not know is not checked
    cfg(rollout={"backend": "sglang:d1t8"}, actor={"backend": "fsdp:d4", "path": "org/unknown"}),
    # Ulysses: 28 heads and 4 KV heads over c4 (FSDP); after t2, 14 heads and 2 KV heads
    # over c2 (archon)
    cfg(actor={"backend": "fsdp:d2c4", "path": QWEN_7B}),
    cfg(actor={"backend": "archon:d2t2c2", "path": QWEN_7B}),
    # Megatron's context parallelism splits the sequence, not the heads
    cfg(actor={"backend": "megatron:d1c8", "path": QWEN_7B}),
    # FSDP repeats 2 KV heads over c4, which they divide
    cfg(actor={"backend": "fsdp:d2c4", "path": "Qwen/Qwen2.5-1.5B"}),
]


@pytest.mark.parametrize("config", SHAPES_THAT_RUN)
def test_shapes_the_reference_runs_pass(config: dict[str, Any]) -> None:
    validate(config, on_memory="off")


def test_an_unknown_named_model_is_not_replaced_by_another() -> None:
    # the rollout serves sglang.model_path; an unknown one is not checked against actor.path
    validate(
        cfg(
            rollout={"backend": "sglang:d1t8"},
            actor={"backend": "fsdp:d4", "path": QWEN_7B},
            sglang={"model_path": "/ckpt/my-finetune"},
        ),
        on_memory="off",
    )


def test_the_vpp_key_is_a_whole_number() -> None:
    with pytest.raises(AllocationValidationError) as info:
        validate(
            cfg(
                actor={
                    "backend": "megatron:d1p2",
                    "path": QWEN_7B,
                    "megatron": {"virtual_pipeline_parallel_size": "two"},
                }
            ),
            on_memory="off",
        )
    assert info.value.message.startswith(
        "actor.megatron.virtual_pipeline_parallel_size='two': must be an integer"
    )


# --- every interface runs the same rules: check, the hook, preflight, explain --model ----------
# (the shapes are checked before any memory estimate, whatever GPU the environment names)

SHAPE_MESSAGE = (
    f"rollout.backend='sglang:d1t8' does not fit the model (actor.path={QWEN_7B!r}): "
    "num_attention_heads=28 is not divisible by tensor parallel size t8: 28 % 8 = 4"
)


def _experiment(tmp_path: Any) -> str:
    path = tmp_path / "exp.yaml"
    path.write_text(
        "cluster: {n_nodes: 2, n_gpus_per_node: 8}\n"
        "rollout: {backend: 'sglang:d1t8'}\n"
        f"actor: {{backend: 'fsdp:d4', path: {QWEN_7B}}}\n"
    )
    return str(path)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["check", "--quiet", "{exp}"],
            f"areal-alloc check: {SHAPE_MESSAGE}",
        ),
        (
            ["preflight", "--", "python3", "train.py", "--config", "{exp}"],
            f"areal-alloc preflight: {SHAPE_MESSAGE}",
        ),
        (  # the hook, through the areal-alloc app's own experiment (actor.path Qwen2.5-7B-Instruct)
            ["rollout.backend=sglang:d1t8"],
            "areal-alloc: rollout.backend='sglang:d1t8' does not fit the model "
            "(actor.path='Qwen/Qwen2.5-7B-Instruct'): num_attention_heads=28 is not divisible by "
            "tensor parallel size t8: 28 % 8 = 4",
        ),
        (
            ["explain", "vllm:d1t8", "--model", QWEN_7B],
            f"areal-alloc explain: backend='vllm:d1t8' does not fit the model "
            f"(--model={QWEN_7B!r}): num_attention_heads=28 is not divisible by tensor parallel "
            "size t8: 28 % 8 = 4",
        ),
    ],
)
def test_every_interface_checks_the_shape(
    argv: list[str], message: str, tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    from areal_alloc.cli import main

    exp = _experiment(tmp_path)
    assert main([a.replace("{exp}", exp) for a in argv]) == 1
    assert capsys.readouterr().err.strip().splitlines()[-1] == message


def test_the_docs_table_names_every_rules_source() -> None:
    from pathlib import Path

    page = (Path(__file__).resolve().parents[2] / "docs" / "checks.md").read_text(encoding="utf-8")
    table = page.split("## The reference's start-up rules", 1)[1].split("\n## ", 1)[0]
    for rule in RULES:
        for part in rule.source.split("; "):
            assert part.split()[0] in table, rule


def test_the_strict_schema_declares_every_key_the_rules_read(tmp_path: Any) -> None:
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    conf = tmp_path / "conf"
    conf.mkdir()
    (conf / "strict.yaml").write_text(
        "defaults:\n  - areal_alloc/schema\n  - _self_\n"
        "cluster: {n_nodes: 2, n_gpus_per_node: 8}\n"
        "enable_offload: true\ntotal_train_epochs: 2\ntotal_train_steps: 20\ndynamic_bs: false\n"
        "scheduler: {type: local}\ntrain_dataset: {batch_size: 16}\n"
        "gconfig: {n_samples: 4}\n"
        "rollout:\n  backend: 'sglang:d8'\n  _version: v1\n  return_routed_experts: false\n"
        "  agent: {mode: online}\n"
        "  scheduling_strategy: {type: colocation, target: actor}\n"
        "actor:\n  backend: 'fsdp:d8'\n  weight_update_mode: disk\n  use_lora: false\n"
        "  _version: v1\n  enable_delta_weight_update: false\n  ppo_n_minibatches: 1\n"
        "  prox_logp_method: recompute\n"
        "  init_from_scratch: false\n  fsdp: {memory_efficient_load: true}\n  offload: false\n"
        "  megatron: {bridge_type: megatron-bridge, moe_enable_deepep: false,\n"
        "    moe_token_dispatcher_type: alltoall, recompute_num_layers: null,\n"
        "    moe_shared_expert_overlap: false}\n"
    )
    with initialize_config_dir(str(conf), version_base=None):
        cfg = compose("strict")
        assert validate(cfg, on_memory="off").total_gpus == 8
        # and without enable_offload the rule speaks, not the schema
        off = compose("strict", overrides=["enable_offload=false"])
        assert OmegaConf.select(off, "enable_offload") is False
        with pytest.raises(AllocationValidationError, match=r"^enable_offload is false"):
            validate(off, on_memory="off")


def _reference_split_exists(layers: int, stages: int) -> bool:
    """Whether the reference's stage partition finds a layout (its dynamic programme).

    A port of ``_compute_stage_layer_lengths`` (areal/engine/megatron_utils/pipeline_parallel.py,
    AReaL cbff54d6) with equal layer weights: stage 1 may hold only the embedding, the last only
    the loss, every middle stage at least one layer; no finite cost means no layout.
    """
    reachable = [[False] * (layers + 1) for _ in range(stages + 1)]
    reachable[0][0] = True
    for stage in range(1, stages + 1):
        for end in range(layers + 1):
            for start in range(end + 1):
                if not reachable[stage - 1][start]:
                    continue
                if stage not in (1, stages) and start == end:
                    continue
                reachable[stage][end] = True
    return reachable[stages][layers]


@given(
    layers=st.integers(min_value=1, max_value=40),
    pp=st.integers(min_value=2, max_value=12),
    vpp=st.integers(min_value=1, max_value=3),
)
def test_the_megatron_layer_rule_is_the_references_split(layers: int, pp: int, vpp: int) -> None:
    from areal_alloc.model_shape import ModelShape, layout_problems
    from areal_alloc.strategy import ParallelStrategy

    problems = layout_problems(
        "megatron",
        ParallelStrategy(pipeline_parallel_size=pp),
        ModelShape(num_layers=layers, virtual_pipeline_size=vpp),
    )
    assert (problems == []) == _reference_split_exists(layers, pp * vpp)


# --- the Megatron engine's MoE token dispatcher (rules.megatron_deepep_needs_flex …) ----------


def _megatron(megatron: dict[str, Any], **actor: Any) -> dict[str, Any]:
    return cfg(
        rollout={"backend": "vllm:d8"},
        actor={"backend": "megatron:d8", "megatron": megatron, **actor},
    )


# configs the reference's Megatron engine builds, and the warnings each gives
DISPATCHERS_THAT_RUN: list[tuple[dict[str, Any], tuple[str, ...]]] = [
    (_megatron({}), ()),  # the reference's defaults: alltoall, no DeepEP
    (_megatron({"moe_token_dispatcher_type": "flex"}), ()),
    (_megatron({"moe_token_dispatcher_type": "flex", "moe_enable_deepep": "true"}), ()),
    (_megatron({"moe_enable_deepep": False, "moe_token_dispatcher_type": "alltoall"}), ()),
    # a dense model never builds a dispatcher; a model not found here is not checked
    (_megatron({"moe_token_dispatcher_type": "Flex"}, path="Qwen/Qwen3-8B"), ()),
    (_megatron({"moe_token_dispatcher_type": "Flex"}, path="org/unknown-moe"), ()),
    # megatron-bridge ignores both (areal/models/mcore/registry.py make_mcore_model)
    (
        _megatron({"bridge_type": "megatron-bridge", "moe_enable_deepep": True}),
        (
            "actor.megatron.moe_enable_deepep=true ignored: with actor.megatron.bridge_type="
            "'megatron-bridge' the reference's Megatron engine dispatches MoE tokens with "
            "alltoall, without DeepEP (areal/models/mcore/registry.py make_mcore_model)",
        ),
    ),
    (
        _megatron(
            {"bridge_type": "megatron-bridge", "moe_token_dispatcher_type": "flex"},
            path="Qwen/Qwen3-30B-A3B",
        ),
        (
            "actor.megatron.moe_token_dispatcher_type='flex' ignored: with "
            "actor.megatron.bridge_type='megatron-bridge' the reference's Megatron engine "
            "dispatches MoE tokens with alltoall, without DeepEP "
            "(areal/models/mcore/registry.py make_mcore_model)",
        ),
    ),
    # an FSDP engine's megatron section is not read by its engine
    (
        cfg(
            rollout={"backend": "vllm:d8"},
            actor={"backend": "fsdp:d8", "megatron": {"moe_enable_deepep": True}},
        ),
        (),
    ),
]


@pytest.mark.parametrize(("config", "warnings"), DISPATCHERS_THAT_RUN)
def test_the_dispatchers_the_reference_builds(
    config: dict[str, Any], warnings: tuple[str, ...]
) -> None:
    assert validate(config, on_memory="off").warnings == warnings


def test_deepep_is_refused_before_allgather_as_megatron_core_checks() -> None:
    # TransformerConfig.__post_init__ checks DeepEP (l.1230) before allgather (l.2056)
    config = _megatron({"moe_enable_deepep": True, "moe_token_dispatcher_type": "allgather"})
    with pytest.raises(AllocationValidationError) as info:
        validate(config, on_memory="off")
    assert info.value.message.startswith(
        "actor.megatron.moe_enable_deepep=true with actor.megatron.moe_token_dispatcher_type="
        "'allgather': megatron-core's TransformerConfig raises 'DeepEP backend"
    )


def test_every_megatron_engine_is_checked() -> None:
    # the critic is a Megatron engine too (areal/engine/megatron_engine.py for every role)
    config = cfg(
        rollout={"backend": "vllm:d4"},
        actor={"backend": "megatron:d4"},
        critic={"backend": "megatron:d8", "megatron": {"moe_enable_deepep": True}},
    )
    with pytest.raises(AllocationValidationError) as info:
        validate(config, on_memory="off")
    assert info.value.message.startswith(
        "critic.megatron.moe_enable_deepep=true with critic.megatron.moe_token_dispatcher_type="
        "'alltoall': "
    )


DEEPEP_MESSAGE = (
    "actor.megatron.moe_enable_deepep=true with actor.megatron.moe_token_dispatcher_type="
    "'alltoall': megatron-core's TransformerConfig raises 'DeepEP backend is only supported "
    "with flex token dispatcher.' when mbridge builds "
    "actor.backend='megatron:(attn:d4p2t2c2|ffn:d2p2t4e2)'; set "
    "actor.megatron.moe_token_dispatcher_type=flex or actor.megatron.moe_enable_deepep=false"
)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["check", "--quiet", "{exp}"], f"areal-alloc check: {DEEPEP_MESSAGE}"),
        (  # the hook, through the areal-alloc app's own MoE experiment
            ["experiment=moe_32", "+actor.megatron.moe_enable_deepep=true"],
            f"areal-alloc: {DEEPEP_MESSAGE}",
        ),
    ],
)
def test_check_and_the_hook_refuse_deepep_without_flex(
    argv: list[str], message: str, tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    from areal_alloc.cli import main

    exp = tmp_path / "exp.yaml"
    exp.write_text(
        "cluster: {n_nodes: 6, n_gpus_per_node: 8}\n"
        "rollout: {backend: 'sglang:d2t8'}\n"
        "actor:\n  backend: 'megatron:(attn:d4p2t2c2|ffn:d2p2t4e2)'\n"
        "  megatron: {moe_enable_deepep: true}\n"
    )
    assert main([a.replace("{exp}", str(exp)) for a in argv]) == 1
    assert capsys.readouterr().err.strip().splitlines()[-1] == message
    # and with the flex dispatcher both start
    flex = "actor.megatron.moe_token_dispatcher_type=flex"
    exp.write_text(
        exp.read_text().replace(
            "{moe_enable_deepep: true}",
            "{moe_enable_deepep: true, moe_token_dispatcher_type: flex}",
        )
    )
    extra = [] if argv[0] == "check" else [f"+{flex}"]
    assert main([*(a.replace("{exp}", str(exp)) for a in argv), *extra]) == 0


# --- Megatron's selective recompute_modules (rules.moe_act_recompute_needs_experts …) -------

# configs the reference's Megatron engine builds (megatron-core 0.17.0 TransformerConfig)
RECOMPUTE_THAT_RUNS: list[dict[str, Any]] = [
    # no gradient_checkpointing: the reference passes no recompute setting to mbridge
    # (megatron_engine.py l.722), so megatron-core's recompute_granularity stays None
    cfg(
        rollout={"backend": "vllm:d8"},
        actor={
            "backend": "megatron:d8",
            "path": "Qwen/Qwen3-8B",
            "megatron": {
                "recompute_granularity": "selective",
                "recompute_modules": ["moe_act", "mla_up_proj"],
            },
        },
    ),
    # full granularity: megatron-core looks at neither the list nor recompute_num_layers=1
    _selective(
        {"recompute_granularity": "full", "recompute_modules": ["moe_act", "shared_experts"]},
        "deepseek-ai/DeepSeek-V3",
    ),
    _selective({"recompute_granularity": "full", "recompute_modules": ["mla_up_proj"]}),
    # selective with megatron-core's default [core_attn], or nothing, on a dense model
    _selective(SELECTIVE, "Qwen/Qwen3-8B"),
    _selective(SELECTIVE | {"recompute_modules": []}, "Qwen/Qwen3-8B"),
    _selective(
        SELECTIVE | {"recompute_modules": ["core_attn", "layernorm", "mlp"]}, "Qwen/Qwen3-8B"
    ),
    # ModelZoo's selective (moe_act, layernorm) on a MoE model mbridge builds with grouped GEMM
    _selective(SELECTIVE | {"recompute_modules": ["moe_act", "layernorm"]}, "Qwen/Qwen3-30B-A3B"),
    # DeepSeek-V3: MLA, grouped GEMM; everything but shared_experts
    _selective(
        SELECTIVE | {"recompute_modules": ["mla_up_proj", "moe_act", "moe", "layernorm"]},
        "deepseek-ai/DeepSeek-V3",
    ),
    # a model not found here is not checked
    _selective(SELECTIVE | {"recompute_modules": ["moe_act", "mla_up_proj"]}, "org/unknown-model"),
    # an FSDP engine's megatron section is not read by its engine
    cfg(
        rollout={"backend": "vllm:d8"},
        actor={
            "backend": "fsdp:d8",
            "path": "Qwen/Qwen3-8B",
            "gradient_checkpointing": True,
            "megatron": {"recompute_granularity": "selective", "recompute_modules": ["moe_act"]},
        },
    ),
]


@pytest.mark.parametrize("config", RECOMPUTE_THAT_RUNS)
def test_the_recompute_modules_the_reference_builds(config: dict[str, Any]) -> None:
    assert validate(config, on_memory="off").warnings == ()


def test_recompute_num_layers_is_refused_before_the_modules_as_megatron_core_checks() -> None:
    # TransformerConfig.__post_init__ checks recompute_num_layers (l.1346) before the modules
    # (l.1380), and the recompute settings reach mbridge before the MoE ones (l.722 < l.750)
    config = _selective(
        {"recompute_modules": ["moe_act"], "moe_enable_deepep": True}, "Qwen/Qwen3-8B"
    )
    with pytest.raises(AllocationValidationError) as info:
        validate(config, on_memory="off")
    assert info.value.message.startswith(
        "actor.megatron.recompute_granularity='selective' with "
        "actor.megatron.recompute_num_layers=1: "
    )
    # then the modules, before DeepEP's dispatcher
    config["actor"]["megatron"]["recompute_num_layers"] = None
    with pytest.raises(AllocationValidationError) as info:
        validate(config, on_memory="off")
    assert info.value.message.startswith("actor.megatron.recompute_modules=['moe_act'] has ")


def test_the_critic_is_checked_too() -> None:
    config = cfg(
        rollout={"backend": "vllm:d4"},
        actor={"backend": "megatron:d4", "path": "Qwen/Qwen3-8B"},
        critic={
            "backend": "megatron:d8",
            "path": "Qwen/Qwen3-8B",
            "gradient_checkpointing": True,
            "megatron": SELECTIVE | {"recompute_modules": ["mla_up_proj"]},
        },
    )
    with pytest.raises(AllocationValidationError) as info:
        validate(config, on_memory="off")
    assert info.value.message.startswith(
        "critic.megatron.recompute_modules=['mla_up_proj'] has 'mla_up_proj' but the model of "
        "critic.backend='megatron:d8' has no multi-latent attention"
    )


MOE_ACT_MESSAGE = (
    "actor.megatron.recompute_modules=['core_attn', 'moe_act'] has 'moe_act' but "
    "actor.backend='megatron:d4t2' runs a dense model: mbridge leaves megatron-core's "
    "moe_grouped_gemm false for it, and its TransformerConfig raises 'moe_act in "
    "recompute_modules is only supported with moe_grouped_gemm.'; drop 'moe_act' from "
    "actor.megatron.recompute_modules"
)
HOOK_RECOMPUTE = [
    "experiment=moe_32",
    "actor.backend=megatron:d4t2",
    "+actor.path=Qwen/Qwen3-8B",
    "+actor.gradient_checkpointing=true",
    "+actor.megatron.recompute_granularity=selective",
    "+actor.megatron.recompute_num_layers=null",
]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["check", "--quiet", "{exp}"], f"areal-alloc check: {MOE_ACT_MESSAGE}"),
        (  # the hook, through the areal-alloc app's own experiment with a dense model
            HOOK_RECOMPUTE,
            f"areal-alloc: {MOE_ACT_MESSAGE}",
        ),
    ],
)
def test_check_and_the_hook_refuse_moe_act_on_a_dense_model(
    argv: list[str], message: str, tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    from areal_alloc.cli import main

    exp = tmp_path / "exp.yaml"
    exp.write_text(
        "cluster: {n_nodes: 6, n_gpus_per_node: 8}\n"
        "rollout: {backend: 'sglang:d2t8'}\n"
        "actor:\n  backend: 'megatron:d4t2'\n  path: Qwen/Qwen3-8B\n"
        "  gradient_checkpointing: true\n"
        "  megatron:\n    recompute_granularity: selective\n    recompute_num_layers: null\n"
        "    recompute_modules: [core_attn, moe_act]\n"
    )
    hook = argv[0] != "check"
    modules = ["+actor.megatron.recompute_modules=[core_attn,moe_act]"] if hook else []
    assert main([*(a.replace("{exp}", str(exp)) for a in argv), *modules]) == 1
    assert capsys.readouterr().err.strip().splitlines()[-1] == message
    # and without moe_act both start
    exp.write_text(exp.read_text().replace("[core_attn, moe_act]", "[core_attn, layernorm]"))
    modules = ["+actor.megatron.recompute_modules=[core_attn,layernorm]"] if hook else []
    assert main([*(a.replace("{exp}", str(exp)) for a in argv), *modules]) == 0


def _archon(backend: str, archon: dict[str, Any]) -> dict[str, Any]:
    return cfg(
        rollout={"backend": "vllm:d8"},
        actor={"backend": backend, "path": "Qwen/Qwen3-8B", "archon": archon},
    )


@pytest.mark.parametrize(
    ("config", "message"),
    [
        (  # l.152-155: 36 + 1 + 9 = 46, 46 // 8 = 5 < 9
            _archon("archon:d2p4", {"pp_last_stage_less_layers": 9}),
            "actor.backend='archon:d2p4': the archon engine splits 36 layers + 1 (embedding) + 9 "
            "(output) = 46 over p4 × 2 = 8 virtual stages (generate_llm_fqn_per_model_part): "
            "actor.archon.pp_last_stage_less_layers=9 exceeds the 5 layers per stage (46 // 8; "
            "the engine raises 'last_stage_less_layers (9) exceeds layers_per_stage (5)'); lower "
            "it",
        ),
        (  # pipeline_llm l.418-423, at start-up now (without the memory estimate)
            _archon("archon:d2p4", {"pp_layers_per_stage": 7}),
            "actor.archon.pp_layers_per_stage=7: ceil((36 layers + 1 + 1) / 7) = 6 virtual "
            "stages, not a multiple of p4 (the archon engine refuses it); choose "
            "pp_layers_per_stage so that p divides the stages",
        ),
    ],
)
def test_archons_split_is_refused_at_start_up(config: dict[str, Any], message: str) -> None:
    with pytest.raises(AllocationValidationError) as info:
        validate(config, on_memory="off")
    assert info.value.message == message


@pytest.mark.parametrize(
    "config",
    [
        _archon("archon:d2p4", {"pp_last_stage_less_layers": 5}),  # 42 // 8 = 5: equal runs
        _archon("archon:d2p4", {"pp_layers_per_stage": 5}),  # ceil(38 / 5) = 8 = 4 × 2
        _archon("archon:d8", {"pp_first_stage_less_layers": 30}),  # p1: one stage, no split
    ],
)
def test_archons_split_that_builds(config: dict[str, Any]) -> None:
    assert validate(config, on_memory="off").warnings == ()


def test_archons_tree_training_pads_every_micro_batch() -> None:
    # archon_utils.py force_pad_to_maximum: tree training forces pad_to_maximum (l.294-300)
    from areal_alloc.experiment.read import read_experiment

    def padded(tree: bool) -> bool:
        actor = {"backend": "archon:d8", "enable_tree_training": tree}
        training = read_experiment(cfg(actor=actor))["actor"].training
        assert training is not None
        return training.pad_to_maximum

    assert (padded(True), padded(False)) == (True, False)


def _mb(actor: dict[str, Any], batch: int, **sections: Any) -> dict[str, Any]:
    """An RL config with ``actor`` on a rollout of sglang:d8 and ``batch`` prompts a step."""
    return cfg(
        rollout={"backend": "sglang:d8"},
        actor=actor,
        train_dataset={"batch_size": batch},
        **sections,
    )


_MEGATRON_N5 = {"backend": "megatron:d4p2", "ppo_n_minibatches": 1, "mb_spec": {"n_mbs": 5}}
_SPLIT = "(areal/utils/data.py split_padded_tensor_dict_into_mb_list)"

# issue 27 item 5: the micro-batch rule as the reference's engines pack (config, exact
# message, or None where the reference starts); the sources are cited in
# areal_alloc.experiment.rules._micro_batch_floor and _short_minibatch
MICRO_BATCH_EDGES: list[tuple[dict[str, Any], str | None]] = [
    (  # tree training: n_mbs not effective (tree.py l.291-321), 32 / d8 = 4 a rank
        _mb({"backend": "fsdp:d8", "enable_tree_training": True, "mb_spec": {"n_mbs": 8}}, 32),
        None,
    ),
    (  # the same without the tree: 4 minibatches × 8 micro-batches
        _mb({"backend": "fsdp:d8", "mb_spec": {"n_mbs": 8}}, 32),
        "32 trajectories a step over the 8 data-parallel ranks of actor.backend='fsdp:d8' are 4 "
        "per rank, split into actor.ppo_n_minibatches=4 minibatches, each packed into 8 "
        "micro-batches (actor.mb_spec.n_mbs): 4 < 4 × 8 = 32, so a minibatch has fewer "
        "sequences than micro-batches and the reference's seqpack raises 'Number of values … "
        "is smaller than min_groups'; set train_dataset.batch_size=256 or more, or use fewer "
        "data-parallel ranks or minibatches",
    ),
    (  # tree training at Megatron p2: no 2·p floor either (megatron_engine.py l.2677-2698)
        _mb({"backend": "megatron:d4p2", "enable_tree_training": True}, 16),
        None,
    ),
    (  # kk at p2, vpp 1: min(k, 5) = 5 micro-batches, which the 1F1B schedule runs
        _mb({**_MEGATRON_N5, "mb_spec": {"n_mbs": 5, "packing_algorithm": "kk"}}, 20),
        None,
    ),
    (  # kk at p2, vpp 2: 5 micro-batches, no multiple of p2, and megatron-core refuses
        _mb(
            {
                **_MEGATRON_N5,
                "mb_spec": {"n_mbs": 5, "packing_algorithm": "kk"},
                "megatron": {"virtual_pipeline_parallel_size": 2},
            },
            20,
        ),
        "20 trajectories a step over the 4 data-parallel ranks of actor.backend='megatron:d4p2' "
        "are 5 per rank, split into actor.ppo_n_minibatches=1 minibatches, each packed into 6 "
        "micro-batches (actor.mb_spec.n_mbs=5 rounded up to a multiple of p2, the Megatron "
        "engine's n_mbs_divisor): 5 < 1 × 6 = 6, so a minibatch has fewer sequences than "
        "micro-batches and kk packs it into as many as it has sequences, no multiple of p2, and "
        "megatron-core's interleaved schedule (vpp 2) raises 'The remainder of M (the total "
        "micro-batches) divided by N (number of contiguous micro-batches in a virtual pipeline "
        "stage) should be 0, or larger than or equal to the pipeline-parallel size, but it is "
        "…'; set train_dataset.batch_size=24 or more, or use fewer data-parallel ranks or "
        "minibatches",
    ),
    (  # ffd at p2: 5 sequences reach min_groups 5, but no multiple of 2 → 'Cannot allocate'
        _mb(_MEGATRON_N5, 20),
        "20 trajectories a step over the 4 data-parallel ranks of actor.backend='megatron:d4p2' "
        "are 5 per rank, split into actor.ppo_n_minibatches=1 minibatches, each packed into 6 "
        "micro-batches (actor.mb_spec.n_mbs=5 rounded up to a multiple of p2, the Megatron "
        "engine's n_mbs_divisor): 5 < 1 × 6 = 6, so a minibatch has fewer sequences than "
        "micro-batches and the reference's seqpack (ffd) raises 'Cannot allocate values … that "
        "satisfies capacity …, min_groups 6 and n_groups_divisor 2.'; set "
        "train_dataset.batch_size=24 or more, or use fewer data-parallel ranks or minibatches, "
        "or actor.mb_spec.packing_algorithm=kk",
    ),
    (_mb(_MEGATRON_N5, 24), None),  # 6 a rank: 6 micro-batches
    (  # FSDP takes the config's n_mbs_divisor: min_groups max(1, 4) = 4 > 3
        _mb({"backend": "fsdp:d8", "ppo_n_minibatches": 1, "mb_spec": {"n_mbs_divisor": 4}}, 24),
        "24 trajectories a step over the 8 data-parallel ranks of actor.backend='fsdp:d8' are 3 "
        "per rank, split into actor.ppo_n_minibatches=1 minibatches, each packed into 4 "
        "micro-batches (actor.mb_spec.n_mbs_divisor=4): 3 < 1 × 4 = 4, so a minibatch has fewer "
        "sequences than micro-batches and the reference's seqpack raises 'Number of values … is "
        "smaller than min_groups'; set train_dataset.batch_size=32 or more, or use fewer "
        "data-parallel ranks or minibatches",
    ),
    (  # n_mbs 3, divisor 2: ffd cannot come out at 4 groups of 3 sequences
        _mb(
            {
                "backend": "fsdp:d8",
                "ppo_n_minibatches": 1,
                "mb_spec": {"n_mbs": 3, "n_mbs_divisor": 2},
            },
            24,
        ),
        "24 trajectories a step over the 8 data-parallel ranks of actor.backend='fsdp:d8' are 3 "
        "per rank, split into actor.ppo_n_minibatches=1 minibatches, each packed into 4 "
        "micro-batches (actor.mb_spec.n_mbs=3 rounded up to a multiple of actor.mb_spec."
        "n_mbs_divisor=2): 3 < 1 × 4 = 4, so a minibatch has fewer sequences than micro-batches "
        "and the reference's seqpack (ffd) raises 'Cannot allocate values … that satisfies "
        "capacity …, min_groups 4 and n_groups_divisor 2.'; set train_dataset.batch_size=32 or "
        "more, or use fewer data-parallel ranks or minibatches, or "
        "actor.mb_spec.packing_algorithm=kk",
    ),
    (  # ... which kk runs: min(4, 3) = 3 groups
        _mb(
            {
                "backend": "fsdp:d8",
                "ppo_n_minibatches": 1,
                "mb_spec": {"n_mbs": 3, "n_mbs_divisor": 2, "packing_algorithm": "kk"},
            },
            24,
        ),
        None,
    ),
    (  # the Megatron engine sets n_mbs_divisor=p itself (megatron_engine.py l.2713-2717)
        _mb(
            {"backend": "megatron:d8", "ppo_n_minibatches": 1, "mb_spec": {"n_mbs_divisor": 4}}, 24
        ),
        None,
    ),
    (  # granularity 4 over 3 sequences a rank (data.py l.722-725)
        _mb({"backend": "fsdp:d8", "ppo_n_minibatches": 1, "mb_spec": {"granularity": 4}}, 24),
        "24 trajectories a step over the 8 data-parallel ranks of actor.backend='fsdp:d8' are 3 "
        "per rank, not a multiple of actor.mb_spec.granularity=4 (3 % 4 = 3): a minibatch's split "
        f"raises 'Batch size 3 cannot divide granularity 4.' {_SPLIT}; set "
        "train_dataset.batch_size=32 or actor.mb_spec.granularity=1",
    ),
    (_mb({"backend": "fsdp:d8", "ppo_n_minibatches": 2, "mb_spec": {"granularity": 2}}, 32), None),
    (  # 4 sequences into 4 minibatches: one each, no whole group of 2
        _mb({"backend": "fsdp:d8", "ppo_n_minibatches": 4, "mb_spec": {"granularity": 2}}, 32),
        "32 trajectories a step over the 8 data-parallel ranks of actor.backend='fsdp:d8' are 4 "
        "per rank, split into actor.ppo_n_minibatches=4 minibatches, each packed into 1 "
        "micro-batch (actor.mb_spec.n_mbs) of whole groups of actor.mb_spec.granularity=2: 4 < 4 "
        "× 1 × 2 = 8, so a minibatch has fewer sequences than that and its split raises 'Batch "
        "size … cannot divide granularity 2.' (no multiple of 2 sequences) or seqpack 'Number of "
        "values … is smaller than min_groups'; set train_dataset.batch_size=64 or more, or use "
        "fewer data-parallel ranks or minibatches",
    ),
    (  # a ref's forward over its whole share of 6
        _mb(
            {"backend": "fsdp:d8", "ppo_n_minibatches": 1, "kl_ctl": 0.1},
            24,
            ref={"backend": "fsdp:d4", "mb_spec": {"granularity": 4}},
            cluster={"n_nodes": 3, "n_gpus_per_node": 8},
        ),
        "24 trajectories a step over the 4 data-parallel ranks of ref.backend='fsdp:d4' are 6 per "
        "rank, not a multiple of ref.mb_spec.granularity=4 (6 % 4 = 2): its forward's split "
        f"raises 'Batch size 6 cannot divide granularity 4.' {_SPLIT}; set "
        "train_dataset.batch_size=32 or ref.mb_spec.granularity=1",
    ),
    (  # SFT: one step over the whole share
        {
            "cluster": {"n_nodes": 1, "n_gpus_per_node": 8},
            "actor": {"backend": "fsdp:d8", "mb_spec": {"granularity": 2}},
            "train_dataset": {"batch_size": 24},
        },
        "24 sequences a step over the 8 data-parallel ranks of actor.backend='fsdp:d8' are 3 per "
        "rank, not a multiple of actor.mb_spec.granularity=2 (3 % 2 = 1): its step's split raises "
        f"'Batch size 3 cannot divide granularity 2.' {_SPLIT}; set train_dataset.batch_size=32 "
        "or actor.mb_spec.granularity=1",
    ),
]


@pytest.mark.parametrize(("config", "message"), MICRO_BATCH_EDGES)
def test_the_micro_batch_rule_packs_as_the_engines_do(
    config: dict[str, Any], message: str | None
) -> None:
    if message is None:
        validate(config, on_memory="off")
        return
    with pytest.raises(AllocationValidationError) as info:
        validate(config, on_memory="off")
    assert info.value.message == message
