"""The published measurements of ``benchmarks/measurements.json`` and our estimate of each.

One reader of the data file (:func:`load`, :func:`rows`, :func:`architecture`) for
``benchmarks/accuracy.py`` and the accuracy tests, and one adapter per kind that builds a
row's inputs into the package's own public estimate functions:

- ``train_memory``: ``engines.estimate_allocation`` of a training layout (``memory_training.py``);
- ``kv_tokens`` / ``kv_memory``: ``engines.estimate_allocation`` of an inference layout
  (its ``kv_cache``);
- ``train_tps``: ``speed_training.training_step``;
- ``decode_tps``: ``speed_inference.generation`` of the run's batch, prompt and output lengths
  (the prefill, then the decode steps at the mean context); LMDeploy's rows the way
  its ``profile_generation.py`` times them (:func:`_lmdeploy_request`);
- ``rl_step``: ``plan.plan_config`` of the run written as an experiment config (its ``pace``).

Nothing here is fitted: the package's defaults are used wherever the row says nothing.
A row the estimator cannot express (a GPU without cited speeds, float8, a feature the
estimate does not model) comes back with the reason and no estimate, never dropped.
``torch.compile`` is not such a feature: it runs the same arithmetic in the same
precision, so its rows are compared (their error is part of what the benchmark shows).
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from areal_alloc.architecture import Architecture, read_quantization
from areal_alloc.catalogue import GPU, find_gpu, find_model, reported_bytes
from areal_alloc.errors import AllocationError
from areal_alloc.estimate.engines import estimate_allocation
from areal_alloc.estimate.execution import (
    DEFAULT_RECOMPUTE_MODULES,
    TRAINING_RESERVE_BYTES,
    InferenceSettings,
    TrainingSettings,
)
from areal_alloc.estimate.memory import MemoryEstimate
from areal_alloc.estimate.rl_step import COLOCATED, step_seconds, weight_update
from areal_alloc.estimate.speed_inference import generation
from areal_alloc.estimate.speed_training import training_step
from areal_alloc.estimate.system import Hardware, build_hardware, resolve_gpu
from areal_alloc.model import ModelAllocation
from areal_alloc.settings import NAMES, ChosenGPU, Resolved, Settings, Sourced

__all__ = [
    "DATA",
    "GOALS",
    "KINDS",
    "RL_STEP_RULE",
    "Compared",
    "Goal",
    "NotCompared",
    "Summary",
    "architecture",
    "compare",
    "compare_all",
    "load",
    "rows",
    "summary",
]

DATA = Path(__file__).resolve().parent / "measurements.json"
GIB = 1 << 30
KINDS = (
    "train_memory",
    "kv_tokens",
    "kv_memory",
    "decode_tps",
    "train_tps",
    "rl_step",
    "reference_fsdp_memory",
    "reference_fsdp_allocated",
    "reference_fsdp_step",
    "reference_fsdp_forward",
)

#: vLLM's default ``gpu_memory_utilization`` where a row gives none
#: (vllm-project/vllm vllm/engine/arg_utils.py, ``EngineArgs.gpu_memory_utilization: float = 0.9``).
VLLM_DEFAULT_FRACTION = 0.9
#: The torchtitan runs' GPU: "Each H100 GPU is equipped with 96GB HBM2e with 2.4 TB/sec peak
#: memory bandwidth" (pytorch/torchtitan benchmarks/llama3_h100_202412_torchtitan.md, source
#: ``torchtitan-llama3-h100-202412`` of the data file); its compute is the H100 SXM's.
H100_96GB_HBM_TBPS = 2.4


@dataclass(frozen=True, slots=True)
class Goal:
    """Issue 17, item 4: the median and worst absolute error a kind must meet."""

    median: float
    worst: float | None = None

    def met(self, median: float, worst: float) -> bool:
        return median <= self.median and (self.worst is None or worst <= self.worst)

    def text(self) -> str:
        worst = f", worst ≤ {self.worst:.0%}" if self.worst is not None else ""
        return f"median ≤ {self.median:.0%}{worst}"


#: Issue 17 item 4. ``kv_memory`` is the same KV capacity in GiB (tokens × the exact bytes
#: per token), so it is held to the KV-tokens goal.
GOALS: dict[str, Goal] = {
    "kv_tokens": Goal(0.03),
    "kv_memory": Goal(0.03),
    "train_memory": Goal(0.10, 0.20),
    "decode_tps": Goal(0.10, 0.30),
    "train_tps": Goal(0.20, 0.40),
    "rl_step": Goal(0.25, 0.50),
    # issue 28 item 6: measured steps of the reference's own engine
    "reference_fsdp_memory": Goal(0.05, 0.10),
    # the same steps against the allocator's own peak (torch.cuda.max_memory_allocated):
    # the estimate's terms without its reserve (the CUDA context and the allocator's cache)
    "reference_fsdp_allocated": Goal(0.05, 0.10),
    "reference_fsdp_step": Goal(0.15, 0.30),
    "reference_fsdp_forward": Goal(0.15, 0.30),
}


@dataclass(frozen=True, slots=True)
class Compared:
    """One row: our estimate beside the measured value, or why there is none."""

    id: str
    kind: str
    inputs: str  # the inputs in short
    measured: float
    unit: str
    estimate: float | None = None
    reason: str = ""  # not compared: why
    note: str = ""  # compared: what was assumed
    #: compared: the estimate's terms ({name, seconds, formula[, hidden]}), where it has them
    terms: tuple[dict[str, object], ...] = ()

    @property
    def error(self) -> float | None:
        """Signed relative error, estimate / measured − 1."""
        if self.estimate is None or not self.measured:
            return None
        return self.estimate / self.measured - 1

    def to_dict(self) -> dict[str, object]:
        return {
            "id": self.id,
            "kind": self.kind,
            "inputs": self.inputs,
            "measured": self.measured,
            "unit": self.unit,
            "estimate": self.estimate,
            "error": self.error,
            "compared": self.estimate is not None,
            "reason": self.reason or None,
            "note": self.note or None,
            "terms": list(self.terms),
        }


class NotCompared(Exception):
    """A row the estimator cannot express; the message says why."""


#: What an adapter answers: the estimate and what was assumed, and the estimate's terms
#: where it has them (the speed kinds).
Answer = tuple[float, str] | tuple[float, str, tuple[dict[str, object], ...]]


# --- the data file -----------------------------------------------------------------


def load(path: Path = DATA) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return data


def rows(
    data: Mapping[str, Any], kind: str | None = None, source: str | None = None
) -> list[dict[str, Any]]:
    """The rows of one kind and/or one source, in the file's order."""
    return [
        r
        for r in data["rows"]
        if (kind is None or r["kind"] == kind) and (source is None or r["source"] == source)
    ]


def architecture(data: Mapping[str, Any], model: str) -> Architecture:
    """A model of the data file's ``models`` section, else of the catalogue."""
    entry = data["models"].get(model)
    if entry is not None:
        return Architecture.from_mapping(entry["config"], source=model)
    return find_model(model)


def _row_model(data: Mapping[str, Any], inputs: Mapping[str, Any]) -> Architecture:
    name = inputs.get("catalogue_equivalent") or inputs["model"]
    try:
        return architecture(data, name)
    except AllocationError as error:
        raise NotCompared(f"model {name}: {error.message}") from None


# --- the GPU -----------------------------------------------------------------------


def _gpu(data: Mapping[str, Any], name: str, hbm: bool) -> tuple[GPU, str]:
    """A catalogue GPU, with the data file's cited speeds where the catalogue has none;
    ``hbm``: the estimate reads the HBM bandwidth (an A100 of unstated memory is refused)."""
    note = ""
    if name == "H100-96GB-HBM2e":
        base = replace(find_gpu("H100-80GB"), name=name, memory_gib=96, hbm_tbps=H100_96GB_HBM_TBPS)
        note = f"H100 SXM compute, 96 GB, {H100_96GB_HBM_TBPS} TB/s (the source's GPU)"
    elif name == "A100":
        if hbm:
            raise NotCompared(
                "'A100': the memory variant is not stated (HBM 1.555 TB/s for 40 GB, 2.0 for 80 GB)"
            )
        # both variants: 312 TFLOP/s BF16 dense; a training step's element-wise term reads
        # HBM (speed_training._elementwise_term), taken at the 80 GB one's 2.039 TB/s here
        # (the 40 GB one's 1.555 moves torchtune's A100 rows by under 1 point)
        base, note = find_gpu("A100-80GB"), "A100 (variant not stated): A100-80GB's compute"
    else:
        try:
            base = find_gpu(name)
        except AllocationError as error:
            raise NotCompared(f"GPU {name}: {error.message}") from None
    # every GPU figure comes from the catalogue (areal_alloc/data/gpus.json, each with its
    # source): the one home of a hardware fact
    return base, note


def _hardware(
    data: Mapping[str, Any], inputs: Mapping[str, Any], hbm: bool = True
) -> tuple[Hardware, str]:
    gpu, note = _gpu(data, inputs["gpu"], hbm)
    # the one builder of a Hardware, the row's GPU and network given as its settings: the
    # assumed efficiencies, never a stored calibration (the rows measure the estimate)
    network = inputs.get("inter_node_gbps_per_gpu")
    given = Resolved(
        gpu=ChosenGPU(gpu.name, reported_bytes(gpu), "the row's gpu", catalogue=gpu),
        inter_node_gbps=None if network is None else Sourced(network, "inter_node_gbps_per_gpu"),
        use_calibration=False,
    )
    hardware = build_hardware(given, int(inputs.get("gpus_per_node") or 8), None)
    if hardware is None:  # the GPU's compute or HBM speed is not cited
        raise NotCompared(f"GPU {gpu.name}: no cited compute and HBM speeds")
    return hardware, note


def _capacity(data: Mapping[str, Any], name: str) -> int | None:
    try:
        return resolve_gpu(name).capacity
    except AllocationError:
        gpu, _ = _gpu(data, name, hbm=False)
        return gpu.memory_bytes


# --- what the estimate does not model ------------------------------------------------


#: Inference kinds: fp8 weights with a bf16 KV cache are expressible there (the dtypes).
_INFERENCE = ("kv_tokens", "kv_memory", "decode_tps")


def _fp8_weights(inputs: Mapping[str, Any]) -> bool:
    """An FP8 checkpoint served with a bf16 KV cache (``fp8 weights, auto KV dtype (bf16)``)."""
    precision = str(inputs.get("precision") or "")
    return precision.startswith("fp8 weights") and "(bf16)" in precision


def _unmodelled(inputs: Mapping[str, Any], kind: str) -> str | None:
    """Every feature of the run the estimate does not model, or None."""
    found = []
    precision = str(inputs.get("precision") or "")
    if ("float8" in precision or "fp8" in precision) and not (
        (kind in _INFERENCE and _fp8_weights(inputs))
        or (kind == "train_memory" and _float8_linears(inputs))
    ):
        found.append(f"float8 precision ({precision!r})")
    features = (
        *(
            ()
            if kind == "train_memory"  # what they hold is modelled, not what they cost
            else (
                ("async_tp", True, "asynchronous tensor parallelism (collectives overlapped)"),
                ("optimizer_in_backward", True, "the optimizer step inside the backward pass"),
                ("activation_offloading", True, "activation offloading to the CPU"),
                # Megatron-MoE-ModelZoo's rows (source megatron-moe-modelzoo-qwen3)
                ("megatron_fsdp", True, "Megatron-FSDP's sharded parameters"),
                ("a2a_overlap", True, "the all-to-alls overlapped with the other micro-batch"),
            )
        ),
        # torchtune's docs name two (torchao's AdamW8bit, bitsandbytes' PagedAdamW8bit,
        # docs/source/tutorials/memory_optimizations.rst at bd2a0fc7); the README's row
        # does not say which, and they keep different tensors in 8 bits
        ("optimizer", "AdamW8bit", "8-bit AdamW of an unstated implementation"),
    )
    for key, value, what in features:
        if inputs.get(key) == value:
            found.append(f"{what} ({key}={value})")
    if inputs.get("extra_flags"):
        found.append(f"the engine's extra flags {inputs['extra_flags']!r}")
    if inputs.get("not_modelled_detail"):  # what the source leaves unsaid, in the row's words
        found.append(str(inputs["not_modelled_detail"]))
    loss = str(inputs.get("loss") or "")
    if "chunked" in loss and not inputs.get("compile"):
        found.append(f"chunked cross-entropy, not compiled (loss {loss!r})")
    if not found:
        return None
    return "not modelled: " + "; ".join(found)


_RECOMPUTE = {
    "none": "none",
    # torchtitan's per-op policy (activations.op_sac_bytes_per_token, speed_training.training_step)
    "selective (op)": "op",
    "selective": "selective",
    # Megatron-MoE-ModelZoo's "norm, act": ``--recompute-granularity selective
    # --recompute-modules moe_act layernorm`` (yanring/Megatron-MoE-ModelZoo
    # best_practice/Qwen3/run_235b.sh l.27, the H100 baseline TP=2 PP=8 VPP=4 EP=32, at
    # c1ad0b5c89f425d60febddc38e7f741a16f08bd1)
    "selective (norm, act)": "selective",
    "full": "full",
}
#: megatron-core's recompute_modules of each selective row (unlisted: its default)
_RECOMPUTE_MODULES = {"selective (norm, act)": ("moe_act", "layernorm")}


def _recompute(inputs: Mapping[str, Any]) -> str:
    given = inputs.get("activation_checkpointing") or "none"
    if given not in _RECOMPUTE:
        raise NotCompared(f"activation checkpointing {given!r} is not modelled")
    return _RECOMPUTE[given]


def _recompute_modules(inputs: Mapping[str, Any]) -> tuple[str, ...]:
    given = inputs.get("activation_checkpointing") or "none"
    return _RECOMPUTE_MODULES.get(given, DEFAULT_RECOMPUTE_MODULES)


#: The published dispatcher names (Megatron-MoE-ModelZoo's "Dispatcher" column) as
#: TrainingSettings.token_dispatcher: "DeepEP" the flex dispatcher on DeepEP, "A2A" alltoall
_DISPATCHERS = {"DeepEP": "deepep", "A2A": "alltoall"}


def _token_dispatcher(inputs: Mapping[str, Any]) -> str:
    given = inputs.get("dispatcher")
    if given is None:
        return "alltoall"
    if given not in _DISPATCHERS:
        raise NotCompared(f"token dispatcher {given!r} is not modelled")
    return _DISPATCHERS[given]


def backend_string(engine: str, layout: Mapping[str, int]) -> str:
    """``megatron:d24p8t8`` from ``{"d": 24, "t": 8, "p": 8}`` (sizes of 1 left out)."""
    dims = "".join(f"{k}{layout[k]}" for k in "dptce" if layout.get(k, 1) > 1)
    return f"{engine}:{dims or 'd1'}"


def _engine(backend: str) -> str:
    for engine in ("megatron", "fsdp", "vllm", "sglang"):
        if backend.startswith(engine):
            return engine
    if backend.startswith("torchtune (single device)"):
        return "fsdp"  # one GPU: nothing is sharded, as FSDP on one rank
    if backend.startswith("lmdeploy") or backend.startswith("tensorrt"):
        return "vllm"  # decode speed depends on the layout and the model, not the engine
    raise NotCompared(f"backend {backend!r} has no estimate")


def _allocation(inputs: Mapping[str, Any], engine: str | None = None) -> ModelAllocation:
    engine = engine or _engine(str(inputs.get("backend")))
    spec = backend_string(engine, inputs.get("layout") or {})
    try:
        return ModelAllocation.from_str(spec)
    except AllocationError as error:
        raise NotCompared(f"{spec}: {error.message}") from None


def _float8_linears(inputs: Mapping[str, Any]) -> bool:
    """torchao's float8 linears with bf16 otherwise: their memory is taken as the bf16 run's.
    ``Float8Linear`` keeps the weights in their dtype and casts per matmul; for the backward
    it saves the high-precision input and weight (``manual_float8_matmul_with_args_in_hp``:
    ``ctx.save_for_backward(input_hp, weight_hp_t)``) or, tensorwise, their float8 casts
    (``..._in_float8``: ``save_for_backward(input_fp8, weight_fp8_t)``, 1 B each; not
    counted) (pytorch/ao torchao/float8/float8_linear.py@024fe94fd86a94f43be1f0dd62201bd92a313dcb).
    The float8 FSDP all-gather halves only the one gathered layer's bytes (not counted)."""
    precision = str(inputs.get("precision") or "")
    return precision.startswith("float8 linears") and "bf16 otherwise" in precision


def _logits_mode(inputs: Mapping[str, Any]) -> str:
    """How the run's loss holds the logits (memory.LOGITS): torchtitan's and torchtune's
    cross-entropy on float32 logits; compiled where the run's version compiles the loss
    (``inputs.loss_compiled``); torchtune's chunked loss under its compiled recipe
    (full_finetune_single_device.py: ``if self._compile: training.compile_loss(...)``,
    pytorch/torchtune@bd2a0fc7c31430972728494fa01aaeeb0ebf1ba1)."""
    loss = str(inputs.get("loss") or "")
    if "chunked" in loss and inputs.get("compile"):
        return "chunked_compiled"
    if inputs.get("loss_compiled"):
        return "float32_compiled"
    return "float32"


#: torchtune's "Peak Memory Active" counts the tensors torch's allocator holds, none of what
#: the reserve stands for (the CUDA context, NCCL's buffers, the allocator's cached blocks).
#: A "max reserved" peak keeps the reserve: it holds the allocator's cached blocks.
_TORCH_ALLOCATOR_METRICS = ("Peak Memory Active",)


def _torch_allocator_metric(inputs: Mapping[str, Any]) -> bool:
    return any(m in str(inputs.get("memory_metric") or "") for m in _TORCH_ALLOCATOR_METRICS)


def _training_settings(inputs: Mapping[str, Any]) -> TrainingSettings:
    precision = str(inputs.get("precision") or "")
    return TrainingSettings(
        recompute=_recompute(inputs),
        recompute_modules=_recompute_modules(inputs),
        token_dispatcher=_token_dispatcher(inputs),
        logits=_logits_mode(inputs),
        tokens_per_micro_batch=int(inputs["micro_batch"]) * int(inputs["seq_len"]),
        # torchtune's single-device bf16 recipe keeps no float32 copy
        optimizer_dtype="bfloat16" if "no fp32 master" in precision else "float32",
        # torchtitan builds the model on the meta device and materialises its shards
        # (train.py: ``with torch.device("meta"):``, at 9dec370a and e7c0cae9); torchtune's
        # single-device recipe builds it on the GPU in its dtype
        memory_efficient_load=True,
        reserve_bytes=0 if _torch_allocator_metric(inputs) else TRAINING_RESERVE_BYTES,
        optimizer_in_backward=bool(inputs.get("optimizer_in_backward")),
        activation_offload=bool(inputs.get("activation_offloading")),
        # torchtitan's and torchtune's own model code, not Hugging Face's
        modeling="fused",
        # torchtune's single-device recipe wraps nothing in FSDP2
        fsdp2=not str(inputs.get("backend", "")).startswith("torchtune (single device)"),
        # micro-batches per step on a data-parallel rank (gradient accumulation); a
        # pipeline's own micro-batches are another count, not published for these rows
        micro_batches=(
            int(inputs.get("grad_accum") or 1)
            if (inputs.get("layout") or {}).get("p", 1) == 1
            else None
        ),
    )


def _train_memory_note(inputs: Mapping[str, Any]) -> str:
    notes = []
    if _float8_linears(inputs):
        notes.append("float8 linears taken as bf16 (torchao saves the bf16 input and weight)")
    if inputs.get("async_tp"):
        notes.append("async TP holds what TP holds")
    if inputs.get("optimizer_in_backward"):
        notes.append("optimizer in the backward: one parameter's gradient held")
    if inputs.get("activation_offloading"):
        notes.append("checkpoints offloaded to the CPU but the one recomputed")
    mode = _logits_mode(inputs)
    if mode != "float32":
        notes.append(f"logits: {mode}")
    if _torch_allocator_metric(inputs):
        notes.append("active tensors only: no reserve (CUDA context, NCCL, cached blocks)")
    return "; ".join(notes)


# --- one adapter per kind ------------------------------------------------------------


def _train_memory(data: Mapping[str, Any], row: Mapping[str, Any]) -> tuple[float, str]:
    inputs = row["inputs"]
    if not inputs.get("micro_batch"):
        raise NotCompared("the micro-batch is not published")
    alloc = _allocation(inputs)
    estimate = estimate_allocation(
        alloc,
        _row_model(data, inputs),
        _capacity(data, inputs["gpu"]),
        _training_settings(inputs),
        None,
    )
    return estimate.total / GIB, _train_memory_note(inputs)


def _tokens_per_step(inputs: Mapping[str, Any], alloc: ModelAllocation) -> int:
    seq = int(inputs["seq_len"])
    if inputs.get("global_batch"):
        return int(inputs["global_batch"]) * seq
    if not inputs.get("micro_batch"):
        raise NotCompared("the batch is not published")
    return (
        int(inputs["micro_batch"])
        * int(inputs.get("grad_accum") or 1)
        * alloc.parallel.dp_size
        * seq
    )


def paper_flops(arch: Architecture, batch: int, seq: int) -> float:
    """Eq. 3 of arXiv:2104.04473 §5.1, the weak-scaling table's FLOP count (full recomputation):
    F = 96·B·s·l·h²·(1 + s/(6h) + V/(16·l·h))."""
    h, layers, vocab = arch.hidden_size, arch.num_layers, arch.vocab_size
    return 96 * batch * seq * layers * h * h * (1 + seq / (6 * h) + vocab / (16 * layers * h))


#: llm-foundry's ``attn_impl`` (a row's ``inputs.attn_impl``; absent: FlashAttention-2, what
#: torchtitan's and torchtune's SDPA flash backend runs) as the estimate's attention kernel:
#: ``triton`` is FlashAttention-1's Triton port (llmfoundry/models/layers/flash_attn_triton.py,
#: "Copied from https://github.com/HazyResearch/flash-attention/.../flash_attn_triton.py"),
#: ``flash`` the flash-attn 2 package.
_ATTENTION_KERNELS = {"flash": "flash-attention-2", "triton": "flash-attention-1"}


def _train_tps(data: Mapping[str, Any], row: Mapping[str, Any]) -> Answer:
    inputs = row["inputs"]
    alloc = _allocation(inputs)
    arch = _row_model(data, inputs)
    hardware, note = _hardware(data, inputs, hbm=False)
    tokens = _tokens_per_step(inputs, alloc)
    seq = int(inputs["seq_len"])
    micro = int(inputs.get("micro_batch") or 1) * seq
    step = training_step(
        alloc.backend,
        arch,
        alloc.parallel,
        hardware,
        tokens_per_step=tokens,
        tokens_per_micro_batch=micro,
        sequence_length=seq,
        recompute=_recompute(inputs),
        virtual_pipeline=int(inputs.get("virtual_pipeline") or 1),
        attention_kernel=_ATTENTION_KERNELS[str(inputs.get("attn_impl") or "flash")],
        layer_split=str(inputs.get("layer_split", "areal")),
        token_dispatcher=_token_dispatcher(inputs),
        recompute_modules=_recompute_modules(inputs),
    )
    if inputs.get("attn_impl") == "triton":
        note = ", ".join(filter(None, (note, "attn_impl triton: FlashAttention-1's Triton kernel")))
    gpus = alloc.parallel.world_size
    terms = tuple(step.terms_dict())
    if row["measured"]["unit"] == "TFLOPS/gpu":
        flops = paper_flops(arch, int(inputs["global_batch"]), seq)
        return flops / (step.seconds * gpus * 1e12), note, terms
    return tokens / step.seconds / gpus, note, terms


#: An FP8 row's ``quantization_config`` as the published checkpoint names it: ``fp8``
#: weights (the rows say "fp8 weights"); one byte a weight, the block scales (1/16,384 B a
#: weight at 128 × 128) under the rows' precision.
_FP8_CONFIG = {"quantization_config": {"quant_method": "fp8"}}


def _inference(
    data: Mapping[str, Any], inputs: Mapping[str, Any]
) -> tuple[ModelAllocation, Architecture, MemoryEstimate]:
    engine = _engine(str(inputs.get("backend")))
    alloc = _allocation(inputs, engine)
    arch = _row_model(data, inputs)
    fraction = inputs.get("memory_fraction")
    if fraction is None:
        if engine != "vllm":
            raise NotCompared(f"{engine}: the memory fraction is not stated")
        fraction = VLLM_DEFAULT_FRACTION
    precision = str(inputs.get("precision") or "")
    settings = InferenceSettings(
        dtype="float16" if precision.startswith("fp16") else "bfloat16",
        memory_fraction=float(fraction),
    )
    if _fp8_weights(inputs):  # linear and expert weights fp8 (memory_inference), KV bf16
        # the checkpoint's quantization_config as the one config.json reader reads it
        # (architecture.read_quantization): fp8, embedding and output in bf16
        arch = replace(arch, quantization=read_quantization(_FP8_CONFIG, str(inputs["model"])))
    if inputs.get("max_model_len"):
        settings = replace(settings, context_length=int(inputs["max_model_len"]))
    capacity = _inference_capacity(data, inputs)
    device = _reported(data, inputs)
    settings = replace(
        settings,
        device_bytes=device,
        max_num_seqs=int(inputs.get("max_num_seqs") or _vllm_default_seqs(inputs, device or 0)),
        max_num_batched_tokens=inputs.get("max_num_batched_tokens"),
        vllm_allreduce_inputs_held=bool(inputs.get("vllm_allreduce_inputs_held")),
        vllm_counts_cuda_context=bool(inputs.get("vllm_counts_cuda_context")),
    )
    estimate = estimate_allocation(alloc, arch, capacity, None, settings)
    return alloc, arch, estimate


def _inference_capacity(data: Mapping[str, Any], inputs: Mapping[str, Any]) -> int | None:
    """The GPU's capacity for an inference row: the catalogue's, else (a GPU the catalogue
    lacks) the total the row's own log reports (``total_gpu_memory_gib_reported``): the KV
    pool reads only memory, never the GPU's speeds. Without either the row is not compared."""
    try:
        return _capacity(data, inputs["gpu"])
    except NotCompared:
        if inputs.get("total_gpu_memory_gib_reported"):
            return int(float(inputs["total_gpu_memory_gib_reported"]) * GIB)
        raise


def _reported(data: Mapping[str, Any], inputs: Mapping[str, Any]) -> int | None:
    """The total the run's GPU reported: the row's own log line, else the catalogue's."""
    if inputs.get("total_gpu_memory_gib_reported"):
        return int(float(inputs["total_gpu_memory_gib_reported"]) * GIB)
    try:
        return reported_bytes(find_gpu(inputs["gpu"]))
    except AllocationError:
        return _capacity(data, inputs["gpu"])


def _vllm_default_seqs(inputs: Mapping[str, Any], device: int) -> int:
    """vLLM's default ``max_num_seqs`` for the row's engine: 1,024 for the V1 engine's
    server on a GPU of ≥ 70 GiB that is not an A100, else 256 (vllm/engine/arg_utils.py
    ``default_max_num_seqs``; V0's ``max_num_seqs`` default was 256)."""
    v1 = "V1" in str(inputs.get("backend") or "")
    big = device >= 70 * GIB and "a100" not in str(inputs.get("gpu") or "").lower()
    return 1024 if v1 and big else 256


def _kv_note(inputs: Mapping[str, Any]) -> str:
    notes = []
    if inputs.get("memory_fraction") is None:
        notes.append(f"memory fraction not stated: vLLM's default {VLLM_DEFAULT_FRACTION}")
    if _fp8_weights(inputs):
        notes.append("linear and expert weights fp8, the embedding, output and KV cache bf16")
    if inputs.get("vllm_allreduce_inputs_held"):
        notes.append("vLLM before #2151: the profile run's TP all-reduce inputs held")
    if inputs.get("vllm_counts_cuda_context"):
        notes.append("vLLM V0 from #2031 to #10511: total − free counts the CUDA context")
    return "; ".join(notes)


def _kv_tokens(data: Mapping[str, Any], row: Mapping[str, Any]) -> tuple[float, str]:
    _, _, estimate = _inference(data, row["inputs"])
    kv = estimate.kv_cache
    if kv is None or kv.tokens is None:
        raise NotCompared("the estimate gives no KV tokens")
    return float(kv.tokens), _kv_note(row["inputs"])


def _kv_memory(data: Mapping[str, Any], row: Mapping[str, Any]) -> tuple[float, str]:
    _, _, estimate = _inference(data, row["inputs"])
    return estimate.term("kv_cache") / GIB, _kv_note(row["inputs"])


def _a100_variant(data: Mapping[str, Any], inputs: Mapping[str, Any]) -> tuple[str, str]:
    """An A100 of unstated memory, as the run's own size implies: the batch's whole KV
    cache (batch × (prompt + output) tokens) and the weights outgrow the 40 GB A100, so the
    run had the 80 GB one; else the variant stays unknown (one rule for every decode row)."""
    _, arch, estimate = _inference(
        data, {**inputs, "gpu": "A100-80GB", "memory_fraction": VLLM_DEFAULT_FRACTION}
    )
    per_token = estimate.kv_cache.bytes_per_token if estimate.kv_cache is not None else 0
    tokens = int(inputs["batch"]) * (int(inputs["prompt_len"]) + int(inputs["output_len"]))
    weights = arch.parameters.total * 2  # fp16
    needed = weights + tokens * per_token
    small = find_gpu("A100-40GB").memory_bytes
    if needed <= small:
        raise NotCompared(
            f"'A100': the memory variant is not stated and the run ({needed / GIB:.1f} GiB of "
            f"weights and KV) fits either (HBM 1.555 TB/s for 40 GB, 2.039 for 80 GB)"
        )
    return "A100-80GB", (
        f"A100 of unstated memory: weights {weights / GIB:.1f} GiB + KV {tokens:,} tokens × "
        f"{per_token:,} B = {needed / GIB:.1f} GiB > the 40 GB A100's {small / GIB:.0f} GiB, "
        f"so the 80 GB one"
    )


def _decode_tps(data: Mapping[str, Any], row: Mapping[str, Any]) -> Answer:
    inputs = row["inputs"]
    variant = ""
    if inputs["gpu"] == "A100":
        gpu, variant = _a100_variant(data, inputs)
        inputs = {**inputs, "gpu": gpu}
    hardware, note = _hardware(data, inputs)
    note = ", ".join(filter(None, (variant, note)))
    alloc, arch, estimate = _inference(data, {**inputs, "memory_fraction": VLLM_DEFAULT_FRACTION})
    kv = estimate.kv_cache
    prompt, output = int(inputs["prompt_len"]), int(inputs["output_len"])
    batch = int(inputs["batch"])
    steps = output
    if row["source"].startswith("lmdeploy"):
        prompt, steps = _lmdeploy_request(row)
    run = generation(
        arch,
        alloc.parallel,
        hardware,
        batch=batch,
        prompt_len=prompt,
        gen_len=steps,
        kv_bytes_per_token=kv.bytes_per_token if kv is not None else 0,
    )
    return batch * output / run.seconds, note, tuple(run.terms_dict())


#: ``profile_generation.py``'s rounds per thread (``--test-round``, default 6; the warm-up
#: round, ``--warmup-round`` 1, runs before the clock starts), InternLM/lmdeploy
#: benchmark/profile_generation.py at 4818dac37 (the commit that published the rows).
LMDEPLOY_TEST_ROUNDS = 6


def _lmdeploy_request(row: Mapping[str, Any]) -> tuple[int, int]:
    """One LMDeploy request as TurboMind v0.1.0a1 runs it: (prefill tokens, decode steps) =
    (prompt − 1, output).

    The rows were first published at InternLM/lmdeploy 4818dac37 ("The tested lmdeploy
    version is `v0.1.0a1`", docs/en/benchmark/a100_fp16.md; relabelled v0.2.0 later with
    the figures unchanged), timed by benchmark/profile_generation.py at that commit
    (``profile_throughput`` and ``infer``): ``batch`` threads each send
    :data:`LMDEPLOY_TEST_ROUNDS` identical requests back to back (``stream_infer`` of the
    same ``prompt_len`` tokens, ``request_output_len=output_len``, ``ignore_eos=True``); the
    throughput is ``token_latency_stats.size / elapsed_time``, that is batch × rounds ×
    output tokens over the wall time from the threads' start to the last one's join. At
    v0.1.0a1 (9c46b27ce) ``LlamaBatch::ContextDecode`` prefills a new request's prompt but
    its last token ("subtract input/context len by 1 to skip last input token (will process
    with decoder later)", and nothing for a one-token prompt: ``missing > 1``,
    src/turbomind/models/llama/LlamaBatch.cc l.1051-1056), and every output token, the first
    included, is a decode step. All threads' requests are the same and start together, so
    in lock step each round is that prefill + ``output`` steps at the whole batch, and the
    rounds cancel: batch × output / (prefill + output × step). The host's time inside the
    clock (each thread's ``create_instance()``, between a thread's requests, the threads
    drifting apart) is in the wall time too; none is a published input (docs/accuracy.md)."""
    inputs = row["inputs"]
    return max(0, int(inputs["prompt_len"]) - 1), max(1, int(inputs["output_len"]))


def _in_flight(source: str, inputs: Mapping[str, Any]) -> dict[str, int]:
    """An asynchronous NeMo RL run's bound on what is in flight as
    ``rollout.max_concurrent_rollouts``: its collector holds a semaphore of
    ``num_prompts_per_step × max_trajectory_age_steps`` prompt groups, each of
    ``num_generations_per_prompt`` sequences (nemo_rl/algorithms/async_utils.py
    ``AsyncTrajectoryCollector.__init__`` ``max_inflight``, NVIDIA-NeMo/RL v0.5.0 6c7089300f
    and v0.6.0 5fb588932b); with ``max_head_offpolicyness`` = the age, the reference's
    (η + 1) × batch bound does not bind (execution.sequences_in_flight). Each row keeps its
    framework's bound: the AReaL paper's rows and synchronous runs the reference's own."""
    age = int(inputs.get("max_offpolicyness") or 0)
    if age < 1 or not source.startswith("nemo-rl"):
        return {}
    return {"max_concurrent_rollouts": int(inputs["prompts_per_step"]) * age}


def _nemo_max_num_seqs(source: str, inputs: Mapping[str, Any]) -> dict[str, int]:
    """The requests a NeMo RL run's vLLM instance runs at once: its recipes set no
    ``max_num_seqs`` (``git grep max_num_seqs`` in nemo_rl/ and the performance recipes
    finds only DeepSeek-V3's, NVIDIA-NeMo/RL v0.5.0 6c7089300f and v0.6.0 5fb588932b), so
    vLLM's own default for how the worker builds its engine: ``vllm.LLM(**llm_kwargs)``
    (nemo_rl/models/generation/vllm/vllm_worker.py) is the LLM_CLASS usage context, 1,024
    on a GPU of ≥ 70 GiB that is not an A100, else 256; the asynchronous worker's
    ``AsyncLLM.from_engine_args`` (vllm_worker_async.py) keeps its default
    ``usage_context=UsageContext.ENGINE_CONTEXT``, which ``get_batch_defaults`` does not
    list, so ``SchedulerConfig.DEFAULT_MAX_NUM_SEQS`` = 128 (vllm/engine/arg_utils.py
    ``_set_default_max_num_seqs_and_batched_tokens_args``, vllm-project/vllm@99d7eb5d;
    vllm/v1/engine/async_llm.py@00080ee1; vllm/config/scheduler.py)."""
    rollout = inputs.get("rollout") or {}
    if not source.startswith("nemo-rl") or rollout.get("backend") != "vllm":
        return {}
    if rollout.get("max_num_seqs"):
        return {"max_num_seqs": int(rollout["max_num_seqs"])}
    if rollout.get("async_engine"):
        return {"max_num_seqs": 128}
    big = "a100" not in str(inputs.get("gpu") or "").lower() and (
        (_capacity_or_zero(inputs)) >= 70 * GIB
    )
    return {"max_num_seqs": 1024 if big else 256}


def _capacity_or_zero(inputs: Mapping[str, Any]) -> int:
    try:
        return reported_bytes(find_gpu(inputs["gpu"]))
    except AllocationError:
        return 0


def _rl_config(
    data: Mapping[str, Any], inputs: Mapping[str, Any], source: str = ""
) -> dict[str, Any]:
    """The run as an experiment config in the reference's keys (``source``: the row's)."""
    rollout, train = inputs.get("rollout"), inputs.get("train")
    if not rollout or not train:
        raise NotCompared("the rollout and training layouts are not published")
    per_node = int(inputs.get("gpus_per_node") or 8)
    gpus = int(inputs["gpus"])
    r_engine = _engine(rollout["backend"])
    t_engine = "megatron" if "megatron" in train["backend"] else _engine(train["backend"])
    tokens_mb = train.get("max_tokens_per_mb") or int(inputs.get("max_seq_len") or 0) * int(
        train.get("micro_batch") or 1
    )
    model = inputs.get("catalogue_equivalent") or inputs["model"]
    fraction_key = "mem_fraction_static" if r_engine == "sglang" else "gpu_memory_utilization"
    prompt = inputs.get("max_prompt_len")
    if prompt is None and inputs.get("max_seq_len"):
        prompt = max(1, int(inputs["max_seq_len"]) - int(inputs["max_new_tokens"]))
    cfg: dict[str, Any] = {
        "cluster": {"n_nodes": math.ceil(gpus / per_node), "n_gpus_per_node": per_node},
        "rollout": {
            "backend": backend_string(r_engine, rollout["layout"]),
            "max_head_offpolicyness": inputs.get("max_offpolicyness"),
            # what the run keeps in flight, in the reference's keys (_in_flight)
            **_in_flight(source, inputs),
            # colocated: rollout and training time-share the same GPUs
            **(
                {"scheduling_strategy": {"type": "colocation", "target": "actor"}}
                if inputs.get("mode") == "colocated"
                else {}
            ),
        },
        r_engine: {
            fraction_key: rollout.get("memory_fraction"),
            **_nemo_max_num_seqs(source, inputs),  # the server's own bound, as the run had it
        },
        "actor": {
            "backend": backend_string(t_engine, train["layout"]),
            "path": model,
            "gradient_checkpointing": train.get("activation_checkpointing", "full") != "none",
            "recompute_logprob": bool(train.get("recompute_logprob")),
            "mb_spec": {"max_tokens_per_mb": int(tokens_mb) or 16384},
            "optimizer": {"type": "adam"},
            # the run's optimizer steps per RL step, in the reference's key (_minibatches)
            "ppo_n_minibatches": _minibatches(inputs),
        },
        "train_dataset": {"batch_size": int(inputs["prompts_per_step"]), "max_length": prompt},
        "gconfig": {
            "n_samples": int(inputs["samples_per_prompt"]),
            "max_new_tokens": int(inputs["max_new_tokens"]),
        },
    }
    if inputs.get("mode") == "colocated":
        cfg["enable_offload"] = True  # the reference's switch for time-sharing the GPUs
        # disk: the one mode the reference allows colocated beside a vLLM rollout (the plan
        # refuses xccl there); the row's update is the run's in-place refit (_colocated_refit)
        cfg["actor"]["weight_update_mode"] = "disk"
        if cfg["rollout"]["backend"].startswith("vllm"):
            # a colocated vLLM is offloaded by /sleep, which frees its memory only in sleep
            # mode (experiment.server_rules); the run's vLLM time-shares the GPUs that way
            cfg.setdefault("vllm", {})["enable_sleep_mode"] = True
    if train.get("reference_model"):
        cfg["actor"]["kl_ctl"] = 0.1
        cfg["ref"] = {
            "backend": "",
            "path": model,
            "mb_spec": cfg["actor"]["mb_spec"],
            "scheduling_strategy": {"type": "colocation", "target": "actor"},
        }
    return cfg


def _minibatches(inputs: Mapping[str, Any]) -> int:
    """The run's optimizer steps per RL step as ``actor.ppo_n_minibatches``: the row's own
    count, else its generation batch over its training global batch (NeMo RL's
    ``num_prompts_per_step × num_generations_per_prompt`` samples, trained
    ``train_global_batch_size`` at a time: 2,048 / 512 = 4 steps)."""
    if inputs.get("ppo_minibatches"):
        return int(inputs["ppo_minibatches"])
    generated, trained = inputs.get("generation_batch"), inputs.get("train_global_batch")
    if not generated or not trained or int(generated) % int(trained):
        raise NotCompared("the optimizer steps per RL step are not published")
    return int(generated) // int(trained)


#: How a colocated NeMo RL run updates the rollout's weights, and the reference's mode for it.
COLOCATED_REFIT = (
    "colocated rows: NeMo RL refits in place, the training worker streaming its weights to "
    "the vLLM worker on the same GPU by CUDA IPC handles over ZMQ (stream_weights_via_ipc_zmq "
    "/ update_weights_via_ipc_zmq in nemo_rl/algorithms/grpo.py refit_policy_generation, "
    "NVIDIA-NeMo/RL v0.5.0 6c7089300f and v0.6.0 5fb588932b); the reference's same-GPU "
    "update is weight_update_mode=awex (areal/engine/awex/colocate_writer.py: CUDA IPC to "
    "the colocated server, then its own ranks redistribute; AReaL cbff54d6), which it allows "
    "beside an SGLang rollout only, so the row takes rl_step.weight_update(awex) over NVLink "
    "from every training GPU in place of the plan's update"
)


def _colocated_refit(
    data: Mapping[str, Any], inputs: Mapping[str, Any], arch: Architecture
) -> dict[str, object]:
    """A colocated row's weight update as the run did it (:data:`COLOCATED_REFIT`)."""
    hardware, _ = _hardware(data, inputs)
    term = weight_update(
        arch, "awex", hardware, inside_node=True, senders=int(inputs["train"]["gpus"])
    )
    return {"name": term.name, "seconds": term.seconds, "formula": term.formula}


def _rl_step(data: Mapping[str, Any], row: Mapping[str, Any]) -> Answer:
    from areal_alloc.plan import plan_config  # the plan's imports are heavier

    inputs = row["inputs"]
    if not inputs.get("mean_sequence_len_published"):
        # one rule for every RL-step row: generation and training both scale with the mean
        # length, and without it the package takes gconfig.max_new_tokens (an upper bound)
        raise NotCompared(
            "the run's mean generation length is not published (the step scales with it; "
            f"without it the estimate takes max_new_tokens {int(inputs['max_new_tokens']):,}, "
            "an upper bound)"
        )
    cfg = _rl_config(data, inputs, str(row.get("source", "")))
    gpu, note = _gpu(data, inputs["gpu"], hbm=True)
    flags: dict[str, object] = {
        "gpu": inputs["gpu"],
        "peak_tflops": gpu.bf16_tflops,
        "hbm_tbps": gpu.hbm_tbps,
        "nvlink_gbps": gpu.nvlink_gbps,
    }
    if "mean_gen_len" in NAMES:
        # NeMo RL's "G-Average Seq len", where the package takes a mean generation length
        flags["mean_gen_len"] = int(inputs["mean_sequence_len_published"])
    settings = Settings.from_sources(flags=flags, environ={}, detect=False)
    try:
        plan = plan_config(cfg, on_memory="warn", settings=settings)
    except AllocationError as error:
        raise NotCompared(f"the plan refuses the run: {error.message}") from None
    pace = plan.pace
    if pace is None:
        raise NotCompared("the plan gives no pace")
    sides: tuple[dict[str, object], ...] = (
        {"name": "generation", "seconds": pace.generate_seconds, "formula": pace.mode},
        {"name": "training side", "seconds": pace.train_seconds, "formula": pace.mode},
    )
    update = tuple(
        {"name": t.name, "seconds": t.seconds, "formula": t.formula} for t in pace.step_terms
    )
    step = float(pace.step_seconds)
    if pace.mode == COLOCATED:
        refit = _colocated_refit(data, inputs, _row_model(data, inputs))
        update = (refit, *(t for t in update if not str(t["name"]).startswith("weight update")))
        step = step_seconds(
            pace.mode,
            pace.generate_seconds,
            pace.train_seconds,
            float(str(refit["seconds"])),
            pace.switch_seconds,
        )
    engines = tuple(
        {
            "name": f"engine {engine.key}",
            "seconds": engine.seconds,
            "formula": engine.what,
            "hidden": True,  # inside the generation or the training side
        }
        for engine in pace.engines
    )
    return step, note, sides + update + engines


#: How a step is taken from the plan's pace.
RL_STEP_RULE = (
    "rl_step: the plan's step in the config's mode (asynchronous: the slower side; "
    "synchronous: the sum; colocated: the sum and the switch), with the weight update; "
    + COLOCATED_REFIT
)

# --- the reference's own engine, measured by this project -------------------------------


def explain_args(inputs: Mapping[str, Any], forward_only: bool = False) -> list[str]:
    """The ``areal-alloc explain`` command of a measured step of the reference's engine:
    ``explain fsdp:d1 --model M --gpu G --tokens N --recompute R --tokens-per-step N
    --seq-len N --json`` (``forward_only``: with ``--optimizer none``, a ref's pass)."""
    tokens = str(int(inputs["seq_len"]) * int(inputs.get("micro_batch") or 1))
    args = [
        backend_string(_engine(str(inputs["backend"])), inputs.get("layout") or {}),
        "--model",
        str(inputs["model"]),
        "--gpu",
        str(inputs["gpu"]),
        "--tokens",
        tokens,
        "--recompute",
        _recompute(inputs),
        "--tokens-per-step",
        tokens,
        "--seq-len",
        str(inputs["seq_len"]),
        "--json",
    ]
    return [*args, "--optimizer", "none"] if forward_only else args


def _explained(inputs: Mapping[str, Any], forward_only: bool = False) -> dict[str, Any]:
    """What ``areal-alloc explain … --json`` prints for the row, run in process."""
    import contextlib
    import io

    from areal_alloc.cli.explain import explain  # the CLI's imports are heavier

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = explain(explain_args(inputs, forward_only))
    if code != 0:
        raise NotCompared(f"explain {' '.join(explain_args(inputs, forward_only))} exits {code}")
    found: dict[str, Any] = json.loads(out.getvalue())
    return found


def _reference_memory(data: Mapping[str, Any], row: Mapping[str, Any]) -> tuple[float, str]:
    """The estimate's total (the reserve included) against the device memory in use at
    the step's peak (total − free: the allocator's blocks, the CUDA context and NCCL)."""
    memory = _explained(row["inputs"])["memory"]
    verdict = (
        str(memory["verdict"]).upper() if memory["verdict"] == "does not fit" else memory["verdict"]
    )
    return float(memory["total"]) / GIB, f"{verdict} in {memory['capacity'] / GIB:.1f} GiB"


def _reference_allocated(data: Mapping[str, Any], row: Mapping[str, Any]) -> tuple[float, str]:
    """The estimate's terms but its reserve (the CUDA context, NCCL and the caching
    allocator's cache) against the allocator's peak (``torch.cuda.max_memory_allocated``)
    over the step."""
    memory = _explained(row["inputs"])["memory"]
    reserve = sum(t["bytes"] for t in memory["terms"] if t["name"] == "reserve")
    allocated = float(memory["total"] - reserve) / GIB
    return allocated, f"{memory['phase']} phase, without the {reserve / GIB:.1f} GiB reserve"


def _speed_terms(found: Mapping[str, Any]) -> tuple[dict[str, object], ...]:
    return tuple(
        {k: t[k] for k in ("name", "seconds", "formula", "hidden") if k in t}
        for t in found["terms"]
    )


def _reference_step(data: Mapping[str, Any], row: Mapping[str, Any]) -> Answer:
    found = _explained(row["inputs"])["training"]
    return float(found["step_seconds"]), "", _speed_terms(found)


def _reference_forward(data: Mapping[str, Any], row: Mapping[str, Any]) -> Answer:
    """The no-grad forward pass as a forward-only engine's step (``--optimizer none``)."""
    found = _explained(row["inputs"], forward_only=True)["training"]
    return float(found["step_seconds"]), "explain --optimizer none", _speed_terms(found)


_ADAPTERS: dict[str, Callable[[Mapping[str, Any], Mapping[str, Any]], Answer]] = {
    "train_memory": _train_memory,
    "kv_tokens": _kv_tokens,
    "kv_memory": _kv_memory,
    "decode_tps": _decode_tps,
    "train_tps": _train_tps,
    "rl_step": _rl_step,
    "reference_fsdp_memory": _reference_memory,
    "reference_fsdp_allocated": _reference_allocated,
    "reference_fsdp_step": _reference_step,
    "reference_fsdp_forward": _reference_forward,
}


def _short(inputs: Mapping[str, Any]) -> str:
    """The inputs in short: model, layout, GPU and the sizes that matter."""
    parts = [str(inputs.get("model", "?")).rsplit("/", 1)[-1]]
    if inputs.get("layout"):
        parts.append(
            backend_string(str(inputs.get("backend", "?")).split(" ")[0], inputs["layout"])
        )
    elif inputs.get("rollout") and inputs.get("train"):
        parts.append(
            backend_string(inputs["rollout"]["backend"], inputs["rollout"]["layout"])
            + "+"
            + backend_string(inputs["train"]["backend"].split(" ")[0], inputs["train"]["layout"])
        )
    parts.append(f"{inputs.get('gpus', '?')}×{inputs.get('gpu', '?')}")
    for key, label in (
        ("seq_len", "seq"),
        ("micro_batch", "mb"),
        ("batch", "batch"),
        ("prompt_len", "in"),
        ("output_len", "out"),
        ("memory_fraction", "mem"),
        ("mode", ""),
    ):
        if inputs.get(key) is not None:
            parts.append(f"{label} {inputs[key]}".strip())
    return " ".join(parts)


def _measured(row: Mapping[str, Any]) -> tuple[float, str]:
    value, unit = float(row["measured"]["value"]), str(row["measured"]["unit"])
    if unit == "blocks":
        return value * int(row["tokens_per_block"]), "tokens"
    return value, unit


def compare(data: Mapping[str, Any], row: Mapping[str, Any]) -> Compared:
    """Our estimate of one row, or the reason there is none."""
    measured, unit = _measured(row)
    base = Compared(row["id"], row["kind"], _short(row["inputs"]), measured, unit)
    reason = _unmodelled(row["inputs"], row["kind"])
    if reason is not None:
        return replace(base, reason=reason)
    try:
        answer = _ADAPTERS[row["kind"]](data, row)
    except NotCompared as why:
        return replace(base, reason=str(why))
    terms = answer[2] if len(answer) == 3 else ()
    return replace(base, estimate=answer[0], note=answer[1], terms=terms)


def compare_all(data: Mapping[str, Any], kind: str | None = None) -> list[Compared]:
    return [compare(data, row) for row in rows(data, kind)]


@dataclass(frozen=True, slots=True)
class Summary:
    kind: str
    compared: int
    not_compared: int
    median: float | None  # of the absolute errors
    worst: float | None
    goal: Goal | None

    @property
    def met(self) -> bool | None:
        if self.goal is None or self.median is None or self.worst is None:
            return None
        return self.goal.met(self.median, self.worst)

    def to_dict(self) -> dict[str, object]:
        return {
            "kind": self.kind,
            "compared": self.compared,
            "not_compared": self.not_compared,
            "median_abs_error": self.median,
            "worst_abs_error": self.worst,
            "goal": self.goal.text() if self.goal else None,
            "met": self.met,
        }


def summary(results: Iterable[Compared]) -> list[Summary]:
    """Median and worst absolute error per kind, beside the goal."""
    by_kind: dict[str, list[Compared]] = {}
    for result in results:
        by_kind.setdefault(result.kind, []).append(result)
    found = []
    for kind in (k for k in KINDS if k in by_kind):
        errors = [abs(e) for e in (r.error for r in by_kind[kind]) if e is not None]
        found.append(
            Summary(
                kind,
                len(errors),
                len(by_kind[kind]) - len(errors),
                statistics.median(errors) if errors else None,
                max(errors) if errors else None,
                GOALS.get(kind),
            )
        )
    return found
