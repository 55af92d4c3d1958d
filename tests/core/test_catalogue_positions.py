"""The catalogue's cited positions (areal_alloc.catalogue.POSITIONS) through the servers'
context rule (experiment/server_rules.py A4): hub id → positions, config → exact line."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from areal_alloc import AllocationValidationError, validate
from areal_alloc.catalogue import find_model
from tests.conftest import MainCli

ALLOW = ("SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN", "VLLM_ALLOW_LONG_MAX_MODEL_LEN")


@pytest.fixture(autouse=True)
def _no_override(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ALLOW:
        monkeypatch.delenv(name, raising=False)


@pytest.mark.parametrize(
    ("name", "positions", "rope", "limit", "where"),
    [
        ("Qwen/Qwen2.5-7B", 131072, "", 131072, "Qwen/Qwen2.5-7B's config.json"),
        # the Instruct model's own config.json: not its base's 131,072
        ("Qwen/Qwen2.5-7B-Instruct", 32768, "", 32768, "Qwen/Qwen2.5-7B-Instruct's config.json"),
        ("qwen2.5-7b-instruct", 32768, "", 32768, "Qwen/Qwen2.5-7B-Instruct's config.json"),
        ("Qwen/Qwen2.5-3B", 32768, "", 32768, "Qwen/Qwen2.5-3B's config.json"),
        ("Qwen3-8B", 40960, "", 40960, "Qwen/Qwen3-8B's config.json"),
        ("Qwen/Qwen3-30B-A3B", 40960, "", 40960, "Qwen/Qwen3-30B-A3B's config.json"),
        # llama3 rope scaling: both servers take max_position_embeddings as it is
        (
            "meta-llama/Llama-3.1-8B",
            131072,
            "llama3",
            131072,
            "meta-llama/Llama-3.1-8B's config.json",
        ),
        # aliases whose own config.json was not read: no positions, the rule skips them
        ("meta-llama/Llama-3.1-8B-Instruct", 0, "", None, ""),
        ("Qwen/Qwen3-4B-Instruct-2507", 0, "", None, ""),
        ("Qwen/Qwen2.5-1.5B-Instruct", 0, "", None, ""),
        ("deepseek-ai/DeepSeek-V3", 0, "", None, ""),
    ],
)
def test_each_hub_id_has_the_positions_of_its_own_config(
    name: str, positions: int, rope: str, limit: int | None, where: str
) -> None:
    arch = find_model(name)
    assert (arch.max_position_embeddings, arch.rope_type, arch.positions_source) == (
        positions,
        rope,
        where,
    )
    assert (arch.position_limit("sglang"), arch.position_limit("vllm")) == (limit, limit)


def cfg(model: str, backend: str, **sections: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"cluster": {"n_nodes": 2, "n_gpus_per_node": 8}}
    out["actor"] = {"backend": "fsdp:d8", "path": model}
    out["rollout"] = {"backend": backend}
    out.update(sections)
    return out


REFUSED: list[tuple[dict[str, Any], str]] = [
    (
        cfg("Qwen/Qwen2.5-7B-Instruct", "sglang:d2t4", sglang={"context_length": 65536}),
        "sglang.context_length=65,536 is above the model's max_position_embeddings=32,768 "
        "(Qwen/Qwen2.5-7B-Instruct's config.json): sglang stops with 'User-specified "
        "context_length (65536) is greater than the derived context_length' unless "
        "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1 is set in the servers' environment: set "
        "sglang.context_length=32,768 or less",
    ),
    (
        cfg("Qwen/Qwen3-8B", "vllm:d2t4", vllm={"max_model_len": 65536}),
        "vllm.max_model_len=65,536 is above the model's max_position_embeddings=40,960 "
        "(Qwen/Qwen3-8B's config.json): vllm stops with 'User-specified max_model_len (65536) "
        "is greater than the derived max_model_len' unless VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 is "
        "set in the servers' environment: set vllm.max_model_len=40,960 or less",
    ),
    (
        cfg(
            "Qwen/Qwen3-8B",
            "vllm:d2t4",
            train_dataset={"max_length": 8192},
            gconfig={"max_new_tokens": 36864, "max_tokens": 43008},
        ),
        "train_dataset.max_length 8,192 + gconfig.max_new_tokens 36,864 (capped at "
        "gconfig.max_tokens 43,008) = 43,008 tokens is above the model's "
        "max_position_embeddings=40,960 (Qwen/Qwen3-8B's config.json), the longest sequence "
        "vllm serves (past it a request is refused, or with VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 its "
        "positions go out of range): lower gconfig.max_new_tokens to 32,768 or less, or "
        "gconfig.max_tokens to 40,960 or less",
    ),
    (
        cfg("meta-llama/Llama-3.1-8B", "vllm:d2t4", vllm={"max_model_len": 262144}),
        "vllm.max_model_len=262,144 is above the model's max_position_embeddings=131,072 "
        "(meta-llama/Llama-3.1-8B's config.json): vllm stops with 'User-specified "
        "max_model_len (262144) is greater than the derived max_model_len' unless "
        "VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 is set in the servers' environment: set "
        "vllm.max_model_len=131,072 or less",
    ),
]


@pytest.mark.parametrize(("config", "message"), REFUSED)
def test_a_context_above_a_catalogue_models_positions_is_refused(
    config: dict[str, Any], message: str
) -> None:
    with pytest.raises(AllocationValidationError) as info:
        validate(config, on_memory="off")
    assert info.value.message == message


@pytest.mark.parametrize(
    "config",
    [
        # the reference's default context (32,768) fits every cited model
        cfg("Qwen/Qwen2.5-7B-Instruct", "sglang:d2t4"),
        cfg("Qwen/Qwen3-8B", "vllm:d2t4", vllm={"max_model_len": 40960}),
        # the base model's own 131,072 positions
        cfg("Qwen/Qwen2.5-7B", "sglang:d2t4", sglang={"context_length": 65536}),
        cfg("meta-llama/Llama-3.1-8B", "sglang:d2t4", sglang={"context_length": 131072}),
        # 8,192 + 36,864 would pass the 40,960 positions, but the reference caps each
        # request at gconfig.max_tokens (32,768 by default; remote_inf_engine.py l.942-944)
        cfg(
            "Qwen/Qwen3-8B",
            "vllm:d2t4",
            train_dataset={"max_length": 8192},
            gconfig={"max_new_tokens": 36864},
        ),
        # no cited positions: the rule cannot judge, so it says nothing
        cfg("Qwen/Qwen2.5-1.5B-Instruct", "sglang:d2t4", sglang={"context_length": 1 << 20}),
    ],
)
def test_a_context_within_the_positions_starts(config: dict[str, Any]) -> None:
    assert validate(config, on_memory="off").warnings == ()


def test_check_exits_1_on_a_catalogue_models_positions(tmp_path: Path, main_cli: MainCli) -> None:
    exp = tmp_path / "exp.yaml"
    exp.write_text(
        "cluster: {n_nodes: 2, n_gpus_per_node: 8}\n"
        "rollout: {backend: 'vllm:d2t4'}\n"
        "actor: {backend: 'fsdp:d8', path: Qwen/Qwen3-8B}\n"
        "vllm: {max_model_len: 65536}\n"
    )
    done = main_cli("check", "--quiet", str(exp))
    assert done.returncode == 1
    assert (
        done.stderr.strip()
        .splitlines()[-1]
        .startswith(
            "areal-alloc check: vllm.max_model_len=65,536 is above the model's "
            "max_position_embeddings=40,960 (Qwen/Qwen3-8B's config.json)"
        )
    )
    exp.write_text(exp.read_text().replace("65536", "40960"))
    assert main_cli("check", "--quiet", str(exp)).returncode == 0
