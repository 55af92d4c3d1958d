"""Per-GPU memory of one engine: the estimate's types, every term showing its inputs.

A :class:`MemoryEstimate` is a list of :class:`Term` (bytes and the formula they come
from) per phase (:data:`PHASES`), and, for an inference server, its :class:`KVCache`. The
estimates themselves: ``memory_training.training_memory`` (``fsdp``, ``megatron``,
``archon``) and ``memory_inference.inference_memory`` (``sglang``, ``vllm``); what a step
keeps for its backward: ``activations``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from areal_alloc.errors import AllocationValidationError
from areal_alloc.estimate.execution import GIB
from areal_alloc.estimate.margin import (
    KV_MEMORY_ERROR,
    NO_FIT,
    TRAIN_MEMORY_ERROR,
    VERDICTS,
    MeasuredError,
    Verdict,
    judge,
)

__all__ = [
    "DTYPE_BYTES",
    "PHASES",
    "KVCache",
    "MemoryEstimate",
    "Phase",
    "Term",
    "dtype_bytes",
    "readable_bytes",
    "short_count",
]

#: Bytes per element of the dtypes the reference's configs name.
DTYPE_BYTES = {
    "float32": 4,
    "fp32": 4,
    "float": 4,
    "bfloat16": 2,
    "bf16": 2,
    "float16": 2,
    "fp16": 2,
    "half": 2,
    "fp8": 1,
    "fp8_e4m3": 1,
    "fp8_e5m2": 1,
    "float8_e4m3fn": 1,
    "float8_e5m2": 1,
}


def dtype_bytes(name: str, key: str) -> int:
    value = DTYPE_BYTES.get(str(name).lower())
    if value is None:
        raise AllocationValidationError(
            f"{key}={name!r}: unknown dtype; known: {', '.join(sorted(DTYPE_BYTES))}"
        )
    return value


def readable_bytes(n: float) -> str:
    """``12.3 GiB``; ``512.0 MiB`` under a GiB."""
    if abs(n) >= GIB:
        return f"{n / GIB:.1f} GiB"
    return f"{n / (1 << 20):.1f} MiB"


def short_count(n: float) -> str:
    """A parameter or element count, short: 7.62e9 → 7.62B."""
    for unit, size in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if abs(n) >= size:
            return f"{n / size:.3g}{unit}"
    return f"{n:.3g}"


@dataclass(frozen=True, slots=True)
class Term:
    """One part of the estimate: its bytes and the formula with its inputs."""

    name: str
    bytes: int
    formula: str


@dataclass(frozen=True, slots=True)
class KVCache:
    """What an inference instance's KV cache holds, per GPU."""

    bytes_per_token: int
    formula: str
    tokens: int | None  # None: the GPU's memory is not known
    sequence_length: int
    concurrency: int | None  # sequences the run keeps in flight per instance

    @property
    def sequences(self) -> int | None:
        return None if self.tokens is None else self.tokens // self.sequence_length

    def to_dict(self) -> dict[str, object]:
        return {
            "bytes_per_token": self.bytes_per_token,
            "formula": self.formula,
            "tokens": self.tokens,
            "sequence_length": self.sequence_length,
            "sequences": self.sequences,
            "concurrency": self.concurrency,
        }


#: The phases an engine goes through, in the order a run meets them; an engine's
#: memory is its peak over its own (:meth:`MemoryEstimate.with_phases`). The
#: reference's trainer (areal/trainer/rl_trainer.py, areal-project/AReaL@cbff54d645d2
#: cd8ee1f1c358a82f3f473588433d) loads every training engine (``initialize``, lines
#: 311-327) before any inference server starts (``_init_rollout``, line 358); a step
#: (lines 686-856) generates, then runs the critic's values and the ref's and
#: teacher's log-probabilities (forward passes), the actor's ``compute_logp`` when
#: ``should_compute_prox_logp()`` (``recompute_logprob``), then ``ppo_update``, whose
#: ``train_batch`` runs forward and backward per micro-batch and then
#: ``optimizer_step`` (areal/engine/fsdp_engine.py lines 774-812).
#:
#: - ``load``: the weights being loaded (FSDP without ``memory_efficient_load``: the
#:   whole model on every GPU before sharding; Megatron's gradient buffers and
#:   float32 main parameters are built with the model, its Adam states at the first
#:   step: areal_alloc.estimate.memory_training);
#: - ``generation``: an inference server's weights, KV cache and activation peak;
#: - ``forward``: a forward pass without gradients (ref, teacher, the critic's
#:   values, the actor's log-prob recomputation): one layer's activations and the
#:   bfloat16 logits, beside what the engine keeps between its phases;
#: - ``backward``: every activation of the micro-batch, the logits as the loss holds
#:   them and the gradients (but a torch engine's only micro-batch of a step: its
#:   gradients were set to None before the step and grow as the backward frees the
#:   activations, so its peak is the start, without them, or the optimizer step);
#: - ``optimizer_step``: states, gradients and master weights, the activations freed
#:   (FSDP's AdamW is torch's fused one, no per-tensor temporaries:
#:   areal/engine/fsdp_engine.py lines 1195-1202, ``fused=True`` but for a vision
#:   model at t > 1).
PHASES = ("load", "generation", "forward", "backward", "backward_end", "optimizer_step")


@dataclass(frozen=True, slots=True)
class Phase:
    """One phase of an engine (:data:`PHASES`) and the terms on its GPU meanwhile."""

    name: str
    terms: tuple[Term, ...]


@dataclass(frozen=True, slots=True)
class MemoryEstimate:
    """One engine's memory per GPU, term by term: the terms of its peak phase."""

    key: str
    backend: str
    terms: tuple[Term, ...]
    capacity: int | None  # bytes per GPU; None when no GPU is named
    assumptions: tuple[str, ...] = ()
    kv_cache: KVCache | None = None
    #: an inference engine claims this share of the GPU up front
    claimed_fraction: float | None = None
    #: bytes a training engine keeps on its GPUs between its own phases (weights,
    #: gradients, optimizer states): what a colocated engine finds there
    resident: int = 0
    #: bytes it holds right after loading, before its first step (FSDP: the sharded
    #: weights; gradients and AdamW states appear at the first step)
    at_load: int = 0
    #: the phase whose terms are ``terms`` (the peak), and every phase it goes through
    phase: str = ""
    phases: tuple[Phase, ...] = ()
    #: FSDP keeps this model's MLPs whole over t (execution.fsdp_keeps_mlp_whole): t splits
    #: only the attention, which the fix for a term over the GPU says
    whole_mlp: bool = False

    def _bytes(self, terms: tuple[Term, ...]) -> int:
        if (
            self.claimed_fraction is not None
            and self.capacity is not None
            and any(t.name == "kv_cache" for t in terms)
        ):
            # what the server claims, and what a colocated engine keeps beside it; when
            # its terms overflow the claim, they are the total (the weights and reserve
            # alone: a 6e27 GiB weight term is never left out of "total 72.0 GiB of 80.0
            # GiB"; or SGLang's pool, a fraction of the memory after its reserve, which
            # with the reserve is (1 − fraction) × reserve above fraction × the device)
            claim = int(self.claimed_fraction * self.capacity)
            needed = sum(t.bytes for t in terms if t.name != "colocated")
            return max(claim, needed) + sum(t.bytes for t in terms if t.name == "colocated")
        return sum(t.bytes for t in terms)

    @property
    def total(self) -> int:
        return self._bytes(self.terms)

    @property
    def phase_bytes(self) -> dict[str, int]:
        """Each phase's bytes per GPU, in the order of :data:`PHASES`."""
        if not self.phases:
            return {self.phase: self.total} if self.phase else {}
        return {p.name: self._bytes(p.terms) for p in self.phases}

    def with_phases(self, phases: tuple[Phase, ...]) -> MemoryEstimate:
        """This estimate over ``phases``: its terms those of the peak phase (a tie goes
        to the later phase, the one the run keeps repeating)."""
        sizes = [self._bytes(p.terms) for p in phases]
        peak = max(range(len(phases)), key=lambda i: (sizes[i], i))
        chosen = phases[peak]
        kept = tuple(a for a in self.assumptions if " peaks while loading" not in a)
        if chosen.name == "load" and any(t.name == "load" for t in chosen.terms):
            then = max(
                ((sizes[i], phases[i].name) for i in range(len(phases)) if i != peak),
                default=None,
            )
            kept += (
                f"{self.key} peaks while loading: the whole model on every GPU before "
                f"sharding ({self.key}.fsdp.memory_efficient_load=false)"
                + (f"; its {then[1]} then needs {readable_bytes(then[0])} per GPU" if then else ""),
            )
        return replace(self, terms=chosen.terms, phase=chosen.name, phases=phases, assumptions=kept)

    def term(self, name: str) -> int:
        return sum(t.bytes for t in self.terms if t.name == name)

    @property
    def largest(self) -> Term:
        return max(self.terms, key=lambda t: t.bytes)

    @property
    def headroom(self) -> int | None:
        return None if self.capacity is None else self.capacity - self.total

    @property
    def error(self) -> MeasuredError:
        """The measured error of what is judged against the GPU: a server's KV pool, else a
        training engine's memory (estimate.margin)."""
        return KV_MEMORY_ERROR if self.kv_cache is not None else TRAIN_MEMORY_ERROR

    @property
    def margin(self) -> int:
        """Bytes of the estimate's own measured error: a training engine's whole total; a
        server's claim is exact (a fraction of what the device reports), so only what a
        colocated engine keeps beside it, at the training error."""
        return int(TRAIN_MEMORY_ERROR.share * self._judged)

    @property
    def over_margin(self) -> int:
        """Bytes by which the estimate may count more than there is (the measured error's
        other side, ``MeasuredError.over``), of what :attr:`margin` covers."""
        return int(TRAIN_MEMORY_ERROR.over_share * self._judged)

    @property
    def _judged(self) -> int:
        """What the training error applies to: a training engine's whole total; a server's
        claim is exact, so only what a colocated engine keeps beside it."""
        return self.term("colocated") if self.kv_cache is not None else self.total

    @property
    def edge_error(self) -> str:
        """The side of the measured error that puts this estimate at the edge, in words:
        under the capacity, how much more the device may hold; over it, how much less."""
        if self.headroom is None or self.headroom >= 0:
            return f"+{TRAIN_MEMORY_ERROR.percent} = {readable_bytes(self.margin)}"
        return f"−{TRAIN_MEMORY_ERROR.over_percent} = {readable_bytes(self.over_margin)}"

    @property
    def verdict(self) -> Verdict | None:
        """Fits, at the edge or does not fit (estimate.margin.judge); None: no GPU named.
        A server's KV cache must hold one sequence, its tokens within the KV pool's error."""
        if self.capacity is None:
            return None
        total = judge(self.total, self.capacity, self.margin, self.over_margin)
        kv = self.kv_cache
        if kv is None:
            return total
        tokens = max(kv.tokens or 0, 0)
        held = judge(kv.sequence_length, tokens, int(KV_MEMORY_ERROR.share * tokens))
        return max(total, held, key=VERDICTS.index)

    @property
    def fits(self) -> bool | None:
        """Whether the estimate is not refused: False only for "does not fit" (at the edge
        warns); None: no GPU named."""
        verdict = self.verdict
        return None if verdict is None else verdict != NO_FIT

    def with_term(self, term: Term) -> MemoryEstimate:
        """``term`` beside every phase but loading (what a colocated engine keeps)."""
        if not self.phases:
            return replace(self, terms=(*self.terms, term))
        return self.with_phases(
            tuple(p if p.name == "load" else Phase(p.name, (*p.terms, term)) for p in self.phases)
        )

    def to_dict(self) -> dict[str, object]:
        names = ("weights", "gradients", "optimizer", "activations", "logits", "reserve")
        out: dict[str, object] = {name: self.term(name) for name in names}
        for extra in ("colocated", "load"):
            if self.term(extra):
                out[extra] = self.term(extra)
        if self.kv_cache is not None:
            out["kv_cache"] = self.term("kv_cache")
        out["total"] = self.total
        out["phase"] = self.phase
        out["phases"] = self.phase_bytes
        out["capacity"] = self.capacity
        out["headroom"] = self.headroom
        out["fits"] = self.fits
        out["verdict"] = self.verdict
        out["margin"] = self.margin if self.capacity is not None else None
        out["error"] = {
            "share": self.error.share,
            "over": self.error.over_share,
            "kind": self.error.kind,
        }
        out["terms"] = [
            {"name": t.name, "bytes": t.bytes, "formula": t.formula} for t in self.terms
        ]
        out["assumptions"] = list(self.assumptions)
        return out
