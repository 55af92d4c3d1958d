"""A null the reference's loader refuses is refused here, one line naming the key.

The reference merges an experiment into its strict dataclasses, and OmegaConf refuses
``None`` for a field typed without it (areal_alloc.experiment.nulls). Each key of
``NOT_NULL`` is checked against the reference's own types in its published wheel (CI's
second phase; it skips without the wheel), and the keys the reader asks for that the
wheel types without None are all in the table.
"""

from __future__ import annotations

import dataclasses
import os
import typing
from pathlib import Path
from typing import Any

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

import areal_alloc
from areal_alloc import AllocationValidationError
from areal_alloc.experiment.nulls import NOT_NULL
from tests.apps.reference.reference import REQUIRE_ENV, check_wheel, load_cli_args, wheel_path
from tests.reader_keys import asked_keys, engine_configs, read

#: these experiments name the GPU or the model with areal-alloc's own keys (cluster.gpu,
#: model_shape), which the reference's loader refuses: the strict-key check is off here
#: (tests/cli/test_reference_keys.py tests it)
pytestmark = pytest.mark.usefixtures("reference_off")


CLUSTER = {"n_nodes": 1, "n_gpus_per_node": 8}


def _refusal(key: str, kind: str, line: int) -> str:
    found = (
        f"field '{key.rsplit('.', 1)[-1]}' is not Optional"
        if kind.startswith("list") or kind[0].isupper()
        else f"Incompatible value 'None' for field of type '{kind}'"
    )
    return (
        f"{key}=null: the reference's loader refuses it (the field is {kind}, not Optional: "
        f'OmegaConf raises "{found}"; areal/api/cli_args.py l.{line} at cbff54d6); remove the '
        f"key to take the reference's default"
    )


@pytest.mark.parametrize(
    ("config", "message"),
    [
        (
            {"actor": {"backend": "fsdp:d4", "gradient_checkpointing": None}},
            _refusal("actor.gradient_checkpointing", "bool", 1302),
        ),
        (
            {"actor": {"backend": "fsdp:d4", "target_modules": None}},
            _refusal("actor.target_modules", "list[str]", 1382),
        ),
        (
            {"actor": {"backend": "megatron:d4", "megatron": None}},
            _refusal("actor.megatron", "MegatronEngineConfig", 1363),
        ),
        (
            {"actor": {"backend": "fsdp:d4"}, "critic": {"backend": None}},
            _refusal("critic.backend", "str", 1410),
        ),
        (
            {"rollout": {"backend": "sglang:d4", "max_head_offpolicyness": None}},
            _refusal("rollout.max_head_offpolicyness", "int", 2502),
        ),
        (
            {"actor": {"backend": "fsdp:d4"}, "gconfig": {"max_new_tokens": None}},
            _refusal("gconfig.max_new_tokens", "int", 170),
        ),
        (
            {"actor": {"backend": "fsdp:d4"}, "cluster": {"n_nodes": None}},
            _refusal("cluster.n_nodes", "int", 3054),
        ),
        (  # an interpolation to a null: the reference resolves it to None as well
            {"x": None, "actor": {"backend": "fsdp:d4", "gradient_checkpointing": "${x}"}},
            _refusal("actor.gradient_checkpointing", "bool", 1302),
        ),
    ],
)
def test_a_null_the_reference_refuses_is_one_line(config: dict[str, Any], message: str) -> None:
    given = OmegaConf.create({"cluster": CLUSTER, **config})  # as Hydra hands it over
    with pytest.raises(AllocationValidationError) as info:
        areal_alloc.validate(given, on_memory="off")
    assert info.value.message == message


@pytest.mark.parametrize(
    "config",
    [
        # the reference types these Optional: a null is its own value there
        {"actor": {"backend": "fsdp:d4", "mb_spec": {"max_tokens_per_mb": None, "n_mbs": None}}},
        {"actor": {"backend": "megatron:d4", "megatron": {"recompute_granularity": None}}},
        {"actor": {"backend": "fsdp:d4", "optimizer": None}, "critic": None},
        {"actor": {"backend": "fsdp:d4"}, "rollout": {"backend": "sglang:d4"}, "ref": None},
        # keys the reference does not have are not its to refuse
        {"actor": {"backend": "fsdp:d4", "model_shape": None}},
    ],
)
def test_a_null_the_reference_takes_passes(config: dict[str, Any]) -> None:
    areal_alloc.validate({"cluster": CLUSTER, **config}, on_memory="off")


def test_the_strict_schemas_nulls_are_its_unset_keys(tmp_path: Path) -> None:
    conf = tmp_path / "conf"
    conf.mkdir()
    (conf / "strict.yaml").write_text(
        "defaults:\n  - areal_alloc/schema\n  - _self_\n"
        "cluster: {n_nodes: 1, n_gpus_per_node: 8}\nactor: {backend: 'fsdp:d4'}\n"
    )
    with initialize_config_dir(str(conf), version_base=None):
        cfg = compose("strict")
    assert OmegaConf.select(cfg, "actor.gradient_checkpointing") is None
    assert areal_alloc.validate(cfg, on_memory="off")["actor"].gpus == 4


# --- against the reference's own types (its published wheel) ---------------------------

#: the engine sections and the reference's class for each (PPOConfig, TeacherConfig)
_ROOTS = {
    "actor": "PPOActorConfig",
    "ref": "PPOActorConfig",
    "critic": "PPOCriticConfig",
    "rollout": "InferenceEngineConfig",
    "teacher.train": "PPOActorConfig",
    "teacher.rollout": "InferenceEngineConfig",
}


@pytest.fixture(scope="module")
def reference() -> Any:
    problem = check_wheel(wheel_path())
    if problem is not None:
        if os.environ.get(REQUIRE_ENV) == "1":
            pytest.fail(problem)
        pytest.skip(problem)
    return load_cli_args(wheel_path())


def _field(module: Any, cls_name: str, dotted: str) -> Any:
    """The reference's type of ``dotted`` under ``cls_name`` (None: it has no such field)."""
    cls: Any = getattr(module, cls_name)
    hint: Any = None
    for part in dotted.split("."):
        if cls is None or not dataclasses.is_dataclass(cls):
            return None
        hints = typing.get_type_hints(cls, vars(module))
        if part not in hints:
            return None
        hint = hints[part]
        inner = [a for a in typing.get_args(hint) if a is not type(None)] or [hint]
        cls = next((a for a in inner if dataclasses.is_dataclass(a)), None)
    return hint


def _reference_type(module: Any, dotted: str) -> Any:
    for root, cls_name in sorted(_ROOTS.items(), key=lambda item: -len(item[0])):
        if dotted.startswith(root + "."):
            return _field(module, cls_name, dotted[len(root) + 1 :])
    return _field(module, "GRPOConfig", dotted)


def _optional(hint: Any) -> bool:
    return type(None) in typing.get_args(hint)


def test_every_key_of_the_table_is_not_optional_in_the_reference(reference: Any) -> None:
    for dotted, _, _ in NOT_NULL:
        hint = _reference_type(reference, dotted)
        if hint is None:  # a field newer than the wheel (areal 1.0.4): the source's own type
            continue
        assert not _optional(hint), (dotted, hint)


def test_every_key_the_reader_reads_and_the_reference_types_without_none_is_in_the_table(
    reference: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen = asked_keys(monkeypatch)
    for config in engine_configs():
        read(config)
    table = {dotted for dotted, _, _ in NOT_NULL}
    refused = {"allocation_mode"}  # refused whatever its value (the migration message)
    missing = sorted(
        key
        for key in seen - refused
        if (hint := _reference_type(reference, key)) is not None
        and not _optional(hint)
        and key not in table
    )
    assert missing == []
