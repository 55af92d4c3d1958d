"""The `areal-alloc` command: the installed console script once, then ``main(argv)`` in process."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import MainCli

Cli = Callable[..., "subprocess.CompletedProcess[str]"]  # the `cli` fixture (conftest)


DEFAULT_PLAN = """\
allocation plan: 2 nodes × 8 GPUs = 16 GPUs

  engine   backend      dims   world  instances  scheduling         GPUs  note
  rollout  sglang:d2t4  d2 t4  8      2 × 4      separate           8
  actor    fsdp:d4t2    d4 t2  8      -          separate           8
  ref      fsdp:d4t2    d4 t2  8      -          colocated → actor  0     backend from actor.backend

total: 16 of 16 GPUs used, 0 free

node map (one column per GPU, · free):
  GPU     0 1 2 3 4 5 6 7
  node 0  R R R R r r r r
  node 1  A A A A A A A A

  R/r = rollout sglang:d2t4, 2 instances of 4 GPUs  (node 0)
  A = actor fsdp:d4t2 + ref (colocated)  (node 1)

memory per GPU (estimate; H100-80GB, 79.2 GiB, from hydra.callbacks.areal_alloc.gpu; \
every term: areal-alloc explain SPEC --model M):
  engine   per GPU   fits  peak phase  largest term       KV cache per instance
  rollout  71.3 GiB  yes   generation  kv_cache 67.0 GiB  5,015,640 tokens = 153 × 32,768
  actor    37.8 GiB  yes   backward    logits 11.6 GiB
  ref      37.4 GiB  yes   load        load 28.4 GiB

pace per RL step (estimate; 512 sequences):
  rollout   87.7 s generating
  training  110 s (actor 87.2 s + ref 22.4 s)
  host      actor 18.5 s hidden under its GPU time, ref 4.47 s hidden under its GPU time (per \
decoder layer and pass: measured by this project on an NVIDIA H200, 2026-12-04, \
shared/gpu/fsdp_probe.py (AReaL cbff54d6 FSDP engine reproduced): the host-bound steps, \
Qwen3-0.6B at 8,192 tokens and Qwen3-1.7B at 4,096, per decoder layer)
  weight update (xccl)  0.87 s (NCCL broadcast of 14.19 GiB over network 200 Gb/s)
  step      198 s synchronous
  rollout produces 1.2× what training consumes; a synchronous step is their sum, and a GPU \
saves ≈ 13.7 s on training, 11 s on rollout, but the rollout cannot give up a node (8 GPUs): \
it has 8 GPUs and needs at least 8, so the split is the best on whole nodes; a faster step \
needs more GPUs (areal-alloc suggest --gpus N)
"""


def test_default_run_prints_the_plan_and_writes_nothing(tmp_path: Path, cli: Cli) -> None:
    done = cli()
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout == DEFAULT_PLAN
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("args", "lines"),
    [
        (
            ["experiment=moe_32"],
            [
                "allocation plan: 6 nodes × 8 GPUs = 48 GPUs",
                "  actor    megatron:(attn:d4p2t2c2|ffn:d2p2t4e2)  "
                "attn d4 p2 t2 c2 | ffn d2 p2 t4 e2  32     -          separate           32",
            ],
        ),
        (
            ["experiment=distill_teacher"],
            [
                "  teacher  vllm:d1t4  d1 t4  4      1 × 4      separate    4",
                "  node 0  R r R r T T T T",
            ],
        ),
        (
            [  # a value head (is_critic) with its own micro-batch budget, as the reference's
                # PPO examples write it (examples/math/gsm8k_ppo.yaml at AReaL cbff54d6)
                "cluster.n_nodes=3",
                "+critic.backend=fsdp:d4t2",
                "+critic.gradient_checkpointing=1",
                "+critic.is_critic=true",
                "+critic.mb_spec.max_tokens_per_mb=16384",
            ],
            [
                "  critic   fsdp:d4t2    d4 t2  8      -          separate           8",
                "  node 2  C C C C C C C C",
            ],
        ),
        (
            ["cluster.n_gpus_per_node=0"],
            [
                "allocation plan: CPU-only run (cluster.n_gpus_per_node=0): no GPU capacity check",
                "total: 16 GPUs of layout (not checked: CPU-only run)",
            ],
        ),
    ],
)
def test_overrides_and_experiments(
    tmp_path: Path, args: list[str], lines: list[str], main_cli: MainCli
) -> None:
    done = main_cli(*args)
    assert done.returncode == 0, done.stderr
    for line in lines:
        assert line in done.stdout.splitlines()


@pytest.mark.parametrize(
    ("args", "stderr"),
    [
        (
            ["actor.backend=fsdp:d4p2"],
            "areal-alloc: actor.backend='fsdp:d4p2': FSDP backend only supports "
            "data/tensor/context parallelism (d, t, c), got pipeline parallelism (p2); "
            "use megatron or archon for p\n    fsdp:d4p2\n           ^\n",
        ),
        (
            ["rollout.backend=sglang:d1t12", "cluster.n_nodes=3"],
            "areal-alloc: rollout.backend='sglang:d1t12': one sglang instance spans t12·p1 = 12 "
            "GPUs, more than cluster.n_gpus_per_node=8 and not whole nodes (12 % 8 = 4); a "
            "server wider than a node takes whole nodes: use 8 or 16 GPUs per instance\n",
        ),
        (
            ["+allocation_mode=vllm:d2t4+megatron:d2p2t1"],
            "areal-alloc: allocation_mode='vllm:d2t4+megatron:d2p2t1' is deprecated: the "
            "single-controller scheduler ignores it and only the legacy SPMD launchers "
            "(areal.infra.launcher.local, ray, slurm) still read it; remove it and give each "
            "engine its own backend field: "
            "++rollout.backend=vllm:d2t4 ++actor.backend=megatron:d2p2\n",
        ),
    ],
)
def test_bad_overrides(tmp_path: Path, args: list[str], stderr: str, main_cli: MainCli) -> None:
    done = main_cli(*args)
    assert (done.returncode, done.stdout, done.stderr) == (1, "", stderr)


def test_json_output(tmp_path: Path, main_cli: MainCli) -> None:
    done = main_cli("output=json")
    assert done.returncode == 0, done.stderr
    plan = json.loads(done.stdout)
    assert plan["total_gpus"] == 16
    assert [p["key"] for p in plan["placements"]] == ["rollout", "actor"]
    assert plan["placements"][1]["shared_with"] == ["ref"]
    assert plan["placements"][1]["gpu_ranges"][0] == {
        "start": 8,
        "stop": 16,
        "first_node": 1,
        "last_node": 1,
    }


def test_bad_sweep_launches_nothing(tmp_path: Path, main_cli: MainCli) -> None:
    done = main_cli("-m", "actor.backend=fsdp:d4t2,fsdp:d8t2")
    assert done.returncode == 1
    assert "allocation plan" not in done.stdout
    assert done.stderr.splitlines()[0].startswith(
        "areal-alloc: job 1 [actor.backend=fsdp:d8t2]: the engines need 24 GPUs"
    )


def test_sweep_over_a_config_group(tmp_path: Path, main_cli: MainCli) -> None:
    done = main_cli("-m", "experiment=grpo_1x8,grpo_2x8", "actor.backend=fsdp:d8")
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr.splitlines() == [
        "areal-alloc: job 0 [experiment=grpo_1x8 actor.backend=fsdp:d8]: the engines need 12 "
        "GPUs but the cluster has cluster.n_nodes=1 × cluster.n_gpus_per_node=8 = 8: rollout "
        "sglang:d2t2 4 + actor fsdp:d8 8 = 12",
        "areal-alloc: 1 of 2 sweep jobs are invalid; nothing was launched (set "
        "hydra.callbacks.areal_alloc.on_invalid=skip to run the valid ones)",
    ]


def test_sweep_over_quoted_hybrid_layouts(main_cli: MainCli) -> None:
    done = main_cli(
        "-m",
        "actor.backend='megatron:(attn:d4p2t2c2|ffn:d2p2t4e2)',"
        "'megatron:(attn:d4p2t2c2|ffn:d2p2t4e3)'",
        "experiment=moe_32",
    )
    assert done.returncode == 1
    assert (
        "World size of attn and ffn must be identical: attn d4·t2·p2·c2 = 32 ≠ ffn "
        "d2·e3·t4·p2 = 48" in done.stderr.splitlines()[0]
    )


def test_explain(tmp_path: Path, main_cli: MainCli) -> None:
    done = main_cli("explain", "megatron:(attn:d4p2t2c2|ffn:d2p2t4e2)")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[:6] == [
        "megatron:(attn:d4p2t2c2|ffn:d2p2t4e2)  (megatron, training)",
        "",
        "  part  d  p  t  c  e  GPUs",
        "  attn  4  2  2  2  -  32",
        "  ffn   2  2  4  -  2  32",
        "",
    ]
    assert "  tp         2     16     [0, 1] [2, 3] [4, 5] … (13 more)" in lines
    assert "  etp        4     8      [0, 1, 2, 3] [4, 5, 6, 7] [8, 9, 10, 11] … (5 more)" in lines


def test_explain_json_has_every_group(tmp_path: Path, main_cli: MainCli) -> None:
    done = main_cli("explain", "megatron:d2p2t2", "--json")
    data = json.loads(done.stdout)
    assert data["world_size"] == 8
    assert data["rank_groups"]["pp"] == [[0, 4], [1, 5], [2, 6], [3, 7]]


def test_migrate(tmp_path: Path, main_cli: MainCli) -> None:
    done = main_cli("migrate", "sglang[rollout]:d2+fsdp[actor]:d4|fsdp[critic]:d4")
    assert done.returncode == 0, done.stderr
    assert done.stdout == (
        "# allocation_mode: sglang[rollout]:d2+fsdp[actor]:d4|fsdp[critic]:d4\n"
        "# becomes, in the experiment YAML:\n"
        "rollout:\n  backend: sglang:d2\n"
        "actor:\n  backend: fsdp:d4\n"
        "critic:\n  backend: fsdp:d4\n  scheduling_strategy:\n    type: colocation\n"
        "    target: actor\n"
        "# or on the command line:\n"
        "++rollout.backend=sglang:d2 ++actor.backend=fsdp:d4 ++critic.backend=fsdp:d4 "
        "++critic.scheduling_strategy.type=colocation ++critic.scheduling_strategy.target=actor\n"
    )


def test_layouts(tmp_path: Path, main_cli: MainCli) -> None:
    done = main_cli("layouts", "fsdp", "8")
    assert done.stdout.split() == [
        "fsdp:d8",
        "fsdp:d4t2",
        "fsdp:d4c2",
        "fsdp:d2t4",
        "fsdp:d2t2c2",
        "fsdp:d2c4",
        "fsdp:d1t8",
        "fsdp:d1t4c2",
        "fsdp:d1t2c4",
        "fsdp:d1c8",
    ]
    sweep = main_cli("layouts", "megatron", "8", "--max-tp", "2", "--max-cp", "1", "--sweep")
    assert (
        sweep.stdout == "megatron:d8,megatron:d4t2,megatron:d4p2,megatron:d2p2t2,"
        "megatron:d2p4,megatron:d1p4t2,megatron:d1p8\n"
    )


def test_layouts_feed_a_sweep(tmp_path: Path, main_cli: MainCli) -> None:
    # the app's model (28 heads) takes no t8: --model drops the layout the run would refuse
    model = "Qwen/Qwen2.5-7B-Instruct"
    values = main_cli("layouts", "fsdp", "8", "--max-cp", "1", "--model", model, "--sweep").stdout
    assert values.strip() == "fsdp:d8,fsdp:d4t2,fsdp:d2t4"
    done = main_cli("-m", f"actor.backend={values.strip()}", "rollout.backend=sglang:d2t4")
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("allocation plan:") == 3


def test_layouts_with_a_model_config(tmp_path: Path, main_cli: MainCli) -> None:
    (tmp_path / "config.json").write_text(
        json.dumps({"num_hidden_layers": 6, "num_attention_heads": 6, "num_key_value_heads": 2})
    )
    done = main_cli("layouts", "megatron", "4", "--model-config", str(tmp_path), "--sweep")
    # heads 6 and kv heads 2 allow t1, t2; the reference's Megatron engine splits 6 layers
    # unevenly over p1, p2 and p4 (areal/engine/megatron_utils/pipeline_parallel.py)
    assert (
        done.stdout == "megatron:d4,megatron:d2t2,megatron:d2p2,megatron:d2c2,megatron:d1p2t2,"
        "megatron:d1p4,megatron:d1t2c2,megatron:d1p2c2,megatron:d1c4\n"
    )


def test_check_an_existing_experiment_file(tmp_path: Path, main_cli: MainCli, data: Path) -> None:
    done = main_cli("check", str(data / "real_grpo.yaml"))
    assert done.returncode == 0, done.stderr
    assert (
        "  ref      fsdp:d8      d8     8      -          separate    0     inactive: "
        "actor.kl_ctl=0.0, so the run creates no reference model" in done.stdout.splitlines()
    )
    as_json = json.loads(main_cli("check", str(data / "real_grpo.yaml"), "--json").stdout)
    assert as_json["total_gpus"] == 16
    bad = main_cli("check", str(data / "real_grpo.yaml"), "actor.backend=fsdp:d16")
    assert bad.returncode == 1
    assert bad.stderr == (
        "areal-alloc check: the engines need 24 GPUs but the cluster has cluster.n_nodes=2 × "
        "cluster.n_gpus_per_node=8 = 16: rollout sglang:d4t2 8 + actor fsdp:d16 16 = 24\n"
    )


@pytest.mark.parametrize(
    ("args", "stderr"),
    [
        (["explain", "fsdp:d4p2"], "areal-alloc explain: FSDP backend only supports"),
        (["migrate", "sglang:d4+"], "areal-alloc migrate: unexpected end of input"),
        (["layouts", "fdsp", "8"], "areal-alloc layouts: unknown backend 'fdsp'; did you mean"),
        (
            ["check", "missing.yaml"],
            "areal-alloc check: experiment file 'missing.yaml' does not exist",
        ),
    ],
)
def test_command_errors(tmp_path: Path, args: list[str], stderr: str, main_cli: MainCli) -> None:
    done = main_cli(*args)
    assert done.returncode == 1
    assert done.stderr.startswith(stderr)
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("command", ["explain", "migrate", "layouts", "check"])
def test_every_command_has_help(tmp_path: Path, command: str, main_cli: MainCli) -> None:
    done = main_cli(command, "--help")
    assert done.returncode == 0
    assert done.stdout.startswith(f"usage: areal-alloc {command}")


def test_app_help_lists_the_commands(tmp_path: Path, main_cli: MainCli) -> None:
    done = main_cli("--help")
    assert done.returncode == 0
    assert "areal-alloc explain SPEC" in done.stdout
    assert "experiment: distill_teacher, grpo_1x8, grpo_2x8, moe_32, ppo_critic" in done.stdout


def test_explain_says_why_megatron_core_refuses_an_order(main_cli: MainCli) -> None:
    done = main_cli("explain", "megatron:d8t2p2", "--order", "tp-cp-ep-pp-dp")
    assert done.returncode == 1
    assert done.stdout.splitlines()[-1] == (
        "rank groups: megatron-core refuses this layout in order tp-cp-ep-pp-dp"
    )
    assert done.stderr == (
        "areal-alloc explain: order 'tp-cp-ep-pp-dp' does not end with pp, so Megatron needs "
        "the same data-parallel size for attention and experts: dp 8 ≠ edp 16 "
        "(world 32 / p2·etp1·e1)\n"
    )
    bad = main_cli("explain", "megatron:d8t2p2", "--order", "tp-xx")
    assert bad.returncode == 1
    assert bad.stdout == ""
    assert bad.stderr.startswith("areal-alloc explain: order 'tp-xx' is not allowed")


@pytest.mark.parametrize(
    ("cluster", "first"),
    [
        ("{n_nodes: 1, n_gpus_per_node: 1}", "one.yaml: 1 node × 1 GPU = 1 GPU"),
        ("{n_nodes: 2, n_gpus_per_node: 1}", "one.yaml: 2 nodes × 1 GPU = 2 GPUs"),
        ("{n_nodes: 1, n_gpus_per_node: 8}", "one.yaml: 1 node × 8 GPUs = 8 GPUs"),
    ],
)
def test_the_plans_first_line_counts_in_words(
    tmp_path: Path, main_cli: MainCli, cluster: str, first: str
) -> None:
    (tmp_path / "one.yaml").write_text(f"cluster: {cluster}\nactor: {{backend: 'fsdp:d1'}}\n")
    ran = main_cli("check", "one.yaml")
    assert ran.returncode == 0, ran
    assert ran.stdout.splitlines()[0] == first


def test_explain_counts_one_gpu_in_words(main_cli: MainCli) -> None:
    ran = main_cli("explain", "fsdp:d1")
    assert ran.returncode == 0, ran
    assert "world size: d1·t1·p1·c1 = 1 GPU\n" in ran.stdout
    served = main_cli("explain", "sglang:d2")
    assert "2 server instance(s) of t1·p1 = 1 GPU each" in served.stdout
