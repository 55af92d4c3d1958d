"""Memory as users meet it: `explain --model --gpu`, `layouts --model --gpu`, `check`, the hook."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import AppRun, MainCli, Ran

#: these experiments name the GPU with areal-alloc's own cluster.gpu, which the reference's
#: loader refuses: the strict-key check is off here (tests/cli/test_reference_keys.py tests it)
pytestmark = pytest.mark.usefixtures("reference_off")


def test_explain_prints_every_term_with_its_inputs(main_cli: MainCli) -> None:
    done = main_cli("explain", "megatron:d2t4", "--model", "Qwen3-8B", "--gpu", "H100-80GB")
    assert done.returncode == 0, done.stderr
    text = done.stdout
    assert "memory per GPU (Qwen3-8B on H100-80GB; an estimate):" in text
    # the Megatron distributed optimizer: float32 main params + 2 Adam states over dp
    assert "× 12 B (float32 main params + 2 float32 Adam states) / dp2" in text
    for term in ("weights", "gradients", "optimizer", "activations", "logits", "reserve"):
        assert f"\n  {term} " in text
    assert "per GPU of 79.2 GiB:" in text


def test_explain_json_has_memory_and_kv_cache(main_cli: MainCli) -> None:
    done = main_cli(
        "explain", "sglang:d2t4", "--model", "meta-llama/Llama-3.1-8B", "--gpu", "80", "--json"
    )
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert set(data["memory"]) >= {
        "weights",
        "gradients",
        "optimizer",
        "activations",
        "logits",
        "reserve",
        "total",
        "capacity",
    }
    # vLLM/SGLang: 2 × max(1, 8 kv heads // t4) × 128 × 32 layers × 2 bytes
    assert data["kv_cache"]["bytes_per_token"] == 2 * 2 * 128 * 32 * 2
    assert data["kv_cache"]["tokens"] > 0
    assert data["kv_cache"]["sequences"] == data["kv_cache"]["tokens"] // 32768


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--model", "Qwen3-9B"],
            "areal-alloc explain: unknown model 'Qwen3-9B': not a local config.json",
        ),
        (["--model", "Qwen3-8B", "--gpu", "H2000"], "areal-alloc explain: unknown GPU 'H2000'"),
        (["--gpu", "H100-80GB"], "areal-alloc explain: --gpu needs --model"),
    ],
)
def test_explain_memory_errors_are_one_line(
    main_cli: MainCli, args: list[str], message: str
) -> None:
    done = main_cli("explain", "fsdp:d8", *args)
    assert done.returncode == 1
    assert done.stderr.startswith(message)
    assert done.stderr.count("\n") == 1


def test_layouts_lists_only_those_that_fit(main_cli: MainCli) -> None:
    everything = main_cli("layouts", "fsdp", "8").stdout.split()
    done = main_cli("layouts", "fsdp", "8", "--model", "Qwen2.5-72B", "--gpu", "H100-80GB")
    # 72.7B parameters: fp32 weights, grads and two fp32 Adam states need 16 B each,
    # 1.16 TB in all, far more than 8 × 80 GiB: no FSDP layout of 8 GPUs holds it
    assert done.returncode == 1
    assert done.stderr.startswith(
        f"areal-alloc layouts: none of the {len(everything)} fsdp layouts of 8 GPUs fits"
    )
    fits = main_cli(
        "layouts", "megatron", "16", "--model", "Qwen3-8B", "--gpu", "H100-80GB", "--sweep"
    )
    assert fits.returncode == 0, fits.stderr
    fitting = fits.stdout.strip().split(",")
    assert fitting
    listed = main_cli("layouts", "megatron", "16", "--model-config", "none", "--max-tp", "1")
    assert listed.returncode == 1  # a model config that does not exist: one clear error
    shaped = main_cli(
        "layouts", "megatron", "16", "--num-attention-heads", "32", "--num-layers", "36"
    )
    assert set(fitting) <= set(shaped.stdout.split())
    assert everything


def test_check_and_the_hook_refuse_what_does_not_fit(tmp_path: Path, main_cli: MainCli) -> None:
    experiment = tmp_path / "exp.yaml"
    experiment.write_text(
        "cluster: {n_nodes: 1, n_gpus_per_node: 8, gpu: A100-40GB}\n"
        "actor:\n"
        "  backend: fsdp:d8\n"
        "  path: Qwen/Qwen2.5-72B\n"
        "  mb_spec: {max_tokens_per_mb: 8192}\n"
    )
    done = main_cli("check", str(experiment))
    assert done.returncode == 1
    assert done.stderr.startswith("areal-alloc check: actor.backend='fsdp:d8': needs about ")
    assert "over the 39.5 GiB of a A100-40GB; largest term" in done.stderr
    warned = main_cli("check", str(experiment), "--on-memory", "warn", "--json")
    assert warned.returncode == 0, warned.stderr
    plan = json.loads(warned.stdout)
    assert plan["engines"][0]["memory"]["fits"] is False
    assert any("needs about" in w for w in plan["warnings"])


HOOK_APP = """\
import hydra

@hydra.main(version_base="1.3", config_path="conf", config_name="config")
def app(cfg):
    print("RAN", cfg.actor.backend)

app()
"""

HOOK_CONFIG = """\
defaults:
  - areal_alloc/validate
  - _self_
cluster: {n_nodes: 2, n_gpus_per_node: 8, gpu: H100-80GB}
rollout: {backend: "sglang:d2t4"}
actor:
  backend: fsdp:d8
  path: Qwen/Qwen3-8B
  gradient_checkpointing: true
  mb_spec: {max_tokens_per_mb: 16384}
"""


def _hook(app: AppRun, tmp_path: Path, *overrides: str) -> Ran:
    """``python app.py OVERRIDES`` of a user's app with the hook, run in this process."""
    (tmp_path / "conf").mkdir(exist_ok=True)
    (tmp_path / "conf" / "config.yaml").write_text(HOOK_CONFIG)
    (tmp_path / "app.py").write_text(HOOK_APP)
    flags = [o for o in overrides if o.startswith("-")]
    values = [o for o in overrides if not o.startswith("-")]
    return app(
        tmp_path / "app.py",
        *flags,
        "hydra.run.dir=.",
        "hydra.output_subdir=null",
        *values,
        cwd=tmp_path,
        env={"HYDRA_FULL_ERROR": "0"},
    )


def test_the_hook_stops_a_run_that_would_not_fit(tmp_path: Path, app_in_process: AppRun) -> None:
    ok = _hook(app_in_process, tmp_path)
    assert ok.returncode == 0, ok.stderr
    assert "RAN fsdp:d8" in ok.stdout
    bad = _hook(
        app_in_process,
        tmp_path,
        "actor.gradient_checkpointing=false",
        "actor.mb_spec.max_tokens_per_mb=65536",
    )
    assert bad.returncode == 1
    assert bad.stdout == ""
    assert bad.stderr.startswith("areal-alloc: actor.backend='fsdp:d8': needs about ")
    assert bad.stderr.count("\n") == 1
    warned = _hook(
        app_in_process,
        tmp_path,
        "actor.gradient_checkpointing=false",
        "actor.mb_spec.max_tokens_per_mb=65536",
        "hydra.callbacks.areal_alloc.on_memory=warn",
    )
    assert warned.returncode == 0, warned.stderr
    assert "areal-alloc: warning: actor.backend='fsdp:d8': needs about" in warned.stderr
    assert "RAN fsdp:d8" in warned.stdout


def test_every_sweep_job_is_checked_for_memory(tmp_path: Path, app_in_process: AppRun) -> None:
    done = _hook(
        app_in_process,
        tmp_path,
        "-m",
        # a budget over the data is not a bigger micro-batch (the reference's micro-batch
        # holds a rank's share at most): the sweep turns recomputation off instead
        "actor.gradient_checkpointing=true,false",
        "hydra.sweep.dir=multirun",
    )
    assert done.returncode == 1
    assert "job 1 [actor.gradient_checkpointing=False]: actor.backend='fsdp:d8': needs" in (
        done.stderr
    )
    assert "1 of 2 sweep jobs are invalid; nothing was launched" in done.stderr
    assert not (tmp_path / "multirun").exists()
