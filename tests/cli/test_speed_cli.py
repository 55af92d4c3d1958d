"""`layouts --rank` and `suggest`, run as users run them."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable

import pytest

from tests.conftest import MainCli

#: these experiments name the GPU with areal-alloc's own cluster.gpu, which the reference's
#: loader refuses: the strict-key check is off here (tests/cli/test_reference_keys.py tests it)
pytestmark = pytest.mark.usefixtures("reference_off")


Cli = Callable[..., "subprocess.CompletedProcess[str]"]  # the `cli` fixture (conftest)

RANK = ["layouts", "megatron", "16", "--model", "Qwen3-8B", "--gpu", "H100-80GB", "--rank"]


def test_rank_lists_the_fitting_layouts_fastest_first(main_cli: MainCli) -> None:
    done = main_cli(*RANK, "--tokens", "16384", "--recompute", "full", "--top", "5")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].split() == ["layout", "per", "GPU", "step", "tokens/s", "MFU", "bottleneck"]
    # a layout at the edge of the GPU's memory is marked "(edge)" after its memory
    rates = [float(line.replace(" (edge)", "").split()[5].replace(",", "")) for line in lines[1:6]]
    assert rates == sorted(rates, reverse=True)
    assert "# assumed: 0.5 of peak compute" in done.stdout


def test_rank_json_has_the_documented_keys(main_cli: MainCli) -> None:
    done = main_cli(*RANK, "--tokens", "16384", "--recompute", "full", "--json", "--top", "3")
    assert done.returncode == 0, done.stderr
    rows = json.loads(done.stdout)
    assert len(rows) == 3
    for row in rows:
        assert {
            "backend",
            "memory_total",
            "step_seconds",
            "tokens_per_second",
            "mfu",
            "bottleneck",
        } <= set(row)
        assert row["memory_total"] <= 80 * 2**30
    sweep = main_cli(*RANK, "--tokens", "16384", "--recompute", "full", "--sweep", "--top", "3")
    assert sweep.stdout.strip().split(",") == [r["backend"] for r in rows]


def test_rank_needs_a_model_and_a_gpu_with_speeds(main_cli: MainCli) -> None:
    done = main_cli("layouts", "fsdp", "8", "--rank")
    assert (done.returncode, done.stderr) == (
        1,
        "areal-alloc layouts: --rank needs --model and --gpu\n",
    )
    unknown = main_cli("layouts", "fsdp", "8", "--model", "Qwen3-8B", "--gpu", "80", "--rank")
    assert unknown.returncode == 1
    assert "is not in the catalogue: give --peak-tflops and --hbm-tbps" in unknown.stderr
    given = main_cli(
        "layouts",
        "fsdp",
        "8",
        "--model",
        "Qwen3-4B",
        "--gpu",
        "80",
        "--rank",
        "--peak-tflops",
        "300",
        "--hbm-tbps",
        "2",
        "--recompute",
        "full",
        "--tokens",
        "8192",
    )
    assert given.returncode == 0, given.stderr


def test_suggest_prints_proposals_with_overrides_and_yaml(main_cli: MainCli) -> None:
    done = main_cli(
        "suggest", "--model", "Qwen3-8B", "--gpus", "32", "--gpu", "H100-80GB", "--top", "2"
    )
    assert done.returncode == 0, done.stderr
    text = done.stdout
    # gconfig.max_new_tokens' default, as the plan takes it (defaults.NEW_TOKENS)
    assert text.startswith("32 × H100-80GB, Qwen3-8B: 512 sequences of 1,024 + 16,384 tokens")
    assert "\n1. rollout " in text
    assert "\n2. rollout " in text
    assert "rollout.backend=sglang:" in text
    assert "actor.backend=megatron:" in text
    assert "scheduling_strategy: {type: colocation, target: actor}" in text


def test_suggest_json_and_sweep(main_cli: MainCli) -> None:
    args = ["suggest", "--model", "Qwen3-8B", "--gpus", "32", "--gpu", "H100-80GB", "--top", "2"]
    data = json.loads(main_cli(*args, "--json").stdout)
    assert len(data) == 2
    for proposal in data:
        assert proposal["rollout"]["gpus"] + proposal["actor"]["gpus"] == 32
        assert proposal["rollout"]["backend"].startswith("sglang:")
        assert {"step_seconds", "balance", "advice", "overrides"} <= set(proposal)
    sweep = main_cli(*args, "--sweep").stdout.splitlines()
    jobs = [line for line in sweep if not line.startswith("#")]
    assert jobs == [" ".join(p["overrides"]) for p in data]


def test_suggest_errors_are_one_line(main_cli: MainCli) -> None:
    done = main_cli("suggest", "--model", "Qwen2.5-72B", "--gpus", "2", "--gpu", "L40S")
    assert done.returncode == 1
    assert done.stderr.startswith("areal-alloc suggest: no split of 2 L40S GPUs fits Qwen2.5-72B")
    assert done.stderr.count("\n") == 1


@pytest.mark.parametrize(
    ("args", "stderr"),
    [
        (
            ["megatron:d8", "--step-seconds", "inf"],
            "areal-alloc calibrate: argument --step-seconds: inf: must be a number above 0 and at "
            "most 10,000,000 (see areal-alloc calibrate --help)\n",
        ),
        (
            ["megatron:d8", "--step-seconds", "nan"],
            "areal-alloc calibrate: argument --step-seconds: nan: must be a number above 0 and at "
            "most 10,000,000 (see areal-alloc calibrate --help)\n",
        ),
        (  # the figure as typed, not divided by the 8 instances
            ["sglang:d8", "--tokens-per-second", "-5"],
            "areal-alloc calibrate: argument --tokens-per-second: -5: must be a number above 0 "
            "and at most 1,000,000,000,000 (see areal-alloc calibrate --help)\n",
        ),
        (  # a Unicode digit is not a number, as in every other flag
            ["megatron:d8", "--step-seconds", "\u0664"],
            "areal-alloc calibrate: argument --step-seconds: '\u0664': must be a number above 0 "
            "and at most 10,000,000 (see areal-alloc calibrate --help)\n",
        ),
    ],
)
def test_calibrate_refuses_impossible_measurements(
    args: list[str], stderr: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from areal_alloc.cli import main

    assert main(["calibrate", *args, "--model", "Qwen3-8B", "--gpu", "H100-80GB"]) == 2
    assert capsys.readouterr().err == stderr


def test_suggest_answers_for_the_largest_cluster(main_cli: MainCli) -> None:
    # 131,071 whole-node splits: searched, not tried one by one (it used to run for hours);
    # a sequence per data-parallel rank at least, so the batch is as large as the cluster
    flags = ["--model", "Qwen3-8B", "--gpus", "1048576", "--gpu", "H100-80GB"]
    done = main_cli("suggest", *flags, "--batch-size", "1048576")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("1048576 × H100-80GB, Qwen3-8B:")
    assert "\n1. rollout " in done.stdout


def test_calibrate_keeps_the_fit_and_rank_starts_from_it(cli: Cli, tmp_path: object) -> None:
    import os
    from pathlib import Path

    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path)}
    args = ["--model", "Qwen3-8B", "--gpu", "H100-80GB", "--tokens", "16384"]
    done = cli(
        "calibrate", "megatron:d4t2", *args, "--recompute", "full", "--step-seconds", "30", env=env
    )
    assert done.returncode == 0, done.stderr
    assert "fitted compute efficiency" in done.stdout
    stored = json.loads((Path(str(tmp_path)) / "areal-alloc" / "calibration.json").read_text())
    (entry,) = stored.values()
    assert 0 < entry["compute_efficiency"] < 0.5  # slower than the default estimate
    assert "a measured 30 s step of megatron:d4t2" in entry["compute_source"]
    ranked = cli("layouts", "megatron", "8", *args, "--recompute", "full", "--rank", env=env)
    assert "# calibrated: compute efficiency" in ranked.stdout
    # a damaged file is ignored, never an error
    (Path(str(tmp_path)) / "areal-alloc" / "calibration.json").write_text("{not json")
    again = cli("layouts", "megatron", "8", *args, "--recompute", "full", "--rank", env=env)
    assert again.returncode == 0, again.stderr
    assert "# calibrated" not in again.stdout
    wrong = cli("calibrate", "sglang:d2t4", *args, "--step-seconds", "3", env=env)
    assert wrong.returncode == 1
    assert "an inference layout: give --tokens-per-second" in wrong.stderr


def test_suggest_reads_an_experiment_config(main_cli: MainCli, tmp_path: object) -> None:
    from pathlib import Path

    experiment = Path(str(tmp_path)) / "exp.yaml"
    experiment.write_text(
        "cluster: {n_nodes: 4, n_gpus_per_node: 8, gpu: H100-80GB}\n"
        "rollout: {backend: 'vllm:d2t4'}\n"
        # the config's own micro-batch and recomputation are what suggest estimates with
        "actor: {backend: 'fsdp:d8', path: /storage/models/Qwen3-8B, "
        "gradient_checkpointing: true, mb_spec: {max_tokens_per_mb: 16384}}\n"
        "ref: {backend: '', scheduling_strategy: {type: colocation, target: actor}}\n"
        "train_dataset: {batch_size: 32, max_length: 2048}\n"
        "gconfig: {n_samples: 4, max_new_tokens: 4096}\n"
    )
    done = main_cli("suggest", "--config", str(experiment), "--top", "1", "--json")
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    (proposal,) = data["proposals"]
    assert set(data["current"]) >= {"generate_seconds", "train_seconds", "step_seconds", "mode"}
    assert proposal["rollout"]["gpus"] + proposal["actor"]["gpus"] == 32
    assert proposal["rollout"]["backend"].startswith("vllm:")  # the config's backends
    assert proposal["actor"]["backend"].startswith("fsdp:")
    text = main_cli(
        "suggest", "--config", str(experiment), "cluster.n_nodes=2", "--top", "1"
    ).stdout
    assert text.startswith("16 × H100-80GB, Qwen3-8B: 128 sequences of 2,048 + 4,096 tokens")
    missing = main_cli("suggest", "--model", "Qwen3-8B", "--gpus", "16")
    assert missing.returncode == 1
    assert "--gpu is needed (or an experiment --config that sets it)" in missing.stderr


def test_layouts_json_without_rank(main_cli: MainCli) -> None:
    plain = json.loads(main_cli("layouts", "fsdp", "4", "--json").stdout)
    assert plain == [{"backend": spec} for spec in main_cli("layouts", "fsdp", "4").stdout.split()]
    fitting = json.loads(
        main_cli(
            "layouts", "fsdp", "8", "--model", "Qwen3-4B", "--gpu", "H100-80GB", "--json"
        ).stdout
    )
    assert fitting
    for row in fitting:
        assert row["memory_total"] == row["memory"]["total"]
        assert row["memory"]["verdict"] in ("fits", "at the edge")  # never "does not fit"
        if row["memory"]["verdict"] == "fits":  # within H100-80GB's 79.18 GiB to torch
            assert row["memory_total"] <= 79.18 * 2**30


def test_layouts_rank_marks_a_layout_at_the_edge(main_cli: MainCli) -> None:
    """Qwen3-4B on fsdp:d2t4 needs 80.8 GiB of an H100-80GB's 79.2 GiB: within the
    estimate's measured error, so it is listed, marked, and the footer says what that means."""
    out = main_cli("layouts", "fsdp", "8", "--model", "Qwen3-4B", "--gpu", "H100-80GB", "--rank")
    lines = out.stdout.splitlines()
    assert out.returncode == 0
    assert any(line.startswith("fsdp:d2t4") and "80.8 GiB (edge)" in line for line in lines)
    assert not any(line.startswith("fsdp:d2c4") and "(edge)" in line for line in lines)
    assert any(line.startswith("# (edge): at the edge of the GPU's memory") for line in lines)
