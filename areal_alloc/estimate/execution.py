"""The execution: the shape of one RL step as the experiment's one reading gives it.

Read from the frozen :class:`areal_alloc.experiment.records.Experiment` (its ``run``, the
keys the reference writes, areal/api/cli_args.py, with its defaults) and the resolved
settings (``areal_alloc.settings``: the mean generation length); every default comes
from ``areal_alloc.defaults`` or is cited here:

- sequences per step = ``train_dataset.batch_size`` × ``gconfig.n_samples``;
- each generates up to ``gconfig.max_new_tokens`` after a prompt of
  ``train_dataset.max_length`` (unset: ``defaults.PROMPT_TOKENS``, said);
- the mean generation length for throughput (``--mean-gen-len``, the hook's
  ``mean_gen_len``; else the maximum, said);
- ``actor.recompute_logprob``, ``rollout.max_head_offpolicyness``,
  ``rollout.max_concurrent_rollouts`` and whether the rollout shares the actor's GPUs;
- the sequences the rollout keeps in flight (:func:`sequences_in_flight`), the reference's
  staleness manager's bound counted in rollouts of ``gconfig.n_samples`` sequences each.

The engines' settings (:func:`training_settings`, :func:`inference_settings`), from
the keys each engine writes:

- training: ``dtype``, ``optimizer.type``, ``optimizer_dtype``,
  ``gradient_checkpointing`` with ``megatron.recompute_granularity`` and
  ``megatron.recompute_modules``,
  ``megatron.ddp.use_distributed_optimizer``,
  ``megatron.use_precision_aware_optimizer``,
  ``megatron.virtual_pipeline_parallel_size``, ``mb_spec.max_tokens_per_mb``
  (unset: the whole local batch, ``mb_spec.n_mbs`` micro-batches, from
  ``train_dataset`` and ``gconfig``), ``fsdp.offload_params``,
  ``fsdp.memory_efficient_load``, ``use_lora`` / ``lora_rank`` /
  ``target_modules``, ``is_critic``, ``megatron.moe_token_dispatcher_type`` with
  ``megatron.moe_enable_deepep`` and ``megatron.bridge_type`` (:func:`token_dispatcher`),
  and ``offload`` with the reference's own offloading of colocated engines
  (``engines._offloaded_while``); the defaults are ``areal_alloc.defaults``;
- inference: ``sglang.mem_fraction_static`` / ``vllm.gpu_memory_utilization``,
  ``sglang.context_length`` / ``vllm.max_model_len``, ``kv_cache_dtype``,
  ``dtype``, ``rollout.max_concurrent_rollouts``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from areal_alloc import defaults
from areal_alloc.errors import AllocationError, AllocationValidationError
from areal_alloc.estimate.backends import TRAINING, server_model
from areal_alloc.experiment.records import (
    Engine,
    Experiment,
    InferenceConfig,
    RunConfig,
    StartupConfig,
    TrainConfig,
    minibatches_of,
)
from areal_alloc.experiment.sections.archon import archon_stages_per_rank
from areal_alloc.experiment.sections.megatron import (
    DEFAULT_RECOMPUTE_MODULES,
    RECOMPUTE_MODULES,
    recompute_module_names,
)
from areal_alloc.limits import MAX_COUNT
from areal_alloc.model_shape import engine_micro_batches, packed_groups
from areal_alloc.numbers import read_float, read_int
from areal_alloc.settings import Resolved

__all__ = [
    "DEFAULT_OFFPOLICYNESS",
    "DEFAULT_RECOMPUTE_LOGPROB",
    "DEFAULT_RECOMPUTE_MODULES",
    "FSDP_WHOLE_MLP_MODEL_TYPES",
    "GIB",
    "LOGITS",
    "LORA_TARGETS",
    "OPTIMIZERS",
    "RECOMPUTE",
    "RECOMPUTE_MODULES",
    "SERVER_DEFAULTS",
    "SGLANG_REQUEST_POOL",
    "TOKEN_DISPATCHERS",
    "TRAINING_RESERVE_BYTES",
    "VLLM_MAX_NUM_SEQS",
    "InferenceSettings",
    "ServerLimit",
    "StepShape",
    "TrainingSettings",
    "budget_shares",
    "forced_minibatches_note",
    "fsdp_keeps_mlp_whole",
    "inference_settings",
    "one_of",
    "sequences_in_flight",
    "server_limit",
    "step_shape",
    "token_dispatcher",
    "training_settings",
    "whole_local_batch_tokens",
]

#: InferenceEngineConfig.max_head_offpolicyness default 0 (synchronous) and
#: PPOActorConfig.recompute_logprob default False (areal-project/AReaL
#: areal/api/cli_args.py lines 2502 and 1804, commit cbff54d645d2cd8ee1f1c358a82f3f473588433d)
DEFAULT_OFFPOLICYNESS = 0
DEFAULT_RECOMPUTE_LOGPROB = False


# --- the engines' settings ------------------------------------------------------------


GIB = 1 << 30
#: What a training engine keeps back per GPU for the CUDA context, NCCL buffers and
#: fragmentation: a stated assumption, overridden by ``--memory-reserve-gib`` and
#: ``cluster.memory_reserve_gib``.
TRAINING_RESERVE_BYTES = 4 * GIB


#: The reference's vLLMConfig default ``max_num_seqs: int = 256``, which
#: ``vLLMConfig.build_args`` passes to the server as ``--max-num-seqs`` with every other
#: field (``get_py_cmd``) (areal/api/cli_args.py,
#: areal-project/AReaL@cbff54d645d2cd8ee1f1c358a82f3f473588433d)
VLLM_MAX_NUM_SEQS = 256


#: SGLang's own bound when ``max_running_requests`` is unset: min(KV tokens // 2, its request
#: pool of min(max(KV tokens / context_len × 512, 2,048), 4,096)) (the scheduler's
#: ``max_total_num_tokens // 2 if server_args.max_running_requests is None``, capped by
#: ``req_to_token_pool.size``, and the model runner's ``max_num_reqs``;
#: python/sglang/srt/managers/scheduler.py and model_executor/model_runner.py,
#: sgl-project/sglang@01cc04e2b5b01ce379698a3fee1bd17706e1d0ec)
SGLANG_REQUEST_POOL = (2048, 4096)


@dataclass(frozen=True, slots=True)
class ServerLimit:
    """A rollout server's own bound on the requests it runs at once (per instance), as the
    config writes it: vLLM's ``max_num_seqs`` (the reference passes ``--max-num-seqs``,
    256 by default: :data:`VLLM_MAX_NUM_SEQS`), SGLang's ``max_running_requests`` (unset:
    SGLang's own rule, :data:`SGLANG_REQUEST_POOL`, from the KV pool and
    ``sglang.context_length``)."""

    max_num_seqs: int | None = None
    max_running_requests: int | None = None
    context_length: int = defaults.CONTEXT_LENGTH

    def per_instance(self, backend: str, kv_tokens: int | None) -> tuple[int | None, str]:
        """The requests one instance of ``backend`` runs at once, and the rule that gave
        it (None: no bound beyond its KV cache)."""
        rule = server_model(backend).requests
        if rule == "vllm":
            if self.max_num_seqs is not None:
                return self.max_num_seqs, f"vllm.max_num_seqs {self.max_num_seqs:,}"
            return (
                VLLM_MAX_NUM_SEQS,
                f"vllm.max_num_seqs {VLLM_MAX_NUM_SEQS} (the reference's default)",
            )
        if kv_tokens is None:
            if self.max_running_requests is None:
                return None, ""
            return (
                self.max_running_requests,
                f"sglang.max_running_requests {self.max_running_requests:,}",
            )
        low, high = SGLANG_REQUEST_POOL
        pool = min(max(int(kv_tokens / max(1, self.context_length) * 512), low), high)
        if self.max_running_requests is not None:
            return (
                min(self.max_running_requests, pool, max(1, kv_tokens // 2)),
                f"sglang.max_running_requests {self.max_running_requests:,}",
            )
        limit = max(1, min(kv_tokens // 2, pool))
        return limit, f"SGLang's max_running_requests {limit:,} (KV pool // 2, request pool)"


#: the servers' own defaults (nothing written)
SERVER_DEFAULTS = ServerLimit()


def server_limit(engine: Engine | None) -> ServerLimit:
    """The rollout engine's :class:`ServerLimit` from its one reading."""
    read = engine.inference if engine is not None else None
    if read is None:
        return ServerLimit()
    return ServerLimit(read.max_num_seqs, read.max_running_requests, read.context_length)


#: none | selective (Korthikanti's: the attention scores) | full (each layer's input) |
#: op (torchtitan's and the archon engine's per-op selective checkpointing, see
#: :func:`areal_alloc.estimate.activations.op_sac_bytes_per_token`)
RECOMPUTE = ("none", "selective", "full", "op")

#: The model types whose MLPs the reference's FSDP engine leaves out of its tensor-parallel
#: plan: ``apply_non_moe_tp`` adds the MLP's all-gather, column- and row-parallel projections
#: only ``if not is_moe_model(model_config.model_type)`` (areal/engine/fsdp_utils/parallel.py
#: l.279-293), and ``is_moe_model`` is this list (``VALID_MOE_MODELS``,
#: areal/engine/core/model.py l.66-79, AReaL cbff54d645d2cd8ee1f1c358a82f3f473588433d). Their
#: MLP blocks (router, routed and shared experts, a dense layer's MLP) run whole on each
#: rank's sequence shard: sharded over d·c by FSDP, not split by t, and with no
#: tensor-parallel collective of their own.
FSDP_WHOLE_MLP_MODEL_TYPES = (
    "qwen3_moe",
    "qwen3_vl_moe",
    # the reference tests the wrapper's model_type; a vision-language config is read from its
    # text_config (model_shape.language_model), whose type is qwen3_vl_moe's text model
    "qwen3_vl_moe_text",
    "qwen3_5_moe",
    "qwen3_5_moe_text",
    "bailing_moe_v2",
    "bailing_moe_linear",
    "bailing_hybrid",
)


def fsdp_keeps_mlp_whole(backend: str, model_type: str) -> bool:
    """The reference's FSDP engine leaves this model's MLPs out of tensor parallelism
    (:data:`FSDP_WHOLE_MLP_MODEL_TYPES`)."""
    model = TRAINING.get(backend)
    return model is not None and model.fsdp_engine and model_type in FSDP_WHOLE_MLP_MODEL_TYPES


#: every ``optimizer.type`` some training engine builds (defaults.ENGINE_OPTIMIZERS, by engine)
OPTIMIZERS = tuple(dict.fromkeys(t for types in defaults.ENGINE_OPTIMIZERS.values() for t in types))


#: Bytes per element of the [tokens, vocab/t] logits at the loss's peak, by how the loss
#: holds them.
#:
#: ``areal``: the reference's own loss (areal-project/AReaL@
#: cbff54d645d2cd8ee1f1c358a82f3f473588433d, every citation here at that commit;
#: megatron-core at NVIDIA/Megatron-LM@core_v0.17.0, the version AReaL pins, pyproject.toml
#: l.162). The actor's loss calls
#: ``gather_logprobs_entropy``, compute_logp ``gather_logprobs``, both by chunks of
#: ``logprobs_chunk_size`` = 1,024 tokens (``_chunked_apply``, areal/utils/functional/
#: vocab_parallel.py l.42-61): without vocabulary parallelism on the torch.compile'd
#: ``log_softmax(logits.float())`` (l.24-39), whose forward saves only its input chunk, a
#: view of the logits (so they stay held); at t > 1 on ``_VocabParallelLogProbsEntropy``
#: (l.198-372), which saves each chunk's float32 softmax and whose backward writes a new
#: gradient chunk (l.356). Each chunk's gradient reaches the logits through
#: ``slice_backward``, which writes it into a new full-size zero tensor, added into the
#: logits' gradient ("full-size SliceBackward buffers", l.391-392): the gradient and one
#: such buffer are held at once. Counted at the peak (checked by replaying these code
#: paths on the CPU under torch's memory profiler, torch 2.13):
#:
#: Megatron: Float16Module returns the last stage's logits as float32 (``fp32_output=True``
#: by default, megatron/core/transformer/module.py l.457 and l.494-499; AReaL leaves it
#: unless its LM head is on, ``_float16_wrapper_fp32_output``, areal/engine/
#: megatron_engine.py l.165-177 and l.1189) and the forward step copies them into a new
#: unpadded tensor (``unpad_logits``, areal/utils/data.py l.1063-1076, run for every
#: micro-batch since ``pad_mb_list`` always aligns the sequences, megatron_engine.py
#: l.1307 and l.2735-2740; not when CP keeps the logits local in training, l.1158).
#: Training, 12 B: at t = 1 the float32 logits (4 B, held by the compiled loss's saved
#: chunks), their float32 gradient (4 B) and one chunk's slice buffer (4 B); at t > 1 the
#: logits are freed after the loss's forward (nothing saves them) and the chunks' float32
#: softmax (4 B, freed chunk by chunk) takes their place. The unpadding copy's backward
#: (``CopySlices``) holds as much: its incoming gradient, its full-size copy and the
#: padded logits' gradient (3 × 4 B), plus a clone and a zero tensor of one sequence's
#: rows (8 B × that sequence's tokens, not counted: how many sequences share a
#: micro-batch is not known here; replayed: 11.5-12.5 B a logit for one sequence, 14 B for 2
#: to 4 equal ones, 13 B for 8, 12 B for many).
#: The backward of Float16Module's cast then holds the float32 gradient and its bfloat16
#: copy (6 B). Forward only (compute_logp), 8 B: the float32 logits and their unpadded
#: copy (the cast before them: the bfloat16 logits and the float32 ones, 6 B). With
#: context parallelism compute_logp first gathers the c ranks' logits
#: (``gather_cp_output=True``, megatron_engine.py l.1153-1158 and l.1476;
#: ``postprocess_packed_seqs_context_parallel``, areal/engine/megatron_utils/
#: packed_context_parallel.py l.236-268): during the all-gather the c ranks' float32
#: logits in a list (4 B), the process group's flat receive buffer (ProcessGroupNCCL::
#: allgather copies out of a ``newLikeFlat`` tensor, pytorch/pytorch torch/csrc/
#: distributed/c10d/ProcessGroupNCCL.cpp; gloo's does the same) and the empty gathered
#: tensor (4 B each), all over the whole micro-batch's tokens (c × the rank's), with the
#: rank's own logits (4 B over its tokens): 12·c + 4 B a logit of the rank's tokens (the
#: reordering after it holds less: the list, the gathered tensor, one sequence's buffer;
#: then the unpadded copy, 8 B).
#:
#: FSDP and archon: the model's logits stay bfloat16 (FSDP2's ``MixedPrecisionPolicy``
#: without an output dtype, areal/engine/fsdp_utils/parallel.py l.384-388; the Hugging
#: Face head does not upcast) and stay bound through the backward (``logits`` in
#: ``forward_backward_batch``, areal/engine/fsdp_engine.py l.761-772; archon_runner.py
#: l.99-119). t = 1, 6 B: the bfloat16 logits, their bfloat16 gradient (the compiled
#: loss upcasts inside) and one chunk's slice buffer (2 B each). t > 1 (the head's
#: ``ColwiseParallel`` output sharded on the vocabulary, fsdp_utils/parallel.py l.307-311;
#: archon's ``loss_parallel``), 10 B: the bfloat16 logits (2 B), the chunks' float32
#: softmax (4 B), the bfloat16 gradient (each chunk's float32 gradient is cast back
#: before its slice, 2 B) and one chunk's slice buffer (2 B). Forward only, 2 B: the
#: bfloat16 logits, each chunk upcast in turn.
#:
#: ``float32``: a whole-vocabulary cross-entropy on ``logits.float()`` (torchtitan's
#: ``cross_entropy(pred.flatten(0, 1).float(), ...)``, train.py at pytorch/torchtitan@
#: 9dec370ad26b5f8e9a7333a0e36165018262644b; torchtune's ``output = self.output(h).float()``
#: in torchtune/modules/transformer.py TransformerDecoder.forward): at the start of the
#: backward the saved float32 log-softmax (4 B), the gradient ``nll_loss`` scatters into a
#: zero tensor (4 B) and ``log_softmax``'s gradient (4 B): 12 B.
#:
#: ``float32_logits``: the float32 logits alone, 4 B, as Megatron-LM's
#: theoretical_memory_usage.py counts the output layer (its anchors' figure).
#:
#: ``float32_compiled``: the same cross-entropy on ``pred.float()`` under torch.compile
#: (torchtitan compiles its loss with ``training.compile`` from
#: torchtitan/components/loss.py ``build_cross_entropy_loss``, pytorch/torchtitan@
#: e7c0cae934df78d6e9c2835f42ff1f757dc3fddc; at 9dec370a train.py still says "compiling
#: loss function causes CUDA errors, turning off for now"): inductor fuses the upcast,
#: log-softmax and nll, saves the bfloat16 logits (2 B) and writes their bfloat16 gradient
#: (2 B): 4 B.
#:
#: ``chunked_compiled``: torchtune's ``CEWithChunkedOutputLoss`` (torchtune/modules/loss/
#: ce_chunked_output_loss.py, pytorch/torchtune@bd2a0fc7c31430972728494fa01aaeeb0ebf1ba1):
#: the model returns its logits in 8 bfloat16 chunks (``chunked_output``, no ``.float()``)
#: and the compiled ``compute_cross_entropy`` upcasts one chunk at a time: the bfloat16
#: chunks (2 B) and one chunk's float32 upcast, gradient and bfloat16 gradient
#: ((4 + 4 + 2) / 8 B, rounded up): 3 B.
#:
#: The reference's own vocab-parallel LM head (``megatron.enable_chunked_logits: true``,
#: MegatronEngineConfig l.1017; the Megatron engine, actor and ref alike, swaps it in for
#: Megatron's output layer, areal/models/mcore/registry.py l.319-330; areal-project/AReaL@
#: cbff54d645d2cd8ee1f1c358a82f3f473588433d, the citations below at that commit). Its GEMM
#: writes float32 logits directly (``_LinearWithFp32Output.forward``,
#: areal/models/mcore/vocab_parallel_head.py l.245-255; ``enable_fp32_lm_head``'s float32
#: operands give a float32 matmul output too, l.149-155 and l.437-449) and Float16Module's
#: cast is bypassed (``_float16_wrapper_fp32_output``, areal/engine/megatron_engine.py
#: l.165-177). Assumed: a packed (THD) text model, and Triton available
#: (``reusable_vocab_parallel_logits``, areal/utils/functional/vocab_parallel_kernels.py
#: l.250-272; without it the differentiable path below runs):
#:
#: ``areal_lm_head`` (``entropy_requires_grad`` false, its default, l.1025): the loss
#: reuses the float32 logits' storage (``_reuse_chunked_logits_storage``,
#: megatron_engine.py l.180-186 and l.2858-2861): its forward overwrites them with the
#: softmax and its backward with the gradient, in place and chunk by chunk inside one
#: autograd node (``_InplaceVocabParallelLogProbsEntropy``, areal/utils/functional/
#: vocab_parallel.py l.386-521), and the head's backward packs that float32 gradient into
#: the first half of the same storage as bfloat16 (``_pack_fp32_to_half_inplace``,
#: vocab_parallel_head.py l.25-65 and l.267-281): 4 B through forward and backward, where
#: context parallelism keeps the logits local (megatron_engine.py l.1158). Without it the
#: forward step's ``unpad_logits`` copy runs as without the head (``areal`` above): the
#: loss reuses that copy, but the copy's backward holds its in-place gradient, a
#: full-size copy of it and the padded logits' gradient (3 × 4 B), and the head's output
#: is gone by then (only a weak reference, l.256), so its backward casts the gradient
#: instead of packing it in place (l.264-283): 12 B.
#: Forward only (compute_logp: ``gather_logprobs`` on the same logits, megatron_engine.py
#: l.2963-2972): the float32 logits straight from the GEMM and their unpadded copy, as
#: without the head, 8 B (12 B over the gathered tokens with CP; ``areal`` above).
#:
#: ``areal_lm_head_differentiable`` (``entropy_requires_grad`` true): no reuse; the loss
#: runs the same ``gather_logprobs_entropy`` path on float32 logits as without the head
#: (vocab_parallel.py l.643-651) and the head's backward casts the gradient to bfloat16 as
#: the cast it replaces did (vocab_parallel_head.py l.264-265, l.283): the ``areal`` term,
#: forward only too.
#:
#: ``areal_lm_head_chunks`` (``lm_head_loss_chunk_size`` N > 0, l.1034, which needs the
#: two settings above, l.1107-1122): the model returns its hidden states and the head
#: computes float32 logits N tokens at a time, forward and backward (recomputed), keeping
#: only per-token values (``_ChunkedVocabParallelLMHead``, vocab_parallel_head.py
#: l.560-938, run in the forward step for train and compute_logp alike,
#: megatron_engine.py l.1164-1236). Each chunk's buffer is a new float32 tensor
#: (``_linear_chunk_fp32``, l.538-557) bound to ``logits`` only after it is made, so the
#: previous chunk's is still held (l.647, l.811): min(tokens, 2·N) rows × 4 B
#: (:data:`TrainingSettings.lm_head_chunk`).
LOGITS = (
    "areal",
    "float32",
    "float32_logits",
    "float32_compiled",
    "chunked_compiled",
    "areal_lm_head",
    "areal_lm_head_differentiable",
    "areal_lm_head_chunks",
)

#: How a Megatron engine's MoE layers move tokens to their experts (``TrainingSettings.
#: token_dispatcher``): megatron-core's alltoall or allgather dispatcher, or its flex
#: dispatcher on DeepEP (:func:`token_dispatcher` maps the config's
#: ``megatron.moe_token_dispatcher_type``, one of ``sections.megatron.DISPATCHER_TYPES``, to these).
TOKEN_DISPATCHERS = ("alltoall", "allgather", "deepep")


def one_of(value: object, choices: tuple[str, ...], key: str) -> str:
    """``value`` if it is one of ``choices``, else one line naming ``key``: the one check
    of a setting's name, for the settings and for the estimates' own entry points."""
    if value not in choices:
        raise AllocationValidationError(f"{key}={value!r}: must be one of {', '.join(choices)}")
    return str(value)


@dataclass(frozen=True, slots=True)
class TrainingSettings:
    """The run settings that change a training engine's memory (the reference's defaults)."""

    dtype: str = defaults.DTYPE  # compute dtype (actor.dtype)
    optimizer: str | None = "adam"  # None: no optimizer, forward only (ref, a teacher)
    optimizer_dtype: str = defaults.OPTIMIZER_DTYPE  # FSDP parameter storage and Adam states
    distributed_optimizer: bool = True  # Megatron
    precision_aware_optimizer: bool = False  # Megatron: bf16 Adam states
    recompute: str = defaults.RECOMPUTE  # one of RECOMPUTE
    tokens_per_micro_batch: int = defaults.CONTEXT_LENGTH
    micro_batches: int | None = None  # None: enough to fill the pipeline
    #: ``mb_spec.n_mbs``: the micro-batches the engine packs at least (MicroBatchSpec.n_mbs,
    #: default 1); what each of its minibatches needs sequences for
    n_mbs: int = 1
    #: the micro-batch of the forwards over the whole step (compute_logp, compute_values)
    #: when it differs from the update's: with ``mb_spec.max_tokens_per_mb`` unset, the
    #: update packs each of ``ppo_n_minibatches`` minibatches by count, the forwards the
    #: whole share (:func:`whole_local_batch_tokens`); None: ``tokens_per_micro_batch``
    forward_tokens_per_micro_batch: int | None = None
    #: with a tokens budget: a rank's share of one update minibatch and of the whole step
    #: (at the longest sequence), which the engine balances over at least its micro-batch
    #: count (:meth:`packed`); None: not known (the budget is the micro-batch)
    share_tokens: int | None = None
    forward_share_tokens: int | None = None
    #: the longest sequence the shares are counted at: a micro-batch holds whole ones
    sequence_tokens: int | None = None
    #: each micro-batch padded to the tokens budget (``TrainConfig.pad_to_maximum``): a
    #: budget is then the micro-batch, whatever the share (areal/utils/data.py pad_mb_list
    #: l.1011-1022 at cbff54d6; without a budget the reference warns and pads nothing)
    pad_to_maximum: bool = False
    virtual_pipeline: int = 1
    #: how the layers are split over the pipeline stages (pipeline_split.SPLITS): the
    #: reference's own rule ("areal"), megatron-core's even one for its megatron-bridge
    #: (training_settings: _layer_split)
    layer_split: str = "areal"
    offload_params: bool = False  # FSDP CPU offload of parameters and optimizer
    #: FSDP ``fsdp.per_layer_optim_step``: AdamW's states live on the CPU, and the step streams
    #: them to the GPU one FSDP module (a layer, the embedding, the rest) at a time,
    #: ``optim_prefetch_layers`` ahead (``PerLayerOptimWrapper``, areal/engine/fsdp_utils/
    #: optimizer.py l.323-470 at cbff54d6)
    per_layer_optim_step: bool = False
    optim_prefetch_layers: int = 1
    flash_attention: bool = True  # never stores the a·s² attention scores
    dropout: bool = False  # dropout masks (the reference's LLMs train without dropout)
    #: None: the reference's rule, on when t > 1. It has no config key for it: the
    #: Megatron engine builds ``use_sequence_parallel=parallel_strategy.tensor_parallel_size
    #: > 1`` (areal/engine/megatron_engine.py _make_parallel_strategy) and megatron-bridge's
    #: provider ``sequence_parallel = mpu.get_tensor_model_parallel_world_size() > 1``
    #: (areal/models/mcore/registry.py; areal-project/AReaL@cbff54d645d2cd8ee1f1c358a82f3f47
    #: 3588433d, areal/api/cli_args.py has no sequence_parallel key). A run outside the
    #: reference (Megatron-LM without --sequence-parallel) sets it False.
    sequence_parallel: bool | None = None
    reserve_bytes: int = TRAINING_RESERVE_BYTES
    #: LoRA rank (use_lora: true); None: every parameter trains
    lora_rank: int | None = None
    #: target_modules; empty: all-linear (the reference's default)
    lora_targets: tuple[str, ...] = ()
    #: a critic: a value head of one output instead of the vocabulary (is_critic)
    critic: bool = False
    #: FSDP fsdp.memory_efficient_load: false makes every rank build the whole model
    memory_efficient_load: bool = False
    #: how the loss holds the vocabulary logits (:data:`LOGITS`): the reference's
    #: engines, a whole-vocabulary float32 cross-entropy, or the float32 logits alone
    logits: str = "areal"
    #: ``megatron.lm_head_loss_chunk_size``: the tokens of each chunk of the
    #: ``areal_lm_head_chunks`` logits (needed by that mode, None otherwise)
    lm_head_chunk: int | None = None
    #: the optimizer steps each parameter inside the backward as its gradient is ready and
    #: frees it, so one parameter's gradient is held at a time (torchtune's
    #: ``optimizer_in_bwd``: "By completely removing the buffer of gradients",
    #: docs/source/tutorials/memory_optimizations.rst, pytorch/torchtune@bd2a0fc7)
    optimizer_in_backward: bool = False
    #: the activation checkpoints wait on the CPU for the backward (torchtune's
    #: ``enable_activation_offloading``: with checkpointing "only the checkpointed tensors
    #: will be offloaded", the same page)
    activation_offload: bool = False
    #: the model code the engine runs, which decides what a layer keeps for its backward:
    #: "engine" (the backend's own: Hugging Face's modeling code for fsdp, as the
    #: reference's FSDP engine builds it, activations.hf_activation_bytes_per_token;
    #: Megatron's and torchtitan's fused layers for megatron and archon) or "fused" (a
    #: framework's own fused layers under FSDP: torchtitan's, torchtune's)
    modeling: str = "engine"
    #: the layers and the root module wrapped in FSDP2's ``fully_shard`` (the reference's
    #: fsdp and archon engines, torchtitan); False: a single-device recipe (torchtune's),
    #: which keeps no unsharded gradients apart (memory_training._backward_end_phase)
    fsdp2: bool = True
    #: a forward pass before training (the actor's ``recompute_logprob``): a forward
    #: phase beside the backward one (a ref, a teacher and a critic always have one)
    recompute_logprob: bool = False
    #: the MoE token dispatcher (:data:`TOKEN_DISPATCHERS`): the reference's default is
    #: alltoall (MegatronEngineConfig.moe_token_dispatcher_type = "alltoall",
    #: areal/api/cli_args.py l.981 at cbff54d6, ``defaults.TOKEN_DISPATCHER``); "deepep" is
    #: the flex dispatcher (on DeepEP); megatron-bridge always dispatches with alltoall
    token_dispatcher: str = defaults.TOKEN_DISPATCHER
    #: what ``recompute="selective"`` recomputes (:data:`RECOMPUTE_MODULES`, Megatron's
    #: ``megatron.recompute_modules``; megatron-core's default: the core attention)
    recompute_modules: tuple[str, ...] = DEFAULT_RECOMPUTE_MODULES

    def __post_init__(self) -> None:
        # the one rule (sections.megatron.recompute_module_names): a text is refused whole
        modules = recompute_module_names(self.recompute_modules, "recompute_modules")
        if modules != self.recompute_modules:  # a list, or a name twice: kept as the tuple
            object.__setattr__(self, "recompute_modules", modules)
        one_of(self.token_dispatcher, TOKEN_DISPATCHERS, "token_dispatcher")
        one_of(self.recompute, RECOMPUTE, "recompute")
        if self.logits not in LOGITS:
            raise AllocationValidationError(
                f"logits={self.logits!r}: must be one of {', '.join(LOGITS)}"
            )
        if (self.logits == "areal_lm_head_chunks") != (self.lm_head_chunk is not None):
            raise AllocationValidationError(
                f"logits={self.logits!r} with lm_head_chunk={self.lm_head_chunk!r}: the "
                f"chunk size (megatron.lm_head_loss_chunk_size) goes with "
                f"logits='areal_lm_head_chunks' and only with it"
            )
        if self.optimizer is not None and self.optimizer not in OPTIMIZERS:
            raise AllocationValidationError(
                f"optimizer.type={self.optimizer!r}: must be one of {', '.join(OPTIMIZERS)}"
            )
        for name in (
            "tokens_per_micro_batch",
            "virtual_pipeline",
            "lora_rank",
            "forward_tokens_per_micro_batch",
            "n_mbs",
            "share_tokens",
            "forward_share_tokens",
            "sequence_tokens",
            "lm_head_chunk",
        ):
            value = getattr(self, name)
            if value is None and name != "tokens_per_micro_batch" and name != "n_mbs":
                continue
            number = read_int(value, name, minimum=1, maximum=MAX_COUNT)  # the one reader
            if number is not value:  # "8192" given directly: kept as the number it names
                object.__setattr__(self, name, number)
        prefetch = read_int(
            self.optim_prefetch_layers, "optim_prefetch_layers", minimum=0, maximum=MAX_COUNT
        )
        if prefetch is not self.optim_prefetch_layers:
            object.__setattr__(self, "optim_prefetch_layers", prefetch)

    @property
    def forward_tokens(self) -> int:
        """Tokens of a micro-batch of a forward over the whole step."""
        found = self.forward_tokens_per_micro_batch
        return self.tokens_per_micro_batch if found is None else found

    def packed(self, backend: str, pp: int, forward: bool = False) -> int:
        """The tokens of a micro-batch as ``backend`` at ``pp`` packs it (``forward``: a
        forward's over the whole step, else an update's). By count (``micro_batches``:
        ``mb_spec.max_tokens_per_mb`` unset), the share over the micro-batches the engine
        runs; by the tokens budget, the budget, or the share over them where that is
        smaller (``share_tokens``): the engine runs at least ``mb_spec.n_mbs``, at least 2·p
        for the Megatron engine and p × stages for archon, a multiple of p
        (``model_shape.engine_micro_batches``), and balances the share over them."""
        tokens = self.forward_tokens if forward else self.tokens_per_micro_batch
        count = self.micro_batches
        if count is not None:
            runs = engine_micro_batches(backend, pp, self.virtual_pipeline, count) or count
            return max(1, math.ceil(tokens * count / runs))
        share = self.forward_share_tokens if forward else self.share_tokens
        if share is None or self.pad_to_maximum:
            return tokens
        # over the micro-batches the engine runs at least: past them the budget binds
        runs = engine_micro_batches(backend, pp, self.virtual_pipeline, self.n_mbs) or self.n_mbs
        length = self.sequence_tokens or 1  # whole sequences to a micro-batch
        per = math.ceil(math.ceil(share / length) / runs) * length
        return max(1, min(tokens, per))

    def groups(self, backend: str, pp: int, forward: bool = False) -> int | None:
        """The micro-batches a rank's share is packed into, where known: by count, the
        engine's count (``model_shape.engine_micro_batches``); by a budget with the share
        known, at least that and as many as the budget needs, whole sequences a
        micro-batch (seqpack's ffd_allocate); None otherwise."""
        count = self.micro_batches
        if count is not None:
            return engine_micro_batches(backend, pp, self.virtual_pipeline, count) or count
        share = self.forward_share_tokens if forward else self.share_tokens
        if share is None:
            return None
        length = self.sequence_tokens or 1
        return packed_groups(
            backend,
            pp,
            self.virtual_pipeline,
            self.n_mbs,
            math.ceil(share / length),
            self.tokens_per_micro_batch // length,
        )


@dataclass(frozen=True, slots=True)
class InferenceSettings:
    """The settings that decide an inference server's KV cache (the reference's defaults)."""

    dtype: str = defaults.DTYPE
    kv_cache_dtype: str = "auto"  # auto: the model dtype
    # sglang.mem_fraction_static / vllm.gpu_memory_utilization
    memory_fraction: float = defaults.MEMORY_FRACTION
    context_length: int = defaults.CONTEXT_LENGTH  # sglang.context_length / vllm.max_model_len
    concurrency: int | None = None  # sequences in flight per instance
    #: memory outside the weights and the KV cache; None: the engine's own rule
    #: (:func:`areal_alloc.estimate.memory_inference.inference_memory`), a number:
    #: --memory-reserve-gib in its place
    reserve_bytes: int | None = None
    #: vllm.max_num_seqs: the requests vLLM's profile run samples at once
    max_num_seqs: int = VLLM_MAX_NUM_SEQS
    #: the tokens of vLLM's profile forward (``max_num_batched_tokens``, which the reference's
    #: vLLMConfig cannot set: a published run's own value); None: vLLM's
    #: server default, 8,192 on a GPU of ≥ 70 GiB other than an A100, else 2,048
    #: (vllm/engine/arg_utils.py ``default_max_num_batched_tokens``, OPENAI_API_SERVER,
    #: vllm-project/vllm@99d7eb5d6a512cfcc5a2b104f24ebf2d6cda772b)
    max_num_batched_tokens: int | None = None
    #: the total memory the device reports (catalogue.REPORTED_GIB); None: the capacity
    device_bytes: int | None = None
    #: vLLM before vllm-project/vllm#2151 (merged 2023-12-17, "Fix all-reduce memory
    #: usage"): the profile run does not reuse the inputs of its tensor-parallel
    #: all-reduces (vllm#2150: "when using TP, the activation memory for all reduce is not
    #: reused"), so each one's hidden states stay allocated to its end
    #: (memory_inference.inference_memory)
    vllm_allreduce_inputs_held: bool = False
    #: vLLM whose profile counts the CUDA context among its memory outside torch: the
    #: builds that take total − free after the profile run (from vllm-project/vllm#2031,
    #: 2023-12, until vllm#10511's baseline snapshot, 2024-12); later builds measure from a
    #: snapshot taken after the context (memory_inference.CUDA_CONTEXT_BYTES)
    vllm_counts_cuda_context: bool = False
    #: ``<server>.cpu_offload_gb``: GiB of each GPU's weights kept on the host
    cpu_offload_gb: float = 0.0

    def __post_init__(self) -> None:
        # the one reader of numbers, with the bounds the settings and flags have
        fraction = read_float(
            self.memory_fraction, "memory_fraction", minimum=0, maximum=1, above=True
        )
        length = read_int(self.context_length, "context_length", minimum=1, maximum=MAX_COUNT)
        object.__setattr__(self, "memory_fraction", fraction)
        object.__setattr__(self, "context_length", length)


#: The linear layers LoRA adapts, by the names either engine accepts in target_modules.
#: FSDP (areal/engine/fsdp_engine.py _apply_peft_wrapper, reference commit cbff54d6):
#: peft's LoraConfig on Hugging Face module names, empty or ["all-linear"] meaning every
#: linear layer but the output head. Megatron (areal/engine/megatron_engine.py
#: _apply_megatron_bridge_lora, same commit): megatron-bridge's LoRA on its fused
#: linear_qkv, linear_proj, linear_fc1 (gate and up) and linear_fc2, all four when
#: empty or "all-linear".
LORA_TARGETS = (
    "q_proj",
    "k_proj",
    "v_proj",
    "o_proj",
    "gate_proj",
    "up_proj",
    "down_proj",
    "gate",
    "linear_qkv",
    "linear_proj",
    "linear_fc1",
    "linear_fc2",
)


def token_dispatcher(engine: Engine) -> str:
    """The MoE token dispatcher the engine runs (:data:`TOKEN_DISPATCHERS`), from its reading.

    - megatron-bridge: alltoall, whatever the config says (areal/models/mcore/registry.py
      make_mcore_model l.474-481 at cbff54d6 sets ``moe_token_dispatcher_type='alltoall'``
      and passes no ``moe_enable_deepep``);
    - mbridge: the dispatcher as written (MegatronEngine._build_hf_mcore_bridge passes it,
      areal/engine/megatron_engine.py l.732-750). ``flex`` is DeepEP with or without
      ``moe_enable_deepep``: megatron-core 0.17.0's ``moe_flex_dispatcher_backend`` defaults
      to "deepep" (megatron/core/transformer/transformer_config.py l.757) and the reference
      does not set it, so MoEFlexTokenDispatcher runs DeepEP (megatron/core/transformer/moe/
      token_dispatcher.py l.1361, NVIDIA/Megatron-LM core_v0.17.0). Any other text: a
      dense model, which builds no dispatcher (a MoE model's is refused at start-up,
      rules.moe_dispatcher_is_known), so the default stands;
    - any other backend: the default (the field is the Megatron engine's).
    """
    read = engine.training
    if read is None or engine.allocation.backend != "megatron":
        return defaults.TOKEN_DISPATCHER
    if read.bridge_type == "megatron-bridge":
        return "alltoall"
    written = read.token_dispatcher
    if written == "flex":
        return "deepep"
    if written in ("alltoall", "allgather"):
        return written
    return defaults.TOKEN_DISPATCHER


def _layer_split(engine: Engine) -> str:
    """How the engine's layers are split over its pipeline stages (pipeline_split.SPLITS).

    megatron-bridge: megatron-core's even split. The reference sets its parameter-balanced
    layout (configure_pipeline_layer_splits, areal/engine/megatron_engine.py l.494) on
    ``tf_config``, which for megatron-bridge is ``bridge.transformer_config``
    (areal/models/mcore/registry.py make_hf_and_mcore_config l.353, AReaL cbff54d6), a property
    building a fresh provider and config on each access (megatron-bridge v0.4.0, src/megatron/
    bridge/models/conversion/auto_bridge.py l.1279-1286); make_mcore_model builds the model
    from another new provider (registry.py l.426), with account_for_embedding/loss_in_pipeline_
    split False (l.452-453) and no layout or first/last stage sizes copied, so megatron-core's
    get_num_layers_to_build gives every stage num_layers / (p·vpp) layers
    (megatron/core/transformer/transformer_block.py l.151-170, NVIDIA/Megatron-LM
    core_v0.17.0). Otherwise the reference's own rule.
    """
    read = engine.training
    if (
        read is not None
        and engine.allocation.backend == "megatron"
        and read.bridge_type == "megatron-bridge"
    ):
        return "even"
    return "areal"


def _logits_mode(engine: Engine, read: TrainConfig) -> tuple[str, int | None]:
    """How the engine's loss holds its logits (:data:`LOGITS`): the reference's own LM head
    where ``megatron.enable_chunked_logits`` swaps it in (a Megatron engine's only,
    ``TrainConfig.chunked_logits``), by ``lm_head_loss_chunk_size`` and
    ``entropy_requires_grad``; else the reference's default (``areal``)."""
    if engine.allocation.backend != "megatron" or not read.chunked_logits:
        return "areal", None
    if read.lm_head_chunk > 0:
        return "areal_lm_head_chunks", read.lm_head_chunk
    if read.entropy_requires_grad:
        return "areal_lm_head_differentiable", None
    return "areal_lm_head", None


def training_settings(
    engine: Engine, run: RunConfig, reserve: int | None, notes: list[str], minibatches: int = 1
) -> TrainingSettings:
    """The memory model's settings of a training engine, from its one reading;
    ``minibatches``: its update's ``ppo_n_minibatches`` (``StartupConfig.minibatches_of``)."""
    read, path = engine.training or TrainConfig(), engine.path
    if read.optimizer_assumed:
        notes.append(
            f"{path}.optimizer unset: estimated with adam, but the reference's default is None "
            f"(TrainEngineConfig.optimizer, cli_args.py l.1330), so its engine builds no "
            f"optimizer and the first optimizer step fails ('assert self.optimizer_config is "
            f"not None', fsdp_engine.py l.698 at cbff54d6): set {path}.optimizer.type=adam"
        )
    if (
        read.recompute_unasked and read.optimizer is not None
    ):  # a forward-only one recomputes nothing
        notes.append(
            f"{path}.gradient_checkpointing=false, but with {path}.megatron.bridge_type="
            f"'megatron-bridge' the reference's Megatron engine recomputes anyway: estimated "
            f"with {read.recompute} recomputation (its megatron.recompute_granularity; null "
            f"turns it off)"
        )
    tokens, micro_batches, forward = read.max_tokens_per_mb, None, None
    dp, splits = engine.allocation.parallel.dp_size, minibatches if read.optimizer else 1
    share = forward_share = None
    if tokens is not None:  # the shares the engine balances over its micro-batches
        share, forward_share = budget_shares(run.batch * run.samples, dp, run.longest, splits)
    if tokens is None:
        tokens, forward, micro_batches, note = _whole_local_batch(run, read.n_mbs, path, dp, splits)
    lora_rank: int | None = None
    if read.use_lora:
        lora_rank = read.lora_rank
        _lora_targets(read.target_modules, path, notes)
    vpp = read.virtual_pipeline_size or 1
    if engine.allocation.backend == "archon":
        vpp = _archon_stages(engine, read, notes)
    logits, lm_head_chunk = _logits_mode(engine, read)
    try:
        settings = TrainingSettings(
            dtype=read.dtype,
            optimizer=read.optimizer,
            optimizer_dtype=read.optimizer_dtype,
            distributed_optimizer=read.distributed_optimizer,
            precision_aware_optimizer=read.precision_aware_optimizer,
            recompute=read.recompute,
            tokens_per_micro_batch=tokens,
            micro_batches=micro_batches,
            n_mbs=read.n_mbs,
            forward_tokens_per_micro_batch=forward if forward != tokens else None,
            share_tokens=share,
            forward_share_tokens=forward_share,
            sequence_tokens=run.longest if share is not None else None,
            pad_to_maximum=read.pad_to_maximum
            or (engine.allocation.backend == "archon" and engine.allocation.parallel.pp_size > 1),
            virtual_pipeline=vpp,
            layer_split=_layer_split(engine),
            offload_params=read.offload_params,
            per_layer_optim_step=read.per_layer_optim_step,
            optim_prefetch_layers=read.optim_prefetch_layers,
            reserve_bytes=TRAINING_RESERVE_BYTES if reserve is None else reserve,
            lora_rank=lora_rank,
            lora_targets=read.target_modules if read.use_lora else (),
            critic=read.is_critic,
            memory_efficient_load=read.memory_efficient_load,
            # the actor's forward phase before its update (memory.PHASES)
            recompute_logprob=engine.key == "actor" and bool(run.recompute_logprob),
            token_dispatcher=token_dispatcher(engine),
            recompute_modules=read.recompute_modules,
            logits=logits,
            lm_head_chunk=lm_head_chunk,
        )
    except AllocationError as error:
        raise AllocationValidationError(f"{path}: {error.message}") from None
    backend, pp = engine.allocation.backend, engine.allocation.parallel.pp_size
    packed = settings.packed(backend, pp)
    if share is not None and tokens is not None and packed < tokens:
        notes.append(
            f"{path}.mb_spec.max_tokens_per_mb {tokens:,}: the {backend} engine balances each "
            f"rank's {share:,}-token minibatch (at the longest sequences) over at least "
            f"mb_spec.n_mbs and its own minimum of micro-batches "
            f"(model_shape.engine_micro_batches): {packed:,} tokens each"
        )
    if micro_batches is not None:
        runs = engine_micro_batches(backend, pp, vpp, micro_batches)
        if runs is not None and runs > micro_batches:
            note += (
                f"; at p{pp} the {backend} engine runs {runs} micro-batches "
                f"(model_shape.engine_micro_batches): {settings.packed(backend, pp):,} "
                f"tokens each"
            )
        notes.append(note)
    return settings


def _archon_stages(engine: Engine, read: TrainConfig, notes: list[str]) -> int:
    """The archon engine's virtual stages per pipeline rank (``sections.archon.
    archon_stages_per_rank``: its schedule's, Interleaved1F1B's 2 by default), and what its
    split leaves out."""
    pp, path = engine.allocation.parallel.pp_size, engine.path
    shape = engine.shape() if read.archon_layers_per_stage is not None and pp > 1 else None
    layers = shape.num_layers if shape is not None else None
    per_rank = archon_stages_per_rank(read, layers, pp, path)
    schedule = read.archon_pp_schedule or defaults.ARCHON_PP_SCHEDULE
    if per_rank is None:
        per_rank = defaults.ARCHON_PP_SCHEDULES[schedule]
        notes.append(
            f"{path}.archon.pp_layers_per_stage={read.archon_layers_per_stage}: the model's "
            f"layer count is unknown: estimated with {schedule}'s {per_rank} virtual stages "
            f"per rank"
        )
    if pp > 1 and schedule == "ZBVZeroBubble":
        notes.append(
            f"{path}.archon.pp_schedule=ZBVZeroBubble places rank r's stages at r and 2p − 1 − r "
            f"(the output layer on rank 0): estimated with the looped placement (r and r + p)"
        )
    if pp > 1 and read.archon_less_layers != (1, 1):
        first, last = read.archon_less_layers
        notes.append(
            f"{path}.archon.pp_first_stage_less_layers={first}, pp_last_stage_less_layers="
            f"{last}: the split is estimated with the default 1 and 1"
        )
    return per_rank


def whole_local_batch_tokens(
    sequences: int, dp: int, length: int, n_mbs: int, minibatches: int = 1
) -> int:
    """Tokens of one micro-batch when ``mb_spec.max_tokens_per_mb`` is unset: each of the
    ``dp`` ranks' share of the step's ``sequences``, each ``length`` tokens at most, cut
    into ``minibatches`` (an update's ``ppo_n_minibatches``; 1: a forward over the whole
    share) and each into ``n_mbs`` micro-batches (:func:`_whole_local_batch` says where the
    reference does it). It depends on the layout's d: ``suggest`` calls it for each layout
    it estimates."""
    share = math.ceil(math.ceil(sequences / max(1, dp)) / max(1, minibatches))
    return max(1, math.ceil(share * length / max(1, n_mbs)))


def budget_shares(
    sequences: int, dp: int, length: int, minibatches: int
) -> tuple[int | None, int | None]:
    """With a tokens budget: a rank's share of one update minibatch and of the whole step,
    its sequences at ``length`` (the longest; ``TrainingSettings.share_tokens``), None
    past what a count can be (then the budget alone stands)."""

    def share(splits: int) -> int | None:
        found = whole_local_batch_tokens(sequences, dp, length, 1, splits)
        return found if found <= MAX_COUNT else None

    return share(minibatches), share(1)


def _whole_local_batch(
    run: RunConfig, n_mbs: int, path: str, dp: int, minibatches: int = 1
) -> tuple[int, int, int, str]:
    """Tokens of one micro-batch when ``mb_spec.max_tokens_per_mb`` is unset.

    The reference then caps a micro-batch at DEFAULT_MAX_TOKENS_PER_MB = 10**12
    tokens and packs by count, at least ``mb_spec.n_mbs`` (default 1) groups
    (areal/utils/data.py split_padded_tensor_dict_into_mb_list and
    allocate_balanced_mbs, lines 697-721 and 467-474, reference commit cbff54d6):
    each data-parallel rank's whole share of the step is one micro-batch. That
    share: train_dataset.batch_size × gconfig.n_samples sequences over d, each at
    most train_dataset.max_length + gconfig.max_new_tokens tokens. An update packs one
    of its ``minibatches`` at a time (areal/trainer/ppo/actor.py l.454-457), so its
    micro-batch is 1/minibatches of that: (update tokens, forward tokens, n_mbs, note).
    """
    batch, samples, new_tokens = run.batch, run.samples, run.new_tokens
    prompt_text = (
        f"train_dataset.max_length {run.max_length:,}"
        if run.max_length is not None
        else f"a {defaults.PROMPT_TOKENS:,}-token prompt (train_dataset.max_length unset)"
    )
    sequences = math.ceil(batch * samples / dp)
    length = run.longest  # prompt + max_new_tokens, at most gconfig.max_tokens
    capped = (
        f", at most gconfig.max_tokens {run.tokens_cap:,}"
        if length < run.prompt + new_tokens
        else ""
    )
    forward = whole_local_batch_tokens(batch * samples, dp, length, n_mbs)
    tokens = whole_local_batch_tokens(batch * samples, dp, length, n_mbs, minibatches)
    if forward > MAX_COUNT:
        raise AllocationValidationError(
            f"{path}.mb_spec.max_tokens_per_mb unset: a micro-batch is each data-parallel "
            f"rank's whole batch, train_dataset.batch_size {batch:,} × gconfig.n_samples "
            f"{samples:,} / d{dp} = {sequences:,} sequences × {length:,} tokens / n_mbs "
            f"{n_mbs:,} = {forward:,} tokens, over the limit {MAX_COUNT:,}: set "
            f"{path}.mb_spec.max_tokens_per_mb or lower train_dataset.batch_size"
        )
    split = f" / mb_spec.n_mbs {n_mbs}" if n_mbs > 1 else ""
    note = (
        f"{path}.mb_spec.max_tokens_per_mb unset: the reference packs each data-parallel rank's "
        f"whole batch into {n_mbs} micro-batch{'es' if n_mbs > 1 else ''} (areal/utils/data.py): "
        f"train_dataset.batch_size {batch:,} × gconfig.n_samples {samples:,} / d{dp} = "
        f"{sequences:,} sequence{'s' if sequences != 1 else ''} × ({prompt_text} + "
        f"gconfig.max_new_tokens {new_tokens:,}{capped}){split} = {forward:,} tokens per "
        f"micro-batch"
    )
    if tokens != forward:
        note += (
            f"; its update packs one of its {minibatches} minibatches at a time: "
            f"{tokens:,} tokens per micro-batch"
        )
    return tokens, forward, n_mbs, note


def _lora_targets(targets: tuple[str, ...], path: str, notes: list[str]) -> None:
    """Say which of LoRA's ``target_modules`` the estimate does not count."""
    known = set(LORA_TARGETS) | {"all-linear"}
    unknown = [t for t in targets if t not in known]
    if unknown:
        notes.append(
            f"{path}.target_modules: {', '.join(map(repr, unknown))} not counted (areal-alloc "
            f"counts {', '.join(LORA_TARGETS)} or all-linear)"
        )


def inference_settings(
    engine: Engine, reserve: int | None, device: int | None = None, run: RunConfig | None = None
) -> InferenceSettings:
    """The memory model's settings of an inference engine, from its one reading.

    ``run``: the experiment's run; with it, a rollout that writes ``max_concurrent_rollouts``
    keeps :func:`sequences_in_flight` sequences over its instances (without it, the key as
    written, a count of rollouts)."""
    read = engine.inference or InferenceConfig()
    backend = engine.allocation.backend
    concurrency = read.max_concurrent_rollouts
    if concurrency is not None and run is not None and engine.key == "rollout":
        concurrency = sequences_in_flight(run)
    per_instance = (
        None if concurrency is None else math.ceil(concurrency / engine.allocation.n_instances)
    )
    try:
        return InferenceSettings(
            dtype=read.dtype,
            kv_cache_dtype=read.kv_cache_dtype,
            memory_fraction=read.memory_fraction,
            context_length=read.context_length,
            concurrency=per_instance,
            reserve_bytes=reserve,
            # vLLM's profile run (memory_inference.inference_memory): the reference passes
            # max_num_seqs to vllm serve (areal/api/cli_args.py vLLMConfig, 256 by default) and no
            # max_num_batched_tokens (vLLMConfig has none), so vLLM takes its own default
            max_num_seqs=read.max_num_seqs or VLLM_MAX_NUM_SEQS,
            device_bytes=device,
            cpu_offload_gb=read.cpu_offload_gb,
        )
    except AllocationError as error:
        raise AllocationValidationError(f"{backend}: {error.message}") from None


# --- the run's shape ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class StepShape:
    """What one RL step does, with what was assumed in reading it."""

    sequences: int  # train_dataset.batch_size × gconfig.n_samples
    prompt: int  # tokens per prompt
    new_tokens: int  # gconfig.max_new_tokens, the longest generation
    mean: int  # the mean generation length for throughput
    recompute_logprob: bool
    offpolicyness: int | None  # rollout.max_head_offpolicyness as written
    colocated: bool  # the rollout shares the actor's GPUs
    max_concurrent: int | None  # rollout.max_concurrent_rollouts as written, in rollouts
    #: the sequences in flight over the rollout (:func:`sequences_in_flight`); None: the
    #: step's own sequences
    in_flight: int | None = None
    assumptions: tuple[str, ...] = ()
    #: the rollout server's own bound on the requests it runs at once (:class:`ServerLimit`)
    server: ServerLimit = SERVER_DEFAULTS
    #: the actor's and the critic's optimizer steps per RL step: ``ppo_update`` splits the
    #: step's data into ``ppo_n_minibatches`` minibatches and runs ``train_batch`` on each
    #: (areal/trainer/ppo/actor.py l.454-457, critic.py l.63-66 at cbff54d6)
    minibatches: int = 1
    critic_minibatches: int = 1

    def minibatches_of(self, key: str) -> int:
        """The optimizer steps engine ``key`` takes per RL step (``records.minibatches_of``)."""
        return minibatches_of(key, self.minibatches, self.critic_minibatches)

    @property
    def length(self) -> int:
        """A trained sequence: its prompt and its mean generation."""
        return self.prompt + self.mean

    @property
    def tokens(self) -> int:
        """Tokens a training-side engine processes per step."""
        return self.sequences * self.length


def step_shape(experiment: Experiment, machine: Resolved) -> StepShape:
    """The step's shape from ``experiment``'s run and ``machine``'s mean generation length."""
    run = experiment.run
    new_tokens, assumptions = run.new_tokens, []
    prompt = run.max_length
    if prompt is None:
        prompt = defaults.PROMPT_TOKENS
        assumptions.append(
            f"train_dataset.max_length unset: prompts of {defaults.PROMPT_TOKENS:,} tokens assumed"
        )
    if run.generation < new_tokens:  # the rollout's cap (RunConfig.generation)
        new_tokens = run.generation
        assumptions.append(
            f"gconfig.max_tokens {run.tokens_cap:,} caps a completion after a {prompt:,}-token "
            f"prompt at {new_tokens:,} tokens, below gconfig.max_new_tokens {run.new_tokens:,} "
            f"(areal/infra/remote_inf_engine.py: min(max_tokens − prompt, max_new_tokens))"
        )
    mean, source = _mean_gen_len(machine, new_tokens)
    if source:
        assumptions.append(f"mean generation length {mean:,} tokens ({source})")
    else:
        assumptions.append(
            f"mean generation length = gconfig.max_new_tokens={new_tokens:,} (the maximum; "
            f"give --mean-gen-len or the hook's mean_gen_len)"
        )
    recompute = run.recompute_logprob
    startup = experiment.startup
    return StepShape(
        sequences=run.batch * run.samples,
        prompt=prompt,
        new_tokens=new_tokens,
        mean=mean,
        recompute_logprob=DEFAULT_RECOMPUTE_LOGPROB if recompute is None else recompute,
        offpolicyness=run.max_head_offpolicyness,
        colocated=_colocated(experiment),
        max_concurrent=run.max_concurrent_rollouts,
        in_flight=sequences_in_flight(run),
        assumptions=tuple(assumptions),
        server=server_limit(experiment.get("rollout")),
        minibatches=startup.minibatches_of("actor"),
        critic_minibatches=startup.minibatches_of("critic"),
    )


def forced_minibatches_note(startup: StartupConfig) -> str | None:
    """What the estimate says when reuse_train_logp forced the actor to one minibatch."""
    if startup.forced_minibatches is None:
        return None
    return (
        f"actor.prox_logp_method=reuse_train_logp: actor.ppo_n_minibatches="
        f"{startup.forced_minibatches} taken as 1, as PPOActorConfig.__post_init__ forces it "
        f"with a warning (areal/api/cli_args.py l.1911-1923 at cbff54d6)"
    )


def sequences_in_flight(run: RunConfig) -> int:
    """The sequences the rollout keeps in flight, as the reference bounds them.

    Its staleness manager admits a new rollout while both
    ``max_concurrent_rollouts − running`` and
    ``(max_head_offpolicyness + version + 1) × consumer_batch_size − (accepted + running)``
    are positive (areal/infra/staleness_manager.py ``get_capacity``; the first defaults to
    ``consumer_batch_size``: areal/infra/workflow_executor.py ``WorkflowExecutor.__init__``
    and areal/infra/controller/rollout_controller.py, areal-project/AReaL
    cbff54d645d2cd8ee1f1c358a82f3f473588433d), so at most
    min(``max_concurrent_rollouts``, (η + 1) × ``consumer_batch_size``) rollouts run. A
    rollout is one task of one prompt: the trainer wraps the workflow in
    ``GroupedRolloutWorkflow`` with ``group_size=gconfig.n_samples``
    (areal/trainer/rl_trainer.py, ``prepare_batch(..., group_size=config.gconfig.n_samples)``),
    which generates its ``n_samples`` sequences at once (``asyncio.gather``,
    areal/infra/remote_inf_engine.py, same commit). ``consumer_batch_size`` is taken as
    ``train_dataset.batch_size``, as every RL example of the reference writes it
    (``consumer_batch_size: ${train_dataset.batch_size}``, examples/math/gsm8k_grpo.yaml)."""
    prompts = run.batch
    eta = run.max_head_offpolicyness
    eta = DEFAULT_OFFPOLICYNESS if eta is None else eta
    concurrent = prompts if run.max_concurrent_rollouts is None else run.max_concurrent_rollouts
    rollouts = min(max(1, concurrent), (eta + 1) * prompts)
    return rollouts * run.samples


def _mean_gen_len(machine: Resolved, new_tokens: int) -> tuple[int, str]:
    """The mean generation length and where it came from ("": the maximum)."""
    found = machine.mean_gen_len
    if found is None:
        return new_tokens, ""
    return min(found.value, new_tokens), f"from {found.source}"


def _colocated(experiment: Experiment) -> bool:
    """The rollout and the actor share GPUs (either colocated onto the other)."""
    for key, other in (("rollout", "actor"), ("actor", "rollout")):
        engine = experiment.get(key)
        scheduling = engine.scheduling if engine is not None else None
        if scheduling is not None and scheduling.is_colocated and scheduling.target == other:
            return True
    return False
