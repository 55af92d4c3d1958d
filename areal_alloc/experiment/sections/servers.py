"""The inference servers' sections: ``sglang`` and ``vllm`` as the reference reads them.

One reader, :func:`inference_config`, for the server section of an inference engine's
backend (areal/api/cli_args.py ``SGLangConfig`` l.2160-2215 and ``vLLMConfig``
l.2030-2070 at AReaL cbff54d6) and the engine's ``max_concurrent_rollouts``. The start-up
rules the servers apply to these keys are :mod:`areal_alloc.experiment.server_rules`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from areal_alloc import defaults
from areal_alloc._config import child, section, setting_float, whole_number
from areal_alloc.errors import AllocationValidationError, shown
from areal_alloc.experiment.records import InferenceConfig
from areal_alloc.experiment.sections.values import flag, text
from areal_alloc.limits import MAX_COUNT
from areal_alloc.numbers import read_int

if TYPE_CHECKING:
    from areal_alloc.experiment.records import Engine

__all__ = ["SERVER_DTYPES", "inference_config"]

#: ``--dtype``'s choices in both servers: SGLang 0.5.10.post1 (the reference's pin,
#: pyproject.toml l.149 at cbff54d6) python/sglang/srt/server_args.py l.3826-3830
#: ``choices=["auto", "half", "float16", "bfloat16", "float", "float32"]``; vLLM 0.19.1
#: (pyproject.vllm.toml l.162) vllm/config/model.py l.86 ``ModelDType = Literal["auto",
#: "half", "float16", "bfloat16", "float", "float32"]``. The reference passes ``dtype``
#: unchanged (``get_py_cmd``, cli_args.py l.2007-2022), so argparse refuses anything else.
SERVER_DTYPES = ("auto", "half", "float16", "bfloat16", "float", "float32")


def _signed(node: object, key: str, path: str, default: int) -> int:
    """An int setting that may be negative (``chunked_prefill_size: -1``)."""
    value = child(node, key) if node is not None else None
    if value is None:
        return default
    return read_int(value, path, minimum=-1, maximum=MAX_COUNT)


def _dtype(server: Any, backend: str) -> str:
    """``<backend>.dtype`` as the server's ``--dtype`` takes it; ``auto`` is read as the
    reference's bfloat16 (the checkpoint's own dtype for the bf16 models it trains)."""
    dtype = text(server, "dtype", "bfloat16")
    if dtype not in SERVER_DTYPES:
        kv = (
            "a quantized KV cache is sglang.kv_cache_dtype=fp8_e4m3"
            if backend == "sglang"
            else "the reference cannot set vLLM's KV cache dtype (vLLMConfig has no "
            "kv_cache_dtype, cli_args.py l.2028-2070)"
        )
        hint = (
            f"; {kv}, quantized weights come from the checkpoint's quantization_config"
            if "8" in dtype or "4" in dtype
            else ""
        )
        raise AllocationValidationError(
            f"{backend}.dtype={shown(dtype)}: {backend}'s --dtype takes only "
            f"{', '.join(SERVER_DTYPES)} (its argparse stops with 'argument --dtype: invalid "
            f"choice: {shown(dtype)}'){hint}"
        )
    return "bfloat16" if dtype == "auto" else dtype


def inference_config(cfg: object, engine: Engine, at: Any) -> InferenceConfig:
    """The server section of ``engine``'s backend and its ``max_concurrent_rollouts``
    (``at``: the engine's own section)."""
    backend = engine.allocation.backend
    server = section(cfg, backend, backend)
    vllm = backend == "vllm"
    if vllm:
        fraction_key, length_key = "gpu_memory_utilization", "max_model_len"
    else:
        fraction_key, length_key = "mem_fraction_static", "context_length"
    fraction = setting_float(
        server, fraction_key, f"{backend}.{fraction_key}", minimum=0, maximum=1, above=True
    )
    length = whole_number(server, length_key, f"{backend}.{length_key}")
    concurrency = whole_number(
        at, "max_concurrent_rollouts", f"{engine.path}.max_concurrent_rollouts"
    )
    # Each server's own key only (vLLMConfig.max_num_seqs, SGLangConfig.max_running_requests):
    # neither dataclass has max_num_batched_tokens (areal/api/cli_args.py at cbff54d6, and the
    # areal 1.0.4 wheel), so the reference's loader refuses it and it is never read here;
    # vLLM then takes its own default (memory_inference.vllm_default_batched_tokens).
    seqs = whole_number(server, "max_num_seqs", f"{backend}.max_num_seqs") if vllm else None
    sglang = backend == "sglang"
    running = (
        whole_number(server, "max_running_requests", f"{backend}.max_running_requests")
        if sglang
        else None
    )
    offload = setting_float(
        server, "cpu_offload_gb", f"{backend}.cpu_offload_gb", minimum=0, maximum=1 << 20
    )
    return InferenceConfig(
        dtype=_dtype(server, backend),
        # SGLangConfig.kv_cache_dtype (l.2199); vLLMConfig has none (the key check refuses it)
        kv_cache_dtype=text(server, "kv_cache_dtype", "auto") if not vllm else "auto",
        memory_fraction=defaults.MEMORY_FRACTION if fraction is None else fraction,
        context_length=length or defaults.CONTEXT_LENGTH,
        max_concurrent_rollouts=concurrency,
        max_num_seqs=seqs,
        max_running_requests=running,
        fraction_key=f"{backend}.{fraction_key}",
        length_key=f"{backend}.{length_key}",
        cpu_offload_gb=offload or 0.0,
        # SGLangConfig's parallel and memory switches (cli_args.py l.2169-2201 at cbff54d6)
        dp_size=(whole_number(server, "dp_size", "sglang.dp_size") or 1) if sglang else 1,
        ep_size=(whole_number(server, "ep_size", "sglang.ep_size") or 1) if sglang else 1,
        enable_dp_attention=sglang
        and flag(server, "enable_dp_attention", False, "sglang.enable_dp_attention"),
        enable_ep_moe=sglang and flag(server, "enable_ep_moe", False, "sglang.enable_ep_moe"),
        enable_memory_saver=sglang
        and flag(server, "enable_memory_saver", False, "sglang.enable_memory_saver"),
        chunked_prefill_size=(
            _signed(
                server,
                "chunked_prefill_size",
                "sglang.chunked_prefill_size",
                defaults.CHUNKED_PREFILL_SIZE,
            )
            if sglang
            else defaults.CHUNKED_PREFILL_SIZE
        ),
        max_prefill_tokens=(
            (
                whole_number(server, "max_prefill_tokens", "sglang.max_prefill_tokens")
                or defaults.MAX_PREFILL_TOKENS
            )
            if sglang
            else defaults.MAX_PREFILL_TOKENS
        ),
        # vLLMConfig.enable_sleep_mode (cli_args.py l.2062 at cbff54d6)
        enable_sleep_mode=vllm
        and flag(server, "enable_sleep_mode", False, "vllm.enable_sleep_mode"),
    )
