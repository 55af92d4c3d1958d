"""How fast an inference instance generates: a decode step (:func:`decode_step`) takes the
longer of reading the weights and the batch's KV from HBM and the GEMMs at the batch,
plus 2 tensor-parallel all-reduces per layer; one instance's generation
(:func:`generation`) is its prefill at compute and then its decode steps.
"""

from __future__ import annotations

from areal_alloc.architecture import Architecture
from areal_alloc.errors import AllocationValidationError
from areal_alloc.estimate.memory import KVCache
from areal_alloc.estimate.speed import (
    StepEstimate,
    StepTerm,
    attention_flops,
    members_per_node,
    within_node,
)
from areal_alloc.estimate.speed_host import UNMEASURED
from areal_alloc.estimate.system import Hardware
from areal_alloc.strategy import ParallelStrategy

__all__ = [
    "ALL_REDUCE_LATENCY_US",
    "all_reduce_latency",
    "decode_step",
    "generation",
]

#: One small all-reduce's latency inside an H100 node, by tensor-parallel size: the
#: one-shot custom all-reduce kernel on 512 B, 3.7 / 4.8 / 5.9 µs at t2 / t4 / t8
#: (sgl-project/sglang#2904 "optimize custom allreduce kernel", its H100 unit test table;
#: vLLM's kernel in the same table 9.5 / 9.1 / 10.1 µs without CUDA graphs). A decode
#: step's all-reduces carry batch × h × 2 B, tens of KB: this latency, not the bandwidth,
#: is most of their time.
ALL_REDUCE_LATENCY_US = {2: 3.7, 4: 4.8, 8: 5.9}


def all_reduce_latency(tp: int) -> float:
    """Seconds of one small all-reduce over ``tp`` GPUs (:data:`ALL_REDUCE_LATENCY_US`; the
    next size up in the table, the largest beyond it)."""
    for size in sorted(ALL_REDUCE_LATENCY_US):
        if tp <= size:
            return ALL_REDUCE_LATENCY_US[size] * 1e-6
    return ALL_REDUCE_LATENCY_US[max(ALL_REDUCE_LATENCY_US)] * 1e-6


def decode_step(
    arch: Architecture,
    parallel: ParallelStrategy,
    hardware: Hardware,
    *,
    batch: int,
    context: int,
    kv_bytes_per_token: int,
) -> StepEstimate:
    """One decode step of one inference instance with ``batch`` sequences (those in flight
    on it) of ``context`` tokens: the longer of reading every weight and the batch's KV from
    HBM and the GEMMs' compute at the batch (the roofline: a step is memory-bound until
    2 × active params × batch FLOPs outlast the reads, arXiv:2402.16363 "LLM Inference
    Unveiled: Survey and Roofline Model Insights"), plus 2 tensor-parallel all-reduces
    per layer (Megatron's row-parallel attention output and MLP, arXiv:1909.08053 §3)."""
    tp, pp = parallel.tp_size, parallel.pp_size
    p = arch.parameters
    weights = p.total * 2 / (tp * pp)
    kv = batch * context * kv_bytes_per_token
    hbm = hardware.hbm_tbps * 1e12 * hardware.hbm_efficiency
    reads = (weights + kv) / hbm * pp
    flops = 2.0 * p.active * batch
    gemm = flops / (tp * hardware.peak_tflops * 1e12 * hardware.compute_efficiency)
    terms = [
        StepTerm(
            "HBM reads",
            reads,
            f"(weights {weights / 2**30:.1f} GiB + KV {batch} × {context:,} × "
            f"{kv_bytes_per_token:,} B) / ({hardware.hbm_tbps:g} TB/s × "
            f"{hardware.hbm_efficiency:g}) × p{pp} stages",
            hidden=gemm > reads,
        ),
        StepTerm(
            "GEMM compute",
            gemm,
            f"2 × {p.active / 1e9:.3g}B active params × batch {batch} / (t{tp} × "
            f"{hardware.peak_tflops:g} TFLOP/s × {hardware.compute_efficiency:g}); the step "
            f"takes the longer of this and the HBM reads",
            hidden=gemm <= reads,
        ),
    ]
    if tp > 1:
        inside = within_node(tp, hardware.gpus_per_node)
        members = members_per_node(tp, 1, hardware.gpus_per_node)
        volume = 2 * arch.num_layers * batch * arch.hidden_size * 2 * 2 * (tp - 1) / tp
        latency = all_reduce_latency(tp)
        terms.append(
            StepTerm(
                "tensor parallel",
                2 * arch.num_layers * latency
                + volume / hardware.link_bytes_per_second(inside, members),
                f"2 all-reduces × {arch.num_layers} layers × ({latency * 1e6:.3g} µs latency "
                f"+ {batch} tokens × h {arch.hidden_size} × 2 B × 2(t{tp} − 1)/t{tp} over "
                f"{hardware.link_name(inside, members)})",
            )
        )
    bound = "compute-bound" if gemm > reads else "memory-bound"
    return StepEstimate(
        tuple(terms),
        batch,
        flops,
        tp * pp,
        hardware.peak_tflops,
        (f"decode is {bound} at batch {batch}: max(weights + KV read, GEMM compute)",)
        + ((f"calibrated: {hardware.calibration}",) if hardware.calibration else ()),
    )


def generation(
    arch: Architecture,
    parallel: ParallelStrategy,
    hardware: Hardware,
    *,
    batch: int,
    prompt_len: int,
    gen_len: int,
    kv_bytes_per_token: int,
) -> StepEstimate:
    """One instance generating ``gen_len`` tokens for each of ``batch`` sequences of
    ``prompt_len`` prompt tokens: the prefill at compute (2 × active params + the causal
    attention's forward, 2 × query width × s per layer, per prompt token; the stages of a
    pipeline run one after another), then ``gen_len`` decode steps at the mean context
    ``prompt_len + gen_len / 2`` (the KV read grows linearly, so its mean is exact).
    ``tokens_per_second`` is the generated tokens over the whole time, prefill included."""
    if batch < 1 or prompt_len < 0 or gen_len < 1:
        raise AllocationValidationError(
            f"batch {batch}, prompt length {prompt_len}, generation length {gen_len}: the "
            f"batch and the generation length must be ≥ 1, the prompt length ≥ 0"
        )
    tp = parallel.tp_size
    p = arch.parameters
    prompt_tokens = batch * prompt_len
    attention = attention_flops(arch, prompt_tokens, prompt_len, passes=1)
    prefill_flops = 2.0 * p.active * prompt_tokens + attention
    peak = hardware.peak_tflops * 1e12
    terms = [
        StepTerm(
            "prefill compute",
            prefill_flops / (tp * peak * hardware.compute_efficiency),
            f"(2 × {p.active / 1e9:.3g}B active params × {prompt_tokens:,} prompt tokens + "
            f"causal attention {attention:.3g} FLOPs) / (t{tp} × {hardware.peak_tflops:g} "
            f"TFLOP/s × {hardware.compute_efficiency:g})",
        )
    ]
    if tp > 1 and prompt_tokens:
        inside = within_node(tp, hardware.gpus_per_node)
        members = members_per_node(tp, 1, hardware.gpus_per_node)
        volume = 2 * arch.num_layers * prompt_tokens * arch.hidden_size * 2 * 2 * (tp - 1) / tp
        terms.append(
            StepTerm(
                "prefill tensor parallel",
                volume / hardware.link_bytes_per_second(inside, members),
                f"2 all-reduces × {arch.num_layers} layers × {prompt_tokens:,} tokens × h "
                f"{arch.hidden_size} × 2 B × 2(t{tp} − 1)/t{tp} over "
                f"{hardware.link_name(inside, members)}",
            )
        )
    context = prompt_len + gen_len // 2
    one = decode_step(
        arch,
        parallel,
        hardware,
        batch=batch,
        context=context,
        kv_bytes_per_token=kv_bytes_per_token,
    )
    terms.extend(
        StepTerm(
            f"decode {t.name}",
            t.seconds * gen_len,
            f"{gen_len:,} steps × ({t.formula}) at mean context {context:,}",
            t.hidden,
        )
        for t in one.terms
    )
    return StepEstimate(
        tuple(terms),
        batch * gen_len,
        prefill_flops + one.model_flops * gen_len,
        one.gpus,
        hardware.peak_tflops,
        (
            f"{batch} sequences in flight on the instance for the whole generation",
            "the prefill runs at compute before the decode steps",
            *one.assumptions,
            UNMEASURED.format(what="decode", why="the server's scheduler and sampling"),
        ),
    )


def instance_generation(
    arch: Architecture,
    parallel: ParallelStrategy,
    hardware: Hardware,
    batch: int,
    prompt: int,
    gen: int,
    kv: KVCache | None,
    mean_gen_len: tuple[int, str] | None = None,
    given_prompt: int | None = None,
) -> dict[str, object]:
    """One instance generating ``batch`` sequences of the mean length: ``--gen-len`` is the
    longest (gconfig.max_new_tokens), ``--mean-gen-len`` the mean (default the longest),
    as the plan and suggest read them; ``given_prompt`` is --prompt-len (None: the default
    prompt, said in the assumptions); ``mean_gen_len`` the mean and where it came from (None:
    not given, the longest). ``explain``'s figures (areal_alloc.cli.speed)."""
    per_token = kv.bytes_per_token if kv is not None else 0
    held = kv.tokens if kv is not None else None
    mean = gen if mean_gen_len is None else min(mean_gen_len[0], gen)
    run = generation(
        arch,
        parallel,
        hardware,
        batch=batch,
        prompt_len=prompt,
        gen_len=mean,
        kv_bytes_per_token=per_token,
    )
    assumptions = list(run.assumptions)
    if given_prompt is None:
        assumptions.append(f"prompts of {prompt:,} tokens (--prompt-len not given)")
    if mean_gen_len is not None:
        assumptions.append(f"mean generation length {mean:,} tokens (from {mean_gen_len[1]})")
    needed = batch * (prompt + gen)
    if held is not None and needed > held:
        assumptions.append(
            f"the KV cache holds {held:,} tokens, fewer than batch {batch} × ({prompt:,} + "
            f"{gen:,}) = {needed:,}: the engine would hold fewer sequences in flight"
        )
    return {
        "tokens_per_second": run.tokens_per_second,
        "seconds": run.seconds,
        "batch": batch,
        "prompt_len": prompt,
        "gen_len": gen,
        "mean_gen_len": mean,
        "bottleneck": run.bottleneck,
        "terms": run.terms_dict(),
        "assumptions": assumptions,
    }
