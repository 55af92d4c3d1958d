"""The validation hook as users meet it: a real Hydra app script, run as ``python app.py``
runs it (in this process: ``app_in_process``)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import AppRun

APP = Path(__file__).parents[1] / "apps" / "user_app" / "my_app.py"


@dataclass
class Run:
    code: int
    out: str
    err: str
    markers: list[str]
    cwd: Path


def run_app(app: AppRun, tmp_path: Path, *overrides: str, config_name: str | None = None) -> Run:
    """``python my_app.py OVERRIDES`` in ``tmp_path/work``, run in this process."""
    markers = tmp_path / "markers"
    markers.mkdir(exist_ok=True)
    cwd = tmp_path / "work"
    cwd.mkdir(exist_ok=True)
    args = [*overrides, *(["--config-name", config_name] if config_name else [])]
    done = app(APP, *args, cwd=cwd, env={"MARKER_DIR": str(markers), "HYDRA_FULL_ERROR": "0"})
    return Run(
        done.returncode, done.stdout, done.stderr, sorted(p.name for p in markers.iterdir()), cwd
    )


def test_good_run_keeps_the_users_own_callback(tmp_path: Path, app_in_process: AppRun) -> None:
    run = run_app(app_in_process, tmp_path)
    assert run.code == 0, run.err
    assert "RAN actor.backend=fsdp:d4t2 total_gpus=16" in run.out
    assert run.markers == ["ran-fsdp_d4t2", "user-callback-ran"]


BAD_RUNS = [
    (
        ["actor.backend=fsdp:d4p2"],
        "areal-alloc: actor.backend='fsdp:d4p2': FSDP backend only supports "
        "data/tensor/context parallelism (d, t, c), got pipeline parallelism (p2); "
        "use megatron or archon for p\n    fsdp:d4p2\n           ^\n",
    ),
    (
        ["actor.backend=fsdp.d4"],
        "areal-alloc: actor.backend='fsdp.d4': unexpected '.' at column 5 of 'fsdp.d4': "
        "use ':' between the backend and its dimensions, e.g. 'fsdp:d4'\n"
        "    fsdp.d4\n        ^\n",
    ),
    (
        ["actor.backend=fsdp:d8t2"],
        "areal-alloc: the engines need 24 GPUs but the cluster has cluster.n_nodes=2 × "
        "cluster.n_gpus_per_node=8 = 16: rollout sglang:d2t4 8 + actor fsdp:d8t2 16 = 24\n",
    ),
    (
        [
            "+ref.backend=fsdp:d4",
            "+ref.scheduling_strategy.type=colocation",
            "+ref.scheduling_strategy.target=critic",
        ],
        "areal-alloc: ref.scheduling_strategy.target='critic': no such engine; configured "
        "engines: rollout, actor\n",
    ),
]


@pytest.mark.parametrize(("overrides", "stderr"), BAD_RUNS)
def test_bad_run_stops_before_anything_is_written(
    tmp_path: Path, overrides: list[str], stderr: str, app_in_process: AppRun
) -> None:
    run = run_app(app_in_process, tmp_path, *overrides)
    assert run.code == 1
    assert run.err == stderr
    assert "Traceback" not in run.err
    assert run.markers == []
    assert list(run.cwd.iterdir()) == []  # no outputs/ directory


MIGRATION = (
    "areal-alloc: allocation_mode='sglang:d4+fsdp:d4' is deprecated: the single-controller "
    "scheduler ignores it and only the legacy SPMD launchers (areal.infra.launcher.local, ray, "
    "slurm) still read it; remove it and give each engine its own backend field: "
    "++rollout.backend=sglang:d4 "
    "++actor.backend=fsdp:d4\n"
)


def test_legacy_allocation_mode_on_the_command_line(tmp_path: Path, app_in_process: AppRun) -> None:
    run = run_app(app_in_process, tmp_path, "+allocation_mode=sglang:d4+fsdp:d4")
    assert (run.code, run.err, run.markers) == (1, MIGRATION, [])


def test_bare_allocation_mode_gets_hydras_own_hint(tmp_path: Path, app_in_process: AppRun) -> None:
    # the hook declares no allocation_mode (no key of ours reaches the task), so
    # without + Hydra refuses the override itself and says to use +
    run = run_app(app_in_process, tmp_path, "allocation_mode=sglang:d4+fsdp:d4")
    assert run.code == 1
    assert run.markers == []
    assert "To append to your config use +allocation_mode=sglang:d4+fsdp:d4" in run.err


def test_legacy_allocation_mode_in_yaml(tmp_path: Path, app_in_process: AppRun) -> None:
    conf = APP.parent / "conf"
    legacy = conf / "legacy_test.yaml"
    legacy.write_text(
        "defaults:\n  - config\n  - _self_\n"
        "allocation_mode: sglang[rollout]:d2+fsdp[actor]:d4|fsdp[critic]:d4\n"
    )
    try:
        run = run_app(app_in_process, tmp_path, config_name="legacy_test")
    finally:
        legacy.unlink()
    assert run.code == 1
    assert run.err == (
        "areal-alloc: allocation_mode='sglang[rollout]:d2+fsdp[actor]:d4|fsdp[critic]:d4' is "
        "deprecated: the single-controller scheduler ignores it and only the legacy SPMD "
        "launchers (areal.infra.launcher.local, ray, slurm) still read it; remove it and give "
        "each engine its own backend field: "
        "++rollout.backend=sglang:d2 ++actor.backend=fsdp:d4 ++critic.backend=fsdp:d4 "
        "++critic.scheduling_strategy.type=colocation ++critic.scheduling_strategy.target=actor\n"
    )


SWEEP = "actor.backend=fsdp:d8,fsdp:d4t2,fsdp:d4p2,fsdp:d2p2"
BAD_JOBS = (
    "areal-alloc: job 2 [actor.backend=fsdp:d4p2]: actor.backend='fsdp:d4p2': FSDP backend "
    "only supports data/tensor/context parallelism (d, t, c), got pipeline parallelism (p2); "
    "use megatron or archon for p\n"
    "areal-alloc: job 3 [actor.backend=fsdp:d2p2]: actor.backend='fsdp:d2p2': FSDP backend "
    "only supports data/tensor/context parallelism (d, t, c), got pipeline parallelism (p2); "
    "use megatron or archon for p\n"
)


@pytest.mark.parametrize("launcher", [[], ["hydra/launcher=joblib"]])
def test_bad_sweep_launches_nothing(
    tmp_path: Path, launcher: list[str], app_in_process: AppRun
) -> None:
    run = run_app(app_in_process, tmp_path, "-m", SWEEP, *launcher)
    assert run.code == 1
    assert run.err == BAD_JOBS + (
        "areal-alloc: 2 of 4 sweep jobs are invalid; nothing was launched (set "
        "hydra.callbacks.areal_alloc.on_invalid=skip to run the valid ones)\n"
    )
    assert run.markers == []
    assert list(run.cwd.iterdir()) == []  # no multirun/ directory


@pytest.mark.parametrize("launcher", [[], ["hydra/launcher=joblib"]])
def test_skip_invalid_runs_the_rest(
    tmp_path: Path, launcher: list[str], app_in_process: AppRun
) -> None:
    run = run_app(
        app_in_process,
        tmp_path,
        "-m",
        SWEEP,
        "hydra.callbacks.areal_alloc.on_invalid=skip",
        *launcher,
    )
    assert run.code == 0, run.err
    skipped = BAD_JOBS.replace("areal-alloc: job", "areal-alloc: skipping job")
    assert run.err.startswith(
        skipped + "areal-alloc: skipping 2 invalid of 4 sweep jobs; launching 2\n"
    )
    assert run.markers == ["ran-fsdp_d4t2", "ran-fsdp_d8", "user-callback-ran"]


def test_sweep_values_from_a_resolver_in_sweeper_params(
    tmp_path: Path, app_in_process: AppRun
) -> None:
    conf = APP.parent / "conf"
    swept = conf / "params_test.yaml"
    swept.write_text(
        "defaults:\n  - config\n  - _self_\n"
        "hydra:\n  sweeper:\n    params:\n"
        "      actor.backend: ${alloc.layouts:fsdp,16,'max_tp=2','max_cp=1'}\n"
    )
    try:
        run = run_app(app_in_process, tmp_path, "-m", config_name="params_test")
    finally:
        swept.unlink()
    # fsdp:d16 and fsdp:d8t2 both need 16 GPUs next to the rollout's 8: both rejected
    assert run.code == 1
    assert run.err.splitlines()[-1] == (
        "areal-alloc: 2 of 2 sweep jobs are invalid; nothing was launched (set "
        "hydra.callbacks.areal_alloc.on_invalid=skip to run the valid ones)"
    )
    assert "job 0 [actor.backend=fsdp:d16]: the engines need 24 GPUs" in run.err
    assert run.markers == []


def test_skip_with_every_job_invalid_launches_nothing(
    tmp_path: Path, app_in_process: AppRun
) -> None:
    run = run_app(
        app_in_process,
        tmp_path,
        "-m",
        "actor.backend=fsdp:d4p2,fsdp:d2p2",
        "hydra.callbacks.areal_alloc.on_invalid=skip",
    )
    assert run.code == 1
    assert run.err == BAD_JOBS.replace("job 2", "job 0").replace("job 3", "job 1") + (
        "areal-alloc: all 2 sweep jobs are invalid; nothing to launch\n"
    )
    assert run.markers == []


def test_a_wrong_setting_stops_the_run(tmp_path: Path, app_in_process: AppRun) -> None:
    run = run_app(app_in_process, tmp_path, "hydra.callbacks.areal_alloc.on_invalid=sometimes")
    assert run.code == 1
    assert run.err == (
        "areal-alloc: hydra.callbacks.areal_alloc.on_invalid='sometimes': must be 'fail' or "
        "'skip'\n"
    )
    assert run.markers == []


def test_good_sweep_runs_every_job(tmp_path: Path, app_in_process: AppRun) -> None:
    run = run_app(
        app_in_process,
        tmp_path,
        "-m",
        "actor.backend=fsdp:d8,fsdp:d2t4",
        "hydra.callbacks.areal_alloc.verbose=true",
    )
    assert run.code == 0, run.err
    assert run.err.startswith("areal-alloc: checked 2 sweep jobs\n")
    assert run.markers == ["ran-fsdp_d2t4", "ran-fsdp_d8", "user-callback-ran"]


MODEL_FOLDERS = [
    # (the model folder's config.json, what the hook says of actor.path): a config.json
    # the package refused is named with its fault, never "not found here"
    (
        '{"model_type": "qwen3", "hidden_size": 64, "num_hidden_layers": 2, '
        '"num_attention_heads": 128, "num_key_value_heads": 8, "intermediate_size": 256, '
        '"vocab_size": 1000}',
        "my-model/config.json refused: num_attention_heads=128 is more than hidden_size=64: "
        "a head needs at least one dimension",
    ),
    (None, "not found here (no local config.json, hub cache or catalogue entry)"),
]


@pytest.mark.parametrize(("config_json", "said"), MODEL_FOLDERS)
def test_the_hook_names_a_config_json_it_refused(
    tmp_path: Path, app_in_process: AppRun, config_json: str | None, said: str
) -> None:
    folder = tmp_path / "work" / "my-model"  # actor.path=my-model, in the run's folder
    folder.parent.mkdir()
    if config_json is not None:
        folder.mkdir()
        (folder / "config.json").write_text(config_json)
    run = run_app(app_in_process, tmp_path, "+actor.path=my-model")
    assert run.code == 0, run.err
    # one line per engine (the rollout reads the actor's model)
    assert run.err.splitlines() == [
        f"areal-alloc: warning: {key} not estimated: actor.path='my-model': {said}"
        for key in ("rollout", "actor")
    ]
