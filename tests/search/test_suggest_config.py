"""``suggest --config``: proposals with the config's own execution settings, so that the
proposal of the config's own split has the figures of the plan's pace (``current``)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from areal_alloc.model import ModelAllocation
from tests.conftest import MainCli

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = [
    "conf/app/experiment/grpo_2x8.yaml",  # mb 16,384 tokens, gradient checkpointing, a ref
    "tests/data/real_grpo.yaml",  # mb 10,240, no checkpointing, mem_fraction 0.8, async
    "tests/data/reference/math__gsm8k_grpo.yaml",
    "tests/data/reference/math__gsm8k_grpo_megatron.yaml",
    "tests/data/reference/math__gsm8k_ppo.yaml",  # a critic
]
FIGURES = ("generate_seconds", "train_seconds", "step_seconds")
#: real_grpo.yaml without actor.mb_spec.max_tokens_per_mb: each data-parallel rank's whole
#: share of the step's 128 sequences of 1,024 + 1,024 tokens is one micro-batch
WHOLE_BATCH = (
    "actor.mb_spec.max_tokens_per_mb=null",
    "actor.gradient_checkpointing=true",
    "train_dataset.batch_size=32",
    "cluster.n_nodes=4",
)


def _suggest(main_cli: MainCli, *args: str) -> Any:
    done = main_cli("suggest", "--gpu", "H100-80GB", "--json", *args)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


#: real_grpo.yaml with gconfig.max_tokens 1,536: a completion after a 1,024-token prompt is
#: at most 512 tokens (remote_inf_engine.py), in the plan's pace and the proposals alike
CAPPED = ("+gconfig.max_tokens=1536",)


@pytest.mark.parametrize(
    ("path", "overrides"),
    [*((path, ()) for path in CONFIGS), (CONFIGS[1], WHOLE_BATCH), (CONFIGS[1], CAPPED)],
)
def test_the_proposal_of_the_configs_own_split_has_the_plans_figures(
    main_cli: MainCli, path: str, overrides: tuple[str, ...]
) -> None:
    config = str(ROOT / path)
    best = _suggest(main_cli, "--config", config, *overrides, "--top", "1")["proposals"][0]
    # the config with that split: the plan's pace of it is `current`, and the search
    # proposes the same split again, estimated by the same functions
    found = _suggest(main_cli, "--config", config, *overrides, *best["overrides"], "--top", "3")
    specs = (best["rollout"]["backend"], best["actor"]["backend"])
    same = [
        p for p in found["proposals"] if (p["rollout"]["backend"], p["actor"]["backend"]) == specs
    ]
    assert same, (specs, [p["overrides"] for p in found["proposals"]])
    current = found["current"]
    assert current is not None
    assert same[0]["mode"] == current["mode"]
    assert {k: same[0][k] for k in FIGURES} == pytest.approx(
        {k: current[k] for k in FIGURES}, rel=1e-9
    )


def _actor_terms(proposal: Any) -> dict[str, str]:
    found = proposal["actor"]
    terms = {t["name"]: t["formula"] for t in found["memory"]["terms"]}
    terms.update({t["name"]: t["formula"] for t in found["speed"]["terms"]})
    return terms


def test_proposals_read_the_configs_micro_batch_and_recomputation(main_cli: MainCli) -> None:
    """real_grpo.yaml's actor: 10,240 tokens per micro-batch, no gradient checkpointing
    (suggest's own defaults are 16,384 and full); a flag given still wins."""
    config = str(ROOT / CONFIGS[1])
    own = _actor_terms(_suggest(main_cli, "--config", config, "--top", "1")["proposals"][0])
    assert own["activations"].startswith("10,240 tokens/micro-batch")
    assert "recomputation" not in own["compute"]
    flagged = _actor_terms(
        _suggest(
            main_cli, "--config", config, "--tokens", "4096", "--recompute", "full", "--top", "1"
        )["proposals"][0]
    )
    assert flagged["activations"].startswith("4,096 tokens/micro-batch")
    assert "full recomputation" in flagged["compute"]


def test_without_a_micro_batch_budget_each_layout_has_its_ranks_whole_share(
    main_cli: MainCli,
) -> None:
    """The reference packs each rank's share into one micro-batch when max_tokens_per_mb
    is unset: 128 sequences / d × 2,048 tokens, whatever d the proposal has."""
    config = str(ROOT / CONFIGS[1])
    proposals = _suggest(main_cli, "--config", config, *WHOLE_BATCH, "--top", "3")["proposals"]
    ranks = set()
    for p in proposals:
        parallel = ModelAllocation.from_str(p["actor"]["backend"]).parallel
        ranks.add(parallel.dp_size)
        tokens = math.ceil(128 / parallel.dp_size) * 2048  # per rank; shown per c rank
        shown = f"{math.ceil(tokens / parallel.cp_size):,} tokens/micro-batch"
        assert _actor_terms(p)["activations"].startswith(shown), p["actor"]["backend"]
    assert len(ranks) > 1  # layouts of different d, each with its own micro-batch


def test_nothing_fits_names_the_configs_own_settings(main_cli: MainCli) -> None:
    config = str(ROOT / CONFIGS[1])
    args = ("suggest", "--config", config, "actor.mb_spec.max_tokens_per_mb=null")
    done = main_cli(*args, "--gpu", "H100-80GB")
    assert (done.returncode, done.stderr) == (
        1,
        "areal-alloc suggest: no split of 16 H100-80GB GPUs fits Qwen2.5-1.5B-Instruct: the "
        "rollout or the trainer does not fit on any share; try more GPUs, --recompute full or "
        "fewer --tokens; the actor's micro-batch of each rank's whole share of the step "
        "(max_tokens_per_mb unset) and recomputation none are the config's (actor.mb_spec, "
        "gradient_checkpointing): --tokens and --recompute override them\n",
    )


#: math__gsm8k_grpo.yaml with its rollout colocated onto the actor (as the reference
#: requires then: offload on, weights through disk)
COLOCATED = (
    "rollout.backend=sglang:d8",
    "actor.backend=fsdp:d8",
    "++rollout.scheduling_strategy.type=colocation",
    "++rollout.scheduling_strategy.target=actor",
    "++enable_offload=true",
    "actor.weight_update_mode=disk",
)


def test_a_colocated_configs_proposals_are_separate_splits_in_its_offpolicyness_mode(
    main_cli: MainCli,
) -> None:
    # the plan's pace of the config is colocated; suggest proposes separate splits, which
    # run in the mode its η gives (0 here: synchronous), never "take turns on the same GPUs"
    config = str(ROOT / "tests/data/reference/math__gsm8k_grpo.yaml")
    found = _suggest(main_cli, "--config", config, *COLOCATED, "--top", "2")
    assert found["current"]["mode"] == "colocated"
    for proposal in found["proposals"]:
        assert proposal["mode"] == "synchronous"
        assert "colocated" not in proposal["advice"]
        assert proposal["step_seconds"] == pytest.approx(
            proposal["generate_seconds"] + proposal["train_seconds"] + proposal["update_seconds"]
        )


def test_a_tokens_flag_sets_every_micro_batch_of_a_config_without_a_budget(
    main_cli: MainCli,
) -> None:
    """--tokens over a config without max_tokens_per_mb is that budget written: the update's
    and the forwards' micro-batches both (the forward phase included)."""
    config = str(ROOT / CONFIGS[1])
    unset = (*WHOLE_BATCH, "actor.ppo_n_minibatches=4")
    flagged = _suggest(main_cli, "--config", config, *unset, "--tokens", "4096", "--top", "1")
    written = (*unset[1:], "actor.mb_spec.max_tokens_per_mb=4096")
    budget = _suggest(main_cli, "--config", config, *written, "--top", "1")
    assert flagged["proposals"][0]["actor"]["backend"] == budget["proposals"][0]["actor"]["backend"]
    assert flagged["proposals"][0]["actor"]["memory"] == budget["proposals"][0]["actor"]["memory"]


@pytest.mark.parametrize(
    ("critic_n_mbs", "dynamic_bs", "actor"),
    [
        (1, False, "megatron:d8"),  # 32 sequences over d8: 4 a rank ≥ 2 minibatches × 1
        (4, False, "megatron:d4t2"),  # 4 < 2 × 4: check refuses d8, so suggest skips it
        (4, True, "megatron:d8"),  # dynamic_bs: the rule is not checked
    ],
)
def test_each_trainer_on_the_actors_layout_needs_its_own_sequences(
    critic_n_mbs: int, dynamic_bs: bool, actor: str
) -> None:
    """The critic on the actor's layout splits a rank's sequences into its own
    ppo_n_minibatches, each packed into its own mb_spec.n_mbs (the start-up rule
    minibatches_fill_their_micro_batches, one check: model_shape.minibatch_micro_batches)."""
    from areal_alloc.catalogue import find_gpu, find_model
    from areal_alloc.estimate.execution import TrainingSettings
    from areal_alloc.estimate.system import Hardware
    from areal_alloc.search.split import RunShape, suggest

    gpu = find_gpu("H100-80GB")
    shape = RunShape.of(
        batch=32,
        prompt_len=1024,
        gen_len=1024,
        critic=True,
        minibatches=1,
        critic_minibatches=2,
        dynamic_bs=dynamic_bs,
    )
    trains = TrainingSettings(tokens_per_micro_batch=8192, recompute="full")
    (best,) = suggest(
        find_model("Qwen3-0.6B"),
        16,
        gpu.memory_bytes,
        Hardware.from_gpu(gpu, 8),
        shape,
        training=trains,
        critic_training=TrainingSettings(
            tokens_per_micro_batch=8192, recompute="full", n_mbs=critic_n_mbs
        ),
        top=1,
    )
    assert best.actor.spec == actor


def test_a_prompt_with_no_room_under_max_tokens_is_one_line(main_cli: MainCli) -> None:
    # remote_inf_engine.py: min(max_tokens − prompt, max_new_tokens) ≤ 0 raises
    config = str(ROOT / CONFIGS[1])
    done = main_cli(
        "suggest",
        "--gpu",
        "H100-80GB",
        "--config",
        config,
        "+gconfig.max_tokens=1536",
        "--prompt-len",
        "4096",
    )
    assert done.returncode == 1
    assert done.stderr.strip() == (
        "areal-alloc suggest: --prompt-len 4,096 is not below gconfig.max_tokens 1,536 (prompt "
        "and completion together): such a prompt leaves no token to generate "
        "(areal/infra/remote_inf_engine.py raises); give a shorter --prompt-len or raise "
        "gconfig.max_tokens"
    )
    # a prompt that leaves room: capped at 1,536 − 1,400 = 136 new tokens
    ok = main_cli(
        "suggest",
        "--gpu",
        "H100-80GB",
        "--config",
        config,
        "+gconfig.max_tokens=1536",
        "--prompt-len",
        "1400",
        "--top",
        "1",
    )
    assert ok.returncode == 0, ok.stderr
    assert "sequences of 1,400 + 136 tokens per step" in ok.stdout


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        # the reference's default gconfig.max_tokens 32,768 (GenerationHyperparameters) caps
        # --gen-len after the prompt, as with a config
        (["--prompt-len", "8192", "--gen-len", "30000"], "sequences of 8,192 + 24,576 tokens"),
        (["--prompt-len", "8192", "--gen-len", "20000"], "sequences of 8,192 + 20,000 tokens"),
        ([], "sequences of 1,024 + 16,384 tokens"),  # the defaults leave room
    ],
)
def test_plain_suggest_caps_the_generation_at_the_references_max_tokens(
    main_cli: MainCli, flags: list[str], expected: str
) -> None:
    done = main_cli(
        "suggest",
        "--model",
        "Qwen2.5-1.5B",
        "--gpus",
        "16",
        "--gpu",
        "H100-80GB",
        "--top",
        "1",
        *flags,
    )
    assert done.returncode == 0, done.stderr
    assert expected in done.stdout
    capped = "# assumed: the reference's default gconfig.max_tokens 32,768 caps the generation"
    assert (capped in done.stdout) == ("30000" in flags)


def test_plain_suggest_refuses_a_prompt_with_no_room_under_the_default_cap(
    main_cli: MainCli,
) -> None:
    done = main_cli(
        "suggest",
        "--model",
        "Qwen2.5-1.5B",
        "--gpus",
        "16",
        "--gpu",
        "H100-80GB",
        "--prompt-len",
        "32768",
    )
    assert done.returncode == 1
    assert done.stderr.strip() == (
        "areal-alloc suggest: --prompt-len 32,768 is not below the reference's default "
        "gconfig.max_tokens 32,768 (prompt and completion together): such a prompt leaves no "
        "token to generate (areal/infra/remote_inf_engine.py raises); give a shorter "
        "--prompt-len or pass --config with a larger gconfig.max_tokens"
    )
