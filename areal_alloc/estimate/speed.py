"""How fast a layout runs: the step estimate's types, the FLOP counts and the attention's
efficiency, and the fits that invert them.

An estimate is printed with its terms, never a bare number: a :class:`StepEstimate` is a
list of :class:`StepTerm`; a term marked ``hidden`` runs under another and is shown, not
added. FLOPs are counted as megatron-core counts them (megatron/training/training.py
``num_floating_point_operations``: 6 × the token-linear GEMM weights — attention
projections, MLP or the top-k experts, the output layer — per token, plus 6 × query
width × sequence length per token and layer for causal attention,
:func:`attention_flops`). The estimates: ``speed_training.training_step`` and
``speed_inference.decode_step`` / ``generation``; :func:`fit_training` and
:func:`fit_decode` give the efficiency that makes one match a measurement.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from areal_alloc.architecture import Architecture
from areal_alloc.errors import AllocationValidationError
from areal_alloc.estimate import calibration
from areal_alloc.estimate.backends import TRAINING
from areal_alloc.estimate.system import Hardware

__all__ = [
    "LayerFlops",
    "StepEstimate",
    "StepTerm",
    "attention_efficiency",
    "attention_flops",
    "fit_decode",
    "fit_training",
    "layer_flops",
    "members_per_node",
    "model_flops",
    "ring_share",
    "within_node",
]


@dataclass(frozen=True, slots=True)
class StepTerm:
    """One term of a step; a ``hidden`` term runs under another (a max, or a collective
    overlapped with compute) and is printed but not added to the step."""

    name: str
    seconds: float
    formula: str
    hidden: bool = False


@dataclass(frozen=True, slots=True)
class StepEstimate:
    """A training step (or an inference decode step) term by term."""

    terms: tuple[StepTerm, ...]
    tokens: int  # tokens the step processes (training) or produces (decode)
    model_flops: float
    gpus: int
    peak_tflops: float
    assumptions: tuple[str, ...] = ()

    @property
    def seconds(self) -> float:
        return sum(t.seconds for t in self.terms if not t.hidden)

    @property
    def host(self) -> StepTerm | None:
        """The step's host-time term (``speed_host.host_term``: "host", hidden under the
        GPU's time, or "host (beyond the GPU)"); None where the engine has none."""
        return next((t for t in self.terms if t.name.startswith("host")), None)

    @property
    def tokens_per_second(self) -> float:
        return self.tokens / self.seconds if self.seconds > 0 else 0.0

    @property
    def mfu(self) -> float:
        """Model FLOPs utilisation: the model's FLOPs over the GPUs' peak for the step."""
        if self.seconds <= 0:
            return 0.0
        return self.model_flops / (self.seconds * self.gpus * self.peak_tflops * 1e12)

    @property
    def bottleneck(self) -> str:
        return max((t for t in self.terms if not t.hidden), key=lambda t: t.seconds).name

    def repeated(self, count: int, tokens: int, why: str) -> StepEstimate:
        """This step run ``count`` times over ``tokens`` in all (``why``: what repeats it,
        said as an assumption): every term ``count`` × its own, each printed as such."""
        if count == 1:
            return self
        terms = tuple(
            replace(t, seconds=t.seconds * count, formula=f"{count} × ({t.formula})")
            for t in self.terms
        )
        return StepEstimate(
            terms,
            tokens,
            self.model_flops * tokens / max(1, self.tokens),
            self.gpus,
            self.peak_tflops,
            (*self.assumptions, why),
        )

    def terms_dict(self) -> list[dict[str, object]]:
        return [
            {"name": t.name, "seconds": t.seconds, "formula": t.formula}
            | ({"hidden": True} if t.hidden else {})
            for t in self.terms
        ]

    def to_dict(self) -> dict[str, object]:
        return {
            "step_seconds": self.seconds,
            "tokens_per_second": self.tokens_per_second,
            "mfu": self.mfu,
            "bottleneck": self.bottleneck,
            "terms": self.terms_dict(),
            "assumptions": list(self.assumptions),
        }


@dataclass(frozen=True, slots=True)
class LayerFlops:
    """FLOPs of one forward and backward pass of one layer of each kind (:func:`layer_flops`)."""

    dense: float  # one dense decoder layer: its GEMMs and its causal attention core
    moe: float  # one mixture-of-experts decoder layer (the top-k experts a token passes)
    output: float  # the output layer (the logits GEMM)

    def of(self, dense_layers: int, moe_layers: int, output: bool) -> float:
        """The FLOPs of ``dense_layers`` + ``moe_layers`` layers (+ the output layer)."""
        return self.dense * dense_layers + self.moe * moe_layers + (self.output if output else 0.0)


def layer_flops(arch: Architecture, tokens: int, sequence_length: int) -> LayerFlops:
    """Each layer's FLOPs over ``tokens`` packed in sequences of ``sequence_length``, as
    megatron-core's ``num_floating_point_operations`` counts them: 6 × its token-linear GEMM
    weights per token, plus the attention core (:func:`attention_flops`) in a decoder layer."""
    p = arch.parameters
    per_token = float(tokens) * 6
    attention = attention_flops(arch, tokens, sequence_length, layers=1)
    return LayerFlops(
        dense=per_token * (p.attention + p.dense_mlp) + attention,
        moe=per_token * (p.attention + p.shared_experts + p.active_routed_experts + p.router)
        + attention,
        output=per_token * arch.vocab_size * arch.hidden_size,  # the logits
    )


def model_flops(arch: Architecture, tokens: int, sequence_length: int) -> float:
    """FLOPs of one forward and backward pass over ``tokens`` packed in sequences of
    ``sequence_length``, as megatron-core's ``num_floating_point_operations`` counts them:
    the sum of :func:`layer_flops` over the model's layers."""
    return layer_flops(arch, tokens, sequence_length).of(
        arch.dense_layer_count, arch.moe_layer_count, output=True
    )


def attention_flops(
    arch: Architecture,
    tokens: int,
    sequence_length: int,
    passes: int = 3,
    layers: int | None = None,
) -> float:
    """The causal attention core (QKᵀ and its product with V) over ``tokens`` in sequences of
    ``sequence_length``: 2 matmuls × 2 FLOPs × query width × s per token, layer and pass,
    halved by the causal mask (megatron-core's count; torchtitan's ``get_num_flop_per_token``
    and PaLM's MFU formula, 12·L·h·s per token over 3 passes, count the full square). It
    grows with the sequence: at s = 6h it equals the dense GEMMs (arXiv:2104.04473 eq. 3's
    ``s/(6h)``). ``passes``: 3 for forward and backward, 1 for a forward (prefill);
    ``layers``: the decoder layers counted (None: all of the model's)."""
    count = arch.num_layers if layers is None else layers
    return float(tokens) * 2 * passes * arch.query_width * sequence_length * count


#: "FlashAttention-2 achieving only 35% utilization on the H100 GPU" (Shah et al.,
#: FlashAttention-3, arXiv:2407.08608, abstract): the FSDP engines run FlashAttention-2
#: (the reference's FSDP engine and torchtitan's SDPA flash backend); Megatron's
#: Transformer Engine runs cuDNN's Hopper kernels, taken at the GEMMs' efficiency.
FLASH_ATTENTION_2_HOPPER = 0.35
_HOPPER = ("H100", "H200", "H800", "H20")
#: The attention kernels a training step can run, each as its speed relative to
#: FlashAttention-2's. FlashAttention-1 and its Triton port (flash_attn/flash_attn_triton.py:
#: "Overall Triton forward + backward is slightly slower than CUDA forward + backward")
#: run at half of it: FlashAttention-2 "yield[s] around 2× speedup compared to
#: FlashAttention, reaching 50-73% of the theoretical maximum FLOPs/s on A100", where
#: FlashAttention reached "only 25-40%" (Dao, arXiv:2307.08691, abstract and §1).
ATTENTION_KERNELS: dict[str, float] = {"flash-attention-2": 1.0, "flash-attention-1": 0.5}
DEFAULT_ATTENTION_KERNEL = "flash-attention-2"


def attention_efficiency(
    backend: str, hardware: Hardware, kernel: str = DEFAULT_ATTENTION_KERNEL
) -> float:
    """The fraction of peak the attention core reaches: FlashAttention-2's on a Hopper GPU
    under FSDP (or the GEMMs' if lower), else the GEMMs' efficiency; times the ``kernel``'s
    speed relative to FlashAttention-2 (:data:`ATTENTION_KERNELS`)."""
    if kernel not in ATTENTION_KERNELS:
        raise AllocationValidationError(
            f"attention kernel {kernel!r}: must be one of {', '.join(ATTENTION_KERNELS)}"
        )
    model = TRAINING.get(backend)
    if model is not None and model.fsdp_engine and hardware.name.upper().startswith(_HOPPER):
        base = min(hardware.compute_efficiency, FLASH_ATTENTION_2_HOPPER)
    else:
        base = hardware.compute_efficiency
    return base * ATTENTION_KERNELS[kernel]


def within_node(group_span: int, gpus_per_node: int) -> bool:
    """A group of ``group_span`` consecutive ranks fits in one node."""
    return group_span <= gpus_per_node


def members_per_node(size: int, stride: int, gpus_per_node: int) -> int:
    """How many ranks of a group of ``size`` ranks, ``stride`` apart, share a node."""
    if stride >= gpus_per_node:
        return 1
    return max(1, min(size, gpus_per_node // stride))


# --- calibration: the efficiency that makes an estimate match a measurement ------------


def fit_training(measured_seconds: float, estimate: StepEstimate, hardware: Hardware) -> float:
    """The compute efficiency that makes ``estimate`` take ``measured_seconds``."""
    calibration.check_measured(measured_seconds, "--step-seconds", calibration.MAX_STEP_SECONDS)
    scaled = ("compute", "pipeline imbalance", "pipeline bubble")  # all scale with the compute
    compute = sum(t.seconds for t in estimate.terms if t.name in scaled)
    rest = estimate.seconds - compute
    if measured_seconds <= rest:
        raise AllocationValidationError(
            f"the measured {measured_seconds:g} s is less than the estimated communication "
            f"alone ({rest:.3g} s): give the cluster's real network (--inter-node-gbps) or a "
            f"higher --comm-efficiency"
        )
    efficiency = hardware.compute_efficiency * compute / (measured_seconds - rest)
    return calibration.check_efficiency(
        efficiency,
        f"the measured {measured_seconds:g} s",
        "peak compute",
        "check the measurement, the layout, the tokens per step and the GPU",
    )


def fit_decode(
    measured_tokens_per_second: float,
    estimate: StepEstimate,
    hardware: Hardware,
    instances: int = 1,
) -> float:
    """The HBM efficiency that makes ``estimate`` (one instance's decode step) generate
    ``measured`` tokens per second over ``instances`` instances; messages quote the
    measurement as given."""
    calibration.check_measured(
        measured_tokens_per_second, "--tokens-per-second", calibration.MAX_TOKENS_PER_SECOND
    )
    measured_seconds = estimate.tokens * instances / measured_tokens_per_second
    hbm = sum(t.seconds for t in estimate.terms if t.name == "HBM reads" and not t.hidden)
    rest = estimate.seconds - hbm
    if measured_seconds <= rest:
        raise AllocationValidationError(
            f"{measured_tokens_per_second:g} tokens/s is faster than the estimated "
            f"tensor-parallel traffic alone allows ({estimate.tokens * instances / rest:,.0f} "
            f"tokens/s)"
        )
    efficiency = hardware.hbm_efficiency * hbm / (measured_seconds - rest)
    return calibration.check_efficiency(
        efficiency,
        f"{measured_tokens_per_second:g} tokens/s",
        "the HBM bandwidth",
        "check the measurement, the layout, the batch and the GPU",
    )


def ring_share(arch: Architecture, hardware: Hardware, inside_node: bool) -> float:
    """The fewest tokens of a sequence a context-parallel rank must hold for its attention
    to hide the KV ring: at each of the ring's steps a rank multiplies its n query tokens
    by n key/value tokens (4·n²·q FLOPs, QKᵀ and PV) while it passes n tokens' k and v on
    (2·n·kv × 2 B): the exchange hides while 4·n²·q / (peak × attention efficiency) ≥
    4·n·kv / link, that is n ≥ kv × peak × efficiency / (q × link). Below it each rank
    waits on the link, and more ranks only add waiting (ring attention: Liu et al. 2023,
    arXiv:2310.01889 §3, "the computation of blockwise attention … takes longer than
    transferring key-value blocks")."""
    q = arch.query_width or arch.hidden_size
    kv = arch.kv_width or q
    peak = hardware.peak_tflops * 1e12 * hardware.compute_efficiency
    return kv * peak / (q * hardware.link_bytes_per_second(inside_node))
