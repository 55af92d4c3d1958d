"""The strict schema (``- areal_alloc/schema``) declares every key the plan reads.

docs/hydra.md promises that it "declares exactly what the plan reads, so it accepts every
config the plain hook accepts". Here the reader runs over the reference's example
configs and over one config per engine and backend, every section present, and each
key it asks for (``_config.child``, the one door every reading goes through) must be a
field of :class:`areal_alloc.schema.ExperimentConfig`; a config that sets those keys
reads to the same plan through the schema as without it.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import re
import sys
from pathlib import Path
from typing import Any

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import DictConfig, OmegaConf

import areal_alloc
from areal_alloc import _config, schema
from areal_alloc.errors import AllocationError
from areal_alloc.experiment.read import read_experiment

ROOT = Path(__file__).parents[2]
REFERENCE = sorted((ROOT / "tests" / "data" / "reference").glob("*.yaml"))

#: every section an engine may hold, present (empty) so that each key under it is asked for
SECTIONS: dict[str, Any] = {
    "archon": {},
    "mb_spec": {},
    "megatron": {"ddp": {}},
    "fsdp": {},
    "optimizer": {},
    "scheduling_strategy": {},
    "model_shape": {},
}
RUN: dict[str, Any] = {
    "cluster": {"n_nodes": 4, "n_gpus_per_node": 8},
    "train_dataset": {"batch_size": 64, "max_length": 1024},
    "gconfig": {"n_samples": 4, "max_new_tokens": 1024},
    "sglang": {},
    "vllm": {},
    "scheduler": {},
}
QWEN3_8B, QWEN3_MOE = "Qwen/Qwen3-8B", "Qwen/Qwen3-30B-A3B"

#: one config per backend and role (archon, megatron and fsdp trainers; both servers)
ENGINES: list[dict[str, Any]] = [
    {
        "rollout": {"backend": "vllm:d4"},
        "actor": {"backend": "archon:d2p2", "path": QWEN3_8B, "kl_ctl": 0.1},
        "ref": {"backend": "fsdp:d4", "path": QWEN3_8B},
        "critic": {"backend": "megatron:d2p2", "path": QWEN3_8B},
        "teacher": {"engine_type": "train", "train": {"backend": "megatron:d4", "path": QWEN3_8B}},
    },
    {
        "rollout": {"backend": "sglang:d4"},
        "actor": {
            "backend": "megatron:d4p2",
            "path": QWEN3_MOE,
            "megatron": {"recompute_granularity": "selective", "ddp": {}},
        },
        "teacher": {
            "engine_type": "rollout",
            "rollout": {"backend": "sglang:d4", "path": QWEN3_8B},
        },
    },
    {"rollout": {"backend": "sglang:d4"}, "actor": {"backend": "fsdp:d8", "use_lora": True}},
]


def _with_sections(node: Any) -> Any:
    if isinstance(node, dict):
        if "backend" in node:
            for key, value in SECTIONS.items():
                node.setdefault(key, copy.deepcopy(value))
        for value in node.values():
            _with_sections(value)
    return node


def _declared(dotted: str) -> bool:
    kind: Any = schema.ExperimentConfig
    for part in dotted.split("."):
        if not dataclasses.is_dataclass(kind):
            return False
        fields = {f.name: f for f in dataclasses.fields(kind)}
        if part not in fields:
            return False
        made = fields[part].default_factory
        kind = made if made is not dataclasses.MISSING else None
    return True


@pytest.fixture
def asked(monkeypatch: pytest.MonkeyPatch) -> set[str]:
    """The full keys (``actor.mb_spec.n_mbs``) the reader asks a DictConfig for."""
    seen: set[str] = set()
    original = _config.child

    def child(node: object, key: str) -> Any:
        if isinstance(node, DictConfig):
            seen.add(re.sub(r"\[\d+\]", "", str(node._get_full_key(key))))
        return original(node, key)

    for module in list(sys.modules.values()):
        name = getattr(module, "__name__", "")
        if name.startswith("areal_alloc") and getattr(module, "child", None) is original:
            monkeypatch.setattr(module, "child", child)
    return seen


def _read(config: dict[str, Any]) -> None:
    with contextlib.suppress(AllocationError):  # a refusal still read the keys it got to
        areal_alloc.validate(OmegaConf.create(config), on_memory="off")


def test_the_strict_schema_declares_every_key_the_reader_reads(asked: set[str]) -> None:
    for path in REFERENCE:
        _read(OmegaConf.to_container(OmegaConf.load(path)))  # type: ignore[arg-type]
    for engines in ENGINES:
        _read(_with_sections({**copy.deepcopy(RUN), **copy.deepcopy(engines)}))
    assert "actor.mb_spec.n_mbs" in asked  # the instrument sees the reader
    assert "actor.archon.pp_schedule" in asked
    assert sorted(key for key in asked if not _declared(key)) == []


def test_the_reader_asks_for_no_server_key_the_reference_lacks(asked: set[str]) -> None:
    # vLLMConfig has max_num_seqs and SGLangConfig max_running_requests; neither has
    # max_num_batched_tokens (areal/api/cli_args.py at cbff54d6): its loader refuses it
    for engines in ENGINES:
        _read(_with_sections({**copy.deepcopy(RUN), **copy.deepcopy(engines)}))
    servers = {key for key in asked if key.startswith(("vllm.", "sglang."))}
    assert {"vllm.max_num_seqs", "sglang.max_running_requests"} <= servers
    assert {key for key in servers if key.endswith(".max_num_batched_tokens")} == set()
    assert "sglang.max_num_seqs" not in servers


#: the keys the schema lacked before (the plan read them), each set to a value of its own
SETTINGS = (
    "cluster: {n_nodes: 4, n_gpus_per_node: 8}\n"
    "train_dataset: {batch_size: 64, max_length: 1024}\n"
    "gconfig: {n_samples: 4, max_new_tokens: 2048}\n"
    "vllm: {max_num_seqs: 64}\n"
    "rollout: {backend: 'vllm:d8', max_head_offpolicyness: 0}\n"
    "actor:\n  backend: 'megatron:d2p2t2'\n  path: Qwen/Qwen3-8B\n  pad_to_maximum: true\n"
    "  mb_spec: {n_mbs: 8, max_tokens_per_mb: 8192}\n  use_lora: true\n  lora_rank: 8\n"
    "  target_modules: [q_proj]\n  megatron: {bridge_type: megatron-bridge}\n"
    "critic:\n  backend: 'archon:d4p2'\n  path: Qwen/Qwen3-8B\n  is_critic: true\n"
    "  archon: {pp_schedule: interleaved1f1b, pp_layers_per_stage: 9,\n"
    "    pp_first_stage_less_layers: 0, pp_last_stage_less_layers: 0, enable_compile: true}\n"
)


def test_a_config_reads_the_same_through_the_schema(tmp_path: Path) -> None:
    conf = tmp_path / "conf"
    conf.mkdir()
    (conf / "plain.yaml").write_text(SETTINGS)
    (conf / "strict.yaml").write_text("defaults:\n  - areal_alloc/schema\n  - _self_\n" + SETTINGS)
    with initialize_config_dir(str(conf), version_base=None):
        plain, strict = compose("plain"), compose("strict")
    as_plain = areal_alloc.validate(plain, on_memory="off").to_dict()
    assert areal_alloc.validate(strict, on_memory="off").to_dict() == as_plain
    read = read_experiment(strict)
    actor, critic = read["actor"].training, read["critic"].training
    assert actor is not None
    assert critic is not None
    assert (actor.n_mbs, actor.pad_to_maximum, actor.lora_rank) == (8, True, 8)
    assert actor.target_modules == ("q_proj",)
    assert (critic.is_critic, critic.pad_to_maximum, critic.archon_pp_schedule) == (
        True,
        True,
        "Interleaved1F1B",
    )
    assert read.run.max_head_offpolicyness == 0


def test_the_schemas_null_n_mbs_is_unset_not_the_megatron_refusal(tmp_path: Path) -> None:
    conf = tmp_path / "conf"
    conf.mkdir()
    (conf / "strict.yaml").write_text(
        "defaults:\n  - areal_alloc/schema\n  - _self_\n"
        "cluster: {n_nodes: 1, n_gpus_per_node: 8}\n"
        "rollout: {backend: 'sglang:d4'}\nactor: {backend: 'megatron:d4'}\n"
    )
    with initialize_config_dir(str(conf), version_base=None):
        cfg = compose("strict")
    assert OmegaConf.select(cfg, "actor.mb_spec.n_mbs") is None
    areal_alloc.validate(cfg, on_memory="off")  # not refused
    training = read_experiment(cfg)["actor"].training
    assert training is not None
    assert (training.n_mbs, training.n_mbs_null) == (1, False)
