"""The settings the reference's loader refuses that the plan itself never reads.

``load_expr_config`` first refuses the removed ``behave_imp_weight_*`` keys
(``_migrate_legacy_rejection_sampling``), then ``OmegaConf.to_object`` builds the
experiment's dataclasses, every section present in the config (an engine the run never
creates too: a reference model with ``kl_ctl: 0``, ``teacher.train`` of a rollout teacher),
typing their bool fields, and each one's ``__post_init__`` raises on the loss, the
normalization, the rejection sampling, the training engines' mb_spec, fsdp, archon (and its
fp8_config) and megatron sections, a DPO run's losses and language model, the saver's, the
recovery's and the loggers' modes checked here (areal/api/cli_args.py at
areal-project/AReaL@cbff54d645d2cd8ee1f1c358a82f3f473588433d; each rule cites its lines). A
config those refuse never starts, so :func:`refuse_at_load` refuses it too, in one line that
quotes the value, names the key, says what is allowed and quotes the reference's own message.

One pass over the few sections, in the reference's order (the removed keys, the saver and
loggers, the recovery, the engines, then ``PPOConfig.__post_init__``); a key is read only
when a rule needs it, through :mod:`areal_alloc._config`. A null is the reference's
default here: the nulls it refuses are refused before (:mod:`areal_alloc.experiment.nulls`),
and the strict schema's are its unset keys (a section it leaves all-null is one nobody set).
"""

from __future__ import annotations

from typing import Any

from areal_alloc._config import (
    child,
    is_mapping,
    keys,
    read_bool,
    section,
    strict_schema,
    unset,
    whole_number,
)
from areal_alloc.errors import AllocationValidationError, clipped
from areal_alloc.limits import MAX_COUNT
from areal_alloc.numbers import quote, read_int

__all__ = [
    "ATTN_IMPLS",
    "MODES",
    "REMOVED_KEYS",
    "is_dpo",
    "refuse_at_load",
]

_AT = "at cbff54d6"
_CLI = "areal/api/cli_args.py"

#: ``_LEGACY_REJECTION_SAMPLING_KEYS`` and the sections ``_migrate_legacy_rejection_sampling``
#: looks in, before the merge (areal/api/cli_args.py l.3499-3531, cbff54d6)
REMOVED_KEYS = ("behave_imp_weight_cap", "behave_imp_weight_mode")
_REMOVED_UNDER = ("actor", "teacher")
_REMOVED_WHERE = f"_migrate_legacy_rejection_sampling, {_CLI} l.3499-3531"

#: The modes each ``__post_init__`` allows, by section: (section, allowed, the reference's
#: message for a value ``{}``, where). Python prints the reference's sets in no fixed order;
#: they are quoted in the order of the allowed tuple.
MODES: tuple[tuple[str, tuple[str, ...], str, str], ...] = (
    (  # SaverConfig.__post_init__ (areal/api/cli_args.py l.2753-2756, cbff54d6)
        "saver",
        ("auto", "sync", "async"),
        "Invalid mode '{}'. Valid: {{'auto', 'sync', 'async'}}",
        f"SaverConfig.__post_init__, {_CLI} l.2753-2756",
    ),
    (  # WandBConfig.__post_init__ (l.2828-2834)
        "stats_logger.wandb",
        ("online", "offline", "disabled", "shared"),
        "Invalid wandb mode: '{}'. Must be one of: online, offline, disabled, shared.",
        f"WandBConfig.__post_init__, {_CLI} l.2828-2834",
    ),
    (  # SwanlabConfig.__post_init__ (l.2855-2861)
        "stats_logger.swanlab",
        ("cloud", "local", "disabled", "offline"),
        "Invalid swanlab mode: '{}'. Must be one of: cloud, local, disabled, offline.",
        f"SwanlabConfig.__post_init__, {_CLI} l.2855-2861",
    ),
    (  # TrackioConfig.__post_init__ (l.2894-2900)
        "stats_logger.trackio",
        ("disabled", "online", "local"),
        "Invalid trackio mode: '{}'. Must be one of {{'disabled', 'online', 'local'}}.",
        f"TrackioConfig.__post_init__, {_CLI} l.2894-2900",
    ),
    (  # RecoverConfig.__post_init__ (l.2795-2802): the removed modes are named
        "recover",
        ("on", "off", "auto", "disabled"),
        "Invalid recover mode '{}'. Valid options: {{'on', 'off', 'auto', 'disabled'}}. "
        "Note: 'fault' and 'resume' modes have been removed.",
        f"RecoverConfig.__post_init__, {_CLI} l.2795-2802",
    ),
)

#: BUILTIN_ATTN_IMPLS (areal/engine/fsdp_utils/attn_impl.py l.5-11, cbff54d6); any other
#: ``attn_impl`` must be a Hugging Face kernels repo ID ``org/repo[@revision][:entrypoint]``
#: (transformers' ``is_kernel``): one without a ``/`` never is one.
ATTN_IMPLS = ("eager", "sdpa", "flash_attention_2", "flash_attention_3", "flex_attention")

#: NormConfig.__post_init__'s levels (l.80-96); RejectionSamplingConfig.__post_init__'s
#: choices (l.1602-1625: "binary_kl", in the field's help, is not among its metrics)
_NORM_LEVELS = ("batch", "group")
_NORM_WHERE = f"NormConfig.__post_init__, {_CLI} l.80-96"
_REJECTION = (
    ("level", "token", ("token", "sequence")),
    ("action", "mask", ("mask", "clamp")),
    ("metric", "ratio", ("ratio", "kl_k1", "kl_k2", "kl_k3")),
    ("agg", "mean", ("sum", "mean", "max")),
)
_REJECTION_WHERE = f"RejectionSamplingConfig.__post_init__, {_CLI} l.1602-1659"
_PPO_WHERE = f"PPOActorConfig.__post_init__, {_CLI}"
_TRAIN_WHERE = f"TrainEngineConfig.__post_init__, {_CLI}"
_FSDP_WHERE = f"FSDPEngineConfig.__post_init__, {_CLI} l.517-521"
_MEGATRON_WHERE = f"MegatronEngineConfig.__post_init__, {_CLI} l.1107-1122"
_EXPERIMENT_WHERE = f"PPOConfig.__post_init__, {_CLI}"

#: the sections the reference types PPOActorConfig (PPOConfig l.3410-3411, TeacherConfig
#: l.3353) and the training engines (those and PPOCriticConfig, l.3412)
_POLICIES = ("actor", "ref", "teacher.train")
_TRAINERS = ("actor", "ref", "critic", "teacher.train")
#: the sections the reference types InferenceEngineConfig (PPOConfig's rollout, TeacherConfig's)
_ROLLOUTS = ("rollout", "teacher.rollout")
#: DPOConfig's DPOEngineConfig sections (l.3329-3331)
_DPO_ENGINES = ("actor", "ref")
_DPO_LOSSES = ("sigmoid", "ipo")  # DPOEngineConfig.__post_init__'s (l.3315-3322)
#: MicroBatchSpec.__post_init__'s choices (PACKING_ALGORITHMS, areal/utils/seqpack.py
#: l.162-164, cbff54d6): its one check; n_mbs, granularity, max_tokens_per_mb and
#: n_mbs_divisor it does not check
PACKING_ALGORITHMS = ("ffd", "kk")
_MB_SPEC_WHERE = f"MicroBatchSpec.__post_init__, {_CLI} l.141-147"
_FP8_WHERE = f"ArchonFP8Config.__post_init__, {_CLI} l.590-603"
_ARCHON_WHERE = f"ArchonEngineConfig.__post_init__, {_CLI} l.750-777"
#: ArchonEngineConfig.__post_init__'s choices (l.765-777): None is a router dtype (the model's)
_RESHARD_POLICIES = ("default", "always", "never")
_ROUTER_DTYPES = ("fp32",)


def refuse_at_load(cfg: object) -> None:
    """Raise for the first setting the reference's loader refuses among those above."""
    dpo = is_dpo(cfg)
    for name in _REMOVED_UNDER:
        _refuse_removed(child(cfg, name), name)
    for path, allowed, said, where in MODES:
        _refuse_mode(_at(cfg, path, own=True), path, allowed, said, where)
    for path in _ROLLOUTS:  # InferenceEngineConfig.__post_init__ (l.2666-2671)
        node = _at(cfg, path)
        if node is not None:
            _refuse_spec_count(
                node, path, f"InferenceEngineConfig.__post_init__, {_CLI} l.2668-2671"
            )
    for path in _TRAINERS:
        node = _at(cfg, path)
        if node is None:
            continue
        # its sub-configs are built first (TrainEngineConfig's fields mb_spec, l.1287, then
        # fsdp, archon, megatron, l.1361-1363), then PPOActorConfig's own, then
        # TrainEngineConfig.__post_init__, then DPOEngineConfig's (l.3315-3322)
        _refuse_mb_spec(node, path)
        _refuse_fsdp(node, path)
        _refuse_archon(node, path)
        _refuse_megatron(node, path)
        if path in _POLICIES:
            _refuse_policy(node, path)
        _refuse_train(node, path)
        if dpo and path in _DPO_ENGINES:
            _refuse_dpo_loss(node, path)
    if dpo:
        _refuse_dpo(cfg)
    _refuse_experiment(cfg)


def is_dpo(cfg: object) -> bool:
    """A DPO run, told from the raw config (the one test; sections/run.py ``trainer_kind`` uses it):
    no rollout, a ``ref`` beside the ``actor`` (examples/alignment/hhrlhf_dpo.yaml at
    cbff54d6). Only DPOConfig has a ``ref`` without a rollout: RWConfig and SFTConfig have
    none, and the reference's merge refuses the key ("Key 'ref' not in 'RWConfig'")."""
    return _at(cfg, "rollout") is None and all(_at(cfg, name) is not None for name in _DPO_ENGINES)


# --- reading -----------------------------------------------------------------------------


def _at(cfg: object, dotted: str, own: bool = False, under: str = "") -> Any:
    """The section at ``dotted``, or None when absent, null or left all-null by the strict
    schema (a section nobody set: the reference's default). A value that is not a section
    is an error naming the key for the sections only these rules read (``own``: the
    loggers', the norms' …); an engine's is the reading's to refuse, in its own words.
    ``under``: the path of ``cfg`` itself, for the messages."""
    node: Any = cfg
    done: list[str] = [under] if under else []
    for part in dotted.split("."):
        done.append(part)
        node = section(node, part, ".".join(done)) if own else child(node, part)
        if not is_mapping(node) or (strict_schema(node) and unset(node)):
            return None
    return node


def _flag(node: object, key: str, path: str) -> bool:
    """A bool setting whose reference default is False, as OmegaConf reads it."""
    value = child(node, key)
    return False if value is None else read_bool(value, f"{path}.{key}")


def _real(node: object, key: str, path: str) -> float | None:
    """A float setting as OmegaConf's float fields convert it (``"0.5"`` → 0.5); None
    when absent or null."""
    value = child(node, key)
    if value is None:
        return None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value.strip())
        except ValueError:
            pass
    raise AllocationValidationError(f"{path}.{key}={quote(value)}: must be a number")


def _integer(node: object, key: str, path: str, default: int) -> int:
    """An int setting as OmegaConf's int fields convert it (``"8"`` → 8)."""
    value = child(node, key)
    if value is None:
        return default
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lstrip("+-").isdigit():
        return int(value.strip())
    raise AllocationValidationError(f"{path}.{key}={quote(value)}: must be an integer")


def _text(node: object, key: str, path: str) -> str | None:
    """A str setting as OmegaConf's str fields convert a scalar (``1`` → ``'1'``); None
    when absent or null (the reference's default, which every rule here allows)."""
    value = child(node, key)
    if value is None:
        return None
    if not _scalar(value):
        raise AllocationValidationError(f"{path}.{key}={quote(value)}: must be a string")
    return value if isinstance(value, str) else str(value)


def _scalar(value: object) -> bool:
    return isinstance(value, (str, int, float, bool))


def _refused(subject: str, allowed: str, said: str, where: str) -> AllocationValidationError:
    """One line: the key and value, what is allowed, the reference's words and lines."""
    return AllocationValidationError(
        f'{subject}: {allowed} (the reference\'s loader raises "{said}": {where} {_AT})'
    )


def _choices(allowed: tuple[str, ...], last: str = "or") -> str:
    quoted = [repr(name) for name in allowed]
    return f"{', '.join(quoted[:-1])} {last} {quoted[-1]}" if len(quoted) > 1 else quoted[0]


#: the words YAML 1.1 (PyYAML, OmegaConf's YAML loader) reads unquoted as booleans
_YAML_WORDS = {"True": ("on", "yes", "true"), "False": ("off", "no", "false")}


def _as_written(
    node: object, key: str, path: str, text: str, allowed: tuple[str, ...] = ()
) -> tuple[str, str]:
    """``path.key=value`` for a refused text setting, and a fix for a boolean there.

    A text field handed a bool (YAML's unquoted ``on``/``off``/``yes``/``no``/``true``/
    ``false``) gets ``'True'``/``'False'`` from OmegaConf, which every rule refuses: the
    second part says so and to quote the value (``''`` for any other value).
    """
    raw = child(node, key)
    if not isinstance(raw, bool) and not (strict_schema(node) and raw in _YAML_WORDS):
        return f"{path}.{key}={quote(text)}", ""
    words = _YAML_WORDS[str(raw)]
    example = next((name for name in allowed if name.lower() in words), None)
    quoted = f", e.g. {path}.{key}={example!r}" if example is not None else ""
    hint = (
        f"; YAML reads unquoted on/off/yes/no/true/false as booleans, which a text field "
        f"turns into {str(raw)!r}: quote the value{quoted}"
    )
    return f"{path}.{key}={quote(raw)}", hint


def _written(value: object) -> str:
    """A value as written, a null as ``null``."""
    return "null" if value is None else quote(value)


# --- the rules ---------------------------------------------------------------------------


def _refuse_removed(node: object, name: str) -> None:
    """``actor`` / ``teacher`` holding a removed ``behave_imp_weight_*`` key (l.3516-3531)."""
    if not is_mapping(node):
        return
    found = [key for key in REMOVED_KEYS if key in keys(node)]
    if not found:
        return
    subject = ", ".join(f"{name}.{key}={_written(_raw(node, key))}" for key in found)
    listed = ", ".join(repr(key) for key in found)
    # TeacherConfig has no rejection_sampling: its PPOActorConfig, teacher.train, has (l.3353)
    home = "teacher.train" if name == "teacher" else name
    raise _refused(
        subject,
        f"removed; use {home}.rejection_sampling instead (behave_imp_weight_mode 'token_mask' "
        f"or 'token_truncate' with behave_imp_weight_cap X → {{level: token, action: mask or "
        f"clamp, metric: ratio, upper: X}}; 'disabled' → null)",
        f"Found removed config key(s) {{{listed}}} under '{name}'. Config keys "
        f"'behave_imp_weight_cap' and 'behave_imp_weight_mode' have been removed. Use "
        f"'rejection_sampling' sub-config instead.",
        _REMOVED_WHERE,
    )


def _raw(node: object, key: str) -> object:
    """``node[key]`` as written: a DictConfig's interpolation is shown, not resolved."""
    from omegaconf import DictConfig

    if isinstance(node, DictConfig):
        found = node._get_node(key)
        if found is not None:
            return found._value()
    return child(node, key)


def _refuse_mode(node: object, path: str, allowed: tuple[str, ...], said: str, where: str) -> None:
    mode = _text(node, "mode", path) if node is not None else None
    if mode is not None and mode not in allowed:
        subject, hint = _as_written(node, "mode", path, mode, allowed)
        raise _refused(
            subject,
            f"must be {_choices(allowed)}{hint}",
            said.format(clipped(mode)),
            where,
        )


def _refuse_policy(node: object, path: str) -> None:
    """A PPOActorConfig: its norms, its rejection sampling, then its own ``__post_init__``."""
    for name in ("reward_norm", "adv_norm"):
        norm = _at(node, name, own=True, under=path)
        if norm is not None:
            _refuse_norm(norm, f"{path}.{name}")
    rejection = _at(node, "rejection_sampling", own=True, under=path)
    if rejection is not None:
        _refuse_rejection(rejection, f"{path}.rejection_sampling")
    # PPOActorConfig.__post_init__ l.1876-1884; OmegaConf refuses a bool for the
    # float | str field (l.1737) before: "Value 'True' of type 'bool' is incompatible …"
    lam = child(node, "gae_lambda")
    if isinstance(lam, bool) or (isinstance(lam, str) and not lam):
        raise _refused(
            f"{path}.gae_lambda={quote(lam)}",
            "must be a number or a dotted function path (module.function)",
            f"Value '{lam}' of type 'bool' is incompatible with type hint 'Union[float, str]'"
            if isinstance(lam, bool)
            else "gae_lambda function path must not be empty",
            f"OmegaConf, {_CLI} l.1737" if isinstance(lam, bool) else f"{_PPO_WHERE} l.1883-1884",
        )
    # l.1886-1890
    unit = _text(node, "gae_timestep_unit", path)
    if unit is not None and unit not in ("token", "turn"):
        subject, hint = _as_written(node, "gae_timestep_unit", path, unit)
        raise _refused(
            subject,
            f"must be 'token' or 'turn'{hint}",
            f"gae_timestep_unit must be 'token' or 'turn', got {clipped(unit)!r}",
            f"{_PPO_WHERE} l.1886-1890",
        )
    sapo = _flag(node, "use_sapo_loss", path)
    if sapo:  # l.1955-1965
        given = (_real(node, "sapo_tau_pos", path), _real(node, "sapo_tau_neg", path))
        positive = 1.0 if given[0] is None else given[0]  # the fields' defaults
        negative = 1.05 if given[1] is None else given[1]
        for key, tau in (("sapo_tau_pos", positive), ("sapo_tau_neg", negative)):
            if tau <= 0:
                raise _refused(
                    f"{path}.{key}={quote(tau)}",
                    f"must be > 0 with {path}.use_sapo_loss=true",
                    "SAPO temperatures (sapo_tau_pos, sapo_tau_neg) must be positive. "
                    f"Got sapo_tau_pos={positive}, sapo_tau_neg={negative}.",
                    f"{_PPO_WHERE} l.1955-1960",
                )
        if _flag(node, "use_decoupled_loss", path):
            raise _refused(
                f"{path}.use_decoupled_loss=true",
                f"must be false with {path}.use_sapo_loss=true",
                "SAPO is not compatible with `use_decoupled_loss=True`. Please set "
                "`actor.use_decoupled_loss=false` in your configuration.",
                f"{_PPO_WHERE} l.1961-1965",
            )
    if _flag(node, "use_cispo_loss", path):  # l.1968-1984
        if sapo:
            raise _refused(
                f"{path}.use_cispo_loss=true",
                f"cannot go with {path}.use_sapo_loss=true; set at most one",
                "CISPO and SAPO are mutually exclusive surrogates. Set at most one of "
                "use_cispo_loss / use_sapo_loss.",
                f"{_PPO_WHERE} l.1969-1973",
            )
        higher = _real(node, "eps_clip_higher", path)
        if higher is None or higher <= 0:
            raise _refused(
                f"{path}.eps_clip_higher={'null' if higher is None else quote(higher)}",
                f"must be > 0 with {path}.use_cispo_loss=true, e.g. 4.0",
                "CISPO requires a positive eps_clip_higher (the asymmetric upper clip is its "
                f"defining knob, MiniMax-M1 Eq. 4-5). Got eps_clip_higher={higher}.",
                f"{_PPO_WHERE} l.1974-1979",
            )
        level = _text(node, "importance_sampling_level", path)
        if level is not None and level != "token":
            subject, hint = _as_written(node, "importance_sampling_level", path, level)
            raise _refused(
                subject,
                f"must be 'token' with {path}.use_cispo_loss=true{hint}",
                "CISPO only supports importance_sampling_level='token'. Sequence-level "
                "(GSPO-style) CISPO has no published surrogate.",
                f"{_PPO_WHERE} l.1980-1984",
            )


def _refuse_norm(node: object, path: str) -> None:
    """NormConfig.__post_init__ (l.80-96): the levels, and a group's size."""
    levels: list[str | None] = []
    for key, comma in (("mean_level", ""), ("std_level", ",")):
        level = _text(node, key, path)  # null: none (or, in the strict schema, 'batch')
        if level is not None and level not in _NORM_LEVELS:
            subject, hint = _as_written(node, key, path, level)
            raise _refused(
                subject,
                f"must be 'batch', 'group' or null{hint}",
                f"{key} must be 'batch', 'group'{comma} or None, got {clipped(level)}",
                _NORM_WHERE,
            )
        levels.append(level)
    if "group" in levels:
        size = _integer(node, "group_size", path, 1)
        if size < 1:
            raise _refused(
                f"{path}.group_size={quote(size)}",
                "must be ≥ 1 with a 'group' level",
                f"group_size must be a positive integer when using group normalization, got {size}",
                _NORM_WHERE,
            )


def _refuse_rejection(node: object, path: str) -> None:
    """RejectionSamplingConfig.__post_init__ (l.1602-1659), in its order."""
    chosen: dict[str, str] = {}
    for key, default, allowed in _REJECTION:  # l.1612-1625
        found = _text(node, key, path)
        value = default if found is None else found
        if value not in allowed:
            subject, hint = _as_written(node, key, path, value, allowed)
            raise _refused(
                subject,
                f"must be {_choices(allowed)}{hint}",
                f"{key} must be one of {allowed}, got {clipped(value)!r}",
                _REJECTION_WHERE,
            )
        chosen[key] = value
    given = _real(node, "upper", path)
    upper = 5.0 if given is None else given  # the field's default
    lower = _real(node, "lower", path)
    metric = chosen["metric"]
    if lower is not None and lower > upper:  # l.1628-1631
        raise _refused(
            f"{path}.lower={quote(lower)}",
            f"must be ≤ {path}.upper={quote(upper)}",
            f"lower ({lower}) cannot be greater than upper ({upper})",
            _REJECTION_WHERE,
        )
    if metric == "ratio" and upper <= 1.0:  # l.1634-1639
        raise _refused(
            f"{path}.upper={quote(upper)}",
            "must be > 1.0 with metric 'ratio'",
            "upper must be > 1.0 for 'ratio' metric (otherwise all non-identical policy tokens "
            f"will be filtered), got {upper}",
            _REJECTION_WHERE,
        )
    if metric == "ratio" and lower is not None and lower <= 0:  # l.1640-1643
        raise _refused(
            f"{path}.lower={quote(lower)}",
            "must be > 0 (or null) with metric 'ratio'",
            f"lower must be positive for 'ratio' metric, got {lower}",
            _REJECTION_WHERE,
        )
    if metric in ("kl_k2", "kl_k3") and upper <= 0:  # l.1647-1650
        raise _refused(
            f"{path}.upper={quote(upper)}",
            f"must be > 0 with metric {metric!r}",
            f"upper must be positive for '{metric}' metric, got {upper}",
            _REJECTION_WHERE,
        )
    if chosen["action"] == "clamp" and metric != "ratio":  # l.1652-1657
        raise _refused(
            f"{path}.action='clamp'",
            f"needs metric 'ratio', not {metric!r}; use action 'mask' with a KL metric",
            "action='clamp' only supports metric='ratio' (direct importance weight "
            f"truncation). Got metric='{metric}'. Use action='mask' for KL-based filtering.",
            _REJECTION_WHERE,
        )


def _refuse_spec_count(node: object, path: str, where: str) -> None:
    """``scheduling_spec`` holds one or two SchedulingSpec (TrainEngineConfig l.1464-1467,
    InferenceEngineConfig l.2668-2671): the worker's, and optionally the engine's."""
    specs = child(node, "scheduling_spec")
    if specs is None or is_mapping(specs) or isinstance(specs, (str, bytes)):
        return  # the key check and the reading name a value of another kind
    try:
        count = len(specs)
    except TypeError:
        return
    if count not in (1, 2):
        raise _refused(
            f"{path}.scheduling_spec (a list of {count})",
            "must hold 1 or 2 SchedulingSpec sections (the worker's, then optionally the engine's)",
            f"scheduling_spec must contain 1 or 2 SchedulingSpec, got {count}",
            where,
        )


def _refuse_train(node: object, path: str) -> None:
    """TrainEngineConfig.__post_init__'s chunk size and attention (l.1460-1470)."""
    chunk = _integer(node, "logprobs_chunk_size", path, 1024)
    if chunk <= 0:
        raise _refused(
            f"{path}.logprobs_chunk_size={quote(chunk)}",
            "must be ≥ 1",
            f"logprobs_chunk_size must be positive, got {chunk}",
            f"{_TRAIN_WHERE} l.1460-1463",
        )
    _refuse_spec_count(node, path, f"{_TRAIN_WHERE} l.1464-1467")
    attention = _text(node, "attn_impl", path)
    if attention is not None and attention not in ATTN_IMPLS and "/" not in attention:
        subject, hint = _as_written(node, "attn_impl", path, attention)
        raise _refused(
            subject,
            f"must be one of {', '.join(map(repr, ATTN_IMPLS))}, or a Hugging Face kernels "
            f"repo ID org/repo[@revision][:entrypoint]{hint}",
            f"attn_impl must be one of {ATTN_IMPLS} or a Hugging Face kernels repo ID "
            f"formatted as org/repo[@revision][:entrypoint] (optionally prefixed with "
            f"wrapper|), got '{clipped(attention)}'.",
            f"{_TRAIN_WHERE} l.1469-1470; areal/engine/fsdp_utils/attn_impl.py l.21-29",
        )


def _count(node: object, key: str, path: str) -> int | None:
    """A count setting as OmegaConf's int fields convert it (``"8"`` → 8), negative ones
    included, for the rule on its sign to refuse in the reference's words; None when absent."""
    value = child(node, key)
    if value is None:
        return None
    try:
        return read_int(value, f"{path}.{key}", minimum=0, maximum=MAX_COUNT)
    except AllocationValidationError as error:
        try:  # a negative integer: the caller's rule says why
            return read_int(value, f"{path}.{key}", minimum=-MAX_COUNT, maximum=-1)
        except AllocationValidationError:
            raise error from None


def _refuse_fsdp(node: object, path: str) -> None:
    """FSDPEngineConfig (l.482-521): ``per_layer_optim_step`` typed, and its
    ``__post_init__``'s prefetch count ≥ 0 (l.517-521)."""
    fsdp = _at(node, "fsdp", under=path)
    if fsdp is None:
        return
    where = f"{path}.fsdp"
    _flag(fsdp, "per_layer_optim_step", where)
    prefetch = _count(fsdp, "optim_step_prefetch_layers", where)
    if prefetch is not None and prefetch < 0:
        raise _refused(
            f"{where}.optim_step_prefetch_layers={quote(prefetch)}",
            "must be ≥ 0 (the layers whose optimizer states are fetched ahead), e.g. its default 1",
            f"optim_step_prefetch_layers must be >= 0, got {prefetch}",
            _FSDP_WHERE,
        )


def _refuse_mb_spec(node: object, path: str) -> None:
    """MicroBatchSpec.__post_init__ (l.141-147): the packing algorithm, ffd or kk."""
    mb_spec = _at(node, "mb_spec", under=path)
    where = f"{path}.mb_spec"
    packing = _text(mb_spec, "packing_algorithm", where) if mb_spec is not None else None
    if packing is not None and packing not in PACKING_ALGORITHMS:
        subject, hint = _as_written(mb_spec, "packing_algorithm", where, packing)
        raise _refused(
            subject,
            f"must be {_choices(PACKING_ALGORITHMS)} (first fit decreasing or "
            f"Karmarkar-Karp; default 'ffd'){hint}",
            f"packing_algorithm must be one of {sorted(PACKING_ALGORITHMS)}, "
            f"got '{clipped(packing)}'",
            _MB_SPEC_WHERE,
        )


def _refuse_archon(node: object, path: str) -> None:
    """ArchonEngineConfig (l.606-777), whatever the section's backend (l.1362): its
    ``fp8_config`` first (ArchonFP8Config.__post_init__, l.590-603), then its own
    ``__post_init__`` (l.750-777): the pipeline's stage sizes, the reshard policy and the MoE
    router's dtype. The one home of these rules; the reader reads the pipeline's values."""
    archon = _at(node, "archon", under=path)
    if archon is None:
        return
    where = f"{path}.archon"
    fp8 = _at(archon, "fp8_config", own=True, under=where)
    if fp8 is not None:
        _refuse_fp8(fp8, f"{where}.fp8_config")
    per_stage = _count(archon, "pp_layers_per_stage", where)
    if per_stage is not None and per_stage < 1:  # l.751-754
        raise _refused(
            f"{where}.pp_layers_per_stage={quote(per_stage)}",
            "must be ≥ 1 (the layers a virtual pipeline stage holds), or null for the "
            "schedule's stages per rank",
            f"pp_layers_per_stage must be >= 1, got {per_stage}",
            _ARCHON_WHERE,
        )
    for end in ("first", "last"):  # l.755-764
        key = f"pp_{end}_stage_less_layers"
        less = _count(archon, key, where)
        if less is not None and less < 0:
            raise _refused(
                f"{where}.{key}={quote(less)}",
                f"must be ≥ 0 (the layers the {end} pipeline stage holds fewer), e.g. its "
                "default 1",
                f"{key} must be >= 0, got {less}",
                _ARCHON_WHERE,
            )
    policy = _text(archon, "reshard_after_forward_policy", where)
    if policy is not None and policy not in _RESHARD_POLICIES:  # l.765-770
        subject, hint = _as_written(archon, "reshard_after_forward_policy", where, policy)
        raise _refused(
            subject,
            f"must be {_choices(_RESHARD_POLICIES)}{hint}",
            f"reshard_after_forward_policy must be one of {_RESHARD_POLICIES}, "
            f"got '{clipped(policy)}'",
            _ARCHON_WHERE,
        )
    router = _text(archon, "moe_router_dtype", where)
    if router is not None and router not in _ROUTER_DTYPES:  # l.771-777
        subject, hint = _as_written(archon, "moe_router_dtype", where, router)
        raise _refused(
            subject,
            f"must be 'fp32' or null (null: the model's dtype){hint}",
            f"moe_router_dtype must be one of ('fp32', None), got '{clipped(router)}'",
            _ARCHON_WHERE,
        )


def _refuse_fp8(node: object, path: str) -> None:
    """ArchonFP8Config.__post_init__ (l.590-603): the mode, and Triton's kernel with FP8."""
    mode = _text(node, "mode", path)
    # the reference's set {"disabled", "blockwise"} prints in no fixed order (string hashes
    # vary by process): quoted in the field's order, as MODES is
    if mode is not None and mode not in ("disabled", "blockwise"):
        subject, hint = _as_written(node, "mode", path, mode)
        raise _refused(
            subject,
            f"must be 'disabled' or 'blockwise'{hint}",
            f"fp8_config.mode must be one of {{'disabled', 'blockwise'}}, got {clipped(mode)!r}",
            _FP8_WHERE,
        )
    triton = child(node, "use_triton")
    enabled = mode is not None and mode != "disabled"
    if triton is not None and not read_bool(triton, f"{path}.use_triton") and enabled:
        raise _refused(
            f"{path}.use_triton=false with {path}.mode={mode!r}",
            f"must be true with FP8 on (set {path}.use_triton=true, or {path}.mode='disabled')",
            "fp8_config.use_triton must be True when FP8 is enabled. torchao blockwise "
            "FP8 uses mixed per-operand scaling (1x128 activations + 128x128 weights) "
            "which torch._scaled_mm does not support.",
            _FP8_WHERE,
        )


def _refuse_dpo_loss(node: object, path: str) -> None:
    """DPOEngineConfig.__post_init__ (l.3315-3322), after TrainEngineConfig's: the loss."""
    loss = _text(node, "loss_type", path)
    if loss is not None and loss not in _DPO_LOSSES:
        subject, hint = _as_written(node, "loss_type", path, loss)
        raise _refused(
            subject,
            f"must be {_choices(_DPO_LOSSES)} (a DPO run: no rollout, a ref beside the "
            f"actor; default 'sigmoid'){hint}",
            f"Unsupported DPO loss_type '{clipped(loss)}'. Must be one of {sorted(_DPO_LOSSES)}.",
            f"DPOEngineConfig.__post_init__, {_CLI} l.3315-3322",
        )


def _refuse_dpo(cfg: object) -> None:
    """DPOConfig.__post_init__ (l.3333-3339): the actor is a language model, no critic.
    (RWConfig's opposite rule, actor.is_critic true, l.3287-3293, is not checked: without
    a ref nothing tells an RW run that forgot is_critic from an SFT run.)"""
    if _flag(_at(cfg, "actor"), "is_critic", "actor"):
        raise _refused(
            "actor.is_critic=true",
            "must be false in a DPO run (no rollout, a ref beside the actor); a reward "
            "model trains without a ref (RWConfig)",
            "DPOConfig requires a language model (is_critic=False). Remove "
            "'actor.is_critic: true' from your YAML config.",
            f"DPOConfig.__post_init__, {_CLI} l.3333-3339",
        )


#: what MegatronEngineConfig.__post_init__ requires of a positive ``lm_head_loss_chunk_size``
#: (l.1107-1122), in the order it raises: (flag, the value needed, its words)
_LM_HEAD_NEEDS = (
    ("enable_chunked_logits", True, "requires enable_chunked_logits=True"),
    ("entropy_requires_grad", False, "requires entropy_requires_grad=False"),
    ("enable_mtp", False, "does not support enable_mtp=True"),
)


def _refuse_megatron(node: object, path: str) -> None:
    """MegatronEngineConfig.__post_init__ (l.1107-1122): the LM head's loss chunk size, ≥ 0,
    and a positive one with chunked logits, without entropy gradients nor MTP. Every training
    section holds a ``megatron`` section, whatever its backend (l.1363)."""
    megatron = _at(node, "megatron", under=path)
    if megatron is None:
        return
    where = f"{path}.megatron"
    flags = {name: _flag(megatron, name, where) for name, *_ in _LM_HEAD_NEEDS}  # typed
    key = f"{where}.lm_head_loss_chunk_size"
    size = _count(megatron, "lm_head_loss_chunk_size", where) or 0
    if size < 0:
        raise _refused(
            f"{key}={quote(size)}",
            "must be ≥ 0 (0: the LM head's loss in one piece)",
            f"lm_head_loss_chunk_size must be non-negative, got {size}",
            _MEGATRON_WHERE,
        )
    for name, wanted, said in _LM_HEAD_NEEDS:
        if size > 0 and flags[name] != wanted:
            raise _refused(
                f"{key}={quote(size)} with {where}.{name}={str(not wanted).lower()}",
                f"set {where}.{name}={str(wanted).lower()}, or {key}=0",
                f"lm_head_loss_chunk_size {said}",
                _MEGATRON_WHERE,
            )


def _refuse_experiment(cfg: object) -> None:
    """PPOConfig.__post_init__ (l.3433-3458): shared seeds, and two reward normalizations."""
    gconfig = _at(cfg, "gconfig")
    if _flag(_at(cfg, "rollout"), "deterministic_sampling", "rollout"):  # l.3437-3451
        evaluation = _at(cfg, "eval_gconfig", own=True)
        for name, node in (("gconfig", gconfig), ("eval_gconfig", evaluation)):
            seed = child(node, "seed") if node is not None else None
            if seed is None:
                continue
            samples = whole_number(node, "n_samples", f"{name}.n_samples") or 1
            if samples > 1:
                raise _refused(
                    f"{name}.seed={quote(seed)}",
                    f"must be null with rollout.deterministic_sampling=true and "
                    f"{name}.n_samples={samples} (or set {name}.n_samples=1)",
                    "deterministic_sampling with grouped rollouts cannot use a shared "
                    f"{name}.seed, because every sample would receive the same sampling "
                    "seed. Set the seed to null to derive stable per-sample seeds, or set "
                    "n_samples=1.",
                    f"{_EXPERIMENT_WHERE} l.3437-3451",
                )
    if gconfig is not None and _flag(gconfig, "reward_normalization", "gconfig"):
        actor = _at(cfg, "actor")
        norm = _at(actor, "reward_norm", own=True, under="actor") if actor is not None else None
        if norm is not None:  # l.3452-3457
            raise _refused(
                f"gconfig.reward_normalization=true and actor.reward_norm={quote(norm)}",
                "enable only one (set gconfig.reward_normalization=false or "
                "actor.reward_norm=null)",
                "gconfig.reward_normalization (rollout-time, per-prompt) and "
                "actor.reward_norm (training-time, on collected batch) both apply reward "
                "normalization. Enable only one.",
                f"{_EXPERIMENT_WHERE} l.3452-3457",
            )
