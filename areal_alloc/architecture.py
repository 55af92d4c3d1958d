"""A model's architecture, and its exact parameter count, from a Hugging Face config.

:class:`Architecture` holds what the memory estimate needs: widths, layer
counts, attention (multi-head, grouped-query or DeepSeek's multi-head latent
attention), the MLP (SwiGLU), and mixture-of-experts layers (routed and shared
experts, router, dense-first layers). :attr:`Architecture.parameters` counts
every weight the Hugging Face implementation creates, by kind, so that a layout
can shard each kind the way its backend does.

Where the config keys come from: ``transformers``' ``LlamaConfig``,
``Qwen2Config``, ``Qwen3Config``, ``Qwen3MoeConfig`` and ``DeepseekV3Config``
(https://huggingface.co/docs/transformers/model_doc/qwen3_moe lists the MoE
keys); a few Megatron-style names are read too (``num_layers``,
``ffn_hidden_size``, ``num_query_groups``, ``kv_channels``).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from areal_alloc.errors import AllocationValidationError
from areal_alloc.limits import MAX_COUNT
from areal_alloc.model_shape import config_values, language_model, read_model_config
from areal_alloc.numbers import quote, read_int

__all__ = ["Architecture", "ParameterCount", "Quantization", "read_quantization"]

#: The sizes read from a config, by the one alias table (model_shape.CONFIG_KEYS).
_READ = (
    "hidden_size",
    "num_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "intermediate_size",
    "vocab_size",
    "num_experts",
    "experts_per_token",
    "moe_intermediate_size",
    "first_dense_layers",
    "q_lora_rank",
    "kv_lora_rank",
    "qk_nope_head_dim",
    "qk_rope_head_dim",
    "v_head_dim",
    "max_position_embeddings",
)

_REQUIRED = ("hidden_size", "num_layers", "num_attention_heads", "vocab_size")

#: Every width and count of :class:`Architecture`: integers from 0 to MAX_COUNT.
_COUNTS = (
    "hidden_size",
    "num_layers",
    "num_attention_heads",
    "vocab_size",
    "num_key_value_heads",
    "head_dim",
    "intermediate_size",
    "num_experts",
    "experts_per_token",
    "moe_intermediate_size",
    "shared_expert_intermediate_size",
    "first_dense_layers",
    "q_lora_rank",
    "kv_lora_rank",
    "qk_nope_head_dim",
    "qk_rope_head_dim",
    "v_head_dim",
)


def _count(data: Any, source: str, key: str) -> int:
    """An optional count of a config: 0 when absent or null."""
    value = data.get(key)
    return 0 if value is None else read_int(value, f"{source}: {key}", minimum=0, maximum=MAX_COUNT)


def _flag(data: Any, source: str, default: bool, *keys: str) -> bool:
    """A boolean of a config (the first of ``keys`` given): JSON's true or false only.

    ``"false"`` is refused, not read as true: transformers would take the string as
    truthy and tie the embeddings, which is certainly not what was meant.
    """
    for key in keys:
        value = data.get(key)
        if value is None:
            continue
        if isinstance(value, bool):
            return value
        raise AllocationValidationError(
            f"{source}: {key}={quote(value)}: must be true or false (a JSON boolean)"
        )
    return default


@dataclass(frozen=True, slots=True)
class Quantization:
    """A checkpoint's ``quantization_config``: the bytes of each quantized weight (the
    linear and expert layers; the embedding and the output head stay in the activation
    dtype, as the servers load them), and what it was read from."""

    method: str
    weight_bytes: float
    text: str


#: The formats read, as the servers name them in ``quant_method`` (vLLM 0.19.1
#: vllm/model_executor/layers/quantization/, SGLang 0.5.10.post1 python/sglang/srt/
#: layers/quantization/): fp8 (per-tensor, or block with ``weight_block_size``: one float32
#: scale per block), SGLang's w8a8_int8 / w8a8_fp8, AWQ and GPTQ (``bits`` per weight and
#: per ``group_size`` weights a 16-bit scale and a ``bits``-wide zero point), and
#: compressed-tensors (``config_groups.*.weights.num_bits``). The servers' fp8 method
#: quantizes ``LinearBase`` and ``FusedMoE`` layers only (vLLM fp8.py ``get_quant_method``
#: l.174-199), so the vocabulary-parallel embedding and output head keep the activation
#: dtype; AWQ, GPTQ and compressed-tensors checkpoints leave them unquantized too
#: (``modules_to_not_convert`` / ``ignore`` list ``lm_head``).
_EIGHT_BIT = ("fp8", "w8a8_int8", "w8a8_fp8", "fbgemm_fp8", "modelopt", "modelopt_fp8")
_GROUPED = ("awq", "gptq", "awq_marlin", "gptq_marlin", "auto-round")


def read_quantization(data: Any, source: str) -> Quantization | None:
    """A config's ``quantization_config`` (None: not quantized); a format not read here
    is one error naming it."""
    config = data.get("quantization_config") if hasattr(data, "get") else None
    if config is None:
        return None
    if not isinstance(config, dict):
        raise AllocationValidationError(
            f"{source}: quantization_config={quote(config)}: must be a mapping"
        )
    method = str(config.get("quant_method") or "")
    if method in _EIGHT_BIT:
        block = config.get("weight_block_size")
        if (
            isinstance(block, list)
            and len(block) == 2
            and all(isinstance(n, int) and n > 0 for n in block)
        ):
            scale = 4 / (block[0] * block[1])
            return Quantization(
                method,
                1 + scale,
                f"{method} {block[0]}×{block[1]} blocks: 1 B + a float32 scale per block",
            )
        return Quantization(method, 1.0, f"{method}: 1 B")
    if method in _GROUPED:
        bits = read_int(
            config.get("bits", 4), f"{source}: quantization_config.bits", minimum=1, maximum=16
        )
        group = config.get("group_size", 128)
        group = (
            0
            if group in (None, -1)
            else read_int(
                group, f"{source}: quantization_config.group_size", minimum=1, maximum=MAX_COUNT
            )
        )
        extra = (2 + bits / 8) / group if group else 0.0
        grouped = f" + a 16-bit scale and {bits}-bit zero per {group}" if group else ""
        return Quantization(method, bits / 8 + extra, f"{method} {bits}-bit{grouped}")
    if method == "compressed-tensors":
        groups = config.get("config_groups")
        widths = [
            g.get("weights", {}).get("num_bits")
            for g in (groups.values() if isinstance(groups, dict) else ())
            if isinstance(g, dict) and isinstance(g.get("weights"), dict)
        ]
        widths = [w for w in widths if isinstance(w, int) and not isinstance(w, bool) and w > 0]
        if widths:
            bits = max(widths)
            return Quantization(method, bits / 8, f"compressed-tensors {bits}-bit weights")
        raise AllocationValidationError(
            f"{source}: quantization_config.config_groups: no group gives weights.num_bits as "
            f"a whole number above 0, so the weights' bytes are unknown; fix the file, or check "
            f"with --on-memory off (the hook's on_memory: off) to leave memory unestimated"
        )
    raise AllocationValidationError(
        f"{source}: quantization_config.quant_method={quote(method)} is not read here (read: "
        f"{', '.join((*_EIGHT_BIT, *_GROUPED, 'compressed-tensors'))}); check with "
        f"--on-memory off (the hook's on_memory: off) to leave memory unestimated"
    )


@dataclass(frozen=True, slots=True)
class ParameterCount:
    """Parameters by kind, as a backend shards them.

    Per-layer figures are for one layer of that kind; ``moe_layers`` of the
    ``num_layers`` are mixture-of-experts layers, the rest dense.
    """

    embedding: int
    output: int  # 0 when the output layer is tied to the embedding
    attention: int  # one layer's attention projections (and their biases)
    dense_mlp: int  # one dense layer's MLP
    shared_experts: int  # one MoE layer's shared experts (and their gate)
    routed_experts: int  # one MoE layer's routed experts, all of them
    active_routed_experts: int  # the top-k of them one token passes through
    router: int  # one MoE layer's router
    norms: int  # one layer's norms (q/k norms and MLA's latent norms included)
    final_norm: int
    dense_layers: int
    moe_layers: int

    @property
    def dense_layer(self) -> int:
        return self.attention + self.dense_mlp + self.norms

    @property
    def moe_layer(self) -> int:
        return self.attention + self.shared_experts + self.routed_experts + self.router + self.norms

    @property
    def layers(self) -> int:
        return self.dense_layer * self.dense_layers + self.moe_layer * self.moe_layers

    @property
    def total(self) -> int:
        return self.embedding + self.output + self.layers + self.final_norm

    @property
    def active(self) -> int:
        """Parameters one token passes through (routed experts: only the top-k)."""
        return self.total - (self.routed_experts - self.active_routed_experts) * self.moe_layers

    @property
    def expert_sharded(self) -> int:
        """Routed-expert parameters of the whole model (sharded over etp·ep)."""
        return self.routed_experts * self.moe_layers

    @property
    def replicated(self) -> int:
        """Parameters that tensor parallelism does not split (norms, routers)."""
        return (
            self.norms * (self.dense_layers + self.moe_layers)
            + self.router * self.moe_layers
            + self.final_norm
        )

    @property
    def tensor_sharded(self) -> int:
        """Parameters split by tensor parallelism (everything else)."""
        return self.total - self.expert_sharded - self.replicated

    @property
    def largest_layer(self) -> int:
        """The largest decoder layer (what FSDP gathers at once)."""
        return max(
            self.dense_layer if self.dense_layers else 0, self.moe_layer if self.moe_layers else 0
        )


@dataclass(frozen=True, slots=True)
class Architecture:
    """The widths and counts of a decoder-only transformer (SwiGLU MLP, RMSNorm)."""

    hidden_size: int
    num_layers: int
    num_attention_heads: int
    vocab_size: int
    num_key_value_heads: int = 0  # 0: as many as attention heads
    head_dim: int = 0  # 0: hidden_size / num_attention_heads
    intermediate_size: int = 0  # dense MLP width (dense models, dense-first layers)
    tie_word_embeddings: bool = False
    attention_bias: bool = False  # q, k and v projections with bias (Qwen2)
    mlp_bias: bool = False  # MLP (and expert) projections with bias (config "mlp_bias")
    #: learned absolute position embeddings: positions × h more embedding parameters
    #: (0: rotary or none)
    position_embeddings: int = 0
    qk_norm: bool = False  # per-head RMSNorm on q and k (Qwen3)
    gated_mlp: bool = True  # SwiGLU (gate, up, down); False: GPT's two-matrix GeLU MLP
    num_experts: int = 0
    experts_per_token: int = 0
    moe_intermediate_size: int = 0
    shared_expert_intermediate_size: int = 0  # all shared experts together
    shared_expert_gate: bool = False  # Qwen2-MoE's sigmoid gate on the shared expert
    first_dense_layers: int = 0
    q_lora_rank: int = 0  # MLA: 0 means q is projected directly
    kv_lora_rank: int = 0  # MLA when > 0
    qk_nope_head_dim: int = 0
    qk_rope_head_dim: int = 0
    v_head_dim: int = 0
    source: str = "model"
    #: the config's ``model_type`` ("" when not given): some builders' settings depend on the
    #: family (areal_alloc.experiment.rules); not a width, so not compared
    model_type: str = field(default="", compare=False)
    #: ``max_position_embeddings`` (0: not given) and ``rope_scaling``'s type, factor and
    #: ``original_max_position_embeddings`` (0: absent): the longest context each server
    #: derives (:meth:`position_limit`)
    max_position_embeddings: int = field(default=0, compare=False)
    rope_type: str = field(default="", compare=False)
    rope_factor: float = field(default=1.0, compare=False)
    rope_original: int = field(default=0, compare=False)
    #: where the positions above were read when not from ``source`` itself (a catalogue
    #: model's own config.json, cited in areal_alloc.catalogue.POSITIONS); "" : ``source``
    positions_source: str = field(default="", compare=False)
    #: the checkpoint's ``quantization_config`` (None: weights in the activation dtype)
    quantization: Quantization | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        for name in _COUNTS:
            value = getattr(self, name)
            least = 1 if name in _REQUIRED else 0
            number = read_int(value, f"{self.source}: {name}", minimum=least, maximum=MAX_COUNT)
            if number is not value:  # "4096" given directly: kept as the number it names
                object.__setattr__(self, name, number)
        self._check_heads()
        if self.num_experts and not (1 <= self.experts_per_token <= self.num_experts):
            raise AllocationValidationError(
                f"{self.source}: experts_per_token={self.experts_per_token} must be between 1 "
                f"and num_experts={self.num_experts}"
            )
        if self.num_experts and not self.moe_intermediate_size:
            raise AllocationValidationError(
                f"{self.source}: num_experts={self.num_experts} needs moe_intermediate_size"
            )
        if self.first_dense_layers > self.num_layers:
            raise AllocationValidationError(
                f"{self.source}: first_dense_layers={self.first_dense_layers} > "
                f"num_layers={self.num_layers}"
            )
        if self.dense_layer_count and not self.intermediate_size:
            raise AllocationValidationError(
                f"{self.source}: intermediate_size is needed for the dense MLP layers"
            )

    def _check_heads(self) -> None:
        """Heads against the width: what every per-head size below divides by."""
        h, a, kv = self.hidden_size, self.num_attention_heads, self.num_key_value_heads
        if a > h:
            raise AllocationValidationError(
                f"{self.source}: num_attention_heads={a:,} is more than hidden_size={h:,}: "
                f"a head needs at least one dimension"
            )
        if not self.head_dim and not self.is_mla and h % a:
            raise AllocationValidationError(
                f"{self.source}: hidden_size={h:,} is not divisible by num_attention_heads={a:,} "
                f"({h:,} % {a:,} = {h % a:,}); give head_dim when heads are not hidden_size / "
                f"num_attention_heads wide"
            )
        if kv and a % kv:
            raise AllocationValidationError(
                f"{self.source}: num_key_value_heads={kv:,} must divide "
                f"num_attention_heads={a:,} ({a:,} % {kv:,} = {a % kv:,})"
            )

    def position_limit(self, backend: str) -> int | None:
        """The longest context ``backend`` derives from the config (None: no positions
        given). SGLang 0.5.10.post1 (python/sglang/srt/utils/hf_transformers_utils.py
        ``get_context_length`` l.689-706): max_position_embeddings × rope_scaling's factor,
        the factor 1 when rope_scaling holds original_max_position_embeddings or is llama3.
        vLLM 0.19.1 (vllm/config/model.py ``_get_and_verify_max_len`` l.2098-2125): × the
        factor unless the type is su, longrope or llama3; yarn: original × factor."""
        positions = self.max_position_embeddings
        if not positions:
            return None
        kind, factor = self.rope_type, self.rope_factor
        if not kind:
            return positions
        if backend == "vllm":
            if kind in ("su", "longrope", "llama3"):
                return positions
            base = self.rope_original if kind == "yarn" and self.rope_original else positions
            return int(base * factor)
        if self.rope_original or kind == "llama3":
            return positions
        return int(positions * factor)

    # --- derived sizes -------------------------------------------------------------
    @property
    def kv_heads(self) -> int:
        return self.num_key_value_heads or self.num_attention_heads

    @property
    def head_size(self) -> int:
        return self.head_dim or self.hidden_size // self.num_attention_heads

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank > 0

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    @property
    def moe_layer_count(self) -> int:
        return self.num_layers - self.first_dense_layers if self.is_moe else 0

    @property
    def dense_layer_count(self) -> int:
        return self.num_layers - self.moe_layer_count

    @property
    def query_width(self) -> int:
        """Width of all query heads together (a·d; MLA: a·(nope + rope))."""
        if self.is_mla:
            return self.num_attention_heads * (self.qk_nope_head_dim + self.qk_rope_head_dim)
        return self.num_attention_heads * self.head_size

    @property
    def kv_width(self) -> int:
        """Width of the keys (= of the values) per token: kv heads × head size."""
        return self.kv_heads * self.head_size

    @property
    def parameters(self) -> ParameterCount:
        """Parameters by kind (:func:`_parameter_count`, counted once)."""
        return _parameter_count(self)

    # --- reading configs --------------------------------------------------------------
    @classmethod
    def from_mapping(cls, data: Any, source: str = "model") -> Architecture:
        """Read a Hugging Face ``config.json`` mapping (or our own field names)."""
        if not hasattr(data, "get"):
            raise AllocationValidationError(f"{source}: expected a mapping of config values")
        data = language_model(data)  # multimodal wrappers keep the LM in text_config
        # the one alias table and reader the shape checks use (model_shape.config_values)
        values: dict[str, Any] = dict(
            config_values(data, source, _READ, {n: 1 if n in _REQUIRED else 0 for n in _READ})
        )
        missing = [name for name in _REQUIRED if name not in values]
        if missing:
            raise AllocationValidationError(
                f"{source}: not a model config: {', '.join(missing)} missing (a Hugging Face "
                f"config.json has hidden_size, num_hidden_layers, num_attention_heads, "
                f"vocab_size)"
            )
        values["tie_word_embeddings"] = _flag(data, source, False, "tie_word_embeddings")
        values["gated_mlp"] = _flag(data, source, True, "swiglu")  # Megatron-style configs
        model_type = data.get("model_type")
        model_type = model_type if isinstance(model_type, str) else ""
        # Qwen2 always has q/k/v biases; Llama-style configs say attention_bias
        values["attention_bias"] = _flag(
            data, source, model_type in ("qwen2", "qwen2_moe"), "attention_bias", "qkv_bias"
        )
        values["mlp_bias"] = _flag(data, source, False, "mlp_bias")
        # learned absolute positions (Megatron's position_embedding_type, BERT-style
        # "absolute"); rotary models (rope) have none
        if str(data.get("position_embedding_type") or "") in ("learned_absolute", "absolute"):
            values["position_embeddings"] = _count(data, source, "max_position_embeddings")
        values["qk_norm"] = _flag(
            data, source, model_type.startswith("qwen3"), "qk_layernorm", "use_qk_norm"
        )
        shared = _count(data, source, "shared_expert_intermediate_size")
        n_shared = _count(data, source, "n_shared_experts")
        if shared:
            values["shared_expert_intermediate_size"] = shared
            values["shared_expert_gate"] = model_type == "qwen2_moe"
        elif n_shared and values.get("moe_intermediate_size"):
            values["shared_expert_intermediate_size"] = n_shared * values["moe_intermediate_size"]
        if values.get("num_experts") and data.get("mlp_only_layers"):
            raise AllocationValidationError(
                f"{source}: mlp_only_layers={quote(data.get('mlp_only_layers'))} (dense layers "
                f"between MoE layers) is not supported; give a model_shape instead"
            )
        rope = data.get("rope_scaling")
        if isinstance(rope, dict):
            kind = rope.get("rope_type") or rope.get("type") or "default"
            values["rope_type"] = str(kind)
            factor = rope.get("factor")
            if isinstance(factor, (int, float)) and not isinstance(factor, bool) and factor > 0:
                values["rope_factor"] = float(factor)
            original = rope.get("original_max_position_embeddings")
            if isinstance(original, int) and not isinstance(original, bool) and original > 0:
                values["rope_original"] = original
        values["quantization"] = read_quantization(data, source)
        try:
            return cls(**values, source=source, model_type=model_type)
        except TypeError as error:  # a value of the wrong kind, e.g. a list
            raise AllocationValidationError(f"{source}: {error}") from None

    @classmethod
    def from_file(cls, path: str | Path) -> Architecture:
        """Read a local ``config.json`` (or the folder holding one)."""
        file, data = read_model_config(path)
        return cls.from_mapping(data, source=str(file))


@functools.lru_cache(maxsize=1024)
def _parameter_count(arch: Architecture) -> ParameterCount:
    """:attr:`Architecture.parameters`, counted once per architecture: the layout searches
    ask for it tens of thousands of times (equal architectures count alike: every width it
    reads is compared)."""
    h = arch.hidden_size
    if arch.is_mla:
        a, nope, rope, v = (
            arch.num_attention_heads,
            arch.qk_nope_head_dim,
            arch.qk_rope_head_dim,
            arch.v_head_dim,
        )
        if arch.q_lora_rank:
            query = h * arch.q_lora_rank + arch.q_lora_rank * a * (nope + rope)
            latent_norms = arch.q_lora_rank + arch.kv_lora_rank
        else:
            query = h * a * (nope + rope)
            latent_norms = arch.kv_lora_rank
        attention = (
            query
            + h * (arch.kv_lora_rank + rope)  # kv_a_proj_with_mqa
            + arch.kv_lora_rank * a * (nope + v)  # kv_b_proj
            + a * v * h  # o_proj
        )
    else:
        q, kv = arch.query_width, arch.kv_width
        attention = h * q + 2 * h * kv + q * h
        if arch.attention_bias:
            attention += q + 2 * kv
        latent_norms = 2 * arch.head_size if arch.qk_norm else 0
    matrices = 3 if arch.gated_mlp else 2

    def mlp(width: int) -> int:
        """One MLP of ``width``: its matrices, and with mlp_bias each output's bias
        (gate and up f each, down h; LlamaMLP ``bias=config.mlp_bias``)."""
        if not width:
            return 0
        bias = (matrices - 1) * width + h if arch.mlp_bias else 0
        return matrices * h * width + bias

    shared = mlp(arch.shared_expert_intermediate_size)
    if arch.shared_expert_gate and arch.shared_expert_intermediate_size:
        shared += h
    one_expert = mlp(arch.moe_intermediate_size)
    return ParameterCount(
        embedding=arch.vocab_size * h + arch.position_embeddings * h,
        output=0 if arch.tie_word_embeddings else arch.vocab_size * h,
        attention=attention,
        dense_mlp=mlp(arch.intermediate_size),
        shared_experts=shared if arch.is_moe else 0,
        routed_experts=one_expert * arch.num_experts,
        active_routed_experts=one_expert * arch.experts_per_token,
        router=h * arch.num_experts,
        norms=2 * h + latent_norms,
        final_norm=h,
        dense_layers=arch.dense_layer_count,
        moe_layers=arch.moe_layer_count,
    )
