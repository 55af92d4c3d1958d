"""What the reference's loader refuses in settings the plan never reads is refused here.

``load_expr_config`` refuses the removed ``behave_imp_weight_*`` keys and runs each
dataclass's ``__post_init__`` (areal/api/cli_args.py at AReaL cbff54d6); every row below was
run through the reference's own loader both ways (refused there; the nearby value taken).
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

import areal_alloc
from areal_alloc import AllocationValidationError

#: these experiments name the GPU or the model with areal-alloc's own keys (cluster.gpu,
#: model_shape), which the reference's loader refuses: the strict-key check is off here
#: (tests/cli/test_reference_keys.py tests it)
pytestmark = pytest.mark.usefixtures("reference_off")


BASE: dict[str, Any] = {
    "cluster": {"n_nodes": 1, "n_gpus_per_node": 8},
    "rollout": {"backend": "sglang:d4"},
    "actor": {"backend": "fsdp:d4"},
}
CLI = "areal/api/cli_args.py"
PPO = f"PPOActorConfig.__post_init__, {CLI}"
NORM = f"NormConfig.__post_init__, {CLI} l.80-96"
REJECTION = f"RejectionSamplingConfig.__post_init__, {CLI} l.1602-1659"
EXPERIMENT = f"PPOConfig.__post_init__, {CLI}"
TRAIN = f"TrainEngineConfig.__post_init__, {CLI}"


#: a setting that removes the key (a config without a rollout)
_ABSENT: Any = object()


def _config(**settings: Any) -> Any:
    """:data:`BASE` with each dotted setting (``actor__use_sapo_loss`` → actor.use_sapo_loss)."""
    config = copy.deepcopy(BASE)
    for dotted, value in settings.items():
        *parents, key = dotted.split("__")
        node = config
        for part in parents:
            node = node.setdefault(part, {})
        if value is _ABSENT:
            node.pop(key, None)
        else:
            node[key] = copy.deepcopy(value)  # the rows share their sections
    return OmegaConf.create(config)  # as Hydra hands it over


_SPECS = "must hold 1 or 2 SchedulingSpec sections (the worker's, then optionally the engine's)"


def _said(subject: str, allowed: str, said: str, where: str) -> str:
    return f'{subject}: {allowed} (the reference\'s loader raises "{said}": {where} at cbff54d6)'


_REMOVED = (
    "removed; use {0}.rejection_sampling instead (behave_imp_weight_mode 'token_mask' or "
    "'token_truncate' with behave_imp_weight_cap X → {{level: token, action: mask or clamp, "
    "metric: ratio, upper: X}}; 'disabled' → null)"
)
_REMOVED_SAID = (
    "Found removed config key(s) {{{0}}} under '{1}'. Config keys 'behave_imp_weight_cap' and "
    "'behave_imp_weight_mode' have been removed. Use 'rejection_sampling' sub-config instead."
)
_REMOVED_WHERE = f"_migrate_legacy_rejection_sampling, {CLI} l.3499-3531"
_SAPO_TAU = "SAPO temperatures (sapo_tau_pos, sapo_tau_neg) must be positive. Got {}."
_CISPO_HIGHER = (
    "CISPO requires a positive eps_clip_higher (the asymmetric upper clip is its defining "
    "knob, MiniMax-M1 Eq. 4-5). Got eps_clip_higher={}."
)
_SEED = (
    "deterministic_sampling with grouped rollouts cannot use a shared {}.seed, because every "
    "sample would receive the same sampling seed. Set the seed to null to derive stable "
    "per-sample seeds, or set n_samples=1."
)
_ATTN = (
    "attn_impl must be one of ('eager', 'sdpa', 'flash_attention_2', 'flash_attention_3', "
    "'flex_attention') or a Hugging Face kernels repo ID formatted as "
    "org/repo[@revision][:entrypoint] (optionally prefixed with wrapper|), got 'flash'."
)
_TEACHER_TRAIN = {"engine_type": "train", "train": {"backend": "fsdp:d4"}}
_MEGATRON = f"MegatronEngineConfig.__post_init__, {CLI} l.1107-1122"
_FSDP = f"FSDPEngineConfig.__post_init__, {CLI} l.517-521"
_PACKING = "must be 'ffd' or 'kk' (first fit decreasing or Karmarkar-Karp; default 'ffd')"
_MB_SPEC = f"MicroBatchSpec.__post_init__, {CLI} l.141-147"
_ARCHON = f"ArchonEngineConfig.__post_init__, {CLI} l.750-777"
_FP8 = f"ArchonFP8Config.__post_init__, {CLI} l.590-603"
_TRITON = (
    "fp8_config.use_triton must be True when FP8 is enabled. torchao blockwise FP8 uses mixed "
    "per-operand scaling (1x128 activations + 128x128 weights) which torch._scaled_mm does "
    "not support."
)
#: a DPO run, as examples/alignment/hhrlhf_dpo.yaml: no rollout, a ref beside the actor
_DPO = {"rollout": _ABSENT, "ref": {"backend": "fsdp:d4"}}
_DPO_LOSS = (
    "must be 'sigmoid' or 'ipo' (a DPO run: no rollout, a ref beside the actor; default 'sigmoid')"
)
_DPO_SAID = "Unsupported DPO loss_type '{}'. Must be one of ['ipo', 'sigmoid']."
_DPO_WHERE = f"DPOEngineConfig.__post_init__, {CLI} l.3315-3322"
#: a reference model the run does not create (actor.kl_ctl=0, as in the GRPO examples): the
#: reference's loader still builds its PPOActorConfig, with its fsdp and megatron sections
_INACTIVE_REF = {"actor__kl_ctl": 0.0, "ref": {"backend": "fsdp:d4"}}
#: a teacher that scores with its rollout engine, its train section still built at load
_ROLLOUT_TEACHER = {"engine_type": "rollout", "rollout": {"backend": "sglang:d1"}}
_BOOL = (
    "must be true or false (OmegaConf's bool fields also take yes/no, y/n, on/off in any "
    "case, and integers: 0 is false, any other true)"
)
_YAML_BOOL = (
    "; YAML reads unquoted on/off/yes/no/true/false as booleans, which a text field turns "
    "into '{}': quote the value"
)


def _chunk(path: str, size: str, flag: str, wanted: str, said: str) -> str:
    key = f"{path}.megatron.lm_head_loss_chunk_size"
    return _said(
        f"{key}={size} with {path}.megatron.{flag}={'false' if wanted == 'true' else 'true'}",
        f"set {path}.megatron.{flag}={wanted}, or {key}=0",
        f"lm_head_loss_chunk_size {said}",
        _MEGATRON,
    )


REFUSED: list[tuple[dict[str, Any], str]] = [
    # 1. the removed keys, under the actor and the teacher (l.3499-3531)
    (
        {"actor__behave_imp_weight_cap": 5.0},
        _said(
            "actor.behave_imp_weight_cap=5.0",
            _REMOVED.format("actor"),
            _REMOVED_SAID.format("'behave_imp_weight_cap'", "actor"),
            _REMOVED_WHERE,
        ),
    ),
    (
        {"actor__behave_imp_weight_cap": 2, "actor__behave_imp_weight_mode": "token_mask"},
        _said(
            "actor.behave_imp_weight_cap=2, actor.behave_imp_weight_mode='token_mask'",
            _REMOVED.format("actor"),
            _REMOVED_SAID.format("'behave_imp_weight_cap', 'behave_imp_weight_mode'", "actor"),
            _REMOVED_WHERE,
        ),
    ),
    (
        {"teacher__behave_imp_weight_mode": "disabled"},
        _said(  # TeacherConfig has no rejection_sampling: its PPOActorConfig teacher.train has
            "teacher.behave_imp_weight_mode='disabled'",
            _REMOVED.format("teacher.train"),
            _REMOVED_SAID.format("'behave_imp_weight_mode'", "teacher"),
            _REMOVED_WHERE,
        ),
    ),
    (  # a null: printed as written (`+actor.behave_imp_weight_cap=null`)
        {"actor__behave_imp_weight_cap": None},
        _said(
            "actor.behave_imp_weight_cap=null",
            _REMOVED.format("actor"),
            _REMOVED_SAID.format("'behave_imp_weight_cap'", "actor"),
            _REMOVED_WHERE,
        ),
    ),
    # 2. SAPO and CISPO (PPOActorConfig.__post_init__ l.1955-1984), for every PPOActorConfig
    (
        {"actor__use_sapo_loss": True, "actor__use_decoupled_loss": True},
        _said(
            "actor.use_decoupled_loss=true",
            "must be false with actor.use_sapo_loss=true",
            "SAPO is not compatible with `use_decoupled_loss=True`. Please set "
            "`actor.use_decoupled_loss=false` in your configuration.",
            f"{PPO} l.1961-1965",
        ),
    ),
    (
        {"actor__use_sapo_loss": "yes", "actor__sapo_tau_pos": 0},
        _said(
            "actor.sapo_tau_pos=0.0",
            "must be > 0 with actor.use_sapo_loss=true",
            _SAPO_TAU.format("sapo_tau_pos=0.0, sapo_tau_neg=1.05"),
            f"{PPO} l.1955-1960",
        ),
    ),
    (
        {"actor__use_sapo_loss": True, "actor__sapo_tau_neg": "-1"},
        _said(
            "actor.sapo_tau_neg=-1.0",
            "must be > 0 with actor.use_sapo_loss=true",
            _SAPO_TAU.format("sapo_tau_pos=1.0, sapo_tau_neg=-1.0"),
            f"{PPO} l.1955-1960",
        ),
    ),
    (
        {"actor__use_cispo_loss": True},
        _said(
            "actor.eps_clip_higher=null",
            "must be > 0 with actor.use_cispo_loss=true, e.g. 4.0",
            _CISPO_HIGHER.format("None"),
            f"{PPO} l.1974-1979",
        ),
    ),
    (
        {"actor__use_cispo_loss": True, "actor__eps_clip_higher": 0},
        _said(
            "actor.eps_clip_higher=0.0",
            "must be > 0 with actor.use_cispo_loss=true, e.g. 4.0",
            _CISPO_HIGHER.format("0.0"),
            f"{PPO} l.1974-1979",
        ),
    ),
    (
        {"actor__use_cispo_loss": True, "actor__eps_clip_higher": 4, "actor__use_sapo_loss": True},
        _said(
            "actor.use_cispo_loss=true",
            "cannot go with actor.use_sapo_loss=true; set at most one",
            "CISPO and SAPO are mutually exclusive surrogates. Set at most one of "
            "use_cispo_loss / use_sapo_loss.",
            f"{PPO} l.1969-1973",
        ),
    ),
    (
        {
            "actor__use_cispo_loss": True,
            "actor__eps_clip_higher": 4.0,
            "actor__importance_sampling_level": "sequence",
        },
        _said(
            "actor.importance_sampling_level='sequence'",
            "must be 'token' with actor.use_cispo_loss=true",
            "CISPO only supports importance_sampling_level='token'. Sequence-level "
            "(GSPO-style) CISPO has no published surrogate.",
            f"{PPO} l.1980-1984",
        ),
    ),
    (
        {"ref": {"backend": "fsdp:d4", "use_sapo_loss": True, "use_decoupled_loss": True}},
        _said(
            "ref.use_decoupled_loss=true",
            "must be false with ref.use_sapo_loss=true",
            "SAPO is not compatible with `use_decoupled_loss=True`. Please set "
            "`actor.use_decoupled_loss=false` in your configuration.",
            f"{PPO} l.1961-1965",
        ),
    ),
    (
        {"teacher": {"engine_type": "train", "train": {"backend": "fsdp:d4", "use_cispo_loss": 1}}},
        _said(
            "teacher.train.eps_clip_higher=null",
            "must be > 0 with teacher.train.use_cispo_loss=true, e.g. 4.0",
            _CISPO_HIGHER.format("None"),
            f"{PPO} l.1974-1979",
        ),
    ),
    (
        {"actor__gae_timestep_unit": "step"},
        _said(
            "actor.gae_timestep_unit='step'",
            "must be 'token' or 'turn'",
            "gae_timestep_unit must be 'token' or 'turn', got 'step'",
            f"{PPO} l.1886-1890",
        ),
    ),
    (
        {"actor__gae_lambda": ""},
        _said(
            "actor.gae_lambda=''",
            "must be a number or a dotted function path (module.function)",
            "gae_lambda function path must not be empty",
            f"{PPO} l.1883-1884",
        ),
    ),
    (
        {"actor__gae_lambda": True},
        _said(
            "actor.gae_lambda=true",
            "must be a number or a dotted function path (module.function)",
            "Value 'True' of type 'bool' is incompatible with type hint 'Union[float, str]'",
            f"OmegaConf, {CLI} l.1737",
        ),
    ),
    (  # the nulls' table (areal_alloc.experiment.nulls), in OmegaConf's words for a union
        {"actor__gae_lambda": None},
        "actor.gae_lambda=null: the reference's loader refuses it (the field is Union[float, "
        "str], not Optional: OmegaConf raises \"Value 'None' is incompatible with type hint "
        "'Union[float, str]'\"; areal/api/cli_args.py l.1737 at cbff54d6); remove the key to "
        "take the reference's default",
    ),
    # 3. two reward normalizations (PPOConfig.__post_init__ l.3452-3457)
    (
        {"gconfig__reward_normalization": True, "actor__reward_norm": {}},
        _said(
            "gconfig.reward_normalization=true and actor.reward_norm={}",
            "enable only one (set gconfig.reward_normalization=false or actor.reward_norm=null)",
            "gconfig.reward_normalization (rollout-time, per-prompt) and actor.reward_norm "
            "(training-time, on collected batch) both apply reward normalization. Enable only one.",
            f"{EXPERIMENT} l.3452-3457",
        ),
    ),
    # 4. rejection sampling (RejectionSamplingConfig.__post_init__ l.1602-1659)
    (
        {"actor__rejection_sampling": {"level": "step"}},
        _said(
            "actor.rejection_sampling.level='step'",
            "must be 'token' or 'sequence'",
            "level must be one of ('token', 'sequence'), got 'step'",
            REJECTION,
        ),
    ),
    (
        {"actor__rejection_sampling": {"action": "truncate"}},
        _said(
            "actor.rejection_sampling.action='truncate'",
            "must be 'mask' or 'clamp'",
            "action must be one of ('mask', 'clamp'), got 'truncate'",
            REJECTION,
        ),
    ),
    (
        {"actor__rejection_sampling": {"metric": "binary_kl"}},
        _said(
            "actor.rejection_sampling.metric='binary_kl'",
            "must be 'ratio', 'kl_k1', 'kl_k2' or 'kl_k3'",
            "metric must be one of ('ratio', 'kl_k1', 'kl_k2', 'kl_k3'), got 'binary_kl'",
            REJECTION,
        ),
    ),
    (
        {"actor__rejection_sampling": {"agg": "min"}},
        _said(
            "actor.rejection_sampling.agg='min'",
            "must be 'sum', 'mean' or 'max'",
            "agg must be one of ('sum', 'mean', 'max'), got 'min'",
            REJECTION,
        ),
    ),
    (
        {"actor__rejection_sampling": {"lower": 6}},
        _said(
            "actor.rejection_sampling.lower=6.0",
            "must be ≤ actor.rejection_sampling.upper=5.0",
            "lower (6.0) cannot be greater than upper (5.0)",
            REJECTION,
        ),
    ),
    (
        {"actor__rejection_sampling": {"upper": "1"}},
        _said(
            "actor.rejection_sampling.upper=1.0",
            "must be > 1.0 with metric 'ratio'",
            "upper must be > 1.0 for 'ratio' metric (otherwise all non-identical policy tokens "
            "will be filtered), got 1.0",
            REJECTION,
        ),
    ),
    (
        {"actor__rejection_sampling": {"lower": 0}},
        _said(
            "actor.rejection_sampling.lower=0.0",
            "must be > 0 (or null) with metric 'ratio'",
            "lower must be positive for 'ratio' metric, got 0.0",
            REJECTION,
        ),
    ),
    (
        {"actor__rejection_sampling": {"metric": "kl_k2", "upper": 0}},
        _said(
            "actor.rejection_sampling.upper=0.0",
            "must be > 0 with metric 'kl_k2'",
            "upper must be positive for 'kl_k2' metric, got 0.0",
            REJECTION,
        ),
    ),
    (
        {"actor__rejection_sampling": {"metric": "kl_k3", "action": "clamp"}},
        _said(
            "actor.rejection_sampling.action='clamp'",
            "needs metric 'ratio', not 'kl_k3'; use action 'mask' with a KL metric",
            "action='clamp' only supports metric='ratio' (direct importance weight "
            "truncation). Got metric='kl_k3'. Use action='mask' for KL-based filtering.",
            REJECTION,
        ),
    ),
    # 5. the norms (NormConfig.__post_init__ l.80-96)
    (
        {"actor__reward_norm": {"mean_level": "none"}},
        _said(
            "actor.reward_norm.mean_level='none'",
            "must be 'batch', 'group' or null",
            "mean_level must be 'batch', 'group' or None, got none",
            NORM,
        ),
    ),
    (
        {"actor__adv_norm": {"std_level": "none"}},
        _said(
            "actor.adv_norm.std_level='none'",
            "must be 'batch', 'group' or null",
            "std_level must be 'batch', 'group', or None, got none",
            NORM,
        ),
    ),
    (
        {"actor__adv_norm": {"mean_level": "group", "group_size": 0}},
        _said(
            "actor.adv_norm.group_size=0",
            "must be ≥ 1 with a 'group' level",
            "group_size must be a positive integer when using group normalization, got 0",
            NORM,
        ),
    ),
    (
        {
            "teacher": {
                **_TEACHER_TRAIN,
                "train": {"backend": "fsdp:d4", "adv_norm": {"mean_level": "x"}},
            }
        },
        _said(
            "teacher.train.adv_norm.mean_level='x'",
            "must be 'batch', 'group' or null",
            "mean_level must be 'batch', 'group' or None, got x",
            NORM,
        ),
    ),
    # 6. the modes (SaverConfig, RecoverConfig, WandBConfig, SwanlabConfig, TrackioConfig)
    (
        {"saver__mode": "background"},
        _said(
            "saver.mode='background'",
            "must be 'auto', 'sync' or 'async'",
            "Invalid mode 'background'. Valid: {'auto', 'sync', 'async'}",
            f"SaverConfig.__post_init__, {CLI} l.2753-2756",
        ),
    ),
    (
        {"recover__mode": "fault"},
        _said(
            "recover.mode='fault'",
            "must be 'on', 'off', 'auto' or 'disabled'",
            "Invalid recover mode 'fault'. Valid options: {'on', 'off', 'auto', 'disabled'}. "
            "Note: 'fault' and 'resume' modes have been removed.",
            f"RecoverConfig.__post_init__, {CLI} l.2795-2802",
        ),
    ),
    (
        {"stats_logger__wandb__mode": "cloud"},
        _said(
            "stats_logger.wandb.mode='cloud'",
            "must be 'online', 'offline', 'disabled' or 'shared'",
            "Invalid wandb mode: 'cloud'. Must be one of: online, offline, disabled, shared.",
            f"WandBConfig.__post_init__, {CLI} l.2828-2834",
        ),
    ),
    (
        {"stats_logger__swanlab__mode": "online"},
        _said(
            "stats_logger.swanlab.mode='online'",
            "must be 'cloud', 'local', 'disabled' or 'offline'",
            "Invalid swanlab mode: 'online'. Must be one of: cloud, local, disabled, offline.",
            f"SwanlabConfig.__post_init__, {CLI} l.2855-2861",
        ),
    ),
    (
        {"stats_logger__trackio__mode": "offline"},
        _said(
            "stats_logger.trackio.mode='offline'",
            "must be 'disabled', 'online' or 'local'",
            "Invalid trackio mode: 'offline'. Must be one of {'disabled', 'online', 'local'}.",
            f"TrackioConfig.__post_init__, {CLI} l.2894-2900",
        ),
    ),
    # 7. every training section's fsdp and megatron sections (FSDPEngineConfig,
    # MegatronEngineConfig, l.482-521 and l.903-1122), whether or not the run creates the engine
    (
        {"actor__megatron": {"lm_head_loss_chunk_size": 4096}},
        _chunk(
            "actor", "4,096", "enable_chunked_logits", "true", "requires enable_chunked_logits=True"
        ),
    ),
    (
        {
            "actor__megatron": {
                "lm_head_loss_chunk_size": "512",
                "enable_chunked_logits": True,
                "entropy_requires_grad": "yes",
            }
        },
        _chunk(
            "actor", "512", "entropy_requires_grad", "false", "requires entropy_requires_grad=False"
        ),
    ),
    (
        {
            "actor__megatron": {
                "lm_head_loss_chunk_size": 512,
                "enable_chunked_logits": 1,
                "enable_mtp": "ON",
            }
        },
        _chunk("actor", "512", "enable_mtp", "false", "does not support enable_mtp=True"),
    ),
    (
        {"actor__megatron": {"lm_head_loss_chunk_size": -1}},
        _said(
            "actor.megatron.lm_head_loss_chunk_size=-1",
            "must be ≥ 0 (0: the LM head's loss in one piece)",
            "lm_head_loss_chunk_size must be non-negative, got -1",
            _MEGATRON,
        ),
    ),
    (
        {"actor__fsdp": {"optim_step_prefetch_layers": "-1"}},
        _said(
            "actor.fsdp.optim_step_prefetch_layers=-1",
            "must be ≥ 0 (the layers whose optimizer states are fetched ahead), e.g. its default 1",
            "optim_step_prefetch_layers must be >= 0, got -1",
            _FSDP,
        ),
    ),
    (  # the ref the run does not create (the example's kl_ctl 0.0)
        {
            **_INACTIVE_REF,
            "ref": {"backend": "fsdp:d4", "megatron": {"lm_head_loss_chunk_size": 4096}},
        },
        _chunk(
            "ref", "4,096", "enable_chunked_logits", "true", "requires enable_chunked_logits=True"
        ),
    ),
    (
        {
            **_INACTIVE_REF,
            "ref": {"backend": "fsdp:d4", "fsdp": {"optim_step_prefetch_layers": -2}},
        },
        _said(
            "ref.fsdp.optim_step_prefetch_layers=-2",
            "must be ≥ 0 (the layers whose optimizer states are fetched ahead), e.g. its default 1",
            "optim_step_prefetch_layers must be >= 0, got -2",
            _FSDP,
        ),
    ),
    (  # OmegaConf types the bool fields of every section it builds
        {**_INACTIVE_REF, "ref": {"backend": "fsdp:d4", "megatron": {"enable_mtp": "abc"}}},
        f"ref.megatron.enable_mtp='abc': {_BOOL}",
    ),
    (
        {**_INACTIVE_REF, "ref": {"backend": "fsdp:d4", "fsdp": {"per_layer_optim_step": 1.0}}},
        f"ref.fsdp.per_layer_optim_step=1.0: {_BOOL}",
    ),
    (  # teacher.train with teacher.engine_type rollout: built at load, never run
        {
            "teacher": {
                **_ROLLOUT_TEACHER,
                "train": {"backend": "fsdp:d4", "megatron": {"lm_head_loss_chunk_size": 8}},
            }
        },
        _chunk(
            "teacher.train",
            "8",
            "enable_chunked_logits",
            "true",
            "requires enable_chunked_logits=True",
        ),
    ),
    (
        {
            "teacher": {
                **_ROLLOUT_TEACHER,
                "train": {"backend": "fsdp:d4", "fsdp": {"optim_step_prefetch_layers": -1}},
            }
        },
        _said(
            "teacher.train.fsdp.optim_step_prefetch_layers=-1",
            "must be ≥ 0 (the layers whose optimizer states are fetched ahead), e.g. its default 1",
            "optim_step_prefetch_layers must be >= 0, got -1",
            _FSDP,
        ),
    ),
    (
        {"critic": {"backend": "fsdp:d4", "megatron": {"enable_chunked_logits": "1.5"}}},
        f"critic.megatron.enable_chunked_logits='1.5': {_BOOL}",
    ),
    # 7b. every training section's mb_spec and archon sections (MicroBatchSpec l.141-147,
    # ArchonFP8Config l.590-603, ArchonEngineConfig l.750-777), whatever its backend
    (
        {**_INACTIVE_REF, "ref": {"backend": "fsdp:d4", "mb_spec": {"packing_algorithm": "zz"}}},
        _said(
            "ref.mb_spec.packing_algorithm='zz'",
            _PACKING,
            "packing_algorithm must be one of ['ffd', 'kk'], got 'zz'",
            _MB_SPEC,
        ),
    ),
    (
        {"actor__mb_spec": {"packing_algorithm": "FFD"}},
        _said(
            "actor.mb_spec.packing_algorithm='FFD'",
            _PACKING,
            "packing_algorithm must be one of ['ffd', 'kk'], got 'FFD'",
            _MB_SPEC,
        ),
    ),
    (  # the mb_spec is built before the fsdp section (TrainEngineConfig l.1287, l.1361)
        {
            "actor__mb_spec": {"packing_algorithm": "zz"},
            "actor__fsdp": {"optim_step_prefetch_layers": -1},
        },
        _said(
            "actor.mb_spec.packing_algorithm='zz'",
            _PACKING,
            "packing_algorithm must be one of ['ffd', 'kk'], got 'zz'",
            _MB_SPEC,
        ),
    ),
    (
        {"actor__archon": {"reshard_after_forward_policy": "zz"}},  # an fsdp actor
        _said(
            "actor.archon.reshard_after_forward_policy='zz'",
            "must be 'default', 'always' or 'never'",
            "reshard_after_forward_policy must be one of ('default', 'always', 'never'), got 'zz'",
            _ARCHON,
        ),
    ),
    (  # the archon section is built before the megatron section (l.1362-1363)
        {
            "actor__archon": {"reshard_after_forward_policy": "zz"},
            "actor__megatron": {"lm_head_loss_chunk_size": -1},
        },
        _said(
            "actor.archon.reshard_after_forward_policy='zz'",
            "must be 'default', 'always' or 'never'",
            "reshard_after_forward_policy must be one of ('default', 'always', 'never'), got 'zz'",
            _ARCHON,
        ),
    ),
    (
        {"actor__backend": "archon:d4", "actor__archon": {"pp_first_stage_less_layers": -1}},
        _said(
            "actor.archon.pp_first_stage_less_layers=-1",
            "must be ≥ 0 (the layers the first pipeline stage holds fewer), e.g. its default 1",
            "pp_first_stage_less_layers must be >= 0, got -1",
            _ARCHON,
        ),
    ),
    (
        {"critic": {"backend": "fsdp:d4", "archon": {"pp_last_stage_less_layers": "-2"}}},
        _said(
            "critic.archon.pp_last_stage_less_layers=-2",
            "must be ≥ 0 (the layers the last pipeline stage holds fewer), e.g. its default 1",
            "pp_last_stage_less_layers must be >= 0, got -2",
            _ARCHON,
        ),
    ),
    (  # pp_layers_per_stage is checked first (l.751-754)
        {"actor__archon": {"pp_first_stage_less_layers": -1, "pp_layers_per_stage": 0}},
        _said(
            "actor.archon.pp_layers_per_stage=0",
            "must be ≥ 1 (the layers a virtual pipeline stage holds), or null for the "
            "schedule's stages per rank",
            "pp_layers_per_stage must be >= 1, got 0",
            _ARCHON,
        ),
    ),
    (  # the router dtype after the reshard policy (l.765-777)
        {"actor__archon": {"moe_router_dtype": "fp16", "reshard_after_forward_policy": "zz"}},
        _said(
            "actor.archon.reshard_after_forward_policy='zz'",
            "must be 'default', 'always' or 'never'",
            "reshard_after_forward_policy must be one of ('default', 'always', 'never'), got 'zz'",
            _ARCHON,
        ),
    ),
    (
        {"actor__archon": {"moe_router_dtype": "FP32"}},
        _said(
            "actor.archon.moe_router_dtype='FP32'",
            "must be 'fp32' or null (null: the model's dtype)",
            "moe_router_dtype must be one of ('fp32', None), got 'FP32'",
            _ARCHON,
        ),
    ),
    (  # the fp8_config is built before ArchonEngineConfig.__post_init__ runs
        {
            **_INACTIVE_REF,
            "ref": {
                "backend": "fsdp:d4",
                "archon": {"fp8_config": {"mode": "x"}, "reshard_after_forward_policy": "zz"},
            },
        },
        _said(
            "ref.archon.fp8_config.mode='x'",
            "must be 'disabled' or 'blockwise'",
            "fp8_config.mode must be one of {'disabled', 'blockwise'}, got 'x'",
            _FP8,
        ),
    ),
    (
        {"actor__archon": {"fp8_config": {"mode": "blockwise", "use_triton": False}}},
        _said(
            "actor.archon.fp8_config.use_triton=false with "
            "actor.archon.fp8_config.mode='blockwise'",
            "must be true with FP8 on (set actor.archon.fp8_config.use_triton=true, or "
            "actor.archon.fp8_config.mode='disabled')",
            _TRITON,
            _FP8,
        ),
    ),
    (
        {
            "cluster": {"n_nodes": 2, "n_gpus_per_node": 8},
            "teacher": {
                **_ROLLOUT_TEACHER,
                "train": {"backend": "fsdp:d4", "archon": {"fp8_config": {"mode": "Blockwise"}}},
            },
        },
        _said(
            "teacher.train.archon.fp8_config.mode='Blockwise'",
            "must be 'disabled' or 'blockwise'",
            "fp8_config.mode must be one of {'disabled', 'blockwise'}, got 'Blockwise'",
            _FP8,
        ),
    ),
    (
        {"actor__archon": {"fp8_config": {"use_triton": "maybe"}}},
        f"actor.archon.fp8_config.use_triton='maybe': {_BOOL}",
    ),
    # 7c. a DPO run (no rollout, a ref beside the actor): DPOEngineConfig's loss, DPOConfig's
    # language model (l.3315-3322, l.3333-3339)
    (
        {**_DPO, "actor__loss_type": "foo"},
        _said("actor.loss_type='foo'", _DPO_LOSS, _DPO_SAID.format("foo"), _DPO_WHERE),
    ),
    (
        {**_DPO, "ref__loss_type": "IPO"},
        _said("ref.loss_type='IPO'", _DPO_LOSS, _DPO_SAID.format("IPO"), _DPO_WHERE),
    ),
    (  # the engines' own checks come first: TrainEngineConfig.__post_init__, then the loss
        {**_DPO, "actor__loss_type": "foo", "actor__logprobs_chunk_size": 0},
        _said(
            "actor.logprobs_chunk_size=0",
            "must be ≥ 1",
            "logprobs_chunk_size must be positive, got 0",
            f"{TRAIN} l.1460-1463",
        ),
    ),
    (  # the engines are built before DPOConfig.__post_init__
        {**_DPO, "actor__is_critic": True, "ref__loss_type": "foo"},
        _said("ref.loss_type='foo'", _DPO_LOSS, _DPO_SAID.format("foo"), _DPO_WHERE),
    ),
    (
        {**_DPO, "actor__is_critic": "yes"},
        _said(
            "actor.is_critic=true",
            "must be false in a DPO run (no rollout, a ref beside the actor); a reward model "
            "trains without a ref (RWConfig)",
            "DPOConfig requires a language model (is_critic=False). Remove 'actor.is_critic: "
            "true' from your YAML config.",
            f"DPOConfig.__post_init__, {CLI} l.3333-3339",
        ),
    ),
    # 8. a text field handed a boolean (YAML's unquoted on/off/yes/no): both loaders refuse it
    (
        {"recover__mode": True},
        _said(
            "recover.mode=true",
            "must be 'on', 'off', 'auto' or 'disabled'"
            + _YAML_BOOL.format("True")
            + ", e.g. recover.mode='on'",
            "Invalid recover mode 'True'. Valid options: {'on', 'off', 'auto', 'disabled'}. "
            "Note: 'fault' and 'resume' modes have been removed.",
            f"RecoverConfig.__post_init__, {CLI} l.2795-2802",
        ),
    ),
    (
        {"recover__mode": False},
        _said(
            "recover.mode=false",
            "must be 'on', 'off', 'auto' or 'disabled'"
            + _YAML_BOOL.format("False")
            + ", e.g. recover.mode='off'",
            "Invalid recover mode 'False'. Valid options: {'on', 'off', 'auto', 'disabled'}. "
            "Note: 'fault' and 'resume' modes have been removed.",
            f"RecoverConfig.__post_init__, {CLI} l.2795-2802",
        ),
    ),
    (  # none of wandb's modes is a YAML boolean word: no example
        {"stats_logger__wandb__mode": False},
        _said(
            "stats_logger.wandb.mode=false",
            "must be 'online', 'offline', 'disabled' or 'shared'" + _YAML_BOOL.format("False"),
            "Invalid wandb mode: 'False'. Must be one of: online, offline, disabled, shared.",
            f"WandBConfig.__post_init__, {CLI} l.2828-2834",
        ),
    ),
    (
        {"actor__rejection_sampling": {"level": True}},
        _said(
            "actor.rejection_sampling.level=true",
            "must be 'token' or 'sequence'" + _YAML_BOOL.format("True"),
            "level must be one of ('token', 'sequence'), got 'True'",
            REJECTION,
        ),
    ),
    # 9. the training engines' chunk size, worker specs and attention; the shared seed
    (
        {"actor__scheduling_spec": [{"mem": 32}, {"mem": 32}, {"mem": 32}]},
        _said(
            "actor.scheduling_spec (a list of 3)",
            _SPECS,
            "scheduling_spec must contain 1 or 2 SchedulingSpec, got 3",
            f"{TRAIN} l.1464-1467",
        ),
    ),
    (  # an inactive ref too: every section present is built
        {"ref__scheduling_spec": []},
        _said(
            "ref.scheduling_spec (a list of 0)",
            _SPECS,
            "scheduling_spec must contain 1 or 2 SchedulingSpec, got 0",
            f"{TRAIN} l.1464-1467",
        ),
    ),
    (
        {"rollout__scheduling_spec": []},
        _said(
            "rollout.scheduling_spec (a list of 0)",
            _SPECS,
            "scheduling_spec must contain 1 or 2 SchedulingSpec, got 0",
            "InferenceEngineConfig.__post_init__, areal/api/cli_args.py l.2668-2671",
        ),
    ),
    (
        {"actor__logprobs_chunk_size": 0},
        _said(
            "actor.logprobs_chunk_size=0",
            "must be ≥ 1",
            "logprobs_chunk_size must be positive, got 0",
            f"{TRAIN} l.1460-1463",
        ),
    ),
    (
        {"critic": {"backend": "fsdp:d4", "logprobs_chunk_size": "-3"}},
        _said(
            "critic.logprobs_chunk_size=-3",
            "must be ≥ 1",
            "logprobs_chunk_size must be positive, got -3",
            f"{TRAIN} l.1460-1463",
        ),
    ),
    (
        {"actor__attn_impl": "flash"},
        _said(
            "actor.attn_impl='flash'",
            "must be one of 'eager', 'sdpa', 'flash_attention_2', 'flash_attention_3', "
            "'flex_attention', or a Hugging Face kernels repo ID org/repo[@revision][:entrypoint]",
            _ATTN,
            f"{TRAIN} l.1469-1470; areal/engine/fsdp_utils/attn_impl.py l.21-29",
        ),
    ),
    (
        {"rollout__deterministic_sampling": True, "gconfig": {"n_samples": 4, "seed": 1}},
        _said(
            "gconfig.seed=1",
            "must be null with rollout.deterministic_sampling=true and gconfig.n_samples=4 "
            "(or set gconfig.n_samples=1)",
            _SEED.format("gconfig"),
            f"{EXPERIMENT} l.3437-3451",
        ),
    ),
    (
        {"rollout__deterministic_sampling": True, "eval_gconfig": {"n_samples": 2, "seed": 3}},
        _said(
            "eval_gconfig.seed=3",
            "must be null with rollout.deterministic_sampling=true and eval_gconfig.n_samples=2 "
            "(or set eval_gconfig.n_samples=1)",
            _SEED.format("eval_gconfig"),
            f"{EXPERIMENT} l.3437-3451",
        ),
    ),
]


@pytest.mark.parametrize(("settings", "message"), REFUSED)
def test_what_the_reference_loader_refuses_is_one_line(
    settings: dict[str, Any], message: str
) -> None:
    with pytest.raises(AllocationValidationError) as info:
        areal_alloc.validate(_config(**settings), on_memory="off")
    assert info.value.message == message
    assert "\n" not in info.value.message


#: nearby settings the reference's loader takes (each run through it)
TAKEN: list[dict[str, Any]] = [
    {"actor__use_sapo_loss": True, "actor__use_decoupled_loss": False, "actor__sapo_tau_pos": 0.1},
    {"actor__use_decoupled_loss": True, "actor__recompute_logprob": True},  # the GRPO examples
    {"actor__use_cispo_loss": True, "actor__eps_clip_higher": 4.0, "actor__eps_clip": 1.0},
    {"actor__use_cispo_loss": True, "actor__eps_clip_higher": "4", "actor__use_decoupled_loss": 1},
    {"actor__importance_sampling_level": "sequence"},  # without CISPO
    {"actor__sapo_tau_pos": 0},  # without SAPO
    {"gconfig__reward_normalization": True, "actor__reward_norm": None},
    {"gconfig__reward_normalization": False, "actor__reward_norm": {"mean_level": "group"}},
    {"actor__adv_norm": {"mean_level": "group", "std_level": None, "group_size": 8}},
    {"actor__adv_norm": {"mean_level": "batch", "group_size": 0}},  # not a 'group' level
    {"actor__reward_norm": {"mean_level": None, "std_level": None}},
    {"actor__rejection_sampling": {}},
    {"actor__rejection_sampling": None},
    {"actor__rejection_sampling": {"metric": "kl_k1", "upper": -1}},
    {
        "actor__rejection_sampling": {
            "level": "sequence",
            "action": "clamp",
            "upper": 2,
            "lower": 0.5,
        }
    },
    {"actor__rejection_sampling": {"metric": "kl_k3", "action": "mask", "upper": 0.5}},
    {"saver__mode": "async", "recover__mode": "auto", "evaluator": {"freq_epochs": 1}},
    {"stats_logger": {"wandb": {"mode": "shared"}, "swanlab": {"mode": "cloud"}}},
    {"stats_logger__trackio__mode": "local"},
    {"actor__logprobs_chunk_size": 1, "actor__attn_impl": "sdpa"},
    {"actor__attn_impl": "kernels-community/flash-attn@main:fwd"},
    # the fsdp and megatron sections, in any training section; OmegaConf's bool spellings
    {"actor__megatron": {"lm_head_loss_chunk_size": "1_024", "enable_chunked_logits": "y"}},
    {"actor__megatron": {"entropy_requires_grad": 3}, "actor__fsdp": {"per_layer_optim_step": "0"}},
    {"actor__fsdp": {"optim_step_prefetch_layers": 0}, "actor__megatron": {"enable_mtp": " 1 "}},
    {
        **_INACTIVE_REF,
        "ref": {
            "backend": "fsdp:d4",
            "scheduling_strategy": {"type": "colocation", "target": "actor"},
            "megatron": {"lm_head_loss_chunk_size": 4096, "enable_chunked_logits": "On"},
        },
    },
    {
        "cluster": {"n_nodes": 2, "n_gpus_per_node": 8},
        "teacher": {
            **_ROLLOUT_TEACHER,
            "train": {"backend": "fsdp:d4", "megatron": {"lm_head_loss_chunk_size": 0}},
        },
    },
    # the mb_spec and archon sections, in any training section
    {"actor__mb_spec": {"packing_algorithm": "kk", "n_mbs": 2}},
    {"actor__archon": {"reshard_after_forward_policy": "never", "moe_router_dtype": None}},
    {"actor__archon": {"pp_first_stage_less_layers": 0, "pp_last_stage_less_layers": "0"}},
    {"actor__archon": {"pp_layers_per_stage": 1, "moe_router_dtype": "fp32"}},
    {"actor__archon": {"fp8_config": {"mode": "blockwise"}}},
    {"actor__archon": {"fp8_config": {"mode": "disabled", "use_triton": False}}},
    {"actor__backend": "archon:d4", "actor__archon": {"reshard_after_forward_policy": "always"}},
    {
        **_INACTIVE_REF,
        "ref": {
            "backend": "fsdp:d4",
            "mb_spec": {"packing_algorithm": "ffd"},
            "archon": {"fp8_config": {"mode": "blockwise", "use_triton": "1"}},
        },
    },
    {
        "cluster": {"n_nodes": 2, "n_gpus_per_node": 8},
        "teacher": {
            **_ROLLOUT_TEACHER,
            "train": {"backend": "fsdp:d4", "archon": {"reshard_after_forward_policy": "default"}},
        },
    },
    # a DPO run's losses and language model; a PPO run's actor reads no loss_type, and a
    # critic without a ref is RW's (not a DPO run: RWConfig's own rule is not checked)
    {**_DPO, "actor__loss_type": "ipo", "ref__loss_type": "ipo"},
    {**_DPO, "actor__loss_type": "sigmoid", "actor__is_critic": 0},
    {**_DPO, "ref__is_critic": True},
    {"rollout": _ABSENT, "actor__is_critic": True},
    {"actor__gae_timestep_unit": "turn"},
    {"actor__gae_lambda": 0.95},
    {"actor__gae_lambda": "my_pkg.lambdas.by_turns", "actor__gae_lambda_kwargs": {"a": 1}},
    {"rollout__deterministic_sampling": True, "gconfig": {"n_samples": 4, "seed": None}},
    {"rollout__deterministic_sampling": True, "gconfig": {"n_samples": 1, "seed": 3}},
    {"rollout__deterministic_sampling": False, "gconfig": {"n_samples": 4, "seed": 3}},
]


@pytest.mark.parametrize("settings", TAKEN)
def test_what_the_reference_loader_takes_passes(settings: dict[str, Any]) -> None:
    areal_alloc.validate(_config(**settings), on_memory="off")


def _strict(tmp_path: Path, body: str) -> Any:
    conf = tmp_path / "conf"
    conf.mkdir()
    (conf / "strict.yaml").write_text(
        "defaults:\n  - areal_alloc/schema\n  - _self_\n"
        "cluster: {n_nodes: 1, n_gpus_per_node: 8}\nrollout: {backend: 'sglang:d4'}\n" + body
    )
    with initialize_config_dir(str(conf), version_base=None):
        return compose("strict")


def test_the_strict_schemas_unset_sections_are_the_references_defaults(tmp_path: Path) -> None:
    # reward_norm, rejection_sampling, saver … all null: sections nobody set
    cfg = _strict(tmp_path, "actor: {backend: 'fsdp:d4'}\ngconfig: {reward_normalization: true}\n")
    assert areal_alloc.validate(cfg, on_memory="off")["actor"].gpus == 4


def test_the_strict_schema_reads_the_same_refusals(tmp_path: Path) -> None:
    cfg = _strict(tmp_path, "actor: {backend: 'fsdp:d4', reward_norm: {std_level: none}}\n")
    with pytest.raises(AllocationValidationError) as info:
        areal_alloc.validate(cfg, on_memory="off")
    assert info.value.message == _said(
        "actor.reward_norm.std_level='none'",
        "must be 'batch', 'group' or null",
        "std_level must be 'batch', 'group', or None, got none",
        NORM,
    )


def test_the_strict_schema_declares_the_archon_and_dpo_keys(tmp_path: Path) -> None:
    # an fsdp actor's archon.fp8_config, refused whatever the backend
    body = "actor: {backend: 'fsdp:d4', archon: {fp8_config: {mode: x}}}\n"
    with pytest.raises(AllocationValidationError) as info:
        areal_alloc.validate(_strict(tmp_path, body), on_memory="off")
    assert info.value.message == _said(
        "actor.archon.fp8_config.mode='x'",
        "must be 'disabled' or 'blockwise'",
        "fp8_config.mode must be one of {'disabled', 'blockwise'}, got 'x'",
        _FP8,
    )
    # a DPO run: the strict schema's rollout left unset is no rollout
    conf = tmp_path / "dpo"
    conf.mkdir()
    (conf / "strict.yaml").write_text(
        "defaults:\n  - areal_alloc/schema\n  - _self_\n"
        "cluster: {n_nodes: 1, n_gpus_per_node: 8}\n"
        "actor: {backend: 'fsdp:d4', loss_type: foo}\nref: {backend: 'fsdp:d4'}\n"
    )
    with initialize_config_dir(str(conf), version_base=None):
        cfg = compose("strict")
    with pytest.raises(AllocationValidationError) as info:
        areal_alloc.validate(cfg, on_memory="off")
    assert info.value.message == _said(
        "actor.loss_type='foo'", _DPO_LOSS, _DPO_SAID.format("foo"), _DPO_WHERE
    )


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        # OmegaConf refuses these ("int is not a subclass of NormConfig"), before any rule
        (
            {"actor__reward_norm": 5},
            "actor.reward_norm=5: must be a section (a mapping of keys), not int",
        ),
        ({"saver": "x"}, "saver='x': must be a section (a mapping of keys), not str"),
        (
            {"stats_logger__wandb": [1]},
            "stats_logger.wandb=[1]: must be a section (a mapping of keys), not ListConfig",
        ),
    ],
)
def test_a_section_these_rules_read_must_be_a_section(
    settings: dict[str, Any], message: str
) -> None:
    with pytest.raises(AllocationValidationError) as info:
        areal_alloc.validate(_config(**settings), on_memory="off")
    assert info.value.message == message


_RECOVER_ON = _said(
    "recover.mode={}",
    "must be 'on', 'off', 'auto' or 'disabled'"
    + _YAML_BOOL.format("True")
    + ", e.g. recover.mode='on'",
    "Invalid recover mode 'True'. Valid options: {{'on', 'off', 'auto', 'disabled'}}. "
    "Note: 'fault' and 'resume' modes have been removed.",
    f"RecoverConfig.__post_init__, {CLI} l.2795-2802",
)


def test_yamls_unquoted_on_is_a_boolean_the_message_says_to_quote() -> None:
    body = "cluster: {n_nodes: 1, n_gpus_per_node: 8}\nrollout: {backend: 'sglang:d4'}\n"
    body += "actor: {backend: 'fsdp:d4'}\nrecover: {mode: on}\n"
    with pytest.raises(AllocationValidationError) as info:
        areal_alloc.validate(OmegaConf.create(body), on_memory="off")
    assert info.value.message == _RECOVER_ON.format("true")
    quoted = body.replace("mode: on", "mode: 'on'")
    assert areal_alloc.validate(OmegaConf.create(quoted), on_memory="off")["actor"].gpus == 4


def test_the_strict_schemas_text_field_holds_the_booleans_text(tmp_path: Path) -> None:
    # its str field turns the YAML boolean into 'True', as the reference's does
    cfg = _strict(tmp_path, "actor: {backend: 'fsdp:d4'}\nrecover: {mode: on}\n")
    with pytest.raises(AllocationValidationError) as info:
        areal_alloc.validate(cfg, on_memory="off")
    assert info.value.message == _RECOVER_ON.format("'True'")
