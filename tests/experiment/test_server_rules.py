"""The inference servers' start-up rules (areal_alloc.experiment.server_rules) and the
quantized checkpoints' weight bytes: config → exact line, and ``areal-alloc check`` exit code."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from areal_alloc import AllocationValidationError, validate
from areal_alloc.architecture import Architecture
from areal_alloc.estimate.memory_inference import inference_weights, pipeline_stages
from tests.conftest import MainCli


def cfg(**sections: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"cluster": {"n_nodes": 2, "n_gpus_per_node": 8}}
    out["actor"] = {"backend": "fsdp:d8"}
    out.update(sections)
    return out


COLOCATED_DISK = {"backend": "fsdp:d8", "weight_update_mode": "disk"}


def _colocated(backend: str) -> dict[str, Any]:
    return {"backend": backend, "scheduling_strategy": {"type": "colocation", "target": "actor"}}


REFUSED: list[tuple[dict[str, Any], str]] = [
    (
        cfg(rollout={"backend": "sglang:d2t4"}, sglang={"ep_size": 3}),
        "sglang.ep_size=3 does not divide t4 of rollout.backend='sglang:d2t4': SGLang carves "
        "expert parallelism out of the tensor-parallel GPUs (moe_tp_size = tp_size // ep_size, "
        "python/sglang/srt/distributed/parallel_state.py initialize_model_parallel l.1885-1887 "
        "at SGLang 0.5.10.post1): set sglang.ep_size to one of 1, 2, 4",
    ),
    (
        cfg(rollout={"backend": "sglang:d2t4"}, sglang={"enable_ep_moe": True}),
        "sglang.enable_ep_moe=true: the reference passes --enable-ep-moe, which SGLang "
        "0.5.10.post1 (the reference's pin) no longer has, so its argparse stops with "
        "'unrecognized arguments: --enable-ep-moe'; older SGLang set ep_size = tp_size with it: "
        "set sglang.ep_size=4 (t of rollout.backend='sglang:d2t4') instead",
    ),
    (
        cfg(rollout={"backend": "sglang:d2t4"}, sglang={"dp_size": 2}),
        "sglang.dp_size=2 without sglang.enable_dp_attention: SGLang's data-parallel controller "
        "then starts 2 × t4 = 8 workers in one server, but the reference gives each server of "
        "rollout.backend='sglang:d2t4' t·p = 4 GPUs (areal/infra/controller/"
        "rollout_controller.py l.175-197): raise d in sglang:dXtY instead and set sglang.dp_size=1",
    ),
    (
        cfg(rollout={"backend": "sglang:d2t4"}, sglang={"dp_size": 3, "enable_dp_attention": True}),
        "sglang.enable_dp_attention=true with sglang.dp_size=3 and t4 of "
        "rollout.backend='sglang:d2t4': SGLang asserts 'self.tp_size % self.dp_size == 0' "
        "(4 % 3 = 1; python/sglang/srt/server_args.py _handle_data_parallelism l.2640 at SGLang "
        "0.5.10.post1; older versions said 'You can use 1 < dp-size <= tp-size'): set "
        "sglang.dp_size to one of 2, 4",
    ),
    (
        cfg(
            rollout=_colocated("vllm:d8"),
            actor=COLOCATED_DISK,
            enable_offload=True,
        ),
        "rollout.backend='vllm:d8' colocated with the actor needs vllm.enable_sleep_mode=true: "
        "the reference offloads it by /sleep (areal/engine/vllm_remote.py l.268-295), but "
        "without sleep mode vLLM 0.19.1 allocates the weights and KV cache outside its "
        "CuMemAllocator pool (vllm/v1/worker/gpu_worker.py _maybe_get_memory_pool_context "
        "l.205-207), so sleep frees nothing and the actor meets a full GPU; set "
        "vllm.enable_sleep_mode=true (and VLLM_SERVER_DEV_MODE=1 for the /sleep route)",
    ),
    (
        cfg(rollout={"backend": "vllm:d8"}, vllm={"dtype": "fp8"}),
        "vllm.dtype='fp8': vllm's --dtype takes only auto, half, float16, bfloat16, float, "
        "float32 (its argparse stops with 'argument --dtype: invalid choice: 'fp8''); the "
        "reference cannot set vLLM's KV cache dtype (vLLMConfig has no kv_cache_dtype, "
        "cli_args.py l.2028-2070), quantized weights come from the checkpoint's "
        "quantization_config",
    ),
    (
        cfg(rollout={"backend": "sglang:d8"}, sglang={"dtype": "fp8"}),
        "sglang.dtype='fp8': sglang's --dtype takes only auto, half, float16, bfloat16, float, "
        "float32 (its argparse stops with 'argument --dtype: invalid choice: 'fp8''); a "
        "quantized KV cache is sglang.kv_cache_dtype=fp8_e4m3, quantized weights come from the "
        "checkpoint's quantization_config",
    ),
]


@pytest.mark.parametrize(("config", "message"), REFUSED)
def test_the_servers_refuse_it_and_so_do_we(config: dict[str, Any], message: str) -> None:
    with pytest.raises(AllocationValidationError) as info:
        validate(config, on_memory="off")
    assert info.value.message == message


STARTS: list[dict[str, Any]] = [
    cfg(rollout={"backend": "sglang:d2t4"}, sglang={"ep_size": 4}),
    cfg(rollout={"backend": "sglang:d2t4"}, sglang={"dp_size": 2, "enable_dp_attention": True}),
    cfg(
        rollout=_colocated("vllm:d8"),
        actor=COLOCATED_DISK,
        enable_offload=True,
        vllm={"enable_sleep_mode": True},
    ),
    cfg(rollout={"backend": "vllm:d8"}, vllm={"dtype": "auto"}),
]


@pytest.mark.parametrize("config", STARTS)
def test_the_nearest_configs_start(config: dict[str, Any]) -> None:
    assert validate(config, on_memory="off").warnings == ()


WARNED: list[tuple[dict[str, Any], str]] = [
    (  # a dense model: no MoE layer to split, and SGLang starts
        cfg(
            rollout={"backend": "sglang:d2t4"},
            actor={"backend": "fsdp:d8", "path": "Qwen/Qwen3-8B"},
            sglang={"ep_size": 2},
        ),
        "sglang.ep_size=2 on Qwen/Qwen3-8B, which has no experts: expert parallelism has "
        "nothing to split (SGLang's experts are its MoE layers, python/sglang/srt/layers/moe/"
        "fused_moe_triton/layer.py l.196-203 at SGLang 0.5.10.post1); sglang.ep_size=1 says what "
        "runs",
    ),
    (
        cfg(rollout={"backend": "sglang:d2t4"}, sglang={"dp_size": 1, "enable_dp_attention": True}),
        "sglang.enable_dp_attention=true with sglang.dp_size=1: SGLang turns dp-attention off "
        "at dp_size 1 (python/sglang/srt/server_args.py _handle_data_parallelism l.2633-2636 at "
        "SGLang 0.5.10.post1); set sglang.dp_size to a divisor of t4 above 1 to use it",
    ),
    (
        cfg(rollout=_colocated("sglang:d8"), actor=COLOCATED_DISK, enable_offload=True),
        "rollout.backend='sglang:d8' colocated with the actor without sglang.enable_memory_saver: "
        "SGLang's /release_memory_occupation pauses memory through its memory saver, a no-op "
        "without --enable-memory-saver, so the offload frees nothing (the reference's colocated "
        "example sets it: examples/math/gsm8k_grpo_awex_colocate.yaml l.128); set "
        "sglang.enable_memory_saver=true",
    ),
]


@pytest.mark.parametrize(("config", "warning"), WARNED)
def test_what_starts_but_misbehaves_warns(config: dict[str, Any], warning: str) -> None:
    assert validate(config, on_memory="off").warnings == (warning,)


# --- the context against the model's positions (a local config.json) -------------------

SMALL = {
    "model_type": "qwen2",
    "hidden_size": 1024,
    "intermediate_size": 2816,
    "num_hidden_layers": 4,
    "num_attention_heads": 16,
    "num_key_value_heads": 16,
    "vocab_size": 32000,
    "max_position_embeddings": 4096,
}


def _model(tmp_path: Path, **extra: Any) -> str:
    folder = tmp_path / "model"
    folder.mkdir(exist_ok=True)
    (folder / "config.json").write_text(json.dumps({**SMALL, **extra}))
    return str(folder)


def test_the_references_default_context_is_above_a_4096_position_model(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN", raising=False)
    path = _model(tmp_path)
    config = cfg(rollout={"backend": "sglang:d8"}, actor={"backend": "fsdp:d8", "path": path})
    with pytest.raises(AllocationValidationError) as info:
        validate(config, on_memory="off")
    assert info.value.message == (
        f"sglang.context_length=32,768 is above the model's max_position_embeddings=4,096 "
        f"({path}/config.json): sglang stops with 'User-specified context_length (32768) is "
        f"greater than the derived context_length' unless "
        f"SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1 is set in the servers' environment: set "
        f"sglang.context_length=4,096 or less"
    )
    # the server's own escape hatch set where the check runs: a warning
    monkeypatch.setenv("SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN", "1")
    assert len(validate(config, on_memory="off").warnings) == 1
    monkeypatch.delenv("SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN")
    # the run's longest sequence too
    config["sglang"] = {"context_length": 4096}
    config["train_dataset"] = {"max_length": 1024}
    config["gconfig"] = {"max_new_tokens": 4000}
    with pytest.raises(AllocationValidationError) as info:
        validate(config, on_memory="off")
    assert info.value.message.startswith(
        "train_dataset.max_length 1,024 + gconfig.max_new_tokens 4,000 = 5,024 tokens is above "
        "the model's max_position_embeddings=4,096"
    )
    config["gconfig"] = {"max_new_tokens": 3072}
    validate(config, on_memory="off")


@pytest.mark.parametrize(
    ("rope", "backend", "limit"),
    [
        (
            {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 1024},
            "vllm",
            4096,
        ),
        (
            {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 1024},
            "sglang",
            4096,
        ),
        ({"rope_type": "linear", "factor": 2.0}, "vllm", 8192),
        ({"rope_type": "linear", "factor": 2.0}, "sglang", 8192),
        ({"rope_type": "llama3", "factor": 8.0}, "vllm", 4096),
        (None, "sglang", 4096),
    ],
)
def test_the_positions_each_server_derives(
    rope: dict[str, Any] | None, backend: str, limit: int
) -> None:
    arch = Architecture.from_mapping({**SMALL, "rope_scaling": rope})
    assert arch.position_limit(backend) == limit


def test_check_exits_1_on_a_server_rule(tmp_path: Path, main_cli: MainCli) -> None:
    exp = tmp_path / "exp.yaml"
    exp.write_text(
        "cluster: {n_nodes: 2, n_gpus_per_node: 8}\n"
        "rollout: {backend: 'sglang:d2t4'}\n"
        "actor: {backend: 'fsdp:d8'}\n"
        "sglang: {ep_size: 3}\n"
    )
    done = main_cli("check", "--quiet", str(exp))
    assert done.returncode == 1
    assert (
        done.stderr.strip()
        .splitlines()[-1]
        .startswith(
            "areal-alloc check: sglang.ep_size=3 does not divide t4 of "
            "rollout.backend='sglang:d2t4'"
        )
    )
    exp.write_text(exp.read_text().replace("ep_size: 3", "ep_size: 4"))
    assert main_cli("check", "--quiet", str(exp)).returncode == 0


# --- quantized checkpoints and uneven pipelines -----------------------------------------

QUANTIZED = [
    ({"quant_method": "fp8", "weight_block_size": [128, 128]}, 1 + 4 / 16384),
    ({"quant_method": "fp8", "activation_scheme": "dynamic"}, 1.0),
    ({"quant_method": "w8a8_int8"}, 1.0),
    ({"quant_method": "awq", "bits": 4, "group_size": 128}, 0.5 + 2.5 / 128),
    ({"quant_method": "gptq", "bits": 4, "group_size": -1}, 0.5),
    (
        {
            "quant_method": "compressed-tensors",
            "config_groups": {"group_0": {"weights": {"num_bits": 8}}},
            "ignore": ["lm_head"],
        },
        1.0,
    ),
]


@pytest.mark.parametrize(("config", "per_weight"), QUANTIZED)
def test_quantized_layers_and_unquantized_vocabulary(
    config: dict[str, Any], per_weight: float
) -> None:
    arch = Architecture.from_mapping({**SMALL, "quantization_config": config})
    assert arch.quantization is not None
    assert arch.quantization.weight_bytes == pytest.approx(per_weight)
    p = arch.parameters
    weights, _ = inference_weights("vllm", arch, 1, 1, 2, "bfloat16")
    assert weights == pytest.approx(p.layers * per_weight + (p.total - p.layers) * 2)


def test_an_unread_quantization_is_refused() -> None:
    with pytest.raises(AllocationValidationError, match="quant_method='bitsandbytes' is not read"):
        Architecture.from_mapping(
            {**SMALL, "quantization_config": {"quant_method": "bitsandbytes"}}
        )


@pytest.mark.parametrize(
    ("backend", "layers", "pp", "stages"),
    [
        ("vllm", 61, 2, [31, 30]),  # DeepSeek-V3 at p2 (vllm-ascend#881)
        ("sglang", 61, 2, [30, 31]),
        ("vllm", 10, 4, [2, 3, 3, 2]),
        ("sglang", 10, 4, [2, 2, 3, 3]),
        ("vllm", 28, 4, [7, 7, 7, 7]),
    ],
)
def test_the_servers_uneven_pipeline_split(
    backend: str, layers: int, pp: int, stages: list[int]
) -> None:
    assert pipeline_stages(backend, layers, pp) == stages


def test_experts_that_do_not_split_over_ep_are_refused(tmp_path: Path) -> None:
    """60 experts (as Qwen1.5-MoE-A2.7B has) over ep 8 inside t8."""
    moe = {"num_experts": 60, "num_experts_per_tok": 4, "moe_intermediate_size": 1408}
    path = _model(tmp_path, model_type="qwen2_moe", max_position_embeddings=32768, **moe)
    config = cfg(
        rollout={"backend": "sglang:d1t8"},
        actor={"backend": "fsdp:d8", "path": path},
        sglang={"ep_size": 8},
    )
    with pytest.raises(AllocationValidationError) as caught:
        validate(config, on_memory="off")
    assert caught.value.message == (
        "sglang.ep_size=8: the model's 60 experts do not split over 8 expert-parallel ranks "
        "(60 % 8 = 4): SGLang asserts '(num_experts - num_fused_shared_experts) % "
        "self.moe_ep_size == 0' (python/sglang/srt/layers/moe/fused_moe_triton/layer.py l.200 "
        "at SGLang 0.5.10.post1): set sglang.ep_size to one of 1, 2, 4"
    )


def test_compressed_tensors_without_a_width_names_what_is_missing() -> None:
    config = {"quant_method": "compressed-tensors", "config_groups": {"g": {"weights": {}}}}
    with pytest.raises(AllocationValidationError) as caught:
        Architecture.from_mapping({**SMALL, "quantization_config": config}, source="m")
    assert caught.value.message == (
        "m: quantization_config.config_groups: no group gives weights.num_bits as a whole number "
        "above 0, so the weights' bytes are unknown; fix the file, or check with --on-memory off "
        "(the hook's on_memory: off) to leave memory unestimated"
    )
