"""The inference servers' own start-up rules on what the reference hands them.

The reference passes every ``SGLangConfig`` / ``vLLMConfig`` field to its server unchanged
next to ``tp_size = t`` and ``pp_size = p`` of the backend string (areal/api/cli_args.py
``SGLangConfig.build_args`` l.2258-2310, ``get_py_cmd`` l.2007-2022; areal/trainer/
rl_trainer.py l.1211-1234 at AReaL cbff54d6), and a server sees exactly t·p GPUs
(areal/infra/controller/rollout_controller.py l.175-197). What the servers then refuse,
read from the versions the reference pins: SGLang 0.5.10.post1 (pyproject.toml l.149) and
vLLM 0.19.1 (pyproject.vllm.toml l.162).

:func:`check_servers` raises the first refusal; :func:`server_warnings` returns what starts
but misbehaves. Both read the experiment's one reading, never the raw config.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from areal_alloc.errors import AllocationValidationError
from areal_alloc.numbers import divisors

if TYPE_CHECKING:
    from areal_alloc.architecture import Architecture
    from areal_alloc.experiment.records import Engine, Experiment, InferenceConfig

__all__ = ["ALLOW_LONGER", "check_servers", "server_problems", "server_warnings"]

_SGLANG = "SGLang 0.5.10.post1"
_VLLM = "vLLM 0.19.1"
#: Each server's own escape hatch for a context above the model's positions: SGLang
#: python/sglang/srt/configs/model_config.py ``_derive_context_length`` l.384-404 ("To
#: allow overriding this maximum, set the env var SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1");
#: vLLM vllm/config/model.py ``_get_and_verify_max_len`` l.2158-2182 (the same words with
#: VLLM_ALLOW_LONG_MAX_MODEL_LEN=1).
ALLOW_LONGER = {
    "sglang": "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN",
    "vllm": "VLLM_ALLOW_LONG_MAX_MODEL_LEN",
}
#: SGLang's own reserve outside ``mem_fraction_static``, in MB, with chunked prefill off
#: (python/sglang/srt/server_args.py ``_handle_gpu_memory_settings`` l.1281-1290 at
#: 0.5.10.post1): 512 + max(max_prefill_tokens, 2048) × 1.5 (max(chunked_prefill_size,
#: 2048) × 1.5 with it on) + cuda_graph_max_bs × 2 + t·p / 8 × 1024.
_RESERVE_BASE_MB = 512
_RESERVE_PER_TOKEN_MB = 1.5


def _servers(experiment: Experiment) -> list[tuple[Engine, InferenceConfig]]:
    return [
        (e, e.inference)
        for e in experiment.engines
        if e.active and e.inference is not None and e.allocation.backend in ALLOW_LONGER
    ]


def _architecture(engine: Engine) -> Architecture | None:
    try:
        return engine.model.architecture()[0]
    except AllocationValidationError:  # the model checks say what is wrong with it
        return None


def _sizes(values: list[int] | tuple[int, ...]) -> str:
    return ", ".join(map(str, values))


def _sglang_parallel(engine: Engine, server: InferenceConfig) -> str | None:
    """A1-A3: ``enable_ep_moe``, ``ep_size``, ``dp_size`` and ``enable_dp_attention``."""
    t = engine.allocation.parallel.tp_size
    backend = f"{engine.backend_key}={engine.spec!r}"
    if server.enable_ep_moe:
        return (
            f"sglang.enable_ep_moe=true: the reference passes --enable-ep-moe, which "
            f"{_SGLANG} (the reference's pin) no longer has, so its argparse stops with "
            f"'unrecognized arguments: --enable-ep-moe'; older SGLang set ep_size = tp_size "
            f"with it: set sglang.ep_size={t} (t of {backend}) instead"
        )
    ep = server.ep_size
    if ep > 1 and t % ep:
        return (
            f"sglang.ep_size={ep} does not divide t{t} of {backend}: SGLang carves expert "
            f"parallelism out of the tensor-parallel GPUs (moe_tp_size = tp_size // ep_size, "
            f"python/sglang/srt/distributed/parallel_state.py initialize_model_parallel l.1885-"
            f"1887 at {_SGLANG}): set sglang.ep_size to one of {_sizes(divisors(t))}"
        )
    arch = _architecture(engine)
    if ep > 1 and arch is not None and arch.num_experts and arch.num_experts % ep:
        fits = [n for n in divisors(t) if arch.num_experts % n == 0]
        return (
            f"sglang.ep_size={ep}: the model's {arch.num_experts} experts do not split over "
            f"{ep} expert-parallel ranks ({arch.num_experts} % {ep} = "
            f"{arch.num_experts % ep}): SGLang asserts '(num_experts - "
            f"num_fused_shared_experts) % self.moe_ep_size == 0' (python/sglang/srt/layers/moe/"
            f"fused_moe_triton/layer.py l.200 at {_SGLANG}): set sglang.ep_size to one of "
            f"{_sizes(fits)}"
        )
    dp = server.dp_size
    if server.enable_dp_attention and dp > 1 and t % dp:
        fits = [n for n in divisors(t) if n > 1]
        return (
            f"sglang.enable_dp_attention=true with sglang.dp_size={dp} and t{t} of {backend}: "
            f"SGLang asserts 'self.tp_size % self.dp_size == 0' ({t} % {dp} = {t % dp}; "
            f"python/sglang/srt/server_args.py _handle_data_parallelism l.2640 at {_SGLANG}; "
            f"older versions said 'You can use 1 < dp-size <= tp-size'): set sglang.dp_size "
            f"to one of {_sizes(fits) or 'none: t1 has no attention data parallelism'}"
        )
    if dp > 1 and not server.enable_dp_attention:
        return (
            f"sglang.dp_size={dp} without sglang.enable_dp_attention: SGLang's data-parallel "
            f"controller then starts {dp} × t{t} = {dp * t} workers in one server, but the "
            f"reference gives each server of {backend} t·p = "
            f"{t * engine.allocation.parallel.pp_size} GPUs (areal/infra/controller/"
            f"rollout_controller.py l.175-197): raise d in sglang:dXtY instead and set "
            f"sglang.dp_size=1"
        )
    return None


def _context(engine: Engine, server: InferenceConfig, experiment: Experiment) -> str | None:
    """A4: the server's context and the run's longest sequence against the positions the
    server derives from the model's config.json; None where the model gives none."""
    arch = _architecture(engine)
    backend = engine.allocation.backend
    limit = arch.position_limit(backend) if arch is not None else None
    if arch is None or limit is None:
        return None
    run = experiment.run
    # the run's longest sequence, with its gconfig.max_tokens cap (RunConfig.longest)
    longest = run.longest if run.max_length is not None else None
    derived = f"max_position_embeddings={arch.max_position_embeddings:,}"
    where = arch.positions_source or arch.source
    if arch.rope_type and limit != arch.max_position_embeddings:
        derived += f" × rope_scaling {arch.rope_type} factor {arch.rope_factor:g} = {limit:,}"
    variable = ALLOW_LONGER[backend]
    words = (
        "User-specified context_length ({n}) is greater than the derived context_length"
        if backend == "sglang"
        else "User-specified max_model_len ({n}) is greater than the derived max_model_len"
    )
    if server.context_length > limit:
        said = words.format(n=server.context_length)
        return (
            f"{server.length_key}={server.context_length:,} is above the model's {derived} "
            f"({where}): {backend} stops with '{said}' unless {variable}=1 is set in "
            f"the servers' environment: set {server.length_key}={limit:,} or less"
        )
    if longest is not None and run.max_length is not None and longest > limit:
        capped = (
            f" (capped at gconfig.max_tokens {run.tokens_cap:,})"
            if longest < run.max_length + run.new_tokens
            else ""
        )
        return (
            f"train_dataset.max_length {run.max_length:,} + gconfig.max_new_tokens "
            f"{run.new_tokens:,}{capped} = {longest:,} tokens is above the model's {derived} "
            f"({where}), the longest sequence {backend} serves (past it a request is "
            f"refused, or with {variable}=1 its positions go out of range): lower "
            f"gconfig.max_new_tokens to {max(limit - run.max_length, 0):,} or less, or "
            f"gconfig.max_tokens to {limit:,} or less"
        )
    return None


def _colocated_with_actor(engine: Engine, experiment: Experiment) -> bool:
    """The rollout shares the actor's GPUs (rl_trainer._is_actor_rollout_colocated)."""
    if engine.key != "rollout":
        return False
    strategy = engine.allocation.scheduling_strategy
    if strategy.is_colocated and strategy.target == "actor":
        return True
    actor = next((e for e in experiment.engines if e.key == "actor"), None)
    other = actor.allocation.scheduling_strategy if actor is not None else None
    return other is not None and other.is_colocated and other.target == "rollout"


def server_problems(experiment: Experiment) -> list[str]:
    """Every refusal, in order: each server's parallel settings, its context, its sleep."""
    problems: list[str] = []
    for engine, server in _servers(experiment):
        found = []
        if engine.allocation.backend == "sglang":
            found.append(_sglang_parallel(engine, server))
        context = _context(engine, server, experiment)
        if context is not None and os.environ.get(ALLOW_LONGER[engine.allocation.backend]) != "1":
            found.append(context)
        if (
            engine.allocation.backend == "vllm"
            and _colocated_with_actor(engine, experiment)
            and not server.enable_sleep_mode
        ):
            found.append(
                f"rollout.backend={engine.spec!r} colocated with the actor needs "
                f"vllm.enable_sleep_mode=true: the reference offloads it by /sleep "
                f"(areal/engine/vllm_remote.py l.268-295), but without sleep mode {_VLLM} "
                f"allocates the weights and KV cache outside its CuMemAllocator pool "
                f"(vllm/v1/worker/gpu_worker.py _maybe_get_memory_pool_context l.205-207), so "
                f"sleep frees nothing and the actor meets a full GPU; set "
                f"vllm.enable_sleep_mode=true (and VLLM_SERVER_DEV_MODE=1 for the /sleep route)"
            )
        problems.extend(p for p in found if p is not None)
    return problems


def check_servers(experiment: Experiment) -> None:
    """Raise the first refusal of :func:`server_problems`."""
    problems = server_problems(experiment)
    if problems:
        raise AllocationValidationError(problems[0])


def server_warnings(experiment: Experiment) -> list[str]:
    """What the servers start with but misbehave on: dp-attention at dp_size 1 (off), a
    colocated SGLang without the memory saver, SGLang's prefill reserve above the share its
    memory fraction leaves free, and a context allowed by the servers' own variable."""
    out: list[str] = []
    for engine, server in _servers(experiment):
        backend = engine.allocation.backend
        context = _context(engine, server, experiment)
        if context is not None and os.environ.get(ALLOW_LONGER[backend]) == "1":
            out.append(f"{context} ({ALLOW_LONGER[backend]}=1 is set here: the server warns)")
        if backend != "sglang":
            continue
        arch = _architecture(engine) if server.ep_size > 1 else None
        if arch is not None and not arch.num_experts:
            out.append(
                f"sglang.ep_size={server.ep_size} on {arch.source}, which has no experts: "
                f"expert parallelism has nothing to split (SGLang's experts are its MoE "
                f"layers, python/sglang/srt/layers/moe/fused_moe_triton/layer.py l.196-203 at "
                f"{_SGLANG}); sglang.ep_size=1 says what runs"
            )
        if server.enable_dp_attention and server.dp_size == 1:
            out.append(
                "sglang.enable_dp_attention=true with sglang.dp_size=1: SGLang turns "
                "dp-attention off at dp_size 1 (python/sglang/srt/server_args.py "
                f"_handle_data_parallelism l.2633-2636 at {_SGLANG}); set sglang.dp_size to a "
                f"divisor of t{engine.allocation.parallel.tp_size} above 1 to use it"
            )
        if _colocated_with_actor(engine, experiment) and not server.enable_memory_saver:
            out.append(
                f"rollout.backend={engine.spec!r} colocated with the actor without "
                f"sglang.enable_memory_saver: SGLang's /release_memory_occupation pauses memory "
                f"through its memory saver, a no-op without --enable-memory-saver, so the "
                f"offload frees nothing (the reference's colocated example sets it: "
                f"examples/math/gsm8k_grpo_awex_colocate.yaml l.128); set "
                f"sglang.enable_memory_saver=true"
            )
        out.extend(_prefill_reserve(engine, server, experiment))
    return out


def _prefill_reserve(engine: Engine, server: InferenceConfig, experiment: Experiment) -> list[str]:
    """A8: SGLang's own reserve for its prefill against the share its fraction leaves
    free. A warning: with mem_fraction_static given, SGLang computes no reserve and starts;
    a prefill larger than the free share runs out of memory later."""
    gpu = experiment.cluster.gpu
    if gpu is None:
        return []
    chunked = server.chunked_prefill_size
    budget, key = (
        (server.max_prefill_tokens, "sglang.max_prefill_tokens")
        if chunked <= 0
        else (chunked, "sglang.chunked_prefill_size")
    )
    p = engine.allocation.parallel
    reserve_mb = (
        _RESERVE_BASE_MB
        + max(budget, 2048) * _RESERVE_PER_TOKEN_MB
        + p.tp_size * p.pp_size / 8 * 1024
    )
    free_mb = (1 - server.memory_fraction) * gpu.capacity / (1 << 20)
    if reserve_mb <= free_mb:
        return []
    off = " (chunked prefill off: sglang.chunked_prefill_size=-1)" if chunked <= 0 else ""
    return [
        f"{server.fraction_key}={server.memory_fraction:g} leaves {free_mb:,.0f} MB of the "
        f"{gpu.name}'s {gpu.capacity / (1 << 20):,.0f} MB free, below SGLang's own reserve for "
        f"its prefill{off}: 512 + max({key} {budget:,}, 2048) × 1.5 + t{p.tp_size}·p"
        f"{p.pp_size} / 8 × 1024 = {reserve_mb:,.0f} MB, before CUDA graphs (python/sglang/"
        f"srt/server_args.py l.1281-1292 at {_SGLANG}); a long prefill may run out of "
        f"memory: lower {server.fraction_key} to "
        f"{max(0.0, 1 - reserve_mb / (gpu.capacity / (1 << 20))):.2f} or {key}"
    ]
