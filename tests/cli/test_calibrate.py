"""``calibrate``: fits outside [0.001, 1] are refused and nothing is kept; ``--list`` and
``--forget``; a calibration in use is named in every output it changes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from areal_alloc.catalogue import find_model
from areal_alloc.cli import main
from areal_alloc.estimate import calibration

#: these experiments name the GPU with areal-alloc's own cluster.gpu, which the reference's
#: loader refuses: the strict-key check is off here (tests/cli/test_reference_keys.py tests it)
pytestmark = pytest.mark.usefixtures("reference_off")


MODEL = ["--model", "Qwen3-8B", "--gpu", "H100-80GB"]
OFF = (
    "--no-calibration or AREAL_ALLOC_NO_CALIBRATION=1 leaves it out; areal-alloc calibrate "
    "--forget removes it"
)


@pytest.fixture(autouse=True)
def cache_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.delenv("AREAL_ALLOC_NO_CALIBRATION", raising=False)
    return tmp_path


REFUSED = [
    (
        ["sglang:d2t4", "--tokens-per-second", "1e-300"],
        "1e-300 tokens/s would mean 1.91e-304 of the HBM bandwidth, under the floor of 0.001 "
        "a calibration keeps: check the measurement, the layout, the batch and the GPU; "
        "nothing was stored",
    ),
    (
        ["megatron:d4t2", "--step-seconds", "1e6"],
        "the measured 1e+06 s would mean 1.05e-05 of peak compute, under the floor of 0.001 a "
        "calibration keeps: check the measurement, the layout, the tokens per step and the "
        "GPU; nothing was stored",
    ),
    (
        ["sglang:d2t4", "--tokens-per-second", "9000", "--batch", "128"],
        "9000 tokens/s would need 1.71 of the HBM bandwidth: check the measurement, the "
        "layout, the batch and the GPU; nothing was stored",
    ),
    (["--list", "--forget"], "give --list or --forget, not both"),
    (
        ["--list", "fsdp:d2"],
        "--list and --forget take no layout (got 'fsdp:d2'); --forget takes --model and --gpu "
        "to remove only that calibration",
    ),
    (
        [],
        "calibrate needs the layout that was measured (e.g. megatron:d4t2), or --list or --forget",
    ),
]


@pytest.mark.parametrize(("args", "message"), REFUSED)
def test_refused_and_nothing_kept(
    args: list[str], message: str, capsys: pytest.CaptureFixture[str], cache_home: Path
) -> None:
    extra = MODEL if args and not args[0].startswith("-") else []
    assert main(["calibrate", *args, *extra]) == 1
    assert capsys.readouterr().err == f"areal-alloc calibrate: {message}\n"
    assert not (cache_home / "areal-alloc" / calibration.FILE).exists()


def test_list_and_forget(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["calibrate", "--list"]) == 0
    assert capsys.readouterr().out == "no calibration is stored\n"
    fit = ["megatron:d4t2", *MODEL, "--tokens", "16384", "--recompute", "full"]
    assert main(["calibrate", *fit, "--step-seconds", "30"]) == 0
    kept = capsys.readouterr().out
    assert kept.endswith(f"start from it ({OFF})\n")
    assert main(["calibrate", "--list"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "model     GPU        compute  HBM  from",
        "Qwen3-8B  h100-80gb  0.388    -    a measured 30 s step of megatron:d4t2 "
        "(1,048,576 tokens)",
        f"# 1 stored calibration(s): {OFF}",
    ]
    assert main(["calibrate", "--forget", "--model", "Qwen3-4B", "--gpu", "H100-80GB"]) == 0
    assert capsys.readouterr().out == "no calibration of Qwen3-4B on H100-80GB is stored\n"
    assert main(["calibrate", "--forget", *MODEL]) == 0
    assert capsys.readouterr().out == "removed the calibration of Qwen3-8B on H100-80GB\n"
    assert main(["calibrate", *fit, "--step-seconds", "30"]) == 0
    assert main(["calibrate", "--forget"]) == 0
    assert capsys.readouterr().out.endswith("removed 1 stored calibration(s)\n")
    assert main(["calibrate", "--list"]) == 0
    assert capsys.readouterr().out == "no calibration is stored\n"


def _calibrated(capsys: pytest.CaptureFixture[str]) -> str:
    fit = ["megatron:d4t2", *MODEL, "--tokens", "16384", "--recompute", "full"]
    assert main(["calibrate", *fit, "--step-seconds", "30"]) == 0
    capsys.readouterr()
    return "compute efficiency 0.388 from a measured 30 s step of megatron:d4t2 (1,048,576 tokens)"


def test_layouts_rank_and_suggest_name_it(capsys: pytest.CaptureFixture[str]) -> None:
    used = _calibrated(capsys)
    rank = ["layouts", "megatron", "8", *MODEL, "--tokens", "16384", "--recompute", "full"]
    assert main([*rank, "--rank", "--top", "1"]) == 0
    assert f"# calibrated: {used} ({OFF})" in capsys.readouterr().out.splitlines()
    assert main([*rank, "--rank", "--top", "1", "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)
    assert f"calibrated: {used} ({OFF})" in row["speed"]["assumptions"]
    suggest = ["suggest", *MODEL, "--gpus", "16", "--top", "1"]
    assert main(suggest) == 0
    assert f"# calibrated: {used} ({OFF})" in capsys.readouterr().out.splitlines()
    assert main([*suggest, "--json"]) == 0
    assert f"calibrated: {used} ({OFF})" in capsys.readouterr().out
    assert main([*suggest, "--no-calibration"]) == 0
    assert "calibrated" not in capsys.readouterr().out


def test_the_plan_names_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    used = _calibrated(capsys)
    experiment = tmp_path / "exp.yaml"
    experiment.write_text(
        "cluster: {n_nodes: 2, n_gpus_per_node: 8, gpu: H100-80GB}\n"
        "rollout: {backend: 'sglang:d2t4'}\n"
        "actor: {backend: 'megatron:d4t2', path: Qwen/Qwen3-8B, gradient_checkpointing: true,"
        " mb_spec: {max_tokens_per_mb: 16384}}\n"
        "train_dataset: {batch_size: 32, max_length: 2048}\n"
        "gconfig: {n_samples: 4, max_new_tokens: 4096}\n"
    )
    off = "AREAL_ALLOC_NO_CALIBRATION=1 leaves it out; areal-alloc calibrate --forget removes it"
    assert main(["check", str(experiment)]) == 0
    assert f"  calibrated: {used} ({off})" in capsys.readouterr().out.splitlines()
    assert main(["check", str(experiment), "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["pace"]["calibration"] == f"{used} ({off})"
    monkeypatch.setenv("AREAL_ALLOC_NO_CALIBRATION", "1")
    assert main(["check", str(experiment), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["pace"]["calibration"] is None


def test_no_calibration_flag_and_environment(
    cache_home: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    calibration.save(
        find_model("Qwen3-8B"),
        "H100-80GB",
        calibration.Calibration(compute_efficiency=0.25, compute_source="a measured 9 s step"),
    )
    args = ["layouts", "megatron", "8", "--model", "Qwen3-8B", "--gpu", "H100-80GB", "--rank"]
    line = (
        "# calibrated: compute efficiency 0.25 from a measured 9 s step (--no-calibration or "
        "AREAL_ALLOC_NO_CALIBRATION=1 leaves it out; areal-alloc calibrate --forget removes it)"
    )
    assert main([*args, "--top", "1"]) == 0
    assert line in capsys.readouterr().out.splitlines()
    assert main([*args, "--top", "1", "--no-calibration"]) == 0
    assert "calibrated" not in capsys.readouterr().out
    monkeypatch.setenv("AREAL_ALLOC_NO_CALIBRATION", "1")
    assert main([*args, "--top", "1"]) == 0
    assert "calibrated" not in capsys.readouterr().out


def test_a_shared_cache_folder_keeps_nothing(
    cache_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = cache_home / "areal-alloc"
    folder.mkdir(mode=0o777)
    folder.chmod(0o777)
    fit = ["megatron:d4t2", *MODEL, "--tokens", "16384", "--recompute", "full"]
    assert main(["calibrate", *fit, "--step-seconds", "30"]) == 1
    assert capsys.readouterr().err == (
        f"areal-alloc calibrate: the cache folder {folder} is not private to you (yours, no "
        f"group or other write bit) or not writable; nothing was kept\n"
    )
    assert not (folder / calibration.FILE).exists()
    assert main(["calibrate", "--list"]) == 0
    assert capsys.readouterr().out == (
        f"no calibration is read or kept: the cache folder {folder} is not private to you "
        f"(yours, no group or other write bit), so what it holds is ignored\n"
    )
