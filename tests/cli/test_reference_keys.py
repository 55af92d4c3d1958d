"""Every key, as the reference's loader reads it (areal_alloc.experiment.reference_keys).

Table tests against the committed schema (config → the exact one line, exit code 1 from
``areal-alloc check``), the version's sources (flag, hook parameter, environment), the
real ``areal``'s own loader step (a small fake ``areal`` package on ``sys.path``), the
committed schema against what the generator writes from the wheel, and the differential
test: every built-in experiment, the README's and the docs' examples, real_grpo.yaml and
a table of bad keys merged through the reference's own loader from the wheel and through
the checker with version 1.0.4, the same verdict and the same key (CI's reference phase).
"""

from __future__ import annotations

import os
import sys
import timeit
from pathlib import Path
from typing import Any

import pytest
from omegaconf import DictConfig, OmegaConf

from areal_alloc import AllocationValidationError
from areal_alloc.experiment import reference_keys
from areal_alloc.experiment.reference_keys import check_reference_keys
from areal_alloc.settings import Settings
from tests.apps.reference.reference import REQUIRE_ENV, check_wheel, load_cli_args, wheel_path
from tests.conftest import MainCli

ROOT = Path(__file__).parents[2]
GRPO = {"rollout": {"backend": "sglang:d4"}, "actor": {"backend": "fsdp:d4"}}
_LOADER = "the reference's loader (areal {v}) refuses it"


def _with(**sections: Any) -> dict[str, Any]:
    cfg: dict[str, Any] = {k: dict(v) for k, v in GRPO.items()}
    for dotted, value in sections.items():
        *parents, key = dotted.split("__")
        node = cfg
        for part in parents:
            node = node.setdefault(part, {})
        node[key] = value
    return cfg


#: (config, the one line) with the newest version (cbff54d6)
TABLE = [
    (
        _with(sglang__tp_size=2),
        "sglang.tp_size=2: the reference's loader (areal cbff54d6) refuses it: Key 'tp_size' "
        "not in 'SGLangConfig'; t of rollout.backend='sglang:d4' sets it: the reference passes "
        "tp_size=1 to each server (SGLangConfig.build_args, cli_args.py l.2258-2300); change t "
        "there for another size",
    ),
    (
        _with(vllm__tensor_parallel_size=2),
        "vllm.tensor_parallel_size=2: the reference's loader (areal cbff54d6) refuses it: Key "
        "'tensor_parallel_size' not in 'vLLMConfig'; t of rollout.backend sets it: the "
        "reference passes it as tensor_parallel_size (vLLMConfig.build_args, cli_args.py "
        "l.2083-2097)",
    ),
    (
        {
            "rollout": {"backend": "vllm:d2p2t2"},
            "actor": {"backend": "fsdp:d8"},
            "vllm": {"pipeline_parallel_size": 4},
        },
        "vllm.pipeline_parallel_size=4: the reference's loader (areal cbff54d6) refuses it: Key "
        "'pipeline_parallel_size' not in 'vLLMConfig'; p of rollout.backend='vllm:d2p2t2' sets "
        "it: the reference passes pipeline_parallel_size=2 to each server (vLLMConfig.build_args, "
        "cli_args.py l.2084-2098); change p there for another size",
    ),
    (
        _with(teacher={"backend": "sglang:d1"}),
        "teacher.backend='sglang:d1': the reference's loader (areal cbff54d6) refuses it: Key "
        "'backend' not in 'TeacherConfig'; a teacher's backend belongs to its engine: "
        "teacher.rollout.backend (teacher.engine_type rollout, the default) or "
        "teacher.train.backend with teacher.engine_type: train (TeacherConfig, cli_args.py "
        "l.3343-3383)",
    ),
    (
        _with(vllm__max_num_batched_tokens=8192),
        "vllm.max_num_batched_tokens=8192: the reference's loader (areal cbff54d6) refuses it: "
        "Key 'max_num_batched_tokens' not in 'vLLMConfig'; the reference cannot pass it to vLLM "
        "(vLLMConfig.build_args passes only vLLMConfig's own fields, cli_args.py l.2081-2100)",
    ),
    (
        _with(actor__optimzer={"type": "adam"}),
        "actor.optimzer: the reference's loader (areal cbff54d6) refuses it: Key 'optimzer' not "
        "in 'PPOActorConfig'; did you mean actor.optimizer?",
    ),
    (
        _with(model_shape={"num_layers": 28}),
        "model_shape: the reference's loader (areal cbff54d6) refuses it: Key 'model_shape' not "
        "in 'GRPOConfig'; areal-alloc's own model section: name the model in actor.path (a "
        "local folder with config.json, a hub id or a catalogue name) instead; a config only "
        "areal-alloc reads is checked with --reference-version off",
    ),
    (
        _with(cluster__gpu="H800"),
        "cluster.gpu='H800': the reference's loader (areal cbff54d6) refuses it: Key 'gpu' not "
        "in 'ClusterSpecConfig'; areal-alloc's own setting, not the experiment's: give it as "
        "--gpu (any command), hydra.callbacks.areal_alloc.gpu (the hook) or AREAL_ALLOC_GPU",
    ),
    (
        _with(actor__lora_rank="abc"),
        "actor.lora_rank='abc': the reference's loader (areal cbff54d6) refuses it: Value 'abc' "
        "of type 'str' could not be converted to Integer (the field is int); give an integer",
    ),
    (
        _with(actor__target_modules="all-linear"),
        "actor.target_modules='all-linear': the reference's loader (areal cbff54d6) refuses it: "
        "Invalid value assigned: str is not a ListConfig, list or tuple (the field is "
        "list[str]); give a list",
    ),
    (
        _with(sglang="fast"),
        "sglang='fast': the reference's loader (areal cbff54d6) refuses it: Merge error: str is "
        "not a subclass of SGLangConfig (the field is SGLangConfig); give a section (a mapping "
        "of its keys)",
    ),
    (
        _with(actor__gae_lambda=1),
        "actor.gae_lambda=1: the reference's loader (areal cbff54d6) refuses it: Value '1' of "
        "type 'int' is incompatible with type hint 'Union[float, str]' (the field is "
        "Union[float, str]); give a value of type Union[float, str]",
    ),
]

#: what OmegaConf converts is taken (omegaconf/nodes.py, 2.3)
TAKEN = [
    _with(actor__lora_rank="16"),
    _with(actor__lora_rank=" 1_6 "),
    _with(actor__kl_ctl="0.1"),
    _with(actor__kl_ctl=0),
    _with(actor__gradient_checkpointing="yes"),
    _with(actor__gradient_checkpointing=0),
    _with(sglang__context_length="4096"),
    _with(actor__target_modules=["q_proj", 1]),
    _with(actor__gae_lambda="auto"),
    _with(actor__scheduling_strategy={"type": "colocation", "target": "rollout"}),
    {**_with(), "hydra": {"anything": 1}},
]


@pytest.mark.parametrize(("config", "message"), TABLE)
def test_a_key_the_reference_refuses_is_one_line(config: dict[str, Any], message: str) -> None:
    with pytest.raises(AllocationValidationError) as caught:
        check_reference_keys(OmegaConf.create(config), "cbff54d6")
    assert caught.value.message == message


@pytest.mark.parametrize("config", TAKEN)
def test_what_omegaconf_converts_is_taken(config: dict[str, Any]) -> None:
    check_reference_keys(OmegaConf.create(config), "cbff54d6")
    check_reference_keys(config, "cbff54d6")  # a plain mapping too


def test_the_message_names_the_version() -> None:
    with pytest.raises(AllocationValidationError) as caught:
        check_reference_keys(_with(sglang__tp_size=2), "1.0.4")
    assert caught.value.message.startswith(
        "sglang.tp_size=2: the reference's loader (areal 1.0.4) refuses it: "
    )
    check_reference_keys(_with(sglang__tp_size=2), "off")  # off: not checked


def test_check_refuses_it_with_exit_code_1(tmp_path: Path, main_cli: MainCli) -> None:
    (tmp_path / "run.yaml").write_text(OmegaConf.to_yaml(_with(sglang__tp_size=2)))
    done = main_cli("check", "run.yaml")
    assert (done.returncode, done.stderr) == (1, f"areal-alloc check: {TABLE[0][1]}\n")
    old = main_cli("check", "run.yaml", "--reference-version", "1.0.4")
    assert old.returncode == 1
    assert "(areal 1.0.4)" in old.stderr
    off = main_cli("check", "run.yaml", "--reference-version", "off")
    assert off.returncode == 0, off.stderr


def test_suggest_config_checks_the_keys_and_takes_the_flag(
    tmp_path: Path, main_cli: MainCli
) -> None:
    cfg = _with(sglang__tp_size=2)
    cfg["actor"].update(path="Qwen/Qwen3-0.6B", mb_spec={"max_tokens_per_mb": 8192})
    cfg["cluster"] = {"n_nodes": 1, "n_gpus_per_node": 8}
    (tmp_path / "run.yaml").write_text(OmegaConf.to_yaml(cfg))
    done = main_cli("suggest", "--config", "run.yaml", "--gpu", "H100-80GB")
    assert (done.returncode, done.stderr) == (1, f"areal-alloc suggest: {TABLE[0][1]}\n")
    off = main_cli(
        "suggest", "--config", "run.yaml", "--gpu", "H100-80GB", "--reference-version", "off"
    )
    assert off.returncode == 0, off.stderr


_APP_KEY = (
    "warning: econfig: not a key of GRPOConfig (areal cbff54d6): the reference's loader refuses "
    "it unless the entry script loads a config class of its own that declares it (as "
    "examples/tau2/train.py l.70 loads Tau2PPOConfig(PPOConfig)); if yours does, name it in "
    "--app-keys or the hook's app_keys; or did you mean gconfig?"
)


def test_a_top_level_key_of_an_apps_own_config_class_warns(
    tmp_path: Path, main_cli: MainCli
) -> None:
    """The reference's own tau2 app loads Tau2PPOConfig(PPOConfig), which adds ``econfig``:
    a check cannot know the entry script's class, so a top-level key warns (and a near name
    is named); --app-keys names it; areal-alloc's own model_shape stays refused."""
    cfg = {**GRPO, "econfig": {"domain": "airline"}}
    (tmp_path / "run.yaml").write_text(OmegaConf.to_yaml(cfg))
    done = main_cli("check", "--on-memory", "off", "run.yaml")
    assert done.returncode == 0, done.stderr
    assert _APP_KEY in done.stdout.splitlines()
    named = main_cli("check", "--on-memory", "off", "--app-keys", "econfig", "run.yaml")
    assert (named.returncode, "econfig" in named.stdout) == (0, False)
    assert check_reference_keys(OmegaConf.create(cfg), skip=("econfig",)) == []
    nested = _with(rollout__agent_plan={"turns": 3})
    with pytest.raises(AllocationValidationError):
        check_reference_keys(OmegaConf.create(nested))
    assert check_reference_keys(OmegaConf.create(nested), skip=("rollout.agent_plan",)) == []
    (tmp_path / "shape.yaml").write_text(OmegaConf.to_yaml({**GRPO, "model_shape": {"x": 1}}))
    assert main_cli("check", "--on-memory", "off", "shape.yaml").returncode == 1


def test_the_version_from_each_source(monkeypatch: pytest.MonkeyPatch) -> None:
    given = Settings.from_sources(flags={"reference_version": "1.0.4"}, environ={}, detect=False)
    assert given.reference_version() == "1.0.4"
    hook = Settings.from_sources(hook={"reference_version": "off"}, environ={}, detect=False)
    assert hook.reference_version() == "off"
    env = {"AREAL_ALLOC_REFERENCE_VERSION": "1.0.4"}
    assert Settings.from_sources(environ=env, detect=False).reference_version() == "1.0.4"
    assert Settings().reference_version() is None
    bad = Settings.from_sources(hook={"reference_version": "2.0"}, environ={}, detect=False)
    with pytest.raises(AllocationValidationError) as caught:
        bad.reference_version()
    assert caught.value.message == (
        "hydra.callbacks.areal_alloc.reference_version='2.0': must be one of the reference "
        "versions areal-alloc knows ('1.0.4', 'cbff54d6'; default 'cbff54d6', the newest) or "
        "'off' (no check of the experiment's keys against the reference's loader)"
    )
    monkeypatch.setenv("AREAL_ALLOC_REFERENCE_VERSION", "off")  # read when none is given
    check_reference_keys(_with(sglang__tp_size=2))


def test_the_app_skips_its_own_keys(main_cli: MainCli) -> None:
    done = main_cli("output=json")  # conf/app/config.yaml: app_keys [output]
    assert done.returncode == 0, done.stderr
    bad = main_cli("+sglang.tp_size=4")
    assert bad.returncode == 1
    assert "sglang.tp_size=4: the reference's loader (areal cbff54d6) refuses it" in bad.stderr


# --- the real areal, when installed --------------------------------------------------------

_FAKE = """
from dataclasses import dataclass, field
from omegaconf import DictConfig, OmegaConf


@dataclass
class SGLangConfig:
    context_length: int = 32768


@dataclass
class EngineConfig:
    backend: str = ""


@dataclass
class GRPOConfig:
    sglang: SGLangConfig = field(default_factory=SGLangConfig)
    rollout: EngineConfig = field(default_factory=EngineConfig)
    actor: EngineConfig = field(default_factory=EngineConfig)


SFTConfig = RWConfig = DPOConfig = GRPOConfig


def to_structured_cfg(cfg, config_cls):
    return OmegaConf.merge(OmegaConf.structured(config_cls), cfg)
"""


def test_the_installed_areal_runs_its_own_loader(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    package = tmp_path / "areal"
    (package / "api").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "api" / "__init__.py").write_text("")
    (package / "api" / "cli_args.py").write_text(_FAKE)
    monkeypatch.syspath_prepend(str(tmp_path))

    def loaded() -> list[str]:
        return [m for m in sys.modules if m == "areal" or m.startswith("areal.")]

    for name in loaded():  # the wheel's stand-ins, put back when the test ends
        monkeypatch.delitem(sys.modules, name)
    try:
        check_reference_keys(OmegaConf.create(GRPO))
        with pytest.raises(AllocationValidationError) as caught:
            check_reference_keys(OmegaConf.create({**GRPO, "sglang": {"context_lenght": 4096}}))
    finally:  # the fake package must not stay "installed" for the tests after this one
        for name in loaded():
            del sys.modules[name]
    assert caught.value.message == (
        "sglang.context_lenght=4096: the reference's loader (areal unknown version, installed "
        "here) refuses it: Key 'context_lenght' not in 'SGLangConfig'; did you mean "
        "sglang.context_length?"
    )


# --- the committed schema, and the reference's own loader from the wheel ------------------


@pytest.fixture(scope="module")
def wheel() -> Path:
    path = wheel_path()
    reason = check_wheel(path)
    if reason is not None:
        if os.environ.get(REQUIRE_ENV):
            pytest.fail(f"{REQUIRE_ENV} is set, but the reference's wheel {reason}")
        pytest.skip(f"the reference's wheel {reason} (.ci/run downloads it)")
    return path


def test_the_committed_schema_is_what_the_generator_writes(wheel: Path) -> None:
    from tests.apps.reference.generate_schema import generate, path_of, text

    assert path_of("1.0.4").read_text(encoding="utf-8") == text(generate("1.0.4"))


def _experiments() -> dict[str, Any]:
    """Every built-in experiment, the README's and docs' examples and real_grpo.yaml, each
    completed with the run's names the reference leaves mandatory (USERS_OWN)."""
    from tests.hydra.test_reference_schema import CASES, LOGGED, NAMED, USERS_OWN

    found: dict[str, Any] = {}
    texts = dict(CASES)
    texts["real_grpo"] = (ROOT / "tests" / "data" / "real_grpo.yaml").read_text(encoding="utf-8")
    for name, text in texts.items():
        cfg = OmegaConf.create(text)
        assert isinstance(cfg, DictConfig)
        cfg.pop("hydra", None)
        sections = [key for key in ("actor", "ref", "critic") if key in cfg]
        own = USERS_OWN + "".join(f"{key}: {NAMED}\n" for key in sections)
        own += "".join(f"{key}: {LOGGED}\n" for key in ("saver", "evaluator", "recover"))
        own += f"stats_logger: {LOGGED}\n"
        found[name] = OmegaConf.merge(cfg, OmegaConf.create(own))
    return found


#: bad keys and values, each (name, overrides on grpo_1x8)
BAD: dict[str, dict[str, Any]] = {
    "tp_size": {"sglang": {"tp_size": 2}},
    "tensor_parallel_size": {"vllm": {"tensor_parallel_size": 2}},
    "max_num_batched_tokens": {"vllm": {"max_num_batched_tokens": 8192}},
    "model_shape": {"model_shape": {"num_layers": 28}},
    "cluster.gpu": {"cluster": {"gpu": "H800"}},
    "typo": {"actor": {"optimzer": {"type": "adam"}}},
    "group_size": {"actor": {"group_size": 4}},
    "wrong int": {"actor": {"lora_rank": "abc"}},
    "wrong bool": {"actor": {"gradient_checkpointing": "maybe"}},
    "list as str": {"actor": {"target_modules": "all"}},
    "scalar section": {"sglang": "fast"},
    "null": {"actor": {"dtype": None}},
    "string int": {"actor": {"lora_rank": "16"}},
    "yes bool": {"actor": {"gradient_checkpointing": "yes"}},
}


def _reference_verdict(cfg: Any, module: Any) -> str | None:
    """None when the reference's merge takes it, else the key its error names."""
    from tests.apps.reference.reference import load_as_the_reference

    try:
        load_as_the_reference(cfg, module.GRPOConfig)
    except Exception as error:
        # "" for an error that names no key (OmegaConf's "Merge error: str is not a
        # subclass of SGLangConfig"): any refusal of ours matches it
        return str(getattr(error, "full_key", None) or "")
    return None


def _our_verdict(cfg: Any) -> str | None:
    try:
        check_reference_keys(cfg, "1.0.4")
    except AllocationValidationError as error:
        return error.message.split(": ", 1)[0].split("=", 1)[0]
    return None


def test_the_same_verdict_as_the_reference_s_own_loader(wheel: Path) -> None:
    module = load_cli_args(wheel)
    cases = _experiments()
    base = cases["grpo_1x8"]
    for name, change in BAD.items():
        cases[f"bad: {name}"] = OmegaConf.merge(base, OmegaConf.create(dict(change)))
    verdicts = {
        name: (_reference_verdict(cfg, module), _our_verdict(cfg)) for name, cfg in cases.items()
    }
    ours = {n: mine if theirs != "" else mine is not None for n, (theirs, mine) in verdicts.items()}
    assert ours == {n: theirs if theirs != "" else True for n, (theirs, _) in verdicts.items()}
    refused = {name for name, (theirs, _) in verdicts.items() if theirs is not None}
    assert refused == {f"bad: {n}" for n in BAD if n not in ("string int", "yes bool")}


# --- start-up cost ---------------------------------------------------------------------


def test_the_schema_loads_in_a_few_milliseconds() -> None:
    reference_keys.schema.cache_clear()
    seconds = timeit.timeit(lambda: reference_keys.schema("cbff54d6"), number=1)
    assert seconds < 0.05  # about 1 ms here (docs/checks.md)


def test_app_keys_reach_the_settings_as_a_string_or_a_list() -> None:
    """validate(settings=Settings.from_sources(hook=…)) takes what the hook takes."""
    for given in ("output, round", ["output", "round"]):
        settings = Settings.from_sources(hook={"app_keys": given}, environ={}, detect=False)
        assert settings.app_keys == ("output", "round")
    flags = Settings.from_sources(flags={"app_keys": ("econfig",)}, environ={}, detect=False)
    assert flags.app_keys == ("econfig",)
