"""The Megatron engine's section (``<engine>.megatron``, MegatronEngineConfig in
areal/api/cli_args.py at cbff54d6): its bridge, recomputation, LM head, distributed
optimizer, MoE dispatch and virtual pipeline, each read once, and the names megatron-core
takes for them."""

from __future__ import annotations

from typing import TypedDict

from areal_alloc import defaults
from areal_alloc._config import (
    child,
    is_mapping,
    keys,
    section,
    setting_int,
    shown,
    strict_schema,
)
from areal_alloc.errors import AllocationValidationError
from areal_alloc.experiment.sections.values import flag, text
from areal_alloc.limits import MAX_COUNT

__all__ = [
    "DEFAULT_RECOMPUTE_MODULES",
    "DISPATCHER_TYPES",
    "MAX_VPP",
    "RECOMPUTE_GRANULARITIES",
    "RECOMPUTE_METHOD",
    "RECOMPUTE_METHODS",
    "RECOMPUTE_MODULES",
    "MegatronSettings",
    "bridge_type",
    "megatron_recompute",
    "megatron_settings",
    "recompute_details",
    "recompute_module_names",
    "virtual_pipeline_size",
]


#: Largest virtual pipeline size read from a config (far beyond any real schedule).
MAX_VPP = 1 << 20


#: What Megatron's selective recomputation can recompute (``megatron.recompute_modules``):
#: megatron-core's choices, which it asserts for ``recompute_granularity="selective"``
#: ("Invalid choices for recompute_modules"), and its default ["core_attn"] when unset
#: (megatron/core/transformer/transformer_config.py l.483-495 and l.1360-1378,
#: NVIDIA/Megatron-LM core_v0.17.0; the reference passes the key to mbridge's
#: ``set_extra_args`` when ``gradient_checkpointing``, areal/engine/megatron_engine.py
#: l.722-729, MegatronEngineConfig ``recompute_modules: list[str] | None = None``,
#: areal/api/cli_args.py l.969, AReaL cbff54d6). "moe_act", "layernorm" and "mla_up_proj"
#: discard their outputs and recompute them; the others checkpoint the module.
RECOMPUTE_MODULES = (
    "core_attn",
    "moe_act",
    "layernorm",
    "mla_up_proj",
    "mlp",
    "moe",
    "shared_experts",
)
DEFAULT_RECOMPUTE_MODULES: tuple[str, ...] = ("core_attn",)
#: MegatronEngineConfig.recompute_method's default (areal/api/cli_args.py l.966 at cbff54d6)
RECOMPUTE_METHOD = "uniform"


#: MegatronEngineConfig.moe_token_dispatcher_type's options: "Options: 'allgather','alltoall'
#: and 'flex'." (areal/api/cli_args.py l.981-986, AReaL cbff54d6); megatron-core 0.17.0 (the
#: version the reference pins) types its TransformerConfig field
#: ``Literal['allgather', 'alltoall', 'flex']`` (megatron/core/transformer/transformer_config.py
#: l.750, NVIDIA/Megatron-LM core_v0.17.0). The config's values; the estimate's dispatchers
#: (flex being DeepEP) are ``estimate.execution.TOKEN_DISPATCHERS``.
DISPATCHER_TYPES = ("allgather", "alltoall", "flex")


def _recompute_modules(megatron: object, path: str) -> tuple[str, ...]:
    """``<engine>.megatron.recompute_modules`` under selective recomputation (unset or null:
    megatron-core's default, :data:`DEFAULT_RECOMPUTE_MODULES`; an empty list: nothing).
    A name megatron-core does not know is refused, as its assertion refuses it."""
    raw = child(megatron, "recompute_modules") if megatron is not None else None
    if raw is None:
        return DEFAULT_RECOMPUTE_MODULES
    return recompute_module_names(raw, f"{path}.megatron.recompute_modules")


def recompute_module_names(value: object, key: str) -> tuple[str, ...]:
    """The one rule for what selective recomputation recomputes, where the value enters (the
    reader for a config's ``megatron.recompute_modules``, ``TrainingSettings`` for the API):
    a list (a text, a mapping or a scalar is refused whole) of :data:`RECOMPUTE_MODULES`
    names, megatron-core's assertion refusing any other; a name given twice recomputes
    once."""
    if isinstance(value, str) or is_mapping(value) or not hasattr(value, "__iter__"):
        raise AllocationValidationError(
            f"{key}={shown(value)}: must be a list of module names among "
            f"{', '.join(RECOMPUTE_MODULES)}, e.g. [core_attn, layernorm]"
        )
    names = tuple(str(item) for item in value)
    unknown = [name for name in names if name not in RECOMPUTE_MODULES]
    if unknown:
        raise AllocationValidationError(
            f"{key}: {', '.join(map(repr, unknown))} not among megatron-core's "
            f"{', '.join(RECOMPUTE_MODULES)} (its TransformerConfig refuses it at start-up)"
        )
    return tuple(dict.fromkeys(names))


#: megatron-core's recompute_granularity and recompute_method values: its TransformerConfig.
#: __post_init__ raises for any other (megatron/core/transformer/transformer_config.py
#: l.1321-1332, NVIDIA/Megatron-LM core_v0.17.0; None skips the checks)
RECOMPUTE_GRANULARITIES = ("full", "selective")
RECOMPUTE_METHODS = ("block", "uniform")


def _megatron_recompute_choice(
    megatron: object, name: str, value: str, choices: tuple[str, ...], bridge: str, path: str
) -> str:
    """``value`` of ``<engine>.megatron.<name>`` when megatron-core takes it (one of
    ``choices``, or null); refused otherwise, in one line."""
    if value in choices:
        return value
    if name == "recompute_granularity":  # megatron-core's own spelling, l.1324
        said, fix = f'\'When using recompute_granuarlity: {value} must be "full"or ', "full"
        said += '"selective".\''
    else:
        said = f'\'recompute_method: {value} must be "block" or "uniform".\''
        fix = RECOMPUTE_METHOD
    raise AllocationValidationError(
        f"{path}.megatron.{name}={shown(child(megatron, name))}: must be "
        f"{', '.join(choices)} or null; megatron-core's TransformerConfig raises {said} when "
        f"{bridge} builds it; set {path}.megatron.{name}={fix}"
    )


def _recompute_method(megatron: object) -> str | None:
    """``<engine>.megatron.recompute_method`` (RECOMPUTE_METHOD unset; None when null, but
    the default in areal-alloc's strict schema, which cannot say null)."""
    if megatron is None or "recompute_method" not in keys(megatron):
        return RECOMPUTE_METHOD
    value = child(megatron, "recompute_method")
    if value is None:
        return None if not strict_schema(megatron) else RECOMPUTE_METHOD
    return str(value)


def _recompute_granularity(megatron: object, backend: str | None) -> str | None:
    """``<engine>.megatron.recompute_granularity`` as the Megatron engine passes it (None: no
    recomputation). Unset: the reference's default "full" (MegatronEngineConfig, areal/api/
    cli_args.py l.965 at cbff54d6). Null: None, megatron-core's own default, which recomputes
    nothing (transformer_config.py l.455, its checks under ``is not None`` l.1321; the block
    recomputes under ``== 'full'``, transformer_block.py l.783, a layer under
    ``== 'selective'``, transformer_layer.py l.407: megatron/core/transformer/,
    NVIDIA/Megatron-LM core_v0.17.0); areal-alloc's strict
    schema (every field null when unset, :mod:`areal_alloc.schema`) cannot say null, so there
    it is the default. Another backend's gradient checkpointing does not read the key."""
    if megatron is None or "recompute_granularity" not in keys(megatron):
        return "full"
    value = child(megatron, "recompute_granularity")
    if value is None:
        return None if backend == "megatron" and not strict_schema(megatron) else "full"
    return str(value) if value != "" else "full"


def _recompute_num_layers(megatron: object, path: str) -> int | None:
    """``<engine>.megatron.recompute_num_layers`` (``defaults.RECOMPUTE_NUM_LAYERS`` unset,
    None when null): MegatronEngineConfig's ``int | None`` (areal/api/cli_args.py l.967 at
    cbff54d6). Under selective granularity megatron-core takes only None (a start-up rule)."""
    if megatron is None or "recompute_num_layers" not in keys(megatron):
        return defaults.RECOMPUTE_NUM_LAYERS
    from areal_alloc.numbers import read_int

    value = child(megatron, "recompute_num_layers")
    if value is None:  # null (a strict schema's unset key too: areal-alloc does not refuse it)
        return None
    key = f"{path}.megatron.recompute_num_layers"
    try:
        return read_int(value, key, minimum=0, maximum=MAX_COUNT)
    except AllocationValidationError:
        raise AllocationValidationError(
            f"{key}={shown(value)}: must be null or a whole number (selective recomputation "
            f"takes null)"
        ) from None


def _token_dispatcher(megatron: object, path: str) -> str:
    """``<engine>.megatron.moe_token_dispatcher_type`` (``defaults.TOKEN_DISPATCHER`` unset).

    The reference's ``str`` field takes a number or a bool as its text (OmegaConf's
    StringNode) and any text: which texts its Megatron engine refuses is a start-up rule
    (:mod:`areal_alloc.experiment.rules`). A list or a mapping is no text.
    """
    value = child(megatron, "moe_token_dispatcher_type") if megatron is not None else None
    if value is None:
        return defaults.TOKEN_DISPATCHER
    if isinstance(value, (bool, int, float)):
        return str(value)
    if not isinstance(value, str):
        raise AllocationValidationError(
            f"{path}.megatron.moe_token_dispatcher_type={shown(value)}: must be one of "
            f"{', '.join(DISPATCHER_TYPES)}"
        )
    return value


def bridge_type(megatron: object) -> str:
    """``<engine>.megatron.bridge_type`` (MegatronEngineConfig.bridge_type, ``defaults.
    BRIDGE_TYPE``)."""
    return text(megatron, "bridge_type", defaults.BRIDGE_TYPE)


def megatron_recompute(
    megatron: object, path: str, backend: str | None, asked: bool, bridge: str
) -> str:
    """What recomputation ``<engine>.megatron.recompute_granularity`` makes when ``asked``
    (gradient checkpointing on, or megatron-bridge, which recomputes whatever it says):
    ``full``, ``selective`` or ``none``; megatron-core's refusals in one line."""
    if not asked:
        return "none"
    granularity = _recompute_granularity(megatron, backend)
    if granularity is not None and backend == "megatron":  # it reaches megatron-core
        raw = child(megatron, "recompute_granularity") if megatron is not None else None
        written = granularity if raw is None else str(raw)
        granularity = _megatron_recompute_choice(
            megatron, "recompute_granularity", written, RECOMPUTE_GRANULARITIES, bridge, path
        )
    if granularity is None:
        return "none"
    return "selective" if granularity == "selective" else "full"


def recompute_details(
    megatron: object, path: str, backend: str | None, recompute: str, bridge: str
) -> tuple[tuple[str, ...], int | None, str | None]:
    """(``recompute_modules``, ``recompute_num_layers``, ``recompute_method``) of a
    ``recompute`` recomputation, each read where megatron-core reads it (the defaults
    elsewhere)."""
    modules = DEFAULT_RECOMPUTE_MODULES
    recompute_layers = defaults.RECOMPUTE_NUM_LAYERS
    method: str | None = RECOMPUTE_METHOD
    if recompute == "selective":
        modules = _recompute_modules(megatron, path)
        recompute_layers = _recompute_num_layers(megatron, path)
    elif recompute == "full" and backend == "megatron":
        recompute_layers = _recompute_num_layers(megatron, path)
        if recompute_layers is None and strict_schema(megatron):  # it cannot say null
            recompute_layers = defaults.RECOMPUTE_NUM_LAYERS
    if recompute != "none" and backend == "megatron":
        method = _recompute_method(megatron)
        if method is not None:
            method = _megatron_recompute_choice(
                megatron, "recompute_method", method, RECOMPUTE_METHODS, bridge, path
            )
    return modules, recompute_layers, method


class MegatronSettings(TypedDict):
    """The Megatron section's settings a :class:`~areal_alloc.experiment.records.
    TrainConfig` holds, besides its recomputation and virtual pipeline."""

    lm_head_chunk: int
    chunked_logits: bool
    entropy_requires_grad: bool
    distributed_optimizer: bool
    precision_aware_optimizer: bool
    moe_enable_deepep: bool
    token_dispatcher: str
    moe_shared_expert_overlap: bool


def megatron_settings(megatron: object, path: str, backend: str | None) -> MegatronSettings:
    """The LM head's settings (for the Megatron backend only), the distributed optimizer's
    and the MoE dispatch's."""
    # read for the estimate; the loader's rules on it (MegatronEngineConfig.__post_init__)
    # are areal_alloc.experiment.loader's, for every training section present
    chunk_key = f"{path}.megatron.lm_head_loss_chunk_size"
    lm_head_chunk = setting_int(megatron, chunk_key, 0, 0, MAX_COUNT) or 0
    mega = backend == "megatron"
    where = f"{path}.megatron"
    return MegatronSettings(
        lm_head_chunk=lm_head_chunk if mega else 0,
        **_megatron_optimizer(megatron, path),
        moe_enable_deepep=flag(
            megatron, "moe_enable_deepep", defaults.MOE_ENABLE_DEEPEP, f"{where}.moe_enable_deepep"
        ),
        token_dispatcher=_token_dispatcher(megatron, path),
        moe_shared_expert_overlap=flag(
            megatron,
            "moe_shared_expert_overlap",
            defaults.MOE_SHARED_EXPERT_OVERLAP,
            f"{where}.moe_shared_expert_overlap",
        ),
        chunked_logits=mega
        and flag(megatron, "enable_chunked_logits", False, f"{where}.enable_chunked_logits"),
        entropy_requires_grad=mega
        and flag(megatron, "entropy_requires_grad", False, f"{where}.entropy_requires_grad"),
    )


class _Optimizer(TypedDict):
    distributed_optimizer: bool
    precision_aware_optimizer: bool


def _megatron_optimizer(megatron: object, path: str) -> _Optimizer:
    """``megatron.ddp.use_distributed_optimizer`` and ``megatron.
    use_precision_aware_optimizer``."""
    ddp = section(megatron, "ddp", f"{path}.megatron.ddp")
    return _Optimizer(
        distributed_optimizer=flag(
            ddp, "use_distributed_optimizer", True, f"{path}.megatron.ddp.use_distributed_optimizer"
        ),
        precision_aware_optimizer=flag(
            megatron,
            "use_precision_aware_optimizer",
            False,
            f"{path}.megatron.use_precision_aware_optimizer",
        ),
    )


def virtual_pipeline_size(megatron: object, path: str) -> int | None:
    """``<engine>.megatron.virtual_pipeline_parallel_size`` as written (None: unset)."""
    return setting_int(megatron, f"{path}.megatron.virtual_pipeline_parallel_size", 1, 1, MAX_VPP)
