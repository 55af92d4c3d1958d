"""Hydra's standard plugin tests, the compose API, the resolvers and the strict schema."""

from __future__ import annotations

import copy
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hydra import compose, initialize, initialize_config_module
from hydra.core.global_hydra import GlobalHydra
from hydra.core.plugins import Plugins
from hydra.plugins.config_source import ConfigSource
from hydra.plugins.search_path_plugin import SearchPathPlugin
from hydra.plugins.sweeper import Sweeper
from omegaconf import OmegaConf
from omegaconf.basecontainer import BaseContainer
from omegaconf.errors import ConfigAttributeError, InterpolationResolutionError

import areal_alloc
from areal_alloc import AllocationError
from areal_alloc.resolvers import RESOLVERS, register_resolvers
from hydra_plugins.areal_alloc.areal_alloc_schema_source import AllocSchemaSource
from hydra_plugins.areal_alloc.areal_alloc_searchpath import AllocSearchPathPlugin
from hydra_plugins.areal_alloc.areal_alloc_sweeper import SkipInvalidSweeper

ROOT = Path(__file__).resolve().parents[2]


def _validate(cfg: object) -> areal_alloc.Plan:
    """``areal_alloc.validate`` as the ``areal-alloc`` app's hook runs it: its own ``output``
    key is not the reference's (conf/app/config.yaml, ``app_keys``)."""
    from areal_alloc.settings import Settings

    return areal_alloc.validate(cfg, settings=Settings.from_sources(hook={"app_keys": ["output"]}))


@pytest.fixture
def restore_resolvers() -> Iterator[None]:
    """OmegaConf's documented fixture: leave the resolver registry as we found it."""
    state = copy.deepcopy(BaseContainer._resolvers)
    yield
    BaseContainer._resolvers = state


@pytest.fixture(autouse=True)
def clear_hydra() -> Iterator[None]:
    GlobalHydra.instance().clear()
    yield
    GlobalHydra.instance().clear()


def test_discovery() -> None:
    names = [p.__name__ for p in Plugins.instance().discover(SearchPathPlugin)]
    assert AllocSearchPathPlugin.__name__ in names
    sweepers = [p.__name__ for p in Plugins.instance().discover(Sweeper)]
    assert SkipInvalidSweeper.__name__ in sweepers
    # our namespace share hides no other plugin
    assert "JoblibLauncher" in [p.__name__ for p in Plugins.instance().discover()]


def test_config_installed() -> None:
    with initialize(version_base=None):
        loader = GlobalHydra.instance().config_loader()
        assert "validate" in loader.get_group_options("areal_alloc")
        assert "schema" in loader.get_group_options("areal_alloc")
    names = [p.__name__ for p in Plugins.instance().discover(ConfigSource)]
    assert AllocSchemaSource.__name__ in names


def test_a_hydra_app_without_the_schema_never_builds_it(tmp_path: Path) -> None:
    (tmp_path / "config.yaml").write_text("defaults:\n  - areal_alloc/validate\n  - _self_\n")
    code = (
        "import sys\n"
        "from hydra import compose, initialize_config_dir\n"
        f"with initialize_config_dir(config_dir={str(tmp_path)!r}, version_base='1.3'):\n"
        "    compose('config')\n"
        "print('areal_alloc.schema' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert (done.returncode, done.stdout) == (0, "False\n"), done.stderr


def test_hydra_plugins_is_a_namespace_package() -> None:
    assert not (ROOT / "hydra_plugins" / "__init__.py").exists()
    import hydra_plugins

    assert getattr(hydra_plugins, "__file__", None) is None


def test_plugin_module_imports_nothing_heavy() -> None:
    code = (
        "import sys, hydra_plugins.areal_alloc.areal_alloc_searchpath, "
        "hydra_plugins.areal_alloc.areal_alloc_sweeper, "
        "hydra_plugins.areal_alloc.areal_alloc_schema_source\n"
        "print(sorted(m for m in ('lark', 'areal_alloc._parse', 'areal_alloc.model', "
        "'areal_alloc.plan', 'areal_alloc.schema') if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "[]"


def test_compose_api_and_validate() -> None:
    with initialize_config_module(config_module="areal_alloc.conf.app", version_base="1.3"):
        cfg = compose("config")
        plan = _validate(cfg)
        assert [(e.key, e.spec, e.gpus) for e in plan.engines] == [
            ("rollout", "sglang:d2t4", 8),
            ("actor", "fsdp:d4t2", 8),
            ("ref", "fsdp:d4t2", 0),
        ]
        moe = _validate(compose("config", overrides=["experiment=moe_32"]))
        assert moe["actor"].spec == "megatron:(attn:d4p2t2c2|ffn:d2p2t4e2)"
        assert (moe.total_gpus, moe.capacity) == (48, 48)
        bad = compose("config", overrides=["actor.backend=fsdp:d4p2"])
        with pytest.raises(AllocationError, match=r"^actor.backend='fsdp:d4p2': FSDP backend"):
            _validate(bad)


@pytest.mark.parametrize(
    ("experiment", "engines", "total"),
    [
        ("grpo_2x8", ["rollout", "actor", "ref"], 16),
        ("grpo_1x8", ["rollout", "actor", "ref"], 8),
        ("moe_32", ["rollout", "actor", "ref"], 48),
        ("ppo_critic", ["rollout", "actor", "critic", "ref"], 24),
        ("distill_teacher", ["rollout", "teacher", "actor"], 16),
    ],
)
def test_every_shipped_experiment_validates(
    experiment: str, engines: list[str], total: int
) -> None:
    with initialize_config_module(config_module="areal_alloc.conf.app", version_base="1.3"):
        plan = _validate(compose("config", overrides=[f"experiment={experiment}"]))
    assert [e.key for e in plan.engines] == engines
    assert plan.total_gpus == total


def test_one_override_adds_a_critic() -> None:
    with initialize_config_module(config_module="areal_alloc.conf.app", version_base="1.3"):
        plan = _validate(
            compose(
                "config",
                overrides=[
                    "cluster.n_nodes=3",
                    "+critic.backend=fsdp:d4t2",
                    # the default experiment names its model and GPU: the critic must fit
                    "+critic.gradient_checkpointing=true",
                ],
            )
        )
    assert plan["critic"].spec == "fsdp:d4t2"
    assert plan.total_gpus == 24


# --- the strict schema -----------------------------------------------------------


@pytest.mark.usefixtures("reference_off")  # the strict schema's model_shape
def test_strict_schema_rejects_unknown_keys_and_still_adds_a_critic(tmp_path: Path) -> None:
    conf = tmp_path / "conf"
    conf.mkdir()
    (conf / "strict.yaml").write_text(
        "defaults:\n  - areal_alloc/schema\n  - _self_\n"
        "cluster:\n  n_nodes: 2\nrollout:\n  backend: sglang:d2\nactor:\n  backend: fsdp:d4\n"
    )
    (conf / "typo.yaml").write_text(
        "defaults:\n  - areal_alloc/schema\n  - _self_\nactor:\n  backend: fsdp:d4\n  optimzer: 1\n"
    )
    with initialize_config_dir(str(conf)):
        cfg = compose("strict", overrides=["++critic.backend=fsdp:d4"])
        assert OmegaConf.is_missing(cfg, "cluster") is False
        assert _validate(cfg)["critic"].gpus == 4
        with pytest.raises(Exception, match="optimzer"):
            compose("typo")
        with pytest.raises(ConfigAttributeError, match="not in 'ActorConfig'"):
            cfg.actor.unknown = 1
        legacy = compose("strict", overrides=["allocation_mode=sglang:d4+fsdp:d4"])
        with pytest.raises(AllocationError, match=r"rollout\.backend=sglang:d4 \+\+actor\.backend"):
            _validate(legacy)


@pytest.mark.usefixtures("reference_off")  # the strict schema's model_shape
def test_strict_schema_declares_the_memory_keys(tmp_path: Path) -> None:
    conf = tmp_path / "conf"
    conf.mkdir()
    (conf / "strict.yaml").write_text(
        "defaults:\n  - areal_alloc/schema\n  - _self_\n"
        "cluster: {n_nodes: 2, n_gpus_per_node: 8, gpu: H100-80GB, memory_reserve_gib: 3}\n"
        "rollout: {backend: 'sglang:d2t4', max_concurrent_rollouts: 64}\n"
        "sglang: {context_length: 16384, mem_fraction_static: 0.8}\n"
        "actor:\n  backend: fsdp:d8\n  path: Qwen/Qwen3-8B\n  gradient_checkpointing: true\n"
        "  optimizer: {type: adam}\n  mb_spec: {max_tokens_per_mb: 16384}\n"
        "ref:\n  backend: ''\n  scheduling_strategy: {type: colocation, target: actor}\n"
    )
    with initialize_config_dir(str(conf)):
        plan = _validate(compose("strict"))
    actor, ref, rollout = plan["actor"].memory, plan["ref"].memory, plan["rollout"].memory
    assert actor is not None
    assert ref is not None
    assert rollout is not None
    assert actor.term("reserve") == 3 << 30
    # the schema's all-null ref.optimizer section is no optimizer: the ref runs forward only
    assert ref.term("optimizer") == 0
    assert rollout.kv_cache is not None
    assert rollout.kv_cache.sequence_length == 16384


def initialize_config_dir(path: str) -> Any:
    from hydra import initialize_config_dir as init

    return init(config_dir=path, version_base="1.3")


# --- resolvers -------------------------------------------------------------------


def test_resolvers_registered_on_import_and_idempotent(restore_resolvers: None) -> None:
    for name in RESOLVERS:
        assert OmegaConf.has_resolver(name)
    register_resolvers()  # a second registration is a no-op, not a ValueError
    for name in RESOLVERS:
        BaseContainer._resolvers.pop(name)
    assert not OmegaConf.has_resolver("alloc.world_size")
    register_resolvers()
    assert OmegaConf.has_resolver("alloc.world_size")


RESOLVED = [
    ("${alloc.world_size:megatron:d2p2t4}", 16),
    ("${alloc.world_size:'megatron:(attn:d4p2t2c2|ffn:d2p2t4e2)'}", 32),
    ("${alloc.world_size:${actor.backend}}", 8),
    ("${alloc.dim:${rollout.backend},tp}", 4),
    ("${alloc.dim:${rollout.backend},instances}", 2),
    ("${alloc.dim:${rollout.backend},instance_size}", 4),
    ("${alloc.dim:'megatron:(attn:d4p2t2c2|ffn:d2p2t4e2)',etp}", 4),
    ("${alloc.dim:'megatron:(attn:d4p2t2c2|ffn:d2p2t4e2)',edp}", 2),
    ("${alloc.total_gpus:}", 16),
    ("${alloc.layouts:fsdp,4}", "fsdp:d4,fsdp:d2t2,fsdp:d2c2,fsdp:d1t4,fsdp:d1t2c2,fsdp:d1c4"),
    (
        # tensor parallelism stays inside a 4-GPU node: no sglang:d1t8
        "${alloc.layouts:sglang,8,'gpus_per_node=4'}",
        "sglang:d8,sglang:d4t2,sglang:d4p2,"
        "sglang:d2t4,sglang:d2p2t2,sglang:d2p4,sglang:d1p2t4,sglang:d1p4t2,sglang:d1p8",
    ),
]


@pytest.mark.parametrize(("expression", "expected"), RESOLVED)
def test_resolvers(expression: str, expected: object) -> None:
    cfg = OmegaConf.create(
        {
            "cluster": {"n_nodes": 2, "n_gpus_per_node": 8},
            "rollout": {"backend": "sglang:d2t4"},
            "actor": {"backend": "fsdp:d4t2"},
            "ref": {
                "backend": "",
                "scheduling_strategy": {"type": "colocation", "target": "actor"},
            },
            "value": expression,
        }
    )
    assert cfg.value == expected


RESOLVER_ERRORS = [
    ("${alloc.world_size:fsdp:d4p2}", "FSDP backend only supports data/tensor/context"),
    ("${alloc.world_size:fdsp:d4}", "did you mean 'fsdp'"),
    ("${alloc.dim:fsdp:d4,xx}", "alloc.dim: unknown dimension name 'xx'"),
    ("${alloc.layouts:fsdp,0}", "GPU count must be an integer ≥ 1, got 0"),
    ("${alloc.layouts:fsdp,8,'max_xx=2'}", "unknown layout constraint 'max_xx=2'"),
    (
        "${alloc.layouts:fsdp,8,'model=Qwen2.5-72B','gpu=H100-80GB'}",
        "alloc.layouts: no fsdp layout of 8 GPUs fits Qwen2.5-72B on H100-80GB",
    ),
    ("${alloc.layouts:fsdp,8,'model=Qwen3-8B'}", "the memory filter needs both model=… and gpu="),
    ("${alloc.layouts:fsdp,8,'model=Qwen3-8B','gpu=H2000'}", "unknown GPU 'H2000'"),
    ("${alloc.layouts:fsdp,8,'model=Qwen3-8B','gpu=H100','tokens=x'}", "tokens='x': must be"),
]


def test_the_layouts_resolver_keeps_the_layouts_that_fit() -> None:
    def listed(expression: str) -> list[str]:
        return str(OmegaConf.create({"v": expression}).v).split(",")

    everything = listed("${alloc.layouts:megatron,16,'max_cp=1'}")
    fit = "'model=Qwen3-8B','gpu=H100-80GB','max_cp=1'"
    short = listed(f"${{alloc.layouts:megatron,16,{fit},'tokens=4096'}}")
    long = listed(f"${{alloc.layouts:megatron,16,{fit},'tokens=65536'}}")
    # fewer tokens per micro-batch never needs more memory: a superset fits
    assert set(long) < set(short) <= set(everything)
    assert long


@pytest.mark.parametrize(("expression", "message"), RESOLVER_ERRORS)
def test_resolver_errors_are_the_core_messages(expression: str, message: str) -> None:
    cfg = OmegaConf.create({"value": expression})
    with pytest.raises(InterpolationResolutionError) as info:
        _ = cfg.value
    assert message in str(info.value)
    assert "AllocationValidationError raised while resolving" in str(info.value)


# --- the hook with a sweeper that picks its jobs as it runs ----------------------


def test_hook_with_another_sweeper_checks_the_fixed_config(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from areal_alloc.hydra_hook import ValidateAllocations

    def config(backend: str) -> Any:
        return OmegaConf.create(
            {
                "hydra": {"sweeper": {"_target_": "hydra_plugins.optuna.OptunaSweeper"}},
                "actor": {"backend": backend},
                "cluster": {"n_nodes": 1, "n_gpus_per_node": 8},
            }
        )

    hook = ValidateAllocations()
    hook.on_multirun_start(config("fsdp:d4"))
    assert capsys.readouterr().err == (
        "areal-alloc: hydra_plugins.optuna.OptunaSweeper chooses its jobs while it runs: "
        "checked the fixed part of the config only\n"
    )
    with pytest.raises(SystemExit) as info:
        hook.on_multirun_start(config("fsdp:d4p2"))
    assert str(info.value).startswith("areal-alloc: actor.backend='fsdp:d4p2': FSDP backend")


@pytest.mark.parametrize(
    ("given", "names"),
    [
        (None, ()),
        ("", ()),
        ("output", ("output",)),
        ("output, round", ("output", "round")),
        (["marker_dir", "total_gpus"], ("marker_dir", "total_gpus")),
        (OmegaConf.create(["a", "b"]), ("a", "b")),
        (5, None),
        ({"output": 1}, None),
    ],
)
def test_the_hooks_app_keys_are_a_string_or_a_list(given: object, names: object) -> None:
    from areal_alloc.numbers import read_names

    assert read_names(given) == names


def test_an_app_keys_of_another_type_stops_the_hook_in_one_line() -> None:
    from areal_alloc.hydra_hook import ValidateAllocations

    with pytest.raises(SystemExit) as info:
        ValidateAllocations(app_keys=5)  # type: ignore[arg-type]
    assert str(info.value) == (
        "areal-alloc: hydra.callbacks.areal_alloc.app_keys=5: must be a comma-separated "
        "string of the app's own top-level keys (output,round) or a list of them"
    )
