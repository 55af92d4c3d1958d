"""The estimate interface of issue 17 item 5, run as users run it, through ``main(argv)``
in this process (what the installed command prints).

Every flag the issue names is given on the command line of the installed
``areal-alloc`` and found again in what it prints: ``explain`` (generation of one
instance, training of the whole engine), the plan's ``pace`` (``check FILE --json``,
``areal-alloc output=json``) with ``--gpu`` and ``--mean-gen-len``, ``suggest --config``
(``current`` beside the ``proposals``), and a stored calibration named in every output
it changes with how to turn it off. The environment (``XDG_CACHE_HOME`` for the
calibration store, ``AREAL_ALLOC_NO_CALIBRATION``) is set for each call that reads it.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest

from areal_alloc.catalogue import find_gpu
from tests.conftest import MainCli, Ran

ROOT = Path(__file__).resolve().parents[2]
ASYNC_CONFIG = str(ROOT / "tests/data/real_grpo.yaml")  # max_head_offpolicyness 2, 1.5B model
DEFAULT_CONFIG = str(ROOT / "conf/app/experiment/grpo_2x8.yaml")  # the app's default run
PACE_KEYS = ("generate_seconds", "train_seconds", "step_seconds", "mode")
OFF = "AREAL_ALLOC_NO_CALIBRATION=1 leaves it out"
H100, A100 = find_gpu("H100-80GB"), find_gpu("A100-80GB")


def _json(done: subprocess.CompletedProcess[str] | Ran) -> Any:
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    return data[0] if isinstance(data, list) else data


def _pace(done: subprocess.CompletedProcess[str] | Ran) -> Any:
    pace = _json(done)["pace"]
    assert isinstance(pace, dict), pace
    return pace


def _term_names(terms: Any) -> list[str]:
    assert isinstance(terms, list)
    assert terms
    for term in terms:
        assert {"name", "seconds", "formula"} <= set(term), term
        assert term["seconds"] >= 0
    return [t["name"] for t in terms]


# --- explain --------------------------------------------------------------------------


def test_explain_generation_of_one_instance(main_cli: MainCli) -> None:
    done = main_cli(
        "explain",
        "sglang:d1t2",
        "--model",
        "Qwen3-8B",
        "--gpu",
        "H100-80GB",
        "--batch",
        "64",
        "--prompt-len",
        "1024",
        "--gen-len",
        "2048",
        "--json",
    )
    data = _json(done)
    assert data["world_size"] == 2
    gen = data["generation"]
    assert isinstance(gen, dict)
    assert (gen["batch"], gen["prompt_len"], gen["gen_len"]) == (64, 1024, 2048)
    # one instance: 64 sequences × 2,048 generated tokens in `seconds`
    assert gen["tokens_per_second"] * gen["seconds"] == pytest.approx(64 * 2048)
    names = _term_names(gen["terms"])
    assert "prefill compute" in names  # --prompt-len given: the prompt is prefilled
    assert "decode HBM reads" in names
    formulas = " ".join(t["formula"] for t in gen["terms"])
    # --gpu H100-80GB's speeds
    assert f"{H100.bf16_tflops:g} TFLOP/s" in formulas
    assert f"{H100.hbm_tbps:g} TB/s" in formulas
    assert "2,048 steps" in formulas
    assert "KV 64 ×" in formulas
    assert "training" not in data


def test_explain_training_of_the_whole_engine(main_cli: MainCli) -> None:
    done = main_cli(
        "explain",
        "fsdp:d4t2",
        "--model",
        "Qwen3-8B",
        "--gpu",
        "A100-80GB",
        "--tokens",
        "8192",
        "--tokens-per-step",
        "1048576",
        "--seq-len",
        "4096",
        "--recompute",
        "full",
        "--json",
    )
    data = _json(done)
    assert data["world_size"] == 8
    train = data["training"]
    assert isinstance(train, dict)
    assert (
        train["tokens_per_step"],
        train["tokens_per_micro_batch"],
        train["sequence_length"],
        train["recompute"],
    ) == (1048576, 8192, 4096, "full")
    assert train["tokens_per_second"] * train["step_seconds"] == pytest.approx(1048576)
    assert 0 < train["mfu"] < 1
    names = _term_names(train["terms"])
    assert {"compute", "tensor parallel", "data parallel"} <= set(names)
    compute = next(t["formula"] for t in train["terms"] if t["name"] == "compute")
    assert f"{A100.bf16_tflops:g} TFLOP/s" in compute  # --gpu A100-80GB
    assert "s 4,096" in compute
    assert "full recomputation" in compute
    assert "generation" not in data


# --- the plan's pace: check and the app -----------------------------------------------


def test_check_json_has_the_pace_in_the_configs_own_mode(main_cli: MainCli) -> None:
    pace = _pace(main_cli("check", ASYNC_CONFIG, "--gpu", "H100-80GB", "--json"))
    assert pace["mode"] == "asynchronous"  # rollout.max_head_offpolicyness: 2
    gen, train, update = (pace[k] for k in ("generate_seconds", "train_seconds", "update_seconds"))
    assert isinstance(gen, float)
    assert isinstance(train, float)
    assert isinstance(update, float)
    assert gen > 0
    assert train > 0
    assert pace["step_seconds"] == pytest.approx(max(gen, train) + update)
    assert pace["calibration"] is None


def test_the_apps_json_has_the_pace(main_cli: MainCli) -> None:
    pace = _pace(main_cli("output=json"))  # the default run: grpo_2x8, the hook's gpu H100-80GB
    assert pace["mode"] == "synchronous"  # max_head_offpolicyness unset: the reference's 0
    gen, train, update = (pace[k] for k in ("generate_seconds", "train_seconds", "update_seconds"))
    assert isinstance(gen, float)
    assert isinstance(train, float)
    assert isinstance(update, float)
    assert pace["step_seconds"] == pytest.approx(gen + train + update)
    # the same figures as check of the same experiment file
    checked = _pace(main_cli("check", DEFAULT_CONFIG, "--gpu", "H100-80GB", "--json"))
    assert {k: checked[k] for k in PACE_KEYS} == {k: pace[k] for k in PACE_KEYS}


def test_check_takes_gpu_and_mean_gen_len(main_cli: MainCli) -> None:
    base = _pace(main_cli("check", ASYNC_CONFIG, "--gpu", "H100-80GB", "--json"))
    other_gpu = _pace(main_cli("check", ASYNC_CONFIG, "--gpu", "A100-80GB", "--json"))
    shorter = _pace(
        main_cli("check", ASYNC_CONFIG, "--gpu", "H100-80GB", "--mean-gen-len", "256", "--json")
    )
    # an A100 is slower than an H100 on both sides
    assert other_gpu["generate_seconds"] > base["generate_seconds"]
    assert other_gpu["train_seconds"] > base["train_seconds"]
    assert any("A100-80GB" in a for a in other_gpu["assumptions"])
    # a mean of 256 of the 1,024 new tokens: less to generate and to train on
    assert shorter["generate_seconds"] < base["generate_seconds"]
    assert shorter["train_seconds"] < base["train_seconds"]
    assert "mean generation length 256 tokens (from --mean-gen-len)" in shorter["assumptions"]


# --- suggest --config -------------------------------------------------------------------


def test_suggest_config_gives_current_and_proposals(main_cli: MainCli) -> None:
    flags = ("--gpu", "H100-80GB", "--mean-gen-len", "512")
    pace = _pace(main_cli("check", ASYNC_CONFIG, *flags, "--json"))
    found = _json(main_cli("suggest", "--config", ASYNC_CONFIG, *flags, "--json"))
    current = found["current"]
    assert isinstance(current, dict)
    assert {k: current[k] for k in PACE_KEYS} == {k: pace[k] for k in PACE_KEYS}
    assert current["advice"] == pace["advice"]  # the plan's own advice beside its figures
    proposals = found["proposals"]
    assert isinstance(proposals, list)
    assert proposals
    for p in proposals:
        assert p["mode"] == "asynchronous"  # the config's own mode
        gen, train, update = p["generate_seconds"], p["train_seconds"], p["update_seconds"]
        assert gen > 0
        assert train > 0
        assert p["step_seconds"] == pytest.approx(max(gen, train) + update)
        # --mean-gen-len reached the proposals: 512 tokens per sequence at the mean
        assert "× 512 tokens on each of" in p["generation"]


# --- a stored calibration -----------------------------------------------------------------


Run = Callable[..., Ran]


@pytest.fixture
def run(main_cli: MainCli) -> Run:
    """``run(*args, env=ENV)``: ``main(argv)`` in this process with exactly the environment
    ``ENV`` (the tests' own without it) for that one call, read as a process reads it."""

    def call(*args: str, env: Mapping[str, str] | None = None) -> Ran:
        with pytest.MonkeyPatch.context() as patch:
            if env is not None:
                for name in set(os.environ) - set(env):
                    patch.delenv(name)
                for name, value in env.items():
                    if os.environ.get(name) != value:
                        patch.setenv(name, value)
            return main_cli(*args)

    return call


@pytest.fixture
def calibrated(run: Run, tmp_path: Path) -> dict[str, str]:
    """A private calibration store holding a fitted compute efficiency for Qwen2.5-1.5B
    on H100-80GB (the model of ``real_grpo.yaml``): the environment that reads it."""
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700)
    env = {**os.environ, "XDG_CACHE_HOME": str(cache), "AREAL_ALLOC_DETECT": "0"}
    env.pop("AREAL_ALLOC_NO_CALIBRATION", None)
    done = run(
        "calibrate",
        "fsdp:d8",
        "--model",
        "Qwen/Qwen2.5-1.5B-Instruct",
        "--gpu",
        "H100-80GB",
        "--step-seconds",
        "20",
        "--tokens-per-step",
        "1048576",
        env=env,
    )
    assert done.returncode == 0, done.stderr
    assert (cache / "areal-alloc" / "calibration.json").is_file()
    return env


def test_a_calibration_is_named_where_it_changes_the_plan(
    run: Run, calibrated: dict[str, str]
) -> None:
    plain = _pace(run("check", ASYNC_CONFIG, "--gpu", "H100-80GB", "--json"))  # the test cache
    pace = _pace(run("check", ASYNC_CONFIG, "--gpu", "H100-80GB", "--json", env=calibrated))
    named = pace["calibration"]
    assert isinstance(named, str)
    assert "compute efficiency" in named
    assert "20 s step of fsdp:d8" in named
    assert OFF in named
    assert pace["train_seconds"] > plain["train_seconds"]
    text = run("check", ASYNC_CONFIG, "--gpu", "H100-80GB", env=calibrated)
    assert text.returncode == 0, text.stderr
    assert "calibrated: compute efficiency" in text.stdout
    assert OFF in text.stdout
    off = {**calibrated, "AREAL_ALLOC_NO_CALIBRATION": "1"}
    by_env = _pace(run("check", ASYNC_CONFIG, "--gpu", "H100-80GB", "--json", env=off))
    by_flag = _pace(
        run("check", ASYNC_CONFIG, "--gpu", "H100-80GB", "--no-calibration", "--json", env=off)
    )
    for left_out in (by_env, by_flag):
        assert left_out["calibration"] is None
        assert {k: left_out[k] for k in PACE_KEYS} == {k: plain[k] for k in PACE_KEYS}


def test_a_calibration_is_named_by_suggest_and_turned_off_by_its_flag(
    run: Run, calibrated: dict[str, str]
) -> None:
    args = ("suggest", "--config", ASYNC_CONFIG, "--gpu", "H100-80GB")
    found = _json(run(*args, "--json", env=calibrated))
    current = found["current"]
    assert isinstance(current, dict)
    assert OFF in current["calibration"]
    for p in found["proposals"]:
        assert any(
            a.startswith("calibrated: ") and "--no-calibration" in a
            for a in p["actor"]["speed"]["assumptions"]
        )
    text = run(*args, env=calibrated)
    assert text.returncode == 0, text.stderr
    assert "# calibrated: compute efficiency" in text.stdout
    # --no-calibration leaves it out of the proposals and of current (the plan's pace)
    off = _json(run(*args, "--json", "--no-calibration", env=calibrated))
    plain = _json(run(*args, "--json"))  # the tests' own cache: nothing stored
    current_off = off["current"]
    assert isinstance(current_off, dict)
    assert current_off["calibration"] is None
    assert current_off == plain["current"]
    assert [p["train_seconds"] for p in off["proposals"]] == [
        p["train_seconds"] for p in plain["proposals"]
    ]


def test_a_calibration_is_named_by_explain_and_layouts(
    run: Run, calibrated: dict[str, str]
) -> None:
    model = ("--model", "Qwen/Qwen2.5-1.5B-Instruct", "--gpu", "H100-80GB")
    explain = ("explain", "fsdp:d8", *model, "--tokens-per-step", "1048576")
    train = _json(run(*explain, "--json", env=calibrated))["training"]
    assert isinstance(train, dict)
    assert any(a.startswith("calibrated: ") and OFF in a for a in train["assumptions"])
    text = run(*explain, env=calibrated)
    assert text.returncode == 0, text.stderr
    assert "\n# calibrated: compute efficiency" in text.stdout
    assert "# assumed: calibrated" not in text.stdout  # named as a calibration, not a guess
    off = _json(run(*explain, "--json", "--no-calibration", env=calibrated))["training"]
    assert isinstance(off, dict)
    assert not any(a.startswith("calibrated: ") for a in off["assumptions"])
    assert off["step_seconds"] < train["step_seconds"]
    ranked = run("layouts", "fsdp", "8", *model, "--rank", env=calibrated)
    assert ranked.returncode == 0, ranked.stderr
    assert "# calibrated: compute efficiency" in ranked.stdout
    assert OFF in ranked.stdout


# --- one flag, one meaning -----------------------------------------------------------------

GPU_AND_MEAN = ("--gpu", "H100-80GB", "--mean-gen-len", "300")


def test_explain_generation_takes_mean_gen_len(main_cli: MainCli) -> None:
    """--gen-len is the longest generation (gconfig.max_new_tokens) on every command, and
    --mean-gen-len the mean the throughput is taken at, as check and suggest read them."""
    args = ("explain", "sglang:d1", "--model", "Qwen3-0.6B", "--batch", "32", "--gen-len", "1200")
    gen = _json(main_cli(*args, *GPU_AND_MEAN, "--json"))["generation"]
    assert isinstance(gen, dict)
    assert (gen["gen_len"], gen["mean_gen_len"]) == (1200, 300)
    assert gen["tokens_per_second"] * gen["seconds"] == pytest.approx(32 * 300)
    assert "mean generation length 300 tokens (from --mean-gen-len)" in gen["assumptions"]


@pytest.mark.parametrize(
    ("args", "flag"),
    [
        (("layouts", "sglang", "8", "--model", "Qwen3-0.6B", "--rank"), "--mean-gen-len"),
        (("calibrate", "sglang:d1", "--model", "Qwen3-0.6B"), "--mean-gen-len"),
        (("calibrate", "fsdp:d8", "--model", "Qwen3-0.6B"), "--no-calibration"),
    ],
)
def test_a_flag_is_refused_where_it_means_nothing(
    main_cli: MainCli, args: tuple[str, ...], flag: str
) -> None:
    """layouts --rank ranks decode at --seq-len contexts and calibrate fits a measured step
    anew: a generation length or a stored calibration would be silently ignored there."""
    value = ("300",) if flag == "--mean-gen-len" else ()
    done = main_cli(*args, "--gpu", "H100-80GB", flag, *value)
    assert done.returncode == 2
    assert done.stderr == (
        f"areal-alloc {args[0]}: unrecognized arguments: {' '.join((flag, *value))} "
        f"(see areal-alloc {args[0]} --help)\n"
    )
