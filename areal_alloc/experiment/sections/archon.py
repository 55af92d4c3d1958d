"""The archon engine's section (``<engine>.archon``, ArchonEngineConfig in
areal/api/cli_args.py at cbff54d6): its pipeline schedule and stages, what its
activation checkpointing recomputes, and the engine's refusals of a pipeline split."""

from __future__ import annotations

from typing import Protocol

from areal_alloc import defaults
from areal_alloc._config import child, setting_int, shown
from areal_alloc.errors import AllocationValidationError
from areal_alloc.experiment.sections.values import flag, text
from areal_alloc.limits import MAX_COUNT

__all__ = [
    "ArchonPipeline",
    "archon_compiles",
    "archon_pipeline",
    "archon_recompute",
    "archon_split_refusal",
    "archon_stages_per_rank",
]


class ArchonPipeline(Protocol):
    """The archon settings :func:`archon_stages_per_rank` reads (a
    :class:`~areal_alloc.experiment.records.TrainConfig`)."""

    @property
    def archon_pp_schedule(self) -> str | None: ...

    @property
    def archon_layers_per_stage(self) -> int | None: ...

    @property
    def archon_less_layers(self) -> tuple[int, int]: ...


def archon_pipeline(archon: object, path: str) -> tuple[str | None, int | None, tuple[int, int]]:
    """The archon engine's pipeline settings: ``archon.pp_schedule`` (default
    Interleaved1F1B, ArchonEngineConfig l.668-680 at cbff54d6; one of its four listed names,
    in any case: torch's ``get_schedule_class``, unverified here), ``pp_layers_per_stage``
    (≥ 1 or null) and ``pp_{first,last}_stage_less_layers`` (≥ 0; ArchonEngineConfig.
    __post_init__ l.750-764 refuses the rest, as the loader does before)."""
    # The reference enforces no choice of its own: the field's "choices" are metadata it never
    # reads, and pipeline_llm hands the text unchanged (no strip) to torch's
    # get_schedule_class (pipeline_parallel.py l.383, l.409). torch is not mirrored here: that
    # it matches names case-insensitively, refuses '' and ' 1f1b ', and knows GPipe, LoopedBFS
    # or DualPipeV (which the reference treats as V-style, l.439-440) is unverified. So only
    # the four names the field lists (any case) are modelled, and the rest refused as not
    # modelled, not as the reference's refusal.
    value = child(archon, "pp_schedule") if archon is not None else None
    written = None if value is None else str(value)
    names = {name.lower(): name for name in defaults.ARCHON_PP_SCHEDULES}
    schedule = names.get(written.lower()) if written is not None else None
    if written is not None and schedule is None:
        raise AllocationValidationError(
            f"{path}.archon.pp_schedule={shown(written)}: not modelled; areal-alloc models "
            f"{', '.join(defaults.ARCHON_PP_SCHEDULES)} (the names ArchonEngineConfig."
            f"pp_schedule lists; default {defaults.ARCHON_PP_SCHEDULE}), and the reference "
            f"passes the text unchanged to torch's get_schedule_class"
        )
    # their bounds (pp_layers_per_stage ≥ 1, the less layers ≥ 0) are refused before, in the
    # reference's words, for every training section (loader._refuse_archon): read here only
    layers = setting_int(archon, f"{path}.archon.pp_layers_per_stage", 4, -MAX_COUNT, MAX_COUNT)
    first, last = (
        setting_int(archon, f"{path}.archon.pp_{end}_stage_less_layers", 1, -MAX_COUNT, MAX_COUNT)
        for end in ("first", "last")
    )
    return schedule, layers, (1 if first is None else first, 1 if last is None else last)


def archon_stages_per_rank(
    config: ArchonPipeline, num_layers: int | None, pp: int, path: str
) -> int | None:
    """The archon engine's virtual stages per pipeline rank (``pipeline_llm``,
    areal/experimental/models/archon/pipeline_parallel.py l.409-453, AReaL cbff54d6): with
    ``archon.pp_layers_per_stage`` unset, the schedule's default (1 for 1F1B, 2 for the
    others); set, ceil((layers + first + last) / pp_layers_per_stage) stages over p, which
    must divide them, one per rank for 1F1B, at least two for the others, exactly two for
    ZBVZeroBubble (the engine refuses the rest). None when the stages per rank need the
    model's layer count and it is unknown."""
    schedule = config.archon_pp_schedule or defaults.ARCHON_PP_SCHEDULE
    default = defaults.ARCHON_PP_SCHEDULES[schedule]
    per_stage = config.archon_layers_per_stage
    if per_stage is None or pp <= 1:
        return default
    if num_layers is None:
        return None
    first, last = config.archon_less_layers
    stages = -(-(num_layers + first + last) // per_stage)
    where = (
        f"{path}.archon.pp_layers_per_stage={per_stage}: ceil(({num_layers:,} layers + "
        f"{first} + {last}) / {per_stage}) = {stages:,} virtual stages"
    )
    if stages % pp:
        raise AllocationValidationError(
            f"{where}, not a multiple of p{pp} (the archon engine refuses it); choose "
            f"pp_layers_per_stage so that p divides the stages"
        )
    per_rank = stages // pp
    need = "1" if default == 1 else "2" if schedule == "ZBVZeroBubble" else "at least 2"
    if (
        (default == 1 and per_rank != 1)
        or (default == 2 and per_rank < 2)
        or (schedule == "ZBVZeroBubble" and per_rank != 2)
    ):
        raise AllocationValidationError(
            f"{where} = {per_rank} per rank over p{pp}: {schedule} runs {need} per rank "
            f"(the archon engine refuses it); change pp_layers_per_stage or pp_schedule"
        )
    return per_rank


def archon_split_refusal(
    num_layers: int, pp: int, stages_per_rank: int, first: int, last: int, key: str = "archon"
) -> str | None:
    """Why generate_llm_fqn_per_model_part (areal/experimental/models/archon/
    pipeline_parallel.py l.118-155, AReaL cbff54d6) refuses to split ``num_layers`` layers
    plus ``first`` (embedding) and ``last`` (output) over ``pp × stages_per_rank`` virtual
    stages, as one line (``key``: where pp_*_stage_less_layers are written); None when it
    splits them. The one home of these refusals: pipeline_split.archon_split raises them,
    the start-up rule (rules.archon_layers_fill_the_stages) checks the configured values."""
    stages = pp * stages_per_rank
    if stages == 1:
        return None
    effective = num_layers + first + last
    where = (
        f"the archon engine splits {num_layers:,} layers + {first} (embedding) + {last} "
        f"(output) = {effective:,} over p{pp} × {stages_per_rank} = {stages:,} virtual stages "
        f"(generate_llm_fqn_per_model_part)"
    )
    if stages > effective:
        return (
            f"{where}: more stages than effective layers; use a smaller p or fewer stages "
            f"per rank (archon.pp_schedule=1F1B runs 1)"
        )
    per = effective // stages
    for end, less in (("first", first), ("last", last)):
        if less > per:
            return (
                f"{where}: {key}.pp_{end}_stage_less_layers={less} exceeds the {per} layers "
                f"per stage ({effective:,} // {stages:,}; the engine raises '{end}_stage_less_"
                f"layers ({less}) exceeds layers_per_stage ({per})'); lower it"
            )
    return None


#: ArchonEngineConfig.ac_mode's choices (areal/api/cli_args.py line 631 at cbff54d6)
_ARCHON_AC_MODES = ("none", "full", "selective", "memory_budget")


def archon_recompute(archon: object, path: str) -> str:
    """What the archon engine checkpoints when ``gradient_checkpointing`` is on.

    areal/experimental/engine/archon_utils.py build_ac_config and
    areal/experimental/models/archon/activation_checkpoint.py apply_ac (AReaL cbff54d6):
    ``archon.ac_mode`` (default ``selective``, cli_args.py line 631) with
    ``archon.selective_ac_option`` (default ``op``, line 639) is torchtitan's per-op
    policy ('op': every second mm and the attention outputs saved, no activation
    offload); ``full`` checkpoints every block; a layer option ``'1'`` (or ``'0'``) wraps
    every block, as full does. Every N-th block (N ≥ 2) and ``memory_budget`` (torch.compile's
    min-cut) are not modelled: estimated as without recomputation, an upper bound.
    """
    mode = text(archon, "ac_mode", "selective")
    if mode not in _ARCHON_AC_MODES:
        raise AllocationValidationError(
            f"{path}.archon.ac_mode={shown(mode)}: must be none, full, selective or "
            f"memory_budget (the archon engine's ActivationCheckpointConfig refuses it)"
        )
    if mode in ("none", "full"):
        return mode
    if mode == "memory_budget":
        return "none"
    option = text(archon, "selective_ac_option", "op").strip()
    if option == "op":
        return "op"
    if not option.isdigit():
        raise AllocationValidationError(
            f"{path}.archon.selective_ac_option={shown(option)}: must be 'op' or a "
            f"positive integer string such as '2' (every N-th block; the archon engine's "
            f"ActivationCheckpointConfig refuses it)"
        )
    return "full" if int(option) <= 1 else "none"


def archon_compiles(archon: object, path: str) -> bool:
    """``<engine>.archon.enable_compile`` (default false): the engine then pads every
    micro-batch to ``mb_spec.max_tokens_per_mb`` (archon_utils.py force_pad_to_maximum
    l.258-300 at cbff54d6)."""
    return flag(archon, "enable_compile", False, f"{path}.archon.enable_compile")
