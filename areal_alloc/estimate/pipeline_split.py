"""Which decoder layers each pipeline stage of a Megatron engine holds (:class:`PipelineSplit`).

The reference does not split the layers evenly: for ``pp > 1`` its Megatron engine
(``areal/engine/megatron_engine.py`` l.494 calls ``configure_pipeline_layer_splits``,
``areal/engine/megatron_utils/pipeline_parallel.py``; AReaL
cbff54d645d2cd8ee1f1c358a82f3f473588433d) weighs every layer by its parameters
(``estimate_stage_parameter_buckets``: its own approximation, an MoE layer counting
only the experts local to one expert-parallel rank), puts the embedding's parameters
on the first of the ``pp × vpp`` virtual stages and the output layer's on the last,
and picks the contiguous split that makes the heaviest stage lightest
(``_compute_stage_layer_lengths``: a dynamic programme; the middle stages hold at
least one layer, the first and the last may hold none). It writes the result as
megatron-core's ``pipeline_model_parallel_layout`` and turns
``account_for_{embedding,loss}_in_pipeline_split`` off. :func:`reference_split`
computes the same split; :func:`even_split` is megatron-core's own, used for the
published runs of other launchers; :func:`archon_split` is the archon engine's
(``generate_llm_fqn_per_model_part``: the embedding and the output layer each counted as
one layer, the extra layers on the first stages).

Virtual stage ``i`` runs on pipeline rank ``i mod pp`` (megatron-core
``pipeline_parallel_layer_layout.py``, ``layout[vpp_rank * pp + pp_rank]``), so rank 0
holds the embedding and rank ``pp − 1`` the output layer and the loss.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from functools import lru_cache
from itertools import pairwise
from typing import Any

from areal_alloc.architecture import Architecture
from areal_alloc.defaults import ARCHON_STAGES_PER_RANK
from areal_alloc.errors import AllocationValidationError
from areal_alloc.estimate.backends import TRAINING
from areal_alloc.experiment.sections.archon import archon_split_refusal

__all__ = [
    "ARCHON_RULE",
    "AREAL_RULE",
    "EVEN_RULE",
    "LISTED_RANKS",
    "LISTED_RANK_STAGES",
    "LISTED_STAGES",
    "SPLITS",
    "PipelineSplit",
    "archon_split",
    "engine_split",
    "even_split",
    "reference_split",
    "split_lengths",
]

AREAL_RULE = "the reference's parameter-balanced split"
EVEN_RULE = "megatron-core's even split"
ARCHON_RULE = (
    "the archon engine's generate_llm_fqn_per_model_part split, embedding and output "
    "counted as a layer each"
)

#: How an engine's layers are split over its pipeline stages (``TrainingSettings.layer_split``):
#: "areal", the reference's own rule for its Megatron engine (the default); "even",
#: megatron-core's default (also the reference's Megatron engine with megatron-bridge, whose
#: provider never gets the reference's layout: execution._layer_split); "even-embedding-loss",
#: megatron-core's with ``account_for_embedding_in_pipeline_split`` and
#: ``account_for_loss_in_pipeline_split`` (published runs of other launchers).
SPLITS = ("areal", "even", "even-embedding-loss")

#: Pipeline ranks ``explain`` (text and ``--json``) and the report list at most: past it,
#: the first LISTED_RANKS − 1 and the last (the output layer's), the others counted.
LISTED_RANKS = 32
#: Virtual stages ``explain --json``'s ``stage_layers`` lists at most (the first ones).
LISTED_STAGES = 256
#: Virtual stages listed per rank at most (the first ones), in its text and its JSON.
LISTED_RANK_STAGES = 16


def engine_split(
    backend: str, arch: Architecture, pp: int, vpp: int = 1, ep: int = 1, rule: str = "areal"
) -> PipelineSplit | None:
    """The one place an engine's pipeline split is chosen: None without pipeline
    parallelism; the reference's rule for its Megatron engine; for archon
    :func:`archon_split` with ``vpp`` its virtual stages per rank (whatever ``rule``
    says: the engine has one rule); megatron-core's even split (with the embedding and
    loss slots for "even-embedding-loss") otherwise."""
    if pp <= 1:
        return None
    if rule not in SPLITS:
        raise AllocationValidationError(f"layer split {rule!r}: must be one of {', '.join(SPLITS)}")
    model = TRAINING.get(backend)  # an inference server's stages: memory_inference
    pipeline = model.pipeline if model is not None else None
    if pipeline == "archon":
        return archon_split(arch.num_layers, pp, vpp)
    if pipeline == "megatron" and rule == "areal":
        return reference_split(arch, pp, vpp, ep)
    account = rule == "even-embedding-loss"
    return even_split(arch.num_layers, pp, vpp, embedding_slot=account, loss_slot=account)


@dataclass(frozen=True, slots=True)
class PipelineSplit:
    """The decoder layers of each of the ``pp × vpp`` virtual stages, in layer order."""

    pp: int
    vpp: int
    stage_layers: tuple[int, ...]
    rule: str

    def stages_of(self, rank: int) -> tuple[int, ...]:
        """The virtual stages pipeline rank ``rank`` runs: rank, rank + pp, …"""
        return tuple(range(rank, self.pp * self.vpp, self.pp))

    def layers_of(self, rank: int) -> int:
        """The decoder layers on pipeline rank ``rank``."""
        return sum(self.stage_layers[s] for s in self.stages_of(rank))

    def stage_range(self, stage: int) -> range:
        """The decoder layers (0-based, in model order) of virtual stage ``stage``."""
        start = sum(self.stage_layers[:stage])
        return range(start, start + self.stage_layers[stage])

    def layer_ranges(self, rank: int) -> tuple[range, ...]:
        """The decoder layers on pipeline rank ``rank``, one range per virtual stage."""
        return tuple(self.stage_range(s) for s in self.stages_of(rank))

    def stage_kinds(self, stage: int, first_dense_layers: int, moe: bool) -> tuple[int, int]:
        """Virtual stage ``stage``'s (dense, MoE) decoder layers: MoE from
        ``first_dense_layers`` on, for a model with experts."""
        r = self.stage_range(stage)
        experts = max(0, r.stop - max(r.start, first_dense_layers)) if moe else 0
        return len(r) - experts, experts

    def moe_layers_of(self, rank: int, first_dense_layers: int, moe: bool) -> int:
        """The mixture-of-experts layers on ``rank`` (:meth:`stage_kinds`)."""
        return sum(self.stage_kinds(s, first_dense_layers, moe)[1] for s in self.stages_of(rank))

    def describe(self, rank: int, limit: int | None = None) -> str:
        """One rank's share, e.g. ``11 of 94 layers (stages 7, 15, 23, 31: 3+3+3+2) + output
        layer``; with ``limit``, its first ``limit`` virtual stages and how many more."""
        stages = self.stages_of(rank)
        total = sum(self.stage_layers)
        listed = stages if limit is None else stages[:limit]
        more = f", … ({len(stages) - len(listed):,} more)" if len(listed) < len(stages) else ""
        parts = "+".join(str(self.stage_layers[s]) for s in listed) + ("+…" if more else "")
        what = f"{self.layers_of(rank):,} of {total:,} layers"
        if len(stages) > 1:
            what += f" (virtual stages {', '.join(map(str, listed))}{more}: {parts})"
        if rank == 0:
            what += " + embedding"
        if rank == self.pp - 1:
            what += " + output layer"
        return what

    def listed_ranks(self) -> tuple[int, ...]:
        """The ranks listed (:data:`LISTED_RANKS`): every one, or the first ones and the
        last."""
        if self.pp <= LISTED_RANKS:
            return tuple(range(self.pp))
        return (*range(LISTED_RANKS - 1), self.pp - 1)

    def to_dict(self) -> dict[str, Any]:
        """The split as ``explain --json`` prints it (``pipeline_split``) and the plan's JSON
        holds it per engine: the layers of the first :data:`LISTED_STAGES` virtual stages,
        and each listed rank (:meth:`listed_ranks`) with its layers, its first
        :data:`LISTED_RANK_STAGES` virtual stages and whether it holds the embedding (rank
        0) and the output layer (rank pp − 1); what is left out is counted."""
        stages = self.pp * self.vpp
        ranks = []
        for rank in self.listed_ranks():
            own = self.stages_of(rank)
            listed = own[:LISTED_RANK_STAGES]
            ranks.append(
                {
                    "rank": rank,
                    "layers": self.layers_of(rank),
                    "stages": list(listed),
                    "stage_layers": [self.stage_layers[s] for s in listed],
                    "stages_omitted": len(own) - len(listed),
                    "embedding": rank == 0,
                    "output": rank == self.pp - 1,
                }
            )
        return {
            "rule": self.rule,
            "pp": self.pp,
            "vpp": self.vpp,
            "layers": sum(self.stage_layers),
            "stage_layers": list(self.stage_layers[:LISTED_STAGES]),
            "stage_layers_omitted": max(0, stages - LISTED_STAGES),
            "ranks": ranks,
            "ranks_omitted": self.pp - len(ranks),
        }


#: The reference's programme takes stages × layers² steps (the sweep here stages × layers):
#: beyond this many layers or stages (no published model has more than 126 layers) the
#: split is megatron-core's even one, and its rule says so.
MAX_SPLIT = 512


def reference_split(arch: Architecture, pp: int, vpp: int = 1, ep: int = 1) -> PipelineSplit:
    """The layers per virtual stage as the reference's Megatron engine places them."""
    if arch.num_layers > MAX_SPLIT or pp * vpp > MAX_SPLIT:
        split = even_split(arch.num_layers, pp, vpp)
        return replace(
            split,
            rule=f"{split.rule} (the reference's split is not computed beyond "
            f"{MAX_SPLIT} layers or stages: {arch.num_layers:,} layers, {pp * vpp:,} stages)",
        )
    weights, embedding, output = reference_weights(arch, ep)
    lengths = split_lengths(weights, embedding, output, pp * vpp)
    if not lengths:  # the reference falls back to megatron-core's default then
        return even_split(arch.num_layers, pp, vpp)
    return PipelineSplit(pp, vpp, lengths, AREAL_RULE)


def reference_weights(arch: Architecture, ep: int = 1) -> tuple[tuple[float, ...], float, float]:
    """Each layer's parameters, the embedding's and the output layer's, as the reference's
    ``estimate_stage_parameter_buckets`` approximates them: attention h·(heads·d) +
    2·h·(kv·d) + h·h (its output projection counted h × h) + 2h norms; a gated MLP 3·h·f;
    an MoE layer's router h·E and ceil(E / ep) local experts plus its shared experts; the
    output layer vocab·h (tied: the embedding's). Left out (no catalogue model's split changes
    by them): attention biases, which count there only where a config sets
    ``attention_bias`` (Qwen2's configs do not), and the router's expert bias
    (``moe_router_enable_expert_bias``, DeepSeek-V3's E more per MoE layer); and for MLA
    models the head dim here is h / heads, where the reference reads the ``head_dim`` its
    transformers config carries, which may differ."""
    h = arch.hidden_size
    heads, d = arch.num_attention_heads, arch.head_size
    kv = arch.kv_heads
    matrices = 3 if arch.gated_mlp else 2

    def mlp(width: int) -> float:
        return float(matrices * h * width) if width > 0 else 0.0

    attention = h * (heads * d) + 2 * h * (kv * d) + h * h + 2.0 * h
    dense = float(attention + mlp(arch.intermediate_size or 4 * h))
    weights = [dense] * arch.num_layers
    if arch.is_moe:
        local = math.ceil(arch.num_experts / max(ep, 1))
        moe = float(
            attention
            + h * arch.num_experts
            + mlp(arch.moe_intermediate_size or arch.intermediate_size) * local
            + mlp(arch.shared_expert_intermediate_size)
        )
        for i in range(arch.first_dense_layers, arch.num_layers):
            weights[i] = moe
    embedding = float(arch.vocab_size * h)
    return tuple(weights), embedding, embedding


@lru_cache(maxsize=4096)
def split_lengths(
    weights: tuple[float, ...], embedding: float, output: float, stages: int
) -> tuple[int, ...]:
    """The reference's ``_compute_stage_layer_lengths``: the contiguous split of
    ``weights`` into ``stages`` whose heaviest stage (the embedding on the first, the
    output on the last) is lightest, the middle stages holding at least one layer; of
    equal splits, each stage starts at the earliest layer it can, as the reference's
    loop keeps the first of equals. () when no split exists.

    Each stage's row is :func:`_stage_row` (the reference's scan over every start, or the
    same minima found in one sweep where the previous row rises with the layers)."""
    total = len(weights)
    if total == 0 or stages <= 0:
        return ()
    prefix = [0.0]
    for w in weights:
        prefix.append(prefix[-1] + float(w))
    rising_prefix = all(w >= 0 for w in weights)
    inf = math.inf
    previous = [0.0] + [inf] * total
    choices: list[list[int]] = [[-1] * (total + 1)]
    for stage in range(1, stages + 1):
        base = embedding if stage == 1 else output if stage == stages else 0.0
        middle = stage not in (1, stages)
        current, choice = _stage_row(previous, prefix, base, middle, rising_prefix)
        previous = current
        choices.append(choice)
    if not math.isfinite(previous[total]):
        return ()
    lengths = [0] * stages
    end = total
    for stage in range(stages, 0, -1):
        start = choices[stage][end]
        if start < 0:
            return ()
        lengths[stage - 1] = end - start
        end = start
    return tuple(lengths)


def _stage_row(
    previous: list[float], prefix: list[float], base: float, middle: bool, rising_prefix: bool
) -> tuple[list[float], list[int]]:
    """One stage of :func:`split_lengths`: for every end layer, the lightest heaviest stage
    ``min over starts p of max(previous[p], base + (prefix[end] − prefix[p]))`` and the
    first start that gives it (the reference's loop: -1 where every start is infeasible).

    Where ``previous`` rises (never falls) over its finite entries and the weights are not
    negative, ``max`` of a rising and a falling sequence of p falls, then rises: the first
    start p where previous[p] ≥ base + (prefix[end] − prefix[p]) only moves on as ``end``
    grows, so one sweep finds every minimum, the same floats compared as the scan compares
    (the first of equal minima kept). Otherwise every start is scanned, as the reference does."""
    total = len(prefix) - 1
    inf = math.inf
    current = [inf] * (total + 1)
    choice = [-1] * (total + 1)
    lo = next((i for i, v in enumerate(previous) if v < inf), total + 1)
    finite = previous[lo:]
    if rising_prefix and all(a <= b for a, b in pairwise(finite)):
        k = lo  # the first start where the previous stages weigh at least this one
        for end in range(total + 1):
            top = end if middle else end + 1  # a middle stage holds at least one layer
            if top <= lo:
                continue
            at_end = prefix[end]
            k = max(k, lo)
            while k < top and previous[k] < base + (at_end - prefix[k]):
                k += 1
            if k < top:
                best, where = max(previous[k], base + (at_end - prefix[k])), k
            else:
                best, where = inf, -1
            if k > lo:
                before = max(previous[k - 1], base + (at_end - prefix[k - 1]))
                if before <= best:
                    best, where = before, k - 1
                    while where > lo and (
                        max(previous[where - 1], base + (at_end - prefix[where - 1])) == best
                    ):
                        where -= 1
            if best < inf:
                current[end] = best
                choice[end] = where
        return current, choice
    for end in range(total + 1):
        top = end if middle else end + 1
        if top <= 0:
            continue
        at_end = prefix[end]
        candidates = [
            max(prev, base + (at_end - p))
            for prev, p in zip(previous[:top], prefix[:top], strict=True)
        ]
        best = min(candidates)
        if best < inf:
            current[end] = best
            choice[end] = candidates.index(best)
    return current, choice


def even_split(
    num_layers: int, pp: int, vpp: int = 1, *, embedding_slot: bool = False, loss_slot: bool = False
) -> PipelineSplit:
    """megatron-core's own split: the layers evenly over the ``pp × vpp`` virtual stages;
    with ``account_for_embedding_in_pipeline_split`` / ``account_for_loss_in_pipeline_split``
    the embedding and the loss each take one layer's slot on the first / last stage
    (megatron-core ``transformer_block.get_num_layers_to_build``). Where the slots do not
    divide evenly (megatron-core refuses that), the first stages take one more."""
    stages = pp * vpp
    slots = num_layers + int(embedding_slot) + int(loss_slot)
    base, extra = divmod(slots, stages)
    per = [base + (1 if s < extra else 0) for s in range(stages)]
    if embedding_slot:
        per[0] -= 1
    if loss_slot:
        per[-1] -= 1
    rule = EVEN_RULE + (
        " (embedding and loss counted as layers)"
        if embedding_slot and loss_slot
        else " (embedding counted as a layer)"
        if embedding_slot
        else " (loss counted as a layer)"
        if loss_slot
        else ""
    )
    return PipelineSplit(pp, vpp, tuple(max(0, n) for n in per), rule)


def archon_split(
    num_layers: int,
    pp: int,
    stages_per_rank: int = ARCHON_STAGES_PER_RANK,
    first_stage_less_layers: int = 1,
    last_stage_less_layers: int = 1,
) -> PipelineSplit:
    """The archon engine's split over ``pp × stages_per_rank`` virtual stages, as
    ``generate_llm_fqn_per_model_part`` (areal/experimental/models/archon/
    pipeline_parallel.py l.85-197, AReaL cbff54d645d2cd8ee1f1c358a82f3f473588433d) builds
    it: the embedding and the output layer count as ``pp_first_stage_less_layers`` /
    ``pp_last_stage_less_layers`` layers (default 1 each, cli_args.py l.693-705); the
    ``layers + first + last`` effective layers go evenly over the stages, the first
    ``effective mod stages`` stages one more; the first stage then holds its share less
    ``first``, the last its share less ``last``, no stage more layers than are left.
    E.g. Qwen3-8B's 36 layers at p4 (8 stages): 38 = 8 × 4 + 6, stages 4, 5, 5, 5, 5, 5,
    4, 3. Refuses what the reference refuses (too many stages, a share below the
    embedding's or the output's)."""
    stages = pp * stages_per_rank
    effective = num_layers + first_stage_less_layers + last_stage_less_layers
    if stages == 1:
        return PipelineSplit(pp, stages_per_rank, (num_layers,), ARCHON_RULE)
    refusal = archon_split_refusal(
        num_layers, pp, stages_per_rank, first_stage_less_layers, last_stage_less_layers
    )
    if refusal is not None:
        raise AllocationValidationError(refusal)
    per, extra = divmod(effective, stages)
    lengths = []
    left = num_layers
    for stage in range(stages):
        share = per + (1 if stage < extra else 0)
        if stage == 0:
            share -= first_stage_less_layers
        elif stage == stages - 1:
            share -= last_stage_less_layers
        taken = min(max(share, 0), left)
        lengths.append(taken)
        left -= taken
    return PipelineSplit(pp, stages_per_rank, tuple(lengths), ARCHON_RULE)
