"""Host time of a training engine that runs Hugging Face modeling code (fsdp, archon): the
Python, FSDP2's per-layer hooks and the kernel launches a step spends on the CPU, per
decoder layer and pass, as a term of its own (:func:`host_term`).

The figures are measured (``H200_FSDP``: seven one-GPU steps of the reference's FSDP engine,
AReaL cbff54d6 ``areal/engine/fsdp_engine.py`` reproduced, measured by this project on an
NVIDIA H200, 2026-12-04, ``shared/gpu/fsdp_probe.py``; the rows are
``benchmarks/measurements.json``'s ``reference_fsdp_*`` kinds). Two of those steps are
host-bound (their time does not follow the model's FLOPs: Qwen3-0.6B at 8,192 tokens and
Qwen3-1.7B at 4,096, 2.9× the parameters, both forward in 58–66 ms); the figures below are
those steps' times per decoder layer, the mean of the two:

- forward, per layer and micro-batch: 66.2 ms / 28 = 2.36 ms and 58.1 ms / 28 = 2.08 ms,
  mean :data:`FORWARD_S` (2.22 ms; the no-grad forward log-prob pass, ``forward_s``);
  recomputation runs the same forward code again under the checkpoint, at the same cost;
- backward, per layer and micro-batch: twice the forward (autograd runs a data-gradient
  and a weight-gradient kernel for each forward GEMM, and FSDP2's post-backward hook per
  layer), :data:`BACKWARD_S`;
- the optimizer step, per layer and optimizer step (the reference's grad-norm clip over each
  of a layer's tensors, ``fsdp2_clip_grad_norm``, fused AdamW, ``zero_grad``): what the two
  host-bound training steps leave per layer, 422 ms / 28 − 4 × 2.22 = 6.20 ms (0.6B, full
  recomputation: forward, recomputation, backward) and 303 ms / 28 − 3 × 2.22 = 4.15 ms
  (1.7B, none), mean :data:`OPTIMIZER_S` (5.18 ms).

How host time overlaps GPU time: the host enqueues kernels without waiting for them, and a
step waits for the GPU only where it reads a result (the grad norm's ``math.isfinite``,
``areal/engine/fsdp_engine.py`` l.709 at cbff54d6), so a step takes the longer of the two,
not their sum. The measurements say so: the five GPU-bound steps (≥ 16,384 tokens, or 8B)
measure −9 … +7 % of the GPU terms alone, where adding their 0.4–0.5 s of host time would
put them 15–35 % over, and the two host-bound ones take their host time whatever the
model's size. Megatron's engine and the inference servers are not measured here: no host
term for them (an estimate without it is said so in no figure; see docs/speed.md).
"""

from __future__ import annotations

from areal_alloc.estimate.backends import TRAINING
from areal_alloc.estimate.speed import StepTerm

__all__ = [
    "BACKWARD_S",
    "FORWARD_S",
    "HOST_ENGINES",
    "OPTIMIZER_S",
    "SOURCE",
    "UNMEASURED",
    "host_term",
]

#: Engines that run their layers in eager torch, one Python module a layer (the reference's
#: fsdp_engine.py builds ``AutoModelForCausalLM``, archon_engine.py its own torch modules;
#: megatron runs megatron-core's fused kernels and is not measured here):
#: ``backends.TrainingModel.host_measured``.
HOST_ENGINES = tuple(name for name, model in TRAINING.items() if model.host_measured)

#: Where the figures come from.
SOURCE = (
    "measured by this project on an NVIDIA H200, 2026-12-04, shared/gpu/fsdp_probe.py "
    "(AReaL cbff54d6 FSDP engine reproduced): the host-bound steps, Qwen3-0.6B at 8,192 "
    "tokens and Qwen3-1.7B at 4,096, per decoder layer"
)

#: What the estimate says where it has no host term (Megatron's engine, a server's decode):
#: no measurement of theirs is at hand, and none of the FSDP engine's is carried over.
UNMEASURED = (
    "no host term for {what}: host time (Python, kernel launches, {why}) is measured here "
    "only on the reference's FSDP engine (benchmarks/measurements.json reference_fsdp_*); "
    "this step is its GPU time alone, a floor where the host is the bottleneck (small "
    "models, small batches)"
)

#: Seconds of host time per decoder layer and micro-batch of a forward pass (or a
#: recomputation): the mean of 0.0662 s / 28 and 0.0581 s / 28 (module docstring).
FORWARD_S = (0.0662 / 28 + 0.0581 / 28) / 2
#: Per decoder layer and micro-batch of a backward pass: twice the forward's.
BACKWARD_S = 2 * FORWARD_S
#: Per decoder layer and optimizer step (clip, AdamW, zero_grad): the mean of what the two
#: host-bound training steps leave, 0.4222 s / 28 − 4 × forward and 0.3027 s / 28 − 3 × forward.
OPTIMIZER_S = ((0.4222 / 28 - 4 * FORWARD_S) + (0.3027 / 28 - 3 * FORWARD_S)) / 2


def host_term(
    backend: str,
    layers_here: float,
    micro_batches: int,
    *,
    recompute: bool,
    forward_only: bool,
    gpu_seconds: float,
) -> StepTerm | None:
    """The step's host time on one GPU (``layers_here``: its decoder layers), against the
    GPU terms' ``gpu_seconds``: a step takes the longer of the two, so the term is hidden
    (shown, not added) when the GPU's is longer, else it adds what the host takes beyond
    the GPU. None for an engine without measured host time (:data:`HOST_ENGINES`)."""
    if backend not in HOST_ENGINES:
        return None
    # the cost is per decoder layer, whatever the layer's size (module docstring)
    ms = 1e3
    if forward_only:
        per_layer = FORWARD_S
        passes = f"forward {FORWARD_S * ms:.2f} ms"
        optimizer = 0.0
    else:
        per_layer = FORWARD_S * (2 if recompute else 1) + BACKWARD_S
        passes = (
            f"forward {FORWARD_S * ms:.2f}"
            + (f" + recomputation {FORWARD_S * ms:.2f}" if recompute else "")
            + f" + backward {BACKWARD_S * ms:.2f} ms"
        )
        optimizer = OPTIMIZER_S * layers_here
    host = per_layer * layers_here * micro_batches + optimizer
    formula = (
        f"({passes}) × {layers_here:g} layers × {micro_batches} micro-batches"
        + (
            f" + optimizer step {OPTIMIZER_S * ms:.2f} ms × {layers_here:g} layers"
            if optimizer
            else ""
        )
        + f" = {host:.3g} s on the host, against the GPU's {gpu_seconds:.3g} s: a step takes "
        f"the longer ({SOURCE})"
    )
    if host <= gpu_seconds:
        return StepTerm("host", host, formula + "; hidden under the GPU's", hidden=True)
    return StepTerm("host (beyond the GPU)", host - gpu_seconds, formula)
