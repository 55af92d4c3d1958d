"""How fast a layout runs: a training step's time and an inference instance's throughput.

An estimate printed with its terms, never a bare number. Training
(:func:`training_step`):

- compute: the model's FLOPs for the step, counted as megatron-core counts them
  (megatron/training/training.py ``num_floating_point_operations``: 6 × the
  token-linear GEMM weights — attention projections, MLP or the top-k experts,
  the output layer — per token, plus 6 × query width × sequence length per token
  and layer for causal attention), with recomputation adding its forward pass
  again, at an achievable fraction of the GPU's dense BF16 peak;
- the pipeline bubble (p − 1) / (micro-batches × vpp) of the compute;
- tensor/sequence-parallel all-gathers and reduce-scatters (4 per layer forward,
  4 backward), context-parallel KV exchange, expert all-to-all (dispatch and
  combine, forward and backward), pipeline point-to-point, and the data-parallel
  gradient reduce-scatter and parameter all-gather (FSDP: parameter all-gathers
  forward and backward for every micro-batch), each on the link its group
  crosses: NVLink inside a node, the network between nodes (a ring collective
  across nodes through the ports of all its members in each node).

Communication is assumed not to overlap compute (its terms add to the step);
every assumption is printed with the estimate. Inference (:func:`decode_step`):
a decode step reads the weights on each GPU and the KV of the batch from HBM,
plus a tensor-parallel all-reduce per layer.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from areal_alloc.architecture import Architecture
from areal_alloc.catalogue import GPU
from areal_alloc.errors import AllocationValidationError
from areal_alloc.strategy import ParallelStrategy

__all__ = [
    "Hardware",
    "StepEstimate",
    "StepTerm",
    "balance_advice",
    "decode_step",
    "model_flops",
    "training_step",
]

#: Assumed, printed, overridable (--inter-node-gbps, areal_alloc.settings): one 200 Gb/s network
#: port per GPU between nodes.
DEFAULT_INTER_NODE_GBPS = 200.0
#: Assumed fractions of peak that real kernels reach; calibrate them from one
#: measured step (``calibrated``).
DEFAULT_COMPUTE_EFFICIENCY = 0.5
DEFAULT_COMM_EFFICIENCY = 0.7


@dataclass(frozen=True, slots=True)
class Hardware:
    """A GPU's speeds, its node size, the network between nodes, and the efficiencies."""

    name: str
    peak_tflops: float  # dense BF16
    hbm_tbps: float
    nvlink_gbps: float | None  # per GPU, both directions together (as published)
    gpus_per_node: int
    inter_node_gbps: float = DEFAULT_INTER_NODE_GBPS  # per GPU, gigabits per second
    compute_efficiency: float = DEFAULT_COMPUTE_EFFICIENCY
    comm_efficiency: float = DEFAULT_COMM_EFFICIENCY
    hbm_efficiency: float = DEFAULT_COMM_EFFICIENCY
    #: A stored calibration these efficiencies come from (``calibration.describe``), or "".
    calibration: str = ""

    def __post_init__(self) -> None:
        for name in ("peak_tflops", "hbm_tbps", "inter_node_gbps"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and 0 < value < 1e7):
                raise AllocationValidationError(f"{self.name}: {name}={value!r} must be > 0")
        for name in ("compute_efficiency", "comm_efficiency", "hbm_efficiency"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and 0 < value <= 1):
                raise AllocationValidationError(f"{self.name}: {name}={value!r} must be in (0, 1]")
        if self.gpus_per_node < 1:
            raise AllocationValidationError(f"{self.name}: gpus_per_node must be ≥ 1")

    @classmethod
    def from_gpu(
        cls,
        gpu: GPU,
        gpus_per_node: int,
        *,
        inter_node_gbps: float | None = None,
        compute_efficiency: float | None = None,
        comm_efficiency: float | None = None,
        hbm_efficiency: float | None = None,
    ) -> Hardware:
        """A catalogue GPU's published speeds; the cluster's network and efficiencies."""
        missing = [name for name in ("bf16_tflops", "hbm_tbps") if getattr(gpu, name) is None]
        if missing:
            raise AllocationValidationError(
                f"{gpu.name}: no published {' and '.join(missing)} in the catalogue; give "
                f"--peak-tflops and --hbm-tbps (in a config: cluster.peak_tflops and "
                f"cluster.hbm_tbps)"
            )
        return cls(
            gpu.name,
            float(gpu.bf16_tflops or 0),
            float(gpu.hbm_tbps or 0),
            gpu.nvlink_gbps,
            gpus_per_node,
            DEFAULT_INTER_NODE_GBPS if inter_node_gbps is None else inter_node_gbps,
            DEFAULT_COMPUTE_EFFICIENCY if compute_efficiency is None else compute_efficiency,
            DEFAULT_COMM_EFFICIENCY if comm_efficiency is None else comm_efficiency,
            DEFAULT_COMM_EFFICIENCY if hbm_efficiency is None else hbm_efficiency,
        )

    def link_bytes_per_second(self, inside_node: bool, members_per_node: int = 1) -> float:
        """One direction, per GPU, at the achievable fraction.

        Across nodes, a ring collective (all-gather, reduce-scatter, all-reduce) of a
        group with ``members_per_node`` GPUs in each node runs one ring per member, each
        leaving the node through its own GPU's network port: its bus bandwidth is the
        node's ports for the group together, up to NVLink's (NCCL's own figures:
        "theoretical performance is 100GB/s (200G x 4 / 8)" for four 200 Gb/s ports per
        eight A100s, NVIDIA/nccl-tests#119; 96 GB/s, measured 86, in NVIDIA/nccl#1048).
        A point-to-point send (``members_per_node`` 1) has one GPU's port.
        """
        nvlink = self.nvlink_gbps / 2 * 1e9 * self.comm_efficiency if self.nvlink_gbps else None
        if inside_node and nvlink:
            return nvlink
        network = members_per_node * self.inter_node_gbps / 8 * 1e9 * self.comm_efficiency
        return min(network, nvlink) if nvlink and members_per_node > 1 else network

    def link_name(self, inside_node: bool, members_per_node: int = 1) -> str:
        if inside_node and self.nvlink_gbps:
            return f"NVLink {self.nvlink_gbps / 2:g} GB/s"
        if members_per_node > 1:
            return f"network {members_per_node} ports × {self.inter_node_gbps:g} Gb/s per node"
        return f"network {self.inter_node_gbps:g} Gb/s"


@dataclass(frozen=True, slots=True)
class StepTerm:
    name: str
    seconds: float
    formula: str


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
        return sum(t.seconds for t in self.terms)

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
        return max(self.terms, key=lambda t: t.seconds).name

    def to_dict(self) -> dict[str, object]:
        return {
            "step_seconds": self.seconds,
            "tokens_per_second": self.tokens_per_second,
            "mfu": self.mfu,
            "bottleneck": self.bottleneck,
            "terms": [
                {"name": t.name, "seconds": t.seconds, "formula": t.formula} for t in self.terms
            ],
            "assumptions": list(self.assumptions),
        }


def balance_advice(balance: float | None) -> str:
    """What to do about a balance of generation rate over training rate."""
    if balance is None:
        return "one side has no estimate"
    if 0.9 <= balance <= 1.1:
        return "balanced"
    if balance > 1:
        return f"rollout produces {balance:.1f}× what training consumes: move GPUs to training"
    return f"training could consume {1 / balance:.1f}× what rollout produces: move GPUs to rollout"


def model_flops(arch: Architecture, tokens: int, sequence_length: int) -> float:
    """FLOPs of one forward and backward pass over ``tokens`` packed in sequences of
    ``sequence_length``, as megatron-core's ``num_floating_point_operations`` counts them."""
    p = arch.parameters
    per_token_gemm = (
        p.attention * (p.dense_layers + p.moe_layers)
        + p.dense_mlp * p.dense_layers
        + (p.shared_experts + p.active_routed_experts + p.router) * p.moe_layers
        + arch.vocab_size * arch.hidden_size  # the output layer (logits)
    )
    # QK^T and (QK^T)V: 2 matmuls × 2 FLOPs × 3 passes × q × s, halved by the causal mask
    core = 6 * arch.query_width * sequence_length * arch.num_layers
    return float(tokens) * (6 * per_token_gemm + core)


def _inside(group_span: int, gpus_per_node: int) -> bool:
    return group_span <= gpus_per_node


def _members_per_node(size: int, stride: int, gpus_per_node: int) -> int:
    """How many ranks of a group of ``size`` ranks, ``stride`` apart, share a node."""
    if stride >= gpus_per_node:
        return 1
    return max(1, min(size, gpus_per_node // stride))


def training_step(
    backend: str,
    arch: Architecture,
    parallel: ParallelStrategy,
    hardware: Hardware,
    *,
    tokens_per_step: int,
    tokens_per_micro_batch: int,
    sequence_length: int,
    recompute: str = "none",
    virtual_pipeline: int = 1,
) -> StepEstimate:
    """One optimizer step of a training engine over ``tokens_per_step`` tokens."""
    tp, pp, dp, cp = parallel.tp_size, parallel.pp_size, parallel.dp_size, parallel.cp_size
    ep = parallel.ep_size
    world = parallel.world_size
    node = hardware.gpus_per_node
    if tokens_per_step < 1 or tokens_per_micro_batch < 1 or sequence_length < 1:
        raise AllocationValidationError(
            "tokens per step, per micro-batch and sequence length must be ≥ 1"
        )
    micro_batches = max(1, math.ceil(tokens_per_step / (dp * tokens_per_micro_batch)))
    tokens_mb = min(tokens_per_micro_batch, math.ceil(tokens_per_step / dp))
    flops = model_flops(arch, tokens_per_step, min(sequence_length, tokens_mb))
    executed = flops * {"none": 1.0, "selective": 1.0, "full": 4 / 3}[recompute]
    peak = hardware.peak_tflops * 1e12
    compute = executed / (world * peak * hardware.compute_efficiency)
    terms = [
        StepTerm(
            "compute",
            compute,
            f"{executed:.3g} FLOPs / ({world} GPUs × {hardware.peak_tflops:g} TFLOP/s × "
            f"{hardware.compute_efficiency:g} efficiency)"
            + (" (full recomputation: forward again, ×4/3)" if recompute == "full" else ""),
        )
    ]
    assumptions = [
        f"{hardware.compute_efficiency:.3g} of peak compute and {hardware.comm_efficiency:.3g} of "
        f"link bandwidth are reached (--compute-efficiency, --comm-efficiency)",
        "communication does not overlap compute (its terms add to the step)",
    ]
    if hardware.inter_node_gbps == DEFAULT_INTER_NODE_GBPS:
        assumptions.append(
            f"{DEFAULT_INTER_NODE_GBPS:g} Gb/s of network per GPU between nodes "
            f"(--inter-node-gbps)"
        )
    if pp > 1:
        bubble = (pp - 1) / (micro_batches * virtual_pipeline) * compute
        terms.append(
            StepTerm(
                "pipeline bubble",
                bubble,
                f"(p{pp} − 1) / ({micro_batches} micro-batches × vpp {virtual_pipeline}) × compute",
            )
        )
    h = arch.hidden_size
    layers_here = arch.num_layers / pp
    act = tokens_mb / cp * h * 2  # one micro-batch's hidden states on this GPU, bf16
    if tp > 1:
        inside = _inside(tp, node)
        members = _members_per_node(tp, 1, node)
        volume = 8 * layers_here * micro_batches * act * (tp - 1) / tp
        terms.append(
            StepTerm(
                "tensor parallel",
                volume / hardware.link_bytes_per_second(inside, members),
                f"8 all-gathers/reduce-scatters × {layers_here:g} layers × {micro_batches} "
                f"micro-batches × {act / 2**20:.1f} MiB × (t{tp} − 1)/t{tp} over "
                f"{hardware.link_name(inside, members)}",
            )
        )
    if cp > 1:
        inside = _inside(tp * cp, node)
        kv = tokens_mb / cp * arch.kv_width * 2 * 2  # k and v, bf16
        volume = 3 * layers_here * micro_batches * kv * (cp - 1)
        terms.append(
            StepTerm(
                "context parallel",
                volume / hardware.link_bytes_per_second(inside),
                f"KV ring: 3 passes (forward, backward k/v and their gradients) × "
                f"{layers_here:g} layers × {micro_batches} micro-batches × "
                f"{kv / 2**20:.1f} MiB × (c{cp} − 1) over {hardware.link_name(inside)}",
            )
        )
    if ep > 1 and arch.is_moe:
        inside = _inside(tp * cp * ep, node)
        moe_here = arch.moe_layer_count / pp
        volume = 4 * moe_here * micro_batches * act * arch.experts_per_token * (ep - 1) / ep
        terms.append(
            StepTerm(
                "expert all-to-all",
                volume / hardware.link_bytes_per_second(inside),
                f"4 all-to-alls (dispatch, combine; forward, backward) × {moe_here:g} MoE "
                f"layers × {micro_batches} micro-batches × {act / 2**20:.1f} MiB × top-"
                f"{arch.experts_per_token} × (e{ep} − 1)/e{ep} over {hardware.link_name(inside)}",
            )
        )
    if pp > 1:
        inside = _inside(world // pp, node) and world // pp < node
        volume = 2 * micro_batches * act / tp
        terms.append(
            StepTerm(
                "pipeline p2p",
                volume / hardware.link_bytes_per_second(inside),
                f"2 sends (activation, gradient) × {micro_batches} micro-batches × "
                f"{act / tp / 2**20:.1f} MiB over {hardware.link_name(inside)}",
            )
        )
    p = arch.parameters
    params_here = (
        p.total / (tp * pp)
        if not arch.is_moe
        else (
            (p.total - p.expert_sharded) / (tp * pp)
            + p.expert_sharded / (pp * ep * parallel.etp_size)
        )
    )
    shards = dp * cp
    if shards > 1:
        inside = _inside(world // pp, node)
        members = _members_per_node(shards, tp, node)  # the dp·cp group: ranks t apart
        if backend == "fsdp":
            volume = (2 * micro_batches * 2 + 4) * params_here * (shards - 1) / shards
            formula = (
                f"(2 parameter all-gathers × {micro_batches} micro-batches × 2 B + gradient "
                f"reduce-scatter × 4 B) × {params_here / 1e9:.3g}B params × (dp·cp {shards} − 1)"
                f"/{shards} over {hardware.link_name(inside, members)}"
            )
        else:
            volume = (4 + 2) * params_here * (shards - 1) / shards
            formula = (
                f"(gradient reduce-scatter × 4 B + parameter all-gather × 2 B) × "
                f"{params_here / 1e9:.3g}B params × (dp·cp {shards} − 1)/{shards} over "
                f"{hardware.link_name(inside, members)}"
            )
        terms.append(
            StepTerm(
                "data parallel",
                volume / hardware.link_bytes_per_second(inside, members),
                formula,
            )
        )
    if hardware.calibration:
        assumptions.append(f"calibrated: {hardware.calibration}")
    return StepEstimate(
        tuple(terms), tokens_per_step, flops, world, hardware.peak_tflops, tuple(assumptions)
    )


def decode_step(
    arch: Architecture,
    parallel: ParallelStrategy,
    hardware: Hardware,
    *,
    batch: int,
    context: int,
    kv_bytes_per_token: int,
) -> StepEstimate:
    """One decode step of one inference instance with ``batch`` sequences of ``context``
    tokens: every GPU reads its weights and its share of the batch's KV from HBM."""
    tp, pp = parallel.tp_size, parallel.pp_size
    p = arch.parameters
    weights = p.total * 2 / (tp * pp)
    kv = batch * context * kv_bytes_per_token
    hbm = hardware.hbm_tbps * 1e12 * hardware.hbm_efficiency
    terms = [
        StepTerm(
            "HBM reads",
            (weights + kv) / hbm * pp,
            f"(weights {weights / 2**30:.1f} GiB + KV {batch} × {context:,} × "
            f"{kv_bytes_per_token:,} B) / ({hardware.hbm_tbps:g} TB/s × "
            f"{hardware.hbm_efficiency:g}) × p{pp} stages",
        )
    ]
    if tp > 1:
        inside = _inside(tp, hardware.gpus_per_node)
        members = _members_per_node(tp, 1, hardware.gpus_per_node)
        volume = 2 * arch.num_layers * batch * arch.hidden_size * 2 * 2 * (tp - 1) / tp
        terms.append(
            StepTerm(
                "tensor parallel",
                volume / hardware.link_bytes_per_second(inside, members),
                f"2 all-reduces × {arch.num_layers} layers × {batch} tokens × h "
                f"{arch.hidden_size} × 2 B over {hardware.link_name(inside, members)}",
            )
        )
    flops = 2.0 * p.active * batch
    return StepEstimate(
        tuple(terms),
        batch,
        flops,
        tp * pp,
        hardware.peak_tflops,
        ("decode is memory-bound: each step reads every weight and the batch's KV once",)
        + ((f"calibrated: {hardware.calibration}",) if hardware.calibration else ()),
    )
