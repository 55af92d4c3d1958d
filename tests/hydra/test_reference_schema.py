"""What the hook hands the task is what the user composed, and the reference's loader takes it.

The reference's ``load_expr_config`` merges the composed config into its strict
dataclasses (``OmegaConf.merge(OmegaConf.structured(config_cls), cfg)``, then
``OmegaConf.to_object``): any key of ours there, or a ``???`` placeholder, would stop
the user's launch. A real Hydra app (tests/apps/reference/app.py) with
``- areal_alloc/validate`` in its defaults hands its task config to the reference's
own schema, loaded from the published wheel (tests/apps/reference/reference.py), for
the README's config and every built-in experiment, as a single run and as every job
of a multirun; each job's config must equal the same files composed without the hook.
The app runs in this process (``app_in_process``), as ``python app.py`` would run it.

The wheel is not committed: ``.ci/run`` downloads it into ``.cache/reference/``.
Without it these tests skip (the README's test command, in a fresh environment);
``AREAL_ALLOC_REQUIRE_REFERENCE=1`` (CI's second phase) makes its absence a failure.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from tests.apps.reference.reference import REQUIRE_ENV, WHEEL_ENV, check_wheel, wheel_path
from tests.conftest import AppRun, Ran

ROOT = Path(__file__).parents[2]
APP = ROOT / "tests" / "apps" / "reference" / "app.py"
EXPERIMENTS = sorted((ROOT / "conf" / "app" / "experiment").glob("*.yaml"))

#: What every experiment of the reference's own examples also sets: the run's names,
#: the dataset, and the names each engine and logger section needs (the fields its
#: dataclasses leave mandatory, MISSING, in areal/api/cli_args.py of the wheel).
USERS_OWN = """
experiment_name: gsm8k-grpo
trial_name: trial0
train_dataset: {path: openai/gsm8k, type: rl}
"""
NAMED = "{experiment_name: '${experiment_name}', trial_name: '${trial_name}'}"
LOGGED = (
    "{experiment_name: '${experiment_name}', trial_name: '${trial_name}', fileroot: /tmp/areal}"
)


def _readme_blocks() -> list[str]:
    pages = (ROOT / "README.md", ROOT / "docs" / "hydra.md")  # the engines; the sweep
    text = "".join(page.read_text(encoding="utf-8") for page in pages)
    return re.findall(r"```yaml\n(.*?)```", text, flags=re.DOTALL)


def _readme_experiment() -> str:
    """The README's first experiment (its engines) and its sweep over layouts."""
    blocks = _readme_blocks()
    engines = next(b for b in blocks if b.startswith("rollout:"))
    sweep = next(b for b in blocks if "sweeper" in b and "params" in b)
    return engines + sweep


CASES = {"README": _readme_experiment()} | {
    path.stem: path.read_text(encoding="utf-8") for path in EXPERIMENTS
}


@pytest.fixture(scope="module")
def wheel() -> Path:
    path = wheel_path()
    reason = check_wheel(path)
    if reason is not None:
        if os.environ.get(REQUIRE_ENV):
            pytest.fail(f"{REQUIRE_ENV} is set, but the reference's wheel {reason}")
        pytest.skip(f"the reference's wheel {reason} (.ci/run downloads it)")
    return path


def _configs(folder: Path, experiment: str) -> Path:
    """``user.yaml`` (with the hook) and ``plain.yaml`` (without) over ``base.yaml``."""
    folder.mkdir()
    (folder / "base.yaml").write_text(experiment)
    base = OmegaConf.create(experiment)
    sections = [key for key in ("actor", "ref", "critic") if key in base]
    own = USERS_OWN + "".join(f"{key}: {NAMED}\n" for key in sections)
    own += "".join(f"{key}: {LOGGED}\n" for key in ("saver", "evaluator", "recover"))
    own += f"stats_logger: {LOGGED}\n"
    (folder / "user.yaml").write_text(
        "defaults:\n  - areal_alloc/validate\n  - base\n  - _self_\n" + own
    )
    (folder / "plain.yaml").write_text("defaults:\n  - base\n  - _self_\n" + own)
    return folder


def _run(app: AppRun, folder: Path, wheel: Path, *overrides: str, multirun: bool = False) -> Ran:
    """The app as ``python app.py --config-dir FOLDER --config-name user`` runs it, in
    this process (``app_in_process``): the hook and the reference's loader see the same
    composed config either way, and the schema is read from the wheel once."""
    work = folder.parent / "work"
    work.mkdir(exist_ok=True)
    return app(
        APP,
        *(["--multirun"] if multirun else []),
        "--config-dir",
        str(folder),
        "--config-name",
        "user",
        f"hydra.run.dir={work / 'run'}",
        f"hydra.sweep.dir={work / 'multirun'}",
        *overrides,
        cwd=work,
        env={WHEEL_ENV: str(wheel), "HYDRA_FULL_ERROR": "0"},
    )


def _jobs(done: Ran) -> list[dict[str, Any]]:
    assert done.returncode == 0, done.stderr
    refused = [line for line in done.stdout.splitlines() if line.startswith("REFUSED ")]
    assert refused == [], refused[0][:2000] if refused else ""
    found = [
        json.loads(line[7:]) for line in done.stdout.splitlines() if line.startswith("LOADED ")
    ]
    assert all(job["type"] == "GRPOConfig" for job in found)
    return [job["config"] for job in found]


def _composed(folder: Path, overrides: list[str]) -> Any:
    """The same files, composed without the hook (Hydra's compose API)."""
    with initialize_config_dir(config_dir=str(folder), version_base="1.3"):
        cfg = compose("plain", overrides=overrides)
    return OmegaConf.to_container(cfg, resolve=False)


@pytest.mark.parametrize("case", list(CASES))
def test_a_single_run_hands_over_exactly_what_was_composed(
    tmp_path: Path, wheel: Path, case: str, app_in_process: AppRun
) -> None:
    folder = _configs(tmp_path / "conf", CASES[case])
    (given,) = _jobs(_run(app_in_process, folder, wheel))
    assert given == _composed(folder, [])


def _sweep(case: str) -> tuple[list[str], list[list[str]]]:
    """The multirun's command line and each job's overrides, in launch order."""
    if case == "README":  # hydra.sweeper.params: ${alloc.layouts:fsdp,8,'max_tp=4'}
        from areal_alloc.search.layouts import LayoutConstraints, enumerate_layouts

        layouts = enumerate_layouts("fsdp", 8, LayoutConstraints(max_tp=4))
        return [], [[f"actor.backend={layout}"] for layout in layouts]
    return ["++seed=1,2"], [["++seed=1"], ["++seed=2"]]


@pytest.mark.parametrize("case", list(CASES))
def test_every_multirun_job_hands_over_exactly_what_was_composed(
    tmp_path: Path, wheel: Path, case: str, app_in_process: AppRun
) -> None:
    folder = _configs(tmp_path / "conf", CASES[case])
    command, jobs = _sweep(case)
    given = _jobs(_run(app_in_process, folder, wheel, *command, multirun=True))
    assert len(given) == len(jobs) > 1
    assert given == [_composed(folder, job) for job in jobs]


def test_the_hook_still_checks_and_the_gpu_reaches_it_outside_the_config(
    tmp_path: Path, wheel: Path, app_in_process: AppRun
) -> None:
    folder = _configs(tmp_path / "conf", CASES["grpo_2x8"])
    bad = _run(app_in_process, folder, wheel, "actor.backend=fsdp:d4p2")
    assert bad.returncode == 1
    assert "LOADED" not in bad.stdout
    assert bad.stderr.startswith("areal-alloc: actor.backend='fsdp:d4p2': FSDP backend only")
    small = _run(app_in_process, folder, wheel, "hydra.callbacks.areal_alloc.gpu=RTX-4090")
    assert small.returncode == 1
    assert "LOADED" not in small.stdout
    assert "RTX-4090, from hydra.callbacks.areal_alloc.gpu" in small.stderr


def test_the_reference_refuses_our_old_keys(
    tmp_path: Path, wheel: Path, app_in_process: AppRun
) -> None:
    # why the GPU left the experiment: the reference's loader stops at cluster.gpu
    # (and the hook now stops it first, in the reference's words)
    folder = _configs(tmp_path / "conf", CASES["grpo_1x8"])
    done = _run(app_in_process, folder, wheel, "+cluster.gpu=H800")
    assert done.returncode == 1
    assert "LOADED" not in done.stdout
    assert done.stderr.startswith(
        "areal-alloc: cluster.gpu='H800': the reference's loader (areal cbff54d6) refuses it: "
        "Key 'gpu' not in 'ClusterSpecConfig'; "
    )
    off = _run(
        app_in_process,
        folder,
        wheel,
        "+cluster.gpu=H800",
        "hydra.callbacks.areal_alloc.reference_version=off",
    )
    assert off.returncode == 0, off.stderr
    (line,) = [line for line in off.stdout.splitlines() if line.startswith("REFUSED ")]
    assert json.loads(line[8:])["error"] == "ConfigKeyError: Key 'gpu' not in 'ClusterSpecConfig'"


def test_the_reference_loads_the_dispatcher_keys_the_rules_read(
    tmp_path: Path, wheel: Path, app_in_process: AppRun
) -> None:
    # <engine>.megatron.moe_enable_deepep / moe_token_dispatcher_type are MegatronEngineConfig's
    # own keys (areal/api/cli_args.py): the hook reads them and hands them over unchanged
    folder = _configs(tmp_path / "conf", CASES["moe_32"])
    keys = [
        "++actor.megatron.moe_enable_deepep=true",
        "++actor.megatron.moe_token_dispatcher_type=flex",
    ]
    (given,) = _jobs(_run(app_in_process, folder, wheel, *keys))
    assert given == _composed(folder, keys)
    assert given["actor"]["megatron"] == {
        "moe_enable_deepep": True,
        "moe_token_dispatcher_type": "flex",
    }
    # and the rule speaks before the reference's engine would
    refused = _run(app_in_process, folder, wheel, keys[0])
    assert refused.returncode == 1
    assert "LOADED" not in refused.stdout
    assert refused.stderr.startswith(
        "areal-alloc: actor.megatron.moe_enable_deepep=true with "
        "actor.megatron.moe_token_dispatcher_type='alltoall': "
    )


def test_the_reference_loads_the_recompute_keys_the_rules_read(
    tmp_path: Path, wheel: Path, app_in_process: AppRun
) -> None:
    # <engine>.megatron.recompute_num_layers / recompute_modules / moe_shared_expert_overlap
    # are MegatronEngineConfig's own keys (areal/api/cli_args.py l.965-973): the hook reads
    # them and hands them over unchanged
    folder = _configs(tmp_path / "conf", CASES["moe_32"])
    keys = [
        "++actor.gradient_checkpointing=true",
        "++actor.megatron.recompute_granularity=selective",
        "++actor.megatron.recompute_modules=[core_attn,layernorm]",
        "++actor.megatron.moe_shared_expert_overlap=false",
        "++actor.megatron.recompute_num_layers=null",
    ]
    (given,) = _jobs(_run(app_in_process, folder, wheel, *keys))
    assert given == _composed(folder, keys)
    assert given["actor"]["megatron"] == {
        "recompute_granularity": "selective",
        "recompute_modules": ["core_attn", "layernorm"],
        "moe_shared_expert_overlap": False,
        "recompute_num_layers": None,
    }
    # and without recompute_num_layers=null (the reference's 1) the rule speaks first
    refused = _run(app_in_process, folder, wheel, *keys[:-1])
    assert refused.returncode == 1
    assert "LOADED" not in refused.stdout
    assert refused.stderr.startswith(
        "areal-alloc: actor.megatron.recompute_granularity='selective' with "
        "actor.megatron.recompute_num_layers=1: "
    )
