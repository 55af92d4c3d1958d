"""Which keys areal-alloc's reader asks a config for: one instrument for the tests that
compare them with a schema (the strict one, tests/hydra/test_strict_schema_keys.py; the
reference's own types, tests/experiment/test_nulls.py).

Every reading goes through ``areal_alloc._config.child``; :func:`asked_keys` wraps it in
every module that imported it and records the full key (``actor.mb_spec.n_mbs``) of each
DictConfig it is asked. :data:`ENGINES` holds one config per backend and role, every
section present (:func:`with_sections`), so that the reader asks for each key it knows.
"""

from __future__ import annotations

import contextlib
import copy
import re
import sys
from typing import Any

import pytest
from omegaconf import DictConfig, OmegaConf

import areal_alloc
from areal_alloc import _config
from areal_alloc.errors import AllocationError

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
        "rollout": {"backend": "vllm:d4", "agent": {}},
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
            "gradient_checkpointing": True,
            "megatron": {"recompute_granularity": "selective", "ddp": {}},
        },
        "teacher": {
            "engine_type": "rollout",
            "rollout": {"backend": "sglang:d4", "path": QWEN3_8B},
        },
    },
    {"rollout": {"backend": "sglang:d4"}, "actor": {"backend": "fsdp:d8", "use_lora": True}},
]


def with_sections(node: Any) -> Any:
    """``node`` with :data:`SECTIONS` under every engine section (one with a backend)."""
    if isinstance(node, dict):
        if "backend" in node:
            for key, value in SECTIONS.items():
                node.setdefault(key, copy.deepcopy(value))
        for value in node.values():
            with_sections(value)
    return node


def engine_configs() -> list[dict[str, Any]]:
    """:data:`ENGINES`, each with :data:`RUN` and every section."""
    return [with_sections({**copy.deepcopy(RUN), **copy.deepcopy(e)}) for e in ENGINES]


def read(config: dict[str, Any]) -> None:
    """Plan ``config``; a refusal still read the keys it got to."""
    with contextlib.suppress(AllocationError):
        areal_alloc.validate(OmegaConf.create(config), on_memory="off")


def asked_keys(monkeypatch: pytest.MonkeyPatch) -> set[str]:
    """From now on (until ``monkeypatch`` undoes it), the full keys the reader asks for."""
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
