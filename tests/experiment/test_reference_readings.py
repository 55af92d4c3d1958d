"""Real configs read exactly as the reference reads them (teacher, cluster, numbers, schema)."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any

import pytest
from omegaconf import OmegaConf

from areal_alloc import AllocationError, AllocationValidationError, validate
from areal_alloc.legacy import migration_overrides
from tests.conftest import AppRun, MainCli

#: these experiments name the GPU or the model with areal-alloc's own keys (cluster.gpu,
#: model_shape), which the reference's loader refuses: the strict-key check is off here
#: (tests/cli/test_reference_keys.py tests it)
pytestmark = pytest.mark.usefixtures("reference_off")


# --- the teacher, as the reference reads it ------------------------------------------

ACTOR = {"actor": {"backend": "fsdp:d4"}, "cluster": {"n_nodes": 1, "n_gpus_per_node": 8}}

TEACHERS = [
    ({"rollout": {"backend": "vllm:d1t2"}}, "teacher.rollout.backend", "vllm:d1t2", ()),
    (
        {"engine_type": "train", "train": {"backend": "fsdp:d1t2"}},
        "teacher.train.backend",
        "fsdp:d1t2",
        (),
    ),
    ({"backend": "fsdp:d1t2"}, "teacher.backend", "fsdp:d1t2", ()),  # older configs
    (
        {"backend": "fsdp:d1t2", "engine_type": "rollout", "rollout": {"backend": "vllm:d1t2"}},
        "teacher.rollout.backend",
        "vllm:d1t2",
        (
            "teacher.backend is not read when teacher.engine_type or teacher.rollout/train "
            "is set; the teacher runs teacher.rollout.backend",
        ),
    ),
    (
        {
            "engine_type": "train",
            "rollout": {"backend": "vllm:d1t2"},
            "train": {"backend": "fsdp:d1t2"},
        },
        "teacher.train.backend",
        "fsdp:d1t2",
        (
            "teacher.rollout and teacher.train are both set; teacher.engine_type='train' "
            "selects teacher.train",
        ),
    ),
]


@pytest.mark.parametrize(("teacher", "key", "spec", "warnings"), TEACHERS)
def test_teacher_shapes(
    teacher: dict[str, Any], key: str, spec: str, warnings: tuple[str, ...]
) -> None:
    for form in ({**ACTOR, "teacher": teacher}, OmegaConf.create({**ACTOR, "teacher": teacher})):
        plan = validate(form)
        assert (plan["teacher"].backend_key, plan["teacher"].spec) == (key, spec)
        assert plan.warnings == warnings


TEACHER_ERRORS = [
    (
        {"rollout": {"backend": "fsdp:d1t2"}},
        "teacher.rollout.backend='fsdp:d1t2': teacher.rollout is an inference engine; use "
        "sglang or vllm (fsdp, megatron and archon train)",
    ),
    (
        {"engine_type": "train", "train": {"backend": "vllm:d1t2"}},
        "teacher.train.backend='vllm:d1t2': teacher.train is a training engine; use fsdp, "
        "megatron or archon (sglang and vllm serve the rollout)",
    ),
    (
        {"engine_type": "rollout"},
        "teacher.rollout must be provided when teacher.engine_type='rollout': set it, e.g. "
        "++teacher.rollout.backend=sglang:d1t2 (an inference backend)",
    ),
    (
        {"engine_type": "train"},
        "teacher.train must be provided when teacher.engine_type='train': set it, e.g. "
        "++teacher.train.backend=fsdp:d4 (a training backend)",
    ),
    (
        {"rollout": {"path": "/models/x"}},
        "teacher.rollout.backend is empty: set it, e.g. ++teacher.rollout.backend=sglang:d1t2",
    ),
]


@pytest.mark.parametrize(("teacher", "message"), TEACHER_ERRORS)
def test_teacher_errors(teacher: dict[str, Any], message: str) -> None:
    with pytest.raises(AllocationValidationError) as info:
        validate({**ACTOR, "teacher": teacher})
    assert info.value.message == message


# --- other real-config readings --------------------------------------------------------


def test_a_config_without_cluster_takes_the_reference_defaults(
    tmp_path: Path, main_cli: MainCli
) -> None:
    plan = validate({"actor": {"backend": "fsdp:d8"}})
    assert (plan.n_nodes, plan.n_gpus_per_node) == (32, 8)
    assert plan.assumptions == (
        "cluster.n_nodes=32 and cluster.n_gpus_per_node=8 assumed (not set in the config; "
        "the reference's defaults)",
    )
    # cluster: null is no default: the reference's ClusterSpecConfig field is not Optional
    with pytest.raises(AllocationValidationError, match=r"^cluster=null: the reference's loader"):
        validate({"actor": {"backend": "fsdp:d8"}, "cluster": None})
    (tmp_path / "exp.yaml").write_text("actor:\n  backend: fsdp:d8\n")
    done = main_cli("check", "exp.yaml")
    assert done.returncode == 0, done.stderr
    assert "allocation plan" not in done.stdout
    assert done.stdout.startswith("exp.yaml: 32 nodes × 8 GPUs = 256 GPUs")
    assert "  nodes 1–31  · · · · · · · ·" in done.stdout
    assert (
        "assumed: cluster.n_nodes=32 and cluster.n_gpus_per_node=8 assumed (not set in the "
        "config; the reference's defaults)" in done.stdout
    )


def test_check_composes_the_defaults_list(tmp_path: Path, main_cli: MainCli) -> None:
    (tmp_path / "base.yaml").write_text(
        "cluster:\n  n_nodes: 1\n  n_gpus_per_node: 8\nactor:\n  backend: fsdp:d4p2\n"
    )
    (tmp_path / "top.yaml").write_text("defaults:\n  - base\n  - _self_\nexperiment_name: x\n")
    done = main_cli("check", "top.yaml")
    assert done.returncode == 1
    assert done.stderr.startswith(
        "areal-alloc check: actor.backend='fsdp:d4p2': FSDP backend only supports"
    )
    good = main_cli("check", "top.yaml", "actor.backend=fsdp:d8")
    assert good.returncode == 0, good.stderr
    assert "  A = actor fsdp:d8  (node 0)" in good.stdout


def test_numbers_written_as_strings_convert() -> None:
    plan = validate(
        {
            "cluster": {"n_nodes": "2", "n_gpus_per_node": " 8 "},
            "actor": {"backend": "fsdp:d8", "kl_ctl": "0"},
            "ref": {"backend": ""},
        }
    )
    assert (plan.n_nodes, plan.n_gpus_per_node) == (2, 8)
    assert plan["ref"].active is False


@pytest.fixture
def hydra_conf(tmp_path: Path) -> Path:
    conf = tmp_path / "conf"
    conf.mkdir()
    return conf


def _compose(conf: Path, name: str, overrides: list[str] | None = None) -> Any:
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(str(conf), version_base="1.3"):
        return compose(name, overrides=overrides or [])


def test_strict_schema_accepts_an_actor_only_config(hydra_conf: Path) -> None:
    (hydra_conf / "actor_only.yaml").write_text(
        "defaults:\n  - areal_alloc/schema\n  - _self_\nactor:\n  backend: fsdp:d4\n"
    )
    cfg = _compose(hydra_conf, "actor_only")
    plan = validate(cfg)
    assert [e.key for e in plan.engines] == ["actor"]
    # the plain hook gives the same plan
    assert [e.key for e in validate({"actor": {"backend": "fsdp:d4"}}).engines] == ["actor"]


@pytest.mark.parametrize(
    ("section", "message"),
    [
        ("ref:\n  scheduling_strategy: {typ: colocation, target: actor}\n", "Key 'typ' not in"),
        ("critic:\n  backnd: fsdp:d4\n", "Key 'backnd' not in"),
        ("teacher:\n  rollout: {backend: vllm:d1, extra: 1}\n", "Key 'extra' not in"),
    ],
)
def test_strict_schema_rejects_unknown_keys_under_every_engine(
    hydra_conf: Path, section: str, message: str
) -> None:
    (hydra_conf / "typo.yaml").write_text(
        "defaults:\n  - areal_alloc/schema\n  - _self_\nactor:\n  backend: fsdp:d4\n" + section
    )
    with pytest.raises(Exception, match=message):
        _compose(hydra_conf, "typo")


def test_a_scheduling_typo_is_named_without_the_schema() -> None:
    with pytest.raises(AllocationValidationError) as info:
        validate(
            {
                "actor": {"backend": "fsdp:d4"},
                "ref": {"scheduling_strategy": {"typ": "colocation", "target": "actor"}},
            }
        )
    assert info.value.message == (
        "ref.scheduling_strategy.typ: unknown key; did you mean 'type'? scheduling_strategy "
        "takes type, target, fork"
    )


@pytest.mark.parametrize("order", ["validate_first", "self_first"])
def test_a_deprecated_allocation_mode_in_yaml_stops_the_run_in_any_order(
    tmp_path: Path, order: str, app_in_process: AppRun
) -> None:
    conf = tmp_path / "conf"
    conf.mkdir()
    defaults = (
        "  - areal_alloc/validate\n  - _self_\n"
        if order == "validate_first"
        else "  - _self_\n  - areal_alloc/validate\n"
    )
    (conf / "config.yaml").write_text(
        f"defaults:\n{defaults}allocation_mode: sglang:d8+fsdp:d8\nactor:\n  backend: fsdp:d8\n"
    )
    (tmp_path / "app.py").write_text(
        "import hydra\n"
        "@hydra.main(config_path='conf', config_name='config', version_base='1.3')\n"
        "def app(cfg):\n    print('RAN', 'allocation_mode' in cfg)\n"
        "app()\n"
    )
    done = app_in_process(tmp_path / "app.py", "hydra.run.dir=out", cwd=tmp_path)
    assert done.returncode == 1
    assert "RAN" not in done.stdout
    assert done.stderr.startswith(
        "areal-alloc: allocation_mode='sglang:d8+fsdp:d8' is deprecated: the single-controller "
        "scheduler ignores it"
    )
    # without allocation_mode the task never sees the hook's placeholder
    (conf / "config.yaml").write_text(f"defaults:\n{defaults}actor:\n  backend: fsdp:d8\n")
    ok = app_in_process(tmp_path / "app.py", "hydra.run.dir=out", cwd=tmp_path)
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout == "RAN False\n"
    # no cluster in this config: the hook says what it assumed
    assert ok.stderr == (
        "areal-alloc: assumed: cluster.n_nodes=32 and cluster.n_gpus_per_node=8 assumed (not "
        "set in the config; the reference's defaults)\n"
    )


def test_migration_overrides_work_where_the_engine_does_not_exist_yet(hydra_conf: Path) -> None:
    (hydra_conf / "bare.yaml").write_text("actor:\n  backend: fsdp:d2\n")
    migration = migration_overrides("sglang[rollout]:d2+fsdp[actor]:d4|fsdp[critic]:d4")
    overrides = [o.strip('"') for o in migration.overrides]
    cfg = _compose(hydra_conf, "bare", overrides)
    plan = validate(cfg)
    assert [(e.key, e.spec, e.gpus) for e in plan.engines] == [
        ("rollout", "sglang:d2", 2),
        ("actor", "fsdp:d4", 4),
        ("critic", "fsdp:d4", 0),
    ]


def test_the_hook_prints_the_plans_warnings(tmp_path: Path, main_cli: MainCli) -> None:
    done = main_cli(
        "rollout.backend=sglang:d3t2",
        "rollout.max_concurrent_rollouts=16",
        "actor.backend=megatron:d1t4",  # the model's 28 heads take t4, not t8
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr == (
        "areal-alloc: warning: actor: 1 tensor-parallel group(s) cross nodes, e.g. GPUs 6-9 on "
        "nodes 0 and 1; tensor-parallel traffic would go over the network\n"
    )


# --- messages ---------------------------------------------------------------------------


def test_an_unresolved_interpolation_in_a_plain_dict_says_how_to_load() -> None:
    with pytest.raises(AllocationValidationError) as info:
        validate({"actor": {"backend": "fsdp:d4"}, "ref": {"backend": "${actor.backend}"}})
    assert info.value.message == (
        "ref.backend='${actor.backend}': an unresolved interpolation; the config was read "
        "without OmegaConf (e.g. yaml.safe_load), so ${…} stayed text. Load it with "
        "OmegaConf.load(path), or compose it with Hydra, then validate"
    )


def test_an_engine_written_as_a_list_must_be_a_mapping() -> None:
    for form in ({"actor": ["fsdp:d4"]}, OmegaConf.create({"actor": ["fsdp:d4"]})):
        with pytest.raises(AllocationValidationError) as info:
            validate(form)
        assert info.value.message.endswith(
            "actor must be a mapping (a section with a backend field), not "
            f"{type(form['actor']).__name__}; e.g. actor.backend=fsdp:d4"
        )


@pytest.mark.parametrize(
    ("args", "stderr"),
    [
        (
            ["frobnicate"],
            "areal-alloc: 'frobnicate' is neither a subcommand nor a Hydra override; "
            "subcommands: explain, migrate, layouts, check, preflight, suggest, calibrate, report "
            "(each has --help); "
            "overrides are key=value, e.g. areal-alloc actor.backend=fsdp:d4t2\n",
        ),
        (
            ["check"],
            "areal-alloc check: no experiment file given; usage: areal-alloc check FILE.yaml "
            "[FILE.yaml …] [key=value …] [--json] (the reference's spelling --config FILE "
            "works too)\n",
        ),
    ],
)
def test_command_line_mistakes(
    tmp_path: Path, args: list[str], stderr: str, main_cli: MainCli
) -> None:
    done = main_cli(*args)
    assert done.returncode in (1, 2)
    assert done.stderr == stderr


# --- the dataclass object the reference's loader returns --------------------------------


class StrategyType(str, Enum):
    separation = "separation"
    colocation = "colocation"


@dataclass
class Strategy:
    type: StrategyType = StrategyType.separation
    target: str | None = None
    fork: bool = True


@dataclass
class Engine:
    backend: str = ""
    path: str = ""
    scheduling_strategy: Strategy = field(default_factory=Strategy)


@dataclass
class Actor(Engine):
    kl_ctl: float = 0.1


@dataclass
class Cluster:
    n_nodes: int = 32
    n_gpus_per_node: int = 8


@dataclass
class GRPOLike:
    rollout: Engine = field(default_factory=Engine)
    actor: Actor = field(default_factory=Actor)
    ref: Engine | None = None
    critic: Engine | None = None
    teacher: Any = None
    cluster: Cluster = field(default_factory=Cluster)
    allocation_mode: str = ""


def test_validate_reads_a_dataclass_config() -> None:
    config = GRPOLike(
        rollout=Engine(backend="sglang:d2t4"),
        actor=Actor(backend="fsdp:d4t2"),
        ref=Engine(
            backend="",
            scheduling_strategy=Strategy(StrategyType.colocation, "actor"),
        ),
        cluster=Cluster(n_nodes=2),
    )
    plan = validate(config)
    assert [(e.key, e.spec, e.gpus) for e in plan.engines] == [
        ("rollout", "sglang:d2t4", 8),
        ("actor", "fsdp:d4t2", 8),
        ("ref", "fsdp:d4t2", 0),
    ]
    config.actor.backend = "fsdp:d4p2"
    with pytest.raises(AllocationError, match=r"actor\.backend='fsdp:d4p2'"):
        validate(config)
