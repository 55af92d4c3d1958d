"""Every choice the estimates make by backend, in one table: how a training engine shards
its states and which model code its layers run, how an inference server splits its layers
and bounds its requests. A backend without a row has no memory or speed model: the
estimates refuse it (:func:`training_model`, :func:`server_model`) with one line that names
this table, instead of borrowing another backend's rules.

Adding a backend (docs/architecture.md, "A backend"): its row of ``vocab.BACKEND_DIMS``
(and ``TRAINING_BACKENDS`` or ``INFERENCE_BACKENDS``) makes it parse; its row here makes it
estimated.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from areal_alloc.errors import AllocationValidationError

__all__ = [
    "SERVERS",
    "TRAINING",
    "NoEstimateModel",
    "ServerModel",
    "TrainingModel",
    "server_model",
    "training_model",
]


class NoEstimateModel(AllocationValidationError):
    """A backend that parses but has no row in the estimates' table."""


@dataclass(frozen=True, slots=True)
class TrainingModel:
    """How the estimates treat one training backend's engine (the reference's engines at
    areal-project/AReaL@cbff54d645d2cd8ee1f1c358a82f3f473588433d)."""

    name: str
    #: how weights, gradients and optimizer states are kept and sharded
    #: (``memory_sharding``): "megatron" (bf16 weights, float32 gradient buffers and main
    #: params built with the model, the distributed optimizer), "fsdp" (FSDP2 over d·c of
    #: the whole model, experts too), "archon" (pipeline, tensor and expert splits, then
    #: FSDP2 over d·c)
    sharding: Literal["megatron", "fsdp", "archon"]
    #: the model code a layer's activations are counted for (``memory_training``):
    #: "hugging_face" (``activations.hf_activation_bytes_per_token``; the reference's FSDP
    #: engine builds AutoModelForCausalLM), "fused" (Megatron's or torchtitan's fused
    #: layers: ``activations.activation_bytes_per_token``)
    layers: Literal["hugging_face", "fused"]
    #: FSDP2 (``fully_shard``) under torch's optimizer: the gradients are set to None
    #: before a step and the root's are reduce-scattered when the backward ends
    #: (``memory_training._backward_end_phase``); tensor parallelism by DTensor, whose
    #: linears save their gathered inputs (``activations``' ``gathered_inputs``)
    fsdp2: bool
    #: selective recomputation by Megatron's ``recompute_modules``
    recompute_modules: bool
    #: LoRA adapters as megatron-bridge adapts the fused qkv and gate-up projections
    #: (else peft's, one projection each); None: the engine ignores ``use_lora``
    lora: Literal["megatron", "peft"] | None
    #: the reference's FSDP engine's own options: ``fsdp.per_layer_optim_step``, the MLPs
    #: it keeps out of tensor parallelism (``execution.fsdp_keeps_mlp_whole``), the whole
    #: model loaded before sharding without ``fsdp.memory_efficient_load``, FSDP2's
    #: prefetch overlapping its collectives with compute, FlashAttention-2's efficiency on
    #: Hopper for the Hugging Face attention
    fsdp_engine: bool
    #: host time measured per decoder layer (``speed_host``)
    host_measured: bool
    #: how the layers are split over pipeline stages (``pipeline_split``): the reference's
    #: Megatron rule, archon's own, or none (no pipeline)
    pipeline: Literal["megatron", "archon"] | None


@dataclass(frozen=True, slots=True)
class ServerModel:
    """How the estimates treat one inference server (the versions the reference pins)."""

    name: str
    #: the config key of the longest context a server takes
    context_key: str
    #: a pipeline's uneven layers: vLLM gives the extra layers to the stages before the
    #: last (vllm/distributed/utils.py get_pp_indices), SGLang to the first
    extra_layers_before_last: bool
    #: the KV pool is what a profiled forward leaves (vLLM's ``gpu_memory_utilization``
    #: over the profile run), else a fraction after a reserve (SGLang)
    profiled: bool
    #: the request bound's rule (``execution.InferenceSettings.per_instance``)
    requests: Literal["vllm", "sglang"]
    #: asleep for a weight update, it keeps its weights in host memory (vLLM's sleep
    #: level 1, the reference's ``vllm_sleep`` ``level=1``; ``estimate.host``)
    sleeps_to_host: bool


#: The training backends the estimates model (``vocab.TRAINING_BACKENDS``).
TRAINING: dict[str, TrainingModel] = {
    "fsdp": TrainingModel(
        "fsdp",
        sharding="fsdp",
        layers="hugging_face",
        fsdp2=True,
        recompute_modules=False,
        lora="peft",
        fsdp_engine=True,
        host_measured=True,
        pipeline=None,
    ),
    "megatron": TrainingModel(
        "megatron",
        sharding="megatron",
        layers="fused",
        fsdp2=False,
        recompute_modules=True,
        lora="megatron",
        fsdp_engine=False,
        host_measured=False,
        pipeline="megatron",
    ),
    "archon": TrainingModel(
        "archon",
        sharding="archon",
        layers="fused",
        fsdp2=True,
        recompute_modules=False,
        # areal/experimental/engine/: only fsdp_engine.py and megatron_engine.py apply use_lora
        lora=None,
        fsdp_engine=False,
        host_measured=True,
        pipeline="archon",
    ),
}

#: The inference servers the estimates model (``vocab.INFERENCE_BACKENDS``).
SERVERS: dict[str, ServerModel] = {
    "sglang": ServerModel(
        "sglang",
        context_key="sglang.context_length",
        extra_layers_before_last=False,
        profiled=False,
        requests="sglang",
        sleeps_to_host=False,
    ),
    "vllm": ServerModel(
        "vllm",
        context_key="vllm.max_model_len",
        extra_layers_before_last=True,
        profiled=True,
        requests="vllm",
        sleeps_to_host=True,
    ),
}

_WHERE = 'areal_alloc/estimate/backends.py (docs/architecture.md, "A backend")'


def training_model(backend: str) -> TrainingModel:
    """``backend``'s row of :data:`TRAINING`; a backend without one is refused."""
    found = TRAINING.get(backend)
    if found is None:
        raise NoEstimateModel(
            f"backend {backend!r} has no memory or speed model: add its row to TRAINING in {_WHERE}"
        )
    return found


def server_model(backend: str) -> ServerModel:
    """``backend``'s row of :data:`SERVERS`; a backend without one is refused."""
    found = SERVERS.get(backend)
    if found is None:
        raise NoEstimateModel(
            f"backend {backend!r} has no memory or speed model: add its row to SERVERS in {_WHERE}"
        )
    return found
