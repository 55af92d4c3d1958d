"""One RL step as a timeline: the one model the plan's pace, ``layouts --rank``,
``suggest`` and ``calibrate`` share, so that they cannot disagree.

- generation, per rollout instance (:func:`areal_alloc.estimate.speed.generation`: the
  prefill at compute, then decode steps at max(HBM reads, GEMM compute) plus the
  tensor-parallel all-reduces), at the decode batch :func:`decode_batch` (the sequences
  in flight on the instance: never a fixed cap), over the mean generation length; a
  synchronous step also waits for its longest sequence, so ``gconfig.max_new_tokens``
  decode steps are its floor (:func:`rollout`);
- the training side (summed by the caller, engine by engine);
- the weight update to the rollout (:func:`weight_update`);
- the mode read from the config (:func:`mode_of`) and the step in that mode
  (:func:`step_seconds`): asynchronous (η = ``rollout.max_head_offpolicyness`` > 0:
  the slower side), synchronous (η = 0: the sum) or colocated (time-shared: the sum
  plus the offload and onload of the weights, :func:`switch`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from areal_alloc.architecture import Architecture
from areal_alloc.errors import AllocationValidationError
from areal_alloc.estimate.speed import StepEstimate, StepTerm, decode_step, generation
from areal_alloc.estimate.system import Hardware
from areal_alloc.strategy import ParallelStrategy

__all__ = [
    "ASYNCHRONOUS",
    "COLOCATED",
    "MODES",
    "PCIE_GBPS",
    "SYNCHRONOUS",
    "Generation",
    "decode_batch",
    "mode_of",
    "rollout",
    "step_seconds",
    "switch",
    "weight_update",
]

ASYNCHRONOUS, SYNCHRONOUS, COLOCATED = "asynchronous", "synchronous", "colocated"
MODES = (ASYNCHRONOUS, SYNCHRONOUS, COLOCATED)
#: InferenceEngineConfig.max_head_offpolicyness default 0 (synchronous) and
#: PPOActorConfig.recompute_logprob default False (areal-project/AReaL
#: areal/api/cli_args.py lines 2502 and 1804, commit cbff54d645d2cd8ee1f1c358a82f3f473588433d)
DEFAULT_OFFPOLICYNESS = 0
DEFAULT_RECOMPUTE_LOGPROB = False
#: Host ↔ device copies of an offload / onload: PCIe 4.0 x16, 32 GB/s per direction
#: (PCI-SIG PCIe 4.0 base specification: 16 GT/s × 16 lanes, 128b/130b), the link of
#: an H100/A100 SXM node's GPUs to their host.
PCIE_GBPS = 32.0
#: weight_update_mode=disk: the actor saves a HuggingFace checkpoint and the rollout
#: loads it (areal/engine/fsdp_engine.py _update_weights_from_disk, AReaL cbff54d6):
#: the bytes are written and read once over a shared file system assumed at 2 GB/s
#: (said in the term's formula).
DISK_GBPS = 2.0


def decode_batch(
    sequences: int, instances: int, kv_tokens: int | None, context: int, max_concurrent: int | None
) -> int:
    """The sequences in flight on one instance: min(its share of the step's sequences,
    what its KV cache holds at the mean ``context``, its share of
    ``rollout.max_concurrent_rollouts``), at least 1."""
    instances = max(1, instances)
    batch = math.ceil(sequences / instances)
    if kv_tokens is not None and context > 0:
        batch = min(batch, kv_tokens // context)
    if max_concurrent is not None:
        batch = min(batch, math.ceil(max_concurrent / instances))
    return max(1, batch)


@dataclass(frozen=True, slots=True)
class Generation:
    """A rollout's generation in one RL step."""

    seconds: float  # the step's generation (the floor included when synchronous)
    throughput_seconds: float  # the waves at the mean generation length
    floor_seconds: float  # max_new_tokens decode steps of the longest sequence
    batch: int
    waves: int
    instances: int
    estimate: StepEstimate  # one wave of one instance
    what: str

    @property
    def terms(self) -> tuple[StepTerm, ...]:
        floor = self.floor_seconds
        return (
            StepTerm(
                "generation (mean length)",
                self.throughput_seconds,
                f"{self.waves} wave(s) × {self.estimate.seconds:.4g} s per wave of {self.batch} "
                f"sequences on each of {self.instances} instances",
                hidden=floor > self.throughput_seconds and self.seconds == floor,
            ),
            StepTerm(
                "longest sequence (floor)",
                floor,
                "gconfig.max_new_tokens decode steps of one sequence",
                hidden=self.seconds != floor or floor <= self.throughput_seconds,
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
    max_concurrent: int | None = None,
    synchronous: bool = True,
) -> Generation:
    """The rollout's generation of one step's ``sequences`` over ``instances``."""
    mean = max_new_tokens if mean_gen_len is None else min(mean_gen_len, max_new_tokens)
    if mean < 1:
        raise AllocationValidationError(
            f"mean generation length {mean}: must be ≥ 1 (--mean-gen-len, mean_gen_len)"
        )
    context = prompt + mean // 2
    batch = decode_batch(sequences, instances, kv_tokens, context, max_concurrent)
    waves = math.ceil(math.ceil(sequences / max(1, instances)) / batch)
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
    seconds = max(throughput, floor) if synchronous else throughput
    what = (
        f"{waves} wave(s) of {batch} sequences (min of {math.ceil(sequences / max(1, instances))}"
        f" per instance, the KV cache at mean context {context:,}"
        + ("" if max_concurrent is None else f", max_concurrent_rollouts {max_concurrent:,}")
        + f") × {mean:,} tokens on each of {instances} instances"
        + (f"; floor {max_new_tokens:,} decode steps = {floor:.4g} s" if synchronous else "")
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
        seconds = 2 * size / (DISK_GBPS * 1e9)
        return StepTerm(
            "weight update (disk)",
            seconds,
            f"2 × {gib:.2f} GiB written and read at an assumed {DISK_GBPS:g} GB/s",
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


def switch(arch: Architecture, hardware: Hardware, gpus: int) -> StepTerm:
    """A colocated step's offload of one side's weights and onload of the other's over
    PCIe (:data:`PCIE_GBPS`), each GPU moving its share, twice per step."""
    size = arch.parameters.total * 2 / max(1, gpus)
    seconds = 2 * 2 * size / (PCIE_GBPS * 1e9)
    return StepTerm(
        "offload/onload",
        seconds,
        f"2 switches × (offload + onload) × {size / 2**30:.2f} GiB per GPU / PCIe "
        f"{PCIE_GBPS:g} GB/s",
    )


def mode_of(offpolicyness: int | None, colocated: bool) -> str:
    """The step's mode: colocated when the rollout shares the actor's GPUs, else
    asynchronous when ``rollout.max_head_offpolicyness`` > 0, else synchronous."""
    if colocated:
        return COLOCATED
    eta = DEFAULT_OFFPOLICYNESS if offpolicyness is None else offpolicyness
    return ASYNCHRONOUS if eta > 0 else SYNCHRONOUS


def step_seconds(mode: str, generate: float, train: float, update: float, shift: float) -> float:
    """One step in ``mode``: the weight update is on the step's path in every mode."""
    if mode == ASYNCHRONOUS:
        return max(generate, train) + update
    if mode == COLOCATED:
        return generate + train + update + shift
    return generate + train + update
