"""The hook's verdict cache: a PASS seen before is replayed without the plan, nothing else."""

from __future__ import annotations

import inspect
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from omegaconf import DictConfig, OmegaConf

import areal_alloc.plan
from areal_alloc import _verdicts
from areal_alloc.hydra_hook import ValidateAllocations
from hydra_plugins.areal_alloc.areal_alloc_schema_source import VALIDATE

GOOD: dict[str, Any] = {
    "cluster": {"n_nodes": 2, "n_gpus_per_node": 8},
    "rollout": {"backend": "sglang:d2t4"},
    "actor": {"backend": "fsdp:d4t2", "optimizer": {"lr": 1e-5}},
    "hydra": {"run": {"dir": "outputs/1"}},
}
#: Qwen2.5-7B's shape (28 heads: tensor parallel 4 fits, 28 % 8 = 4 does not)
QWEN = {
    "model_type": "qwen2",
    "hidden_size": 3584,
    "num_attention_heads": 28,
    "num_key_value_heads": 4,
    "num_hidden_layers": 28,
    "intermediate_size": 18944,
    "vocab_size": 152064,
    "max_position_embeddings": 32768,
}


@pytest.fixture
def plans(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """Every call of the full check (plan_config), in a private cache of this test."""
    for name in list(os.environ):
        if name.startswith("AREAL_ALLOC_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("AREAL_ALLOC_DETECT", "0")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    # the package's own files are part of the key (test_an_edited_package_file_is_new_code);
    # fixed here, so an edit elsewhere in the tree during the test cannot make a miss
    monkeypatch.setattr(_verdicts, "_code_identity", lambda: ["this test's code"])
    calls: list[object] = []
    full = areal_alloc.plan.plan_config

    def counted(cfg: object, *args: Any, **kwargs: Any) -> Any:
        calls.append(cfg)
        return full(cfg, *args, **kwargs)

    monkeypatch.setattr(areal_alloc.plan, "plan_config", counted)
    return calls


def _run(
    config: dict[str, Any], capsys: pytest.CaptureFixture[str], **hook: Any
) -> tuple[str, str]:
    """What one run of the hook prints on stderr, and how it ends (ok / the refusal)."""
    cfg: DictConfig = OmegaConf.create(config)
    try:
        ValidateAllocations(**hook).on_run_start(cfg)
        end = "ok"
    except SystemExit as stop:
        end = str(stop.code)
    return capsys.readouterr().err, end


def _with(base: dict[str, Any], dotted: str, value: object) -> dict[str, Any]:
    config: dict[str, Any] = json.loads(json.dumps(base))
    *path, last = dotted.split(".")
    node = config
    for part in path:
        node = node.setdefault(part, {})
    node[last] = value
    return config


def test_a_pass_is_replayed_without_the_full_check(
    plans: list[object], capsys: pytest.CaptureFixture[str]
) -> None:
    runs = [_run(GOOD, capsys) for _ in range(3)]
    assert runs == [("", "ok")] * 3
    assert len(plans) == 1
    # hydra's own keys (the run folder of each run) are not the allocation
    assert _run(_with(GOOD, "hydra.run.dir", "outputs/2"), capsys) == ("", "ok")
    assert len(plans) == 1


def test_warnings_and_assumptions_replay_the_same(
    plans: list[object], capsys: pytest.CaptureFixture[str]
) -> None:
    config = {k: v for k, v in GOOD.items() if k != "cluster"}  # the cluster is assumed
    first, again = _run(config, capsys), _run(config, capsys)
    assert first == again
    assert first[0].startswith("areal-alloc: assumed: cluster.n_nodes=32"), first
    assert len(plans) == 1


# what changes: (config, hook parameters, environment)
CHANGES: list[tuple[str, dict[str, Any], dict[str, Any], dict[str, str]]] = [
    ("a backend", _with(GOOD, "actor.backend", "fsdp:d8"), {}, {}),
    ("a value the checks do not name", _with(GOOD, "actor.optimizer.lr", 2e-5), {}, {}),
    ("the cluster", _with(GOOD, "cluster.n_nodes", 3), {}, {}),
    ("an int for a float", _with(GOOD, "actor.optimizer.lr", 1), {}, {}),
    ("a hook parameter", GOOD, {"on_memory": "warn"}, {}),
    ("a setting in the environment", GOOD, {}, {"AREAL_ALLOC_GPU": "H800"}),
    ("any AREAL_ALLOC_ variable", GOOD, {}, {"AREAL_ALLOC_SOMETHING_NEW": "1"}),
    # a server's escape hatch turns the context rule into a warning (server_rules)
    ("a server's escape hatch", GOOD, {}, {"VLLM_ALLOW_LONG_MAX_MODEL_LEN": "1"}),
]


@pytest.mark.parametrize(("what", "config", "hook", "env"), CHANGES, ids=[c[0] for c in CHANGES])
def test_a_change_takes_the_full_check(
    what: str,
    config: dict[str, Any],
    hook: dict[str, Any],
    env: dict[str, str],
    plans: list[object],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _run(GOOD, capsys)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    _run(config, capsys, **hook)
    assert len(plans) == 2, what
    _run(config, capsys, **hook)  # and that one is known now
    assert len(plans) == 2, what


def test_an_edited_package_file_is_new_code(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    package = tmp_path / "package"
    (package / "sub").mkdir(parents=True)
    (package / "sub" / "rules.py").write_text("LIMIT = 1\n")
    monkeypatch.setattr(_verdicts, "_PACKAGE", package)
    before = _verdicts._code_identity()
    assert before == _verdicts._code_identity()
    (package / "sub" / "rules.py").write_text("LIMIT = 2\n")
    os.utime(package / "sub" / "rules.py", ns=(1, 1))
    assert _verdicts._code_identity() != before


def test_a_changed_config_json_takes_the_full_check(
    plans: list[object], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(QWEN))
    config = _with(_with(GOOD, "actor.path", str(model)), "rollout.backend", "sglang:d2t4")
    config = _with(config, "actor.backend", "fsdp:d4")
    assert _run(config, capsys)[1] == "ok"
    assert _run(config, capsys)[1] == "ok"
    assert len(plans) == 1
    (model / "config.json").write_text(json.dumps({**QWEN, "num_attention_heads": 30}))
    end = _run(config, capsys)[1]
    assert len(plans) == 2
    assert end.startswith("areal-alloc: "), end
    assert "num_attention_heads=30" in end, end


def test_a_refusal_is_never_kept(plans: list[object], capsys: pytest.CaptureFixture[str]) -> None:
    bad = _with(GOOD, "actor.backend", "fsdp:d40")
    first, again = _run(bad, capsys), _run(bad, capsys)
    assert first == again
    assert first[1].startswith("areal-alloc: the engines need 48 GPUs"), first
    assert len(plans) == 2


def test_the_switch_turns_it_off(
    plans: list[object],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    monkeypatch.setenv("AREAL_ALLOC_NO_VERDICT_CACHE", "1")
    assert [_run(GOOD, capsys) for _ in range(2)] == [("", "ok")] * 2
    assert len(plans) == 2
    assert not list((tmp_path / "cache").glob("areal-alloc/verdicts-*"))


def _plant(folder: Path, config: dict[str, Any]) -> None:
    """A PASS for ``config`` written by someone else into ``folder``."""
    hook = ValidateAllocations()
    key = hook._verdict_key(OmegaConf.create(config))
    assert key is not None
    folder.mkdir(parents=True, exist_ok=True)
    file = folder / f"verdicts-py{sys.version_info[0]}{sys.version_info[1]}.json"
    file.write_text(json.dumps({"entries": [[key, ["planted"]]]}))
    file.chmod(0o600)


@pytest.mark.parametrize("mode", [0o777, 0o770, 0o702])
def test_a_verdict_in_a_folder_others_can_write_is_ignored(
    mode: int, plans: list[object], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    bad = _with(GOOD, "actor.backend", "fsdp:d40")
    folder = tmp_path / "cache" / "areal-alloc"
    _plant(folder, bad)
    folder.chmod(mode)
    err, end = _run(bad, capsys)
    assert end.startswith("areal-alloc: the engines need 48 GPUs"), end
    assert "planted" not in err
    assert len(plans) == 1


def test_a_planted_file_others_can_write_is_ignored(
    plans: list[object], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    bad = _with(GOOD, "actor.backend", "fsdp:d40")
    folder = tmp_path / "cache" / "areal-alloc"
    _plant(folder, bad)
    folder.chmod(0o700)
    (file,) = folder.glob("verdicts-*.json")
    file.chmod(0o666)
    assert _run(bad, capsys)[1].startswith("areal-alloc: the engines need 48 GPUs")
    # the same file made private is read: the key above is the hook's own
    file.chmod(0o600)
    assert _run(bad, capsys) == ("planted\n", "ok")


def test_a_damaged_verdict_file_is_ignored(
    plans: list[object], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    _run(GOOD, capsys)
    (file,) = (tmp_path / "cache" / "areal-alloc").glob("verdicts-*.json")
    for damage in ("not json", '["x"]', '{"entries": [[1, 2]]}', '{"entries": [["k", [3]]]}'):
        file.write_text(damage)
        assert _run(GOOD, capsys) == ("", "ok")
    assert len(plans) == 5


def test_the_file_keeps_the_most_recently_used(
    plans: list[object], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_verdicts, "MAX_ENTRIES", 3)
    configs = [_with(GOOD, "actor.optimizer.lr", n) for n in (1, 2, 3)]
    for config in configs:
        _run(config, capsys)
    _run(configs[0], capsys)  # used again: now the newest
    _run(_with(GOOD, "actor.optimizer.lr", 4), capsys)  # evicts lr=2, the oldest
    assert len(plans) == 4
    _run(configs[0], capsys)
    assert len(plans) == 4
    _run(configs[1], capsys)
    assert len(plans) == 5


def test_a_known_config_between_new_ones_always_hits(
    plans: list[object], capsys: pytest.CaptureFixture[str]
) -> None:
    """The benchmark's rounds: a new config, then the known one, more rounds than the
    file keeps. A hit that aged into the older half rewrites the file (the MRU refresh),
    and it is still a hit: the known verdict is never evicted, never checked again."""
    assert _run(GOOD, capsys) == ("", "ok")
    for n in range(_verdicts.MAX_ENTRIES + 8):
        assert _run(_with(GOOD, "actor.optimizer.lr", n + 1), capsys) == ("", "ok")
        assert _run(GOOD, capsys) == ("", "ok")
    assert len(plans) == 1 + _verdicts.MAX_ENTRIES + 8
    known = [c for c in plans if isinstance(c, DictConfig) and c.actor.optimizer.lr == 1e-5]
    assert known == [plans[0]]


def test_the_hook_config_gives_every_parameter_its_default() -> None:
    """``areal_alloc/validate`` (built from a dict, no YAML) names each parameter, so an
    override needs no ``+``, with the hook's own default."""
    hook = VALIDATE["hydra"]["callbacks"]["areal_alloc"]
    parameters = list(inspect.signature(ValidateAllocations.__init__).parameters.values())[1:]
    assert hook == {
        "_target_": "areal_alloc.hydra_hook.ValidateAllocations",
        **{p.name: p.default for p in parameters},
    }


APP = """\
import sys
import hydra

@hydra.main(version_base="1.3", config_path="conf", config_name="config")
def app(cfg):
    heavy = ("lark", "areal_alloc.plan", "areal_alloc.experiment.read", "areal_alloc._parse",
             "areal_alloc._syntax")
    print([m for m in heavy if m in sys.modules])

app()
"""


def test_a_cached_run_imports_no_plan_and_no_lark(tmp_path: Path) -> None:
    (tmp_path / "app.py").write_text(APP)
    (tmp_path / "conf").mkdir()
    (tmp_path / "conf" / "config.yaml").write_text(
        "defaults:\n  - areal_alloc/validate\n  - _self_\n"
        "cluster: {n_nodes: 2, n_gpus_per_node: 8}\n"
        "rollout: {backend: 'sglang:d2t4'}\nactor: {backend: 'megatron:d2p2t2'}\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("AREAL_ALLOC_")}
    env.update(XDG_CACHE_HOME=str(tmp_path / "cache"), AREAL_ALLOC_DETECT="0")
    command = [sys.executable, "app.py", "hydra.run.dir=.", "hydra.output_subdir=null"]
    runs = [
        subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True)
        for _ in range(2)
    ]
    assert [(r.returncode, r.stdout) for r in runs] == [
        (
            0,
            "['lark', 'areal_alloc.plan', 'areal_alloc.experiment.read', 'areal_alloc._parse', "
            "'areal_alloc._syntax']\n",
        ),
        (0, "[]\n"),
    ], runs[0].stderr + runs[1].stderr
