"""The strict schema (``- areal_alloc/schema``) declares every key the plan reads.

docs/hydra.md promises that it "declares exactly what the plan reads, so it accepts every
config the plain hook accepts". Here the reader runs over the reference's example
configs and over one config per engine and backend, every section present, and each
key it asks for (``_config.child``, the one door every reading goes through) must be a
field of :class:`areal_alloc.schema.ExperimentConfig`; a config that sets those keys
reads to the same plan through the schema as without it.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

import areal_alloc
from areal_alloc import schema
from areal_alloc.experiment.read import read_experiment
from tests.reader_keys import asked_keys, engine_configs, read

ROOT = Path(__file__).parents[2]
#: the strict schema declares areal-alloc's own model_shape keys, which the reference's
#: loader refuses: the strict-key check is off here (areal_alloc.experiment.reference_keys)
pytestmark = pytest.mark.usefixtures("reference_off")
REFERENCE = sorted((ROOT / "tests" / "data" / "reference").glob("*.yaml"))


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
    return asked_keys(monkeypatch)


def test_the_strict_schema_declares_every_key_the_reader_reads(asked: set[str]) -> None:
    for path in REFERENCE:
        read(OmegaConf.to_container(OmegaConf.load(path)))  # type: ignore[arg-type]
    for config in engine_configs():
        read(config)
    assert "actor.mb_spec.n_mbs" in asked  # the instrument sees the reader
    assert "actor.archon.pp_schedule" in asked
    assert sorted(key for key in asked if not _declared(key)) == []


def test_the_reader_asks_for_no_server_key_the_reference_lacks(asked: set[str]) -> None:
    # vLLMConfig has max_num_seqs and SGLangConfig max_running_requests; neither has
    # max_num_batched_tokens (areal/api/cli_args.py at cbff54d6): its loader refuses it
    for config in engine_configs():
        read(config)
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
