"""One RL step as a timeline: the one model the plan's pace, ``layouts --rank``,
``suggest`` and ``calibrate`` share, so that they cannot disagree.

- generation, per rollout instance (:func:`areal_alloc.estimate.speed_inference.generation`: the
  prefill at compute, then decode steps at max(HBM reads, GEMM compute) plus the
  tensor-parallel all-reduces), at the decode batch :func:`decode_batch` (the sequences
  in flight on the instance: never a fixed cap), over the mean generation length; a
  synchronous step also waits for its longest sequence: its ``gconfig.max_new_tokens``
  − the mean decode steps past the mean run at the tail's batch of one, on top of the
  throughput (:func:`rollout`), never below the floor of ``max_new_tokens`` steps;
- the training side (:func:`training_side`): the actor's optimizer step, the ref's and a
  training teacher's forward (a forward pass, host time included), the critic's step, an
  inference teacher's prefill, and the actor's log-prob recomputation when
  ``actor.recompute_logprob``, one after another as the reference's training loop calls
  them (:func:`training_pace`, engine by engine, on the engine's layout or, as ``suggest``
  places the ref and the critic, on the actor's);
- the weight update to the rollout (:func:`weight_update`);
- the mode read from the config (:func:`mode_of`) and the step in that mode
  (:func:`step_seconds`): asynchronous (η = ``rollout.max_head_offpolicyness`` > 0:
  the slower side), synchronous (η = 0: the sum) or colocated (time-shared: the sum
  plus the offload and onload of what each side holds, :func:`switch`).

The plan's pace, every engine of an experiment by this model, is
:func:`areal_alloc.estimate.pace.estimate_pace`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

from areal_alloc.architecture import Architecture
from areal_alloc.errors import AllocationValidationError
from areal_alloc.estimate.execution import (
    ServerLimit,
    StepShape,
    TrainingSettings,
)
from areal_alloc.estimate.memory import KVCache
from areal_alloc.estimate.speed import StepEstimate, StepTerm
from areal_alloc.estimate.speed_inference import decode_step, generation
from areal_alloc.estimate.speed_training import settings_step
from areal_alloc.estimate.step_mode import (
    ASYNCHRONOUS,
    COLOCATED,
    MODES,
    SYNCHRONOUS,
    mode_of,
    step_seconds,
)
from areal_alloc.estimate.system import (
    DEFAULT_DISK_GBPS,
    Hardware,
)
from areal_alloc.strategy import ParallelStrategy

__all__ = [
    "ASYNCHRONOUS",
    "COLOCATED",
    "MODES",
    "PCIE_GBPS",
    "SYNCHRONOUS",
    "EnginePace",
    "Generation",
    "decode_batch",
    "mode_of",
    "rollout",
    "step_generation",
    "step_seconds",
    "switch",
    "training_pace",
    "training_side",
    "weight_update",
]

#: Host ↔ device copies of an offload / onload: PCIe 4.0 x16, 32 GB/s per direction
#: (PCI-SIG PCIe 4.0 base specification: 16 GT/s × 16 lanes, 128b/130b), the link of
#: an H100/A100 SXM node's GPUs to their host.
PCIE_GBPS = 32.0


def decode_batch(
    sequences: int,
    instances: int,
    kv_tokens: int | None,
    context: int,
    in_flight: int | None,
    limit: int | None = None,
) -> int:
    """The sequences in flight on one instance: min(its share of the sequences the rollout
    keeps in flight, ``in_flight``, or of the step's ``sequences`` when None; what its KV
    cache holds at the mean ``context``; the server's own bound on the requests it runs at
    once, ``limit``: :meth:`areal_alloc.estimate.execution.ServerLimit.per_instance`), at
    least 1.

    ``in_flight`` is :func:`areal_alloc.estimate.execution.sequences_in_flight`: the
    reference's staleness manager admits min(``rollout.max_concurrent_rollouts``, (η + 1) ×
    the batch) rollouts of ``gconfig.n_samples`` sequences each
    (areal/infra/staleness_manager.py ``get_capacity``, areal/trainer/rl_trainer.py
    ``group_size=config.gconfig.n_samples``, AReaL cbff54d6), more than one step's
    sequences when η > 0."""
    instances = max(1, instances)
    batch = math.ceil((sequences if in_flight is None else in_flight) / instances)
    if kv_tokens is not None and context > 0:
        batch = min(batch, kv_tokens // context)
    if limit is not None:
        batch = min(batch, limit)
    return max(1, batch)


@dataclass(frozen=True, slots=True)
class Generation:
    """A rollout's generation in one RL step."""

    seconds: float  # the step's generation (the long tail included when synchronous)
    throughput_seconds: float  # the waves at the mean generation length
    floor_seconds: float  # max_new_tokens decode steps of the longest sequence, at batch 1
    batch: int
    #: one instance's share of the step over its batch: whole waves when synchronous (the
    #: step drains), a fraction when asynchronous (the batch stays full across steps)
    waves: float
    instances: int
    estimate: StepEstimate  # one wave of one instance
    what: str

    @property
    def tail_seconds(self) -> float:
        """A synchronous step's wait for its longest sequence past the mean length."""
        return self.seconds - self.throughput_seconds

    @property
    def terms(self) -> tuple[StepTerm, ...]:
        tail = self.tail_seconds
        return (
            StepTerm(
                "generation (mean length)",
                self.throughput_seconds,
                f"{self.waves:.3g} wave(s) × {self.estimate.seconds:.4g} s per wave of "
                f"{self.batch} sequences on each of {self.instances} instances",
            ),
            StepTerm(
                "longest sequence (tail)",
                tail,
                "gconfig.max_new_tokens − the mean length decode steps of the longest "
                f"sequence at batch 1 (all {self.floor_seconds:.4g} s of its steps at batch 1 "
                "are the floor)",
                hidden=tail <= 0,
            ),
        )


def rollout(
    arch: Architecture,
    parallel: ParallelStrategy,
    hardware: Hardware,
    *,
    sequences: int,
    instances: int,
    prompt: int,
    max_new_tokens: int,
    mean_gen_len: int | None,
    kv_tokens: int | None,
    kv_bytes_per_token: int,
    in_flight: int | None = None,
    synchronous: bool = True,
    server: ServerLimit | None = None,
    backend: str = "",
) -> Generation:
    """The rollout's generation of one step's ``sequences`` over ``instances``, at the
    decode batch of :func:`decode_batch` (``in_flight``: the sequences the rollout keeps
    in flight, None: the step's; ``server``: the ``backend`` server's own bound on the
    requests it runs at once, None: none)."""
    mean = max_new_tokens if mean_gen_len is None else min(mean_gen_len, max_new_tokens)
    if mean < 1:
        raise AllocationValidationError(
            f"mean generation length {mean}: must be ≥ 1 (--mean-gen-len, mean_gen_len)"
        )
    context = prompt + mean // 2
    # What the KV cache must hold per sequence of a batch: staggered (asynchronous: a
    # finished sequence's place is taken at once), the mean context; a synchronous wave's
    # sequences start together, so at its end the cache holds Σ (prompt + length) of those
    # alive and finished = the batch × (prompt + mean): a batch the cache cannot hold to
    # the end is preempted (vLLM recomputes, SGLang retracts), so the wave is that batch.
    held_context = prompt + mean if synchronous else context
    limit, rule = (None, "") if server is None else server.per_instance(backend, kv_tokens)
    batch = decode_batch(sequences, instances, kv_tokens, held_context, in_flight, limit)
    share = math.ceil(sequences / max(1, instances))
    waves: float = math.ceil(share / batch) if synchronous else share / batch
    one = generation(
        arch,
        parallel,
        hardware,
        batch=batch,
        prompt_len=prompt,
        gen_len=mean,
        kv_bytes_per_token=kv_bytes_per_token,
    )
    throughput = one.seconds * waves
    last = decode_step(
        arch,
        parallel,
        hardware,
        batch=1,
        context=prompt + max_new_tokens // 2,
        kv_bytes_per_token=kv_bytes_per_token,
    )
    floor = last.seconds * max_new_tokens
    # A synchronous step drains: its longest sequence runs max_new_tokens decode steps, the
    # batch thinning as the others finish. With a step's cost a + b × (sequences alive) (the
    # weights read once, then each sequence's KV and GEMM share), the steps cost
    # a × max_new_tokens + b × (the tokens generated) = the waves at the mean length + a ×
    # (max_new_tokens − mean): the throughput plus the tail's extra steps at batch 1 (a
    # step at batch 1 is a, to its one sequence's KV). It is never below the floor (the
    # waves read the KV at the mean's context, the floor at the longest's: one sequence's
    # throughput + tail can fall short of it).
    tail = last.seconds * (max_new_tokens - mean) if synchronous else 0.0
    seconds = max(throughput + tail, floor) if synchronous else throughput
    tail = seconds - throughput
    held = math.ceil((sequences if in_flight is None else in_flight) / max(1, instances))
    what = (
        f"{waves:.3g} wave(s) of {batch} sequences (min of {held:,} in flight per instance, the "
        f"KV cache at {'the wave end' if synchronous else 'mean context'} {held_context:,}"
        f"{', ' + rule if rule else ''}) × {mean:,} tokens "
        f"on each of {instances} "
        f"instances{'' if synchronous else ' (asynchronous: the batch stays full across steps)'}"
        + (
            f"; then the longest sequence's {max_new_tokens - mean:,} decode steps past the mean "
            f"at batch 1 = {tail:.4g} s (floor {max_new_tokens:,} steps = {floor:.4g} s)"
            if synchronous
            else ""
        )
    )
    return Generation(seconds, throughput, floor, batch, waves, instances, one, what)


def weight_update(
    arch: Architecture, mode: str, hardware: Hardware, *, inside_node: bool, senders: int = 1
) -> StepTerm:
    """The actor's new weights (bf16) reaching the rollout once per step.

    ``xccl``: an NCCL broadcast from the actor to the rollout's servers
    (areal/engine/fsdp_engine.py _update_weights_from_distributed, "Broadcast parameters
    with single-pending-bucket pipelining", AReaL cbff54d6) over NVLink inside a node, else
    one GPU's network port; ``awex``: point-to-point shards over the same links, each of
    the ``senders`` training GPUs sending its part (areal/engine/awex/); ``disk``: written
    and read once."""
    size = arch.parameters.total * 2
    gib = size / 2**30
    if mode == "disk":
        seconds = 2 * size / (hardware.disk_gbps * 1e9)
        assumed = " an assumed" if hardware.disk_gbps == DEFAULT_DISK_GBPS else ""
        return StepTerm(
            "weight update (disk)",
            seconds,
            f"2 × {gib:.2f} GiB written and read at{assumed} {hardware.disk_gbps:g} GB/s "
            f"(--disk-gbps)",
        )
    link = hardware.link_bytes_per_second(inside_node)
    name = hardware.link_name(inside_node)
    if mode == "awex":
        return StepTerm(
            "weight update (awex)",
            size / link / max(1, senders),
            f"{gib:.2f} GiB in shards from {max(1, senders)} GPUs in parallel over {name}",
        )
    return StepTerm(
        "weight update (xccl)", size / link, f"NCCL broadcast of {gib:.2f} GiB over {name}"
    )


def switch(hardware: Hardware, training_bytes: float, rollout_bytes: float) -> StepTerm:
    """A colocated step's offloads and onloads over PCIe (:data:`PCIE_GBPS`), each GPU
    moving its own bytes off and back once a step: the training engine's whole memory
    (``training_bytes``: weights, gradients and optimizer states; the reference's
    torch_memory_saver pauses every allocation of the process with a CPU backup,
    ``TMS_INIT_ENABLE_CPU_BACKUP=1`` in areal/utils/offload.py and ``offload`` in
    areal/engine/fsdp_engine.py / megatron_engine.py, AReaL cbff54d6) and the rollout's
    weights (``rollout_bytes``)."""
    seconds = 2 * (training_bytes + rollout_bytes) / (PCIE_GBPS * 1e9)
    return StepTerm(
        "offload/onload",
        seconds,
        f"2 × (training {training_bytes / 2**30:.2f} GiB of weights, gradients and optimizer "
        f"+ rollout weights {rollout_bytes / 2**30:.2f} GiB) per GPU / PCIe {PCIE_GBPS:g} GB/s",
    )


# --- the plan's pace: every engine of an experiment, one step ---------------------------


@dataclass(frozen=True, slots=True)
class EnginePace:
    key: str
    seconds: float  # per RL step
    tokens_per_second: float
    what: str
    estimate: StepEstimate

    def to_dict(self) -> dict[str, object]:
        return {
            "seconds_per_step": self.seconds,
            "tokens_per_second": self.tokens_per_second,
            "what": self.what,
            **self.estimate.to_dict(),
        }


def training_side(paces: Sequence[EnginePace]) -> float:
    """The training-side engines one after another, as the reference's training loop
    calls them: the sum of their seconds per step."""
    return sum(p.seconds for p in paces)


def step_generation(
    model: Architecture,
    parallel: ParallelStrategy,
    hardware: Hardware,
    shape: StepShape,
    kv: KVCache | None,
    *,
    instances: int,
    mode: str,
    backend: str,
) -> Generation:
    """One step's generation on a rollout layout (:func:`rollout`), read from the step's
    shape and the layout's KV cache: the one mapping the plan's pace and ``suggest`` use."""
    return rollout(
        model,
        parallel,
        hardware,
        sequences=shape.sequences,
        instances=instances,
        prompt=shape.prompt,
        max_new_tokens=shape.new_tokens,
        mean_gen_len=shape.mean,
        kv_tokens=kv.tokens if kv is not None else None,
        kv_bytes_per_token=kv.bytes_per_token if kv is not None else 0,
        in_flight=shape.in_flight,
        synchronous=mode != ASYNCHRONOUS,
        server=shape.server,
        backend=backend,
    )


def training_pace(
    key: str,
    backend: str,
    parallel: ParallelStrategy,
    model: Architecture,
    hardware: Hardware,
    shape: StepShape,
    settings: TrainingSettings | None,
) -> EnginePace:
    """A training engine's step on ``parallel``, with its own settings (micro-batch tokens,
    recomputation, optimizer: none is forward only): the actor's and the critic's
    ``ppo_update``, ``shape.minibatches_of(key)`` optimizer steps; the ref's and a training
    teacher's forward (a forward pass, nothing recomputed); the forward a
    trainer runs over the whole step first (:func:`_forward_before_update`: the actor's
    log-probs, the critic's values). The plan calls it on each engine's layout,
    ``suggest`` on the actor's for the ref and the critic it places there."""
    tokens, length = shape.tokens, shape.length
    ts = settings or TrainingSettings()
    args = (backend, model, parallel, hardware)
    # one forward over the step's data (a ref's or a teacher's, the actor's compute_logp, the
    # critic's compute_values): a forward pass over it (settings_step without an optimizer)
    whole = replace(ts, optimizer=None, tokens_per_micro_batch=ts.forward_tokens)
    forward = settings_step(*args, whole, tokens=tokens, sequence_length=length, key=key)
    if ts.optimizer is None:
        seconds = forward.seconds
        what = f"forward pass over {tokens:,} tokens"
        return EnginePace(key, seconds, tokens / seconds, what, forward)
    # ppo_update runs train_batch once per minibatch (speed_training.settings_step)
    count = shape.minibatches_of(key)
    step = settings_step(
        *args, ts, tokens=tokens, sequence_length=length, optimizer_steps=count, key=key
    )
    seconds = step.seconds
    what = (
        f"one optimizer step over {tokens:,} tokens"
        if count == 1
        else f"{count} optimizer steps (ppo_n_minibatches) over {tokens:,} tokens"
    )
    extra = _forward_before_update(key, shape, forward, tokens)
    if extra is not None:
        step = replace(step, terms=(*step.terms, extra))
        seconds += extra.seconds
        what += (
            " + one forward to recompute the log-probs"
            if key == "actor"
            else " + one forward for the values"
        )
    return EnginePace(key, seconds, tokens / seconds, what, step)


def _forward_before_update(
    key: str, shape: StepShape, forward: StepEstimate, tokens: int
) -> StepTerm | None:
    """The forward a trainer runs over the whole step before its ``ppo_update``: the
    actor's ``compute_logp`` when the reference's should_compute_prox_logp says so
    (``shape.recompute_logprob``), the critic's ``compute_values`` every step
    (areal/trainer/rl_trainer.py l.723 and l.784-793 at cbff54d6); None otherwise."""
    third = f"a forward pass of {forward.seconds:.4g} s, host time included"
    if key == "actor" and shape.recompute_logprob:
        return StepTerm(
            "log-prob recomputation",
            forward.seconds,
            f"the actor's compute_logp (recompute_logprob, or use_decoupled_loss): one "
            f"forward over the step's {tokens:,} tokens ({third})",
        )
    if key == "critic":
        return StepTerm(
            "value forward",
            forward.seconds,
            f"the critic's compute_values: one forward over the step's {tokens:,} tokens ({third})",
        )
    return None
