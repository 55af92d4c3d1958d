"""Memory as the reference runs it: LoRA, a critic's value head, offload, micro-batches, loading.

Every rule is read from the reference (github.com/areal-project/AReaL, main-branch
snapshot cbff54d645d2cd8ee1f1c358a82f3f473588433d); each test names the file. The
expected bytes are written out from the formula and the model's config numbers:

Qwen2.5-7B (config.json): hidden 3584, 28 layers, 28 heads of 128 (q width 3584),
4 kv heads (kv width 512), intermediate 18944, vocab 152064, untied, q/k/v bias.
  embedding = output = 152064·3584 = 544,997,376
  one layer = attention 2·3584·3584 + 2·3584·512 + bias (3584 + 2·512) = 29,364,736
              + MLP 3·3584·18944 = 203,685,888 + norms 2·3584 = 7,168 → 233,057,792
  total = 2·544,997,376 + 28·233,057,792 + final norm 3584 = 7,615,616,512
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from areal_alloc.catalogue import find_model
from areal_alloc.cli import main
from areal_alloc.defaults import REFERENCE_COMMIT, REFERENCE_DEFAULTS
from areal_alloc.errors import AllocationValidationError
from areal_alloc.estimate.activations import lora_parameters
from areal_alloc.estimate.engines import estimate_allocation
from areal_alloc.estimate.execution import GIB, TrainingSettings
from areal_alloc.model import ModelAllocation
from areal_alloc.plan import plan_config

#: these experiments name the GPU or the model with areal-alloc's own keys (cluster.gpu,
#: model_shape), which the reference's loader refuses: the strict-key check is off here
#: (tests/cli/test_reference_keys.py tests it)
pytestmark = pytest.mark.usefixtures("reference_off")


QWEN7B = find_model("Qwen2.5-7B")
EMBEDDING = 152064 * 3584
LAYER = (2 * 3584 * 3584 + 2 * 3584 * 512 + 3584 + 2 * 512) + 3 * 3584 * 18944 + 2 * 3584
TOTAL = 2 * EMBEDDING + 28 * LAYER + 3584


def test_the_model_counts_are_the_ones_written_out() -> None:
    assert (EMBEDDING, LAYER, TOTAL) == (544_997_376, 233_057_792, 7_615_616_512)
    assert QWEN7B.parameters.total == TOTAL


# --- LoRA ------------------------------------------------------------------------------

# r·(in + out) per adapted linear layer, rank 32 (TrainEngineConfig.lora_rank default,
# areal/api/cli_args.py line 1380).
# FSDP, peft all-linear (areal/engine/fsdp_engine.py _apply_peft_wrapper):
#   q 32·(3584+3584) + k 32·(3584+512) + v 32·(3584+512) + o 32·(3584+3584)
#   + gate, up, down 3 × 32·(3584+18944)                       = 2,883,584 per layer
# Megatron, megatron-bridge (areal/engine/megatron_engine.py _apply_megatron_bridge_lora):
#   linear_qkv 32·(3584 + (3584+2·512)) + linear_proj 32·(3584+3584)
#   + linear_fc1 32·(3584 + 2·18944) + linear_fc2 32·(18944+3584) = 2,539,520 per layer
FSDP_LORA_LAYER = 2 * 32 * 7168 + 2 * 32 * 4096 + 3 * 32 * 22528
MEGATRON_LORA_LAYER = 32 * (3584 + 4608) + 32 * 7168 + 32 * 41472 + 32 * 22528


@pytest.mark.parametrize(
    ("megatron", "targets", "per_layer"),
    [
        (False, (), FSDP_LORA_LAYER),
        (False, ("all-linear",), FSDP_LORA_LAYER),
        (False, ("q_proj", "v_proj"), 32 * 7168 + 32 * 4096),
        (True, (), MEGATRON_LORA_LAYER),
        (True, ("linear_qkv",), 32 * (3584 + 4608)),
        # Hugging Face names on Megatron adapt the fused layer that holds them
        (True, ("q_proj",), 32 * (3584 + 4608)),
    ],
)
def test_lora_adapter_parameters(megatron: bool, targets: tuple[str, ...], per_layer: int) -> None:
    dense, _, experts, _ = lora_parameters(QWEN7B, megatron, 32, targets)
    assert (dense, experts) == (per_layer, 0)
    assert (FSDP_LORA_LAYER, MEGATRON_LORA_LAYER) == (2_883_584, 2_539_520)


def _train(spec: str, **settings: Any) -> dict[str, int]:
    base = {"tokens_per_micro_batch": 4096, "recompute": "full"}
    estimate = estimate_allocation(
        ModelAllocation.from_str(spec), QWEN7B, 80 * GIB, TrainingSettings(**{**base, **settings})
    )
    return {t.name: t.bytes for t in estimate.terms}


ADAPTERS = 28 * FSDP_LORA_LAYER  # 80,740,352
MEGATRON_ADAPTERS = 28 * MEGATRON_LORA_LAYER  # 71,106,560
# FSDP gathers the root (embedding + output) and two layers in bfloat16
GATHERED = 2 * EMBEDDING + 2 * LAYER


@pytest.mark.parametrize(
    ("spec", "settings", "expected"),
    [
        # FSDP keeps the frozen base and the adapters in optimizer_dtype (float32, 4 B),
        # adapters' gradients 4 B and AdamW states 2 × 4 B; base: no gradient, no state
        (
            "fsdp:d1",
            {"lora_rank": 32, "memory_efficient_load": True},
            {
                "weights": (TOTAL + ADAPTERS) * 4 + GATHERED * 2,
                "gradients": ADAPTERS * 4,
                "optimizer": ADAPTERS * 8,
            },
        ),
        # Megatron: the base in bfloat16; adapters' float32 main grads and
        # 12 B of main params + Adam states over dp2
        (
            "megatron:d2",
            {"lora_rank": 32},
            {
                "weights": (TOTAL + MEGATRON_ADAPTERS) * 2,
                "gradients": MEGATRON_ADAPTERS * 4,
                "optimizer": MEGATRON_ADAPTERS * 12 // 2,
            },
        ),
        # the same runs without LoRA: every parameter has a gradient and states
        (
            "fsdp:d1",
            {"memory_efficient_load": True},
            {"weights": TOTAL * 4 + GATHERED * 2, "gradients": TOTAL * 4, "optimizer": TOTAL * 8},
        ),
    ],
)
def test_lora_trains_only_the_adapters(
    spec: str, settings: dict[str, Any], expected: dict[str, int]
) -> None:
    terms = _train(spec, **settings)
    assert {k: terms[k] for k in expected} == expected


def test_lora_on_one_a100_80gb_is_not_refused_as_full_fine_tuning() -> None:
    # issue 16: Qwen2.5-7B fsdp:d1 with use_lora was refused for its 56.7 GiB optimizer
    cfg = {
        "cluster": {"n_nodes": 1, "n_gpus_per_node": 1, "gpu": "A100-80GB"},
        "actor": {
            "backend": "fsdp:d1",
            "path": "Qwen/Qwen2.5-7B",
            "use_lora": True,
            "lora_rank": 32,
            "gradient_checkpointing": True,
            "mb_spec": {"max_tokens_per_mb": 8192},
        },
    }
    memory = plan_config(cfg)["actor"].memory
    assert memory is not None
    assert memory.fits is True
    assert memory.term("optimizer") == ADAPTERS * 8
    cfg["actor"]["use_lora"] = False
    with pytest.raises(AllocationValidationError, match=r"largest term optimizer 56\.7 GiB"):
        plan_config(cfg)


# --- a critic's value head ---------------------------------------------------------------

# FSDP builds AutoModelForTokenClassification(num_labels=1) for is_critic
# (areal/engine/fsdp_engine.py _create_llm_actor_or_critic): no vocabulary head,
# a value head of h; Megatron builds a one-output value head (megatron_engine.py).
CRITIC = EMBEDDING + 3584 + 28 * LAYER + 3584  # 7,070,622,720


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        (
            "fsdp:d8",
            {
                "weights": CRITIC // 8 * 4 + (EMBEDDING + 3584 + 2 * LAYER) * 2,
                "gradients": CRITIC // 8 * 4,
                "optimizer": CRITIC // 8 * 8,
            },
        ),
        (
            "megatron:d8",
            {"weights": CRITIC * 2, "gradients": CRITIC * 4, "optimizer": CRITIC * 12 // 8},
        ),
    ],
)
def test_a_critic_has_a_value_head_and_no_logits(spec: str, expected: dict[str, int]) -> None:
    assert CRITIC == 7_070_622_720
    terms = _train(spec, critic=True, memory_efficient_load=True)
    assert {k: terms[k] for k in expected} == expected
    assert "logits" not in terms
    # the actor's logits (execution.LOGITS "areal"): FSDP's bf16 logits, their gradient and
    # one chunk's slice gradient, 6 B; Megatron's float32 ones (Float16Module), their
    # gradient and one chunk's slice gradient, 12 B
    per_logit = 12 if spec.startswith("megatron") else 6
    assert _train(spec, memory_efficient_load=True)["logits"] == 4096 * 152064 * per_logit


# --- max_tokens_per_mb unset: the whole local batch ---------------------------------------


def _grpo(**actor: Any) -> dict[str, Any]:
    return {
        "cluster": {"n_nodes": 2, "n_gpus_per_node": 8},
        "rollout": {"backend": "sglang:d8"},
        "actor": {"backend": "fsdp:d8", "path": "Qwen/Qwen2.5-7B", **actor},
        "train_dataset": {"batch_size": 256, "max_length": 1024},
        "gconfig": {"n_samples": 4, "max_new_tokens": 1024},
    }


# areal/utils/data.py (lines 697, 718-721): max_tokens_per_mb None → 10**12, packed by
# count into mb_spec.n_mbs (default 1) groups: 256 × 4 / d8 = 128 sequences × 2048 tokens;
# the update packs one of ppo_n_minibatches (default 4) minibatches at a time
# (areal/trainer/ppo/actor.py l.454-457): 32 sequences × 2,048 = 65,536 tokens
@pytest.mark.parametrize(
    ("cfg", "tokens", "note"),
    [
        (
            _grpo(),
            65_536,
            "actor.mb_spec.max_tokens_per_mb unset: the reference packs each data-parallel "
            "rank's whole batch into 1 micro-batch (areal/utils/data.py): "
            "train_dataset.batch_size 256 × gconfig.n_samples 4 / d8 = 128 sequences × "
            "(train_dataset.max_length 1,024 + gconfig.max_new_tokens 1,024) = 262,144 tokens "
            "per micro-batch; its update packs one of its 4 minibatches at a time: 65,536 "
            "tokens per micro-batch",
        ),
        (
            _grpo(mb_spec={"n_mbs": 4}),
            16_384,
            "actor.mb_spec.max_tokens_per_mb unset: the reference packs each data-parallel "
            "rank's whole batch into 4 micro-batches (areal/utils/data.py): "
            "train_dataset.batch_size 256 × gconfig.n_samples 4 / d8 = 128 sequences × "
            "(train_dataset.max_length 1,024 + gconfig.max_new_tokens 1,024) / mb_spec.n_mbs 4 "
            "= 65,536 tokens per micro-batch; its update packs one of its 4 minibatches at a "
            "time: 16,384 tokens per micro-batch",
        ),
        (
            # the reference's defaults: batch 1, n_samples 1, max_new_tokens 16384
            {"actor": {"backend": "fsdp:d8", "path": "Qwen/Qwen2.5-7B"}},
            17_408,
            "actor.mb_spec.max_tokens_per_mb unset: the reference packs each data-parallel "
            "rank's whole batch into 1 micro-batch (areal/utils/data.py): "
            "train_dataset.batch_size 1 × gconfig.n_samples 1 / d8 = 1 sequence × (a 1,024-token "
            "prompt (train_dataset.max_length unset) + gconfig.max_new_tokens 16,384) = 17,408 "
            "tokens per micro-batch",
        ),
    ],
)
def test_unset_max_tokens_per_mb_budgets_the_whole_local_batch(
    cfg: dict[str, Any], tokens: int, note: str
) -> None:
    plan = plan_config(cfg)
    assert note in plan.assumptions
    memory = plan["actor"].memory
    assert memory is not None
    assert memory.term("logits") == tokens * 152064 * 6  # memory.LOGITS "areal"


def test_the_forward_before_the_update_packs_the_whole_share() -> None:
    # compute_logp runs over the whole step (rl_trainer.py l.784-793): its micro-batch is
    # the rank's whole share, 128 sequences × 2,048 = 262,144 tokens, its bf16 logits 2 B
    # each; the update's backward the minibatch's 65,536 tokens at 6 B
    plan = plan_config(_grpo(recompute_logprob=True))
    memory = plan["actor"].memory
    assert memory is not None
    logits = {
        phase.name: next(t.bytes for t in phase.terms if t.name == "logits")
        for phase in memory.phases
        if phase.name in ("forward", "backward")
    }
    assert logits == {"forward": 262_144 * 152064 * 2, "backward": 65_536 * 152064 * 6}


# --- offload: each engine alone, or the resident sum ----------------------------------------

_COLOCATE = {"type": "colocation", "target": "actor"}


def _shared(**extra: Any) -> dict[str, Any]:
    cfg: dict[str, Any] = {
        "cluster": {"n_nodes": 1, "n_gpus_per_node": 8},
        "enable_offload": True,
        "actor": {
            "backend": "fsdp:d8",
            "path": "Qwen/Qwen2.5-7B",
            "weight_update_mode": "disk",
            "mb_spec": {"max_tokens_per_mb": 8192},
        },
    }
    for key, value in extra.items():
        cfg[key] = {**cfg.get(key, {}), **value}
    return cfg


def _critic(**extra: Any) -> dict[str, Any]:
    return {"backend": "fsdp:d8", "is_critic": True, "scheduling_strategy": _COLOCATE, **extra}


# areal/trainer/rl_trainer.py lines 155-171 (who is offloaded) and 686-856 (when each is
# onloaded): (config, engine, the engine whose resident bytes it carries or None)
@pytest.mark.parametrize(
    ("cfg", "engine", "carries"),
    [
        # actor ↔ rollout colocated: the reference offloads both, each runs alone
        (
            _shared(rollout={"backend": "sglang:d8", "scheduling_strategy": _COLOCATE}),
            "actor",
            None,
        ),
        (
            _shared(rollout={"backend": "sglang:d8", "scheduling_strategy": _COLOCATE}),
            "rollout",
            None,
        ),
        # colocated the other way round: the same
        (
            _shared(
                actor={"scheduling_strategy": {"type": "colocation", "target": "rollout"}},
                rollout={"backend": "sglang:d8"},
            ),
            "actor",
            None,
        ),
        # ref colocated with the actor, no offload: both stay, each carries the other
        (_shared(ref={"backend": "fsdp:d8", "scheduling_strategy": _COLOCATE}), "actor", "ref"),
        (_shared(ref={"backend": "fsdp:d8", "scheduling_strategy": _COLOCATE}), "ref", "actor"),
        # ref.offload: onloaded only for its forward pass; the actor still stays
        (
            _shared(ref={"backend": "fsdp:d8", "scheduling_strategy": _COLOCATE, "offload": True}),
            "actor",
            None,
        ),
        (
            _shared(ref={"backend": "fsdp:d8", "scheduling_strategy": _COLOCATE, "offload": True}),
            "ref",
            "actor",
        ),
        # actor.offload: off while ref runs (ref's own load phase aside: it loads while
        # the actor is still on the GPUs, see the next test)
        (
            _shared(
                actor={"offload": True},
                ref={
                    "backend": "fsdp:d8",
                    "scheduling_strategy": _COLOCATE,
                    "fsdp": {"memory_efficient_load": True},
                },
            ),
            "ref",
            None,
        ),
        # the critic stays from its values until after its update, so it is beside the
        # actor's update whatever critic.offload says, and the actor beside the critic's
        (_shared(critic=_critic(offload=True)), "actor", "critic"),
        (_shared(actor={"offload": True}, critic=_critic()), "critic", "actor"),
    ],
)
def test_offload_as_the_reference_schedules_it(
    cfg: dict[str, Any], engine: str, carries: str | None
) -> None:
    plan = plan_config(cfg)
    memory = plan[engine].memory
    assert memory is not None
    if carries is None:
        assert memory.term("colocated") == 0
    else:
        other = plan[carries].memory
        assert other is not None
        # an engine whose peak is its load phase finds the other's loaded weights beside
        # it (FSDP: no gradient or AdamW state yet), else its weights and states
        held = other.at_load if memory.term("load") else other.resident
        assert memory.term("colocated") == held > 0


def test_an_engine_loads_beside_the_engines_loaded_before_it() -> None:
    # areal/trainer/rl_trainer.py lines 311-335: actor, critic, ref, teacher load in
    # this order, all before the actor is offloaded and before any server starts. The
    # ref's peak is its load phase (Qwen2.5-7B in float32 on every GPU, 28.4 GiB),
    # beside the actor's sharded weights (FSDP: no gradient or AdamW state yet).
    plan = plan_config(
        _shared(
            actor={"offload": True},
            ref={"backend": "fsdp:d8", "scheduling_strategy": _COLOCATE},
        )
    )
    ref, actor = plan["ref"].memory, plan["actor"].memory
    assert ref is not None
    assert actor is not None
    assert ref.term("load") == TOTAL * 4
    assert ref.term("colocated") == actor.at_load == TOTAL // 8 * 4 + GATHERED * 2
    # the actor's peak is training (8,192 tokens), beside the ref's weights
    assert actor.term("load") == 0
    assert actor.term("colocated") == ref.resident == TOTAL // 8 * 4 + GATHERED * 2


def test_a_7b_actor_colocated_with_sglang_on_8_h20_fits_without_actor_offload() -> None:
    # issue 16: refused unless actor.offload: true; the reference offloads it anyway
    cfg = _shared(
        cluster={"gpu": "H20"},
        actor={"gradient_checkpointing": True},
        rollout={"backend": "sglang:d8", "scheduling_strategy": _COLOCATE},
    )
    plan = plan_config(cfg)
    for engine in ("actor", "rollout"):
        memory = plan[engine].memory
        assert memory is not None
        assert memory.fits is True


# --- FSDP's load phase --------------------------------------------------------------------

# areal/engine/fsdp_engine.py _create_device_model: without memory_efficient_load every
# rank builds the whole model on its GPU in optimizer_dtype (float32) before sharding.
# Qwen3-8B: 8,190,735,360 parameters (tests/estimate/test_memory.py) × 4 B = 32,762,941,440 B
# = 30.5 GiB, + the 4 GiB reserve = 34.5 GiB, over a 24 GiB RTX-4090.
LOAD_REFUSAL = (
    "ref.backend='fsdp:d8': needs about 34.5 GiB per GPU, over the 23.6 GiB of a RTX-4090; "
    "largest term load 30.5 GiB (8.19B params × 4 B (float32): every rank builds the whole "
    "model on its GPU before sharding (ref.fsdp.memory_efficient_load=false)); set "
    "ref.fsdp.memory_efficient_load=true (rank 0 then loads on the CPU and broadcasts after "
    "sharding)"
)


def test_fsdp_without_memory_efficient_load_peaks_while_loading() -> None:
    cfg: dict[str, Any] = {
        "cluster": {"n_nodes": 1, "n_gpus_per_node": 8, "gpu": "RTX-4090"},
        "ref": {"backend": "fsdp:d8", "path": "Qwen/Qwen3-8B"},
    }
    with pytest.raises(AllocationValidationError) as caught:
        plan_config(cfg)
    assert str(caught.value) == LOAD_REFUSAL
    cfg["ref"]["fsdp"] = {"memory_efficient_load": True}
    memory = plan_config(cfg)["ref"].memory
    assert memory is not None
    assert memory.term("load") == 0
    assert memory.fits is True
    del cfg["cluster"]["gpu"]
    del cfg["ref"]["fsdp"]
    loading = plan_config(cfg)["ref"].memory
    assert loading is not None
    assert loading.term("load") == 8_190_735_360 * 4


# --- refusals and what is not estimated ------------------------------------------------------


def test_a_refusal_names_every_engine_that_does_not_fit() -> None:
    cfg = {
        "cluster": {"n_nodes": 1, "n_gpus_per_node": 8, "gpu": "RTX-4090"},
        "actor": {"backend": "fsdp:d4", "path": "Qwen/Qwen3-8B"},
        "ref": {"backend": "fsdp:d4", "path": "Qwen/Qwen3-8B"},
    }
    with pytest.raises(AllocationValidationError) as caught:
        plan_config(cfg)
    message = str(caught.value)
    assert message.startswith("2 engines do not fit: (1) actor.backend='fsdp:d4': needs about ")
    assert " (2) ref.backend='fsdp:d4': needs about " in message
    assert "more)" not in message
    assert "\n" not in message


def test_a_model_not_found_is_said_even_with_quiet(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    experiment = tmp_path / "exp.yaml"
    experiment.write_text(
        "cluster: {n_nodes: 1, n_gpus_per_node: 8, gpu: H100-80GB}\n"
        "actor: {backend: 'fsdp:d8', path: /cluster/models/no-such-model}\n"
    )
    assert main(["check", "--quiet", str(experiment)]) == 0
    out, err = capsys.readouterr()
    assert out == ""
    assert err == (
        "areal-alloc check: actor not estimated: actor.path='/cluster/models/no-such-model': "
        "not found here (no local config.json, hub cache or catalogue entry)\n"
    )
    assert main(["check", str(experiment)]) == 0
    out, _ = capsys.readouterr()
    assert "  actor   not estimated  -     -           (model not found: see warning)" in out
    assert (
        "warning: actor not estimated: actor.path='/cluster/models/no-such-model': not found "
        "here (no local config.json, hub cache or catalogue entry)"
    ) in out.splitlines()


def test_preflight_says_what_is_not_estimated_even_with_quiet(tmp_path: Path, cli: Any) -> None:
    # a process: preflight replaces itself with the launch command (here `true`)
    (tmp_path / "exp.yaml").write_text(
        "actor: {backend: 'fsdp:d8', path: /cluster/models/no-such-model}\n"
    )
    done = cli("preflight", "--quiet", "--", "true", "--config", "exp.yaml")
    assert (done.returncode, done.stdout) == (0, "")
    assert done.stderr == (
        "areal-alloc preflight: actor not estimated: actor.path='/cluster/models/no-such-model'"
        ": not found here (no local config.json, hub cache or catalogue entry)\n"
    )


def test_the_defaults_table_cites_the_reference() -> None:
    assert REFERENCE_COMMIT == "cbff54d645d2cd8ee1f1c358a82f3f473588433d"
    for row in REFERENCE_DEFAULTS:
        assert row.source.startswith("areal/api/cli_args.py@cbff54d6 "), row


def test_the_app_follows_the_hooks_on_memory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # the built-in grpo_2x8 experiment does not fit a 24 GiB GPU (its FSDP load phase)
    monkeypatch.chdir(tmp_path)
    # the hook's GPU, and the experiment's own key (read last, by the hook and the app alike)
    gpu = ["hydra.callbacks.areal_alloc.gpu=RTX-4090", "+cluster.gpu=RTX-4090"]
    assert main(gpu) == 1
    _, err = capsys.readouterr()
    assert err.startswith(
        "areal-alloc: 2 engines do not fit a RTX-4090, from hydra.callbacks.areal_alloc.gpu: "
        "(1) actor.backend='fsdp:d4t2'"
    )
    assert main([*gpu, "hydra.callbacks.areal_alloc.on_memory=off"]) == 0
    out, err = capsys.readouterr()
    assert out.startswith("allocation plan: 2 nodes × 8 GPUs = 16 GPUs")
    assert "memory per GPU" not in out
    assert "do not fit" not in err


@settings(max_examples=60, deadline=None)
@given(
    spec=st.sampled_from(["fsdp:d1", "fsdp:d4t2", "megatron:d2p2", "megatron:d2t4"]),
    rank=st.integers(min_value=1, max_value=128),
)
def test_lora_adds_adapters_and_trains_only_them(spec: str, rank: int) -> None:
    # FSDP and Megatron apply use_lora; the archon engine reads no LoRA setting
    assert _train("archon:d4", lora_rank=rank) == _train("archon:d4")
    full = _train(spec, memory_efficient_load=True)
    lora = _train(spec, memory_efficient_load=True, lora_rank=rank)
    assert lora["weights"] > full["weights"]  # the frozen base is all there, plus adapters
    assert lora["gradients"] < full["gradients"] / 10
    assert lora["optimizer"] < full["optimizer"] / 10
    assert (lora["activations"], lora["logits"]) == (full["activations"], full["logits"])


@pytest.mark.parametrize("backend", ["megatron", "archon"])
def test_the_unset_budgets_note_counts_the_engines_micro_batches(backend: str) -> None:
    # p2: megatron 2·p = 4, archon p × 2 stages (its default schedule's) = 4 micro-batches of
    # 64 × 4 / d2 = 128 sequences × 2,048 / 4 minibatches = 65,536 tokens: 16,384 each
    cfg = {
        "cluster": {"n_nodes": 2, "n_gpus_per_node": 8},
        "rollout": {"backend": "sglang:d8"},
        "actor": {"backend": f"{backend}:d2p2t2", "path": "Qwen/Qwen3-8B"},
        "train_dataset": {"batch_size": 64, "max_length": 1024},
        "gconfig": {"n_samples": 4, "max_new_tokens": 1024},
    }
    note = next(a for a in plan_config(cfg).assumptions if "max_tokens_per_mb unset" in a)
    assert note.endswith(
        f"; at p2 the {backend} engine runs 4 micro-batches (model_shape.engine_micro_batches): "
        f"16,384 tokens each"
    )


def test_unset_budget_packs_into_the_micro_batches_the_megatron_engine_runs() -> None:
    # the Megatron engine at p2 runs at least 2·p = 4 micro-batches (megatron_engine.py
    # l.2705-2716), so mb_spec.n_mbs 1 packs as n_mbs 4 does: 64 × 4 / d2 = 128 sequences ×
    # 2,048 tokens / 4 minibatches / 4 = 16,384 tokens a micro-batch either way
    def cfg(**mb: int) -> dict[str, Any]:
        actor = {"backend": "megatron:d2p2t2", "path": "Qwen/Qwen3-8B"}
        return {
            "cluster": {"n_nodes": 2, "n_gpus_per_node": 8},
            "rollout": {"backend": "sglang:d8"},
            "actor": {**actor, "gradient_checkpointing": True, "mb_spec": mb},
            "train_dataset": {"batch_size": 64, "max_length": 1024},
            "gconfig": {"n_samples": 4, "max_new_tokens": 1024},
        }

    one, four = plan_config(cfg()), plan_config(cfg(n_mbs=4))
    assert one["actor"].memory == four["actor"].memory
    # a budget of the whole minibatch (32 sequences × 2,048 = 65,536) is balanced over the
    # same 4 micro-batches: 8 sequences, 16,384 tokens each, as the reference packs it
    budget = plan_config(cfg(max_tokens_per_mb=65536))
    assert budget["actor"].memory == one["actor"].memory
    assert (
        "actor.mb_spec.max_tokens_per_mb 65,536: the megatron engine balances each rank's "
        "65,536-token minibatch (at the longest sequences) over at least mb_spec.n_mbs and its "
        "own minimum of micro-batches (model_shape.engine_micro_batches): 16,384 tokens each"
    ) in budget.assumptions
    assert any(
        a.endswith(
            "at p2 the megatron engine runs 4 micro-batches "
            "(model_shape.engine_micro_batches): 16,384 tokens each"
        )
        for a in one.assumptions
    )


@pytest.mark.parametrize(
    ("backend", "extra", "tokens"),
    [
        ("megatron:d2p2t2", {}, 16_384),  # balanced: 32 sequences of 2,048 over 4
        ("megatron:d2p2t2", {"pad_to_maximum": True}, 65_536),  # padded to the budget
        ("archon:d2p2t2", {}, 65_536),  # archon pads at p > 1 (force_pad_to_maximum)
    ],
)
def test_a_padded_micro_batch_is_the_budget(
    backend: str, extra: dict[str, Any], tokens: int
) -> None:
    # pad_mb_list pads every micro-batch to max_tokens_per_mb under pad_to_maximum
    # (areal/utils/data.py l.1011-1022), which the archon engine forces with pipeline
    # parallelism (archon_utils.py force_pad_to_maximum l.276-282)
    cfg = {
        "cluster": {"n_nodes": 2, "n_gpus_per_node": 8},
        "rollout": {"backend": "sglang:d8"},
        "actor": {
            "backend": backend,
            "path": "Qwen/Qwen3-8B",
            "gradient_checkpointing": True,
            "mb_spec": {"max_tokens_per_mb": 65536},
            **extra,
        },
        "train_dataset": {"batch_size": 64, "max_length": 1024},
        "gconfig": {"n_samples": 4, "max_new_tokens": 1024},
    }
    memory = plan_config(cfg, on_memory="warn")["actor"].memory
    assert memory is not None
    activations = next(
        t.formula
        for p in memory.phases
        if p.name == "backward"
        for t in p.terms
        if t.name == "activations"
    )
    assert activations.startswith(f"{tokens:,} tokens/micro-batch")


@pytest.mark.parametrize(("batch", "samples", "held"), [(8, 1, False), (64, 4, True)])
def test_one_group_by_a_budget_starts_its_backward_without_gradients(
    batch: int, samples: int, held: bool
) -> None:
    # one minibatch a step; 8 sequences over d8 are 1 a rank, one group under a 16,384
    # budget: its backward starts without gradients (zero_grad's set_to_none); 64 × 4 / d8
    # = 32 sequences of 2,048 = 65,536 tokens make 4 groups: the later ones find gradients
    cfg = {
        "cluster": {"n_nodes": 2, "n_gpus_per_node": 8},
        "rollout": {"backend": "sglang:d8"},
        "actor": {
            "backend": "fsdp:d8",
            "path": "Qwen/Qwen3-8B",
            "gradient_checkpointing": True,
            "ppo_n_minibatches": 1,
            "mb_spec": {"max_tokens_per_mb": 16384},
        },
        "train_dataset": {"batch_size": batch, "max_length": 1024},
        "gconfig": {"n_samples": samples, "max_new_tokens": 1024},
    }
    memory = plan_config(cfg, on_memory="warn")["actor"].memory
    assert memory is not None
    backward = next(p for p in memory.phases if p.name == "backward")
    assert ("gradients" in {t.name for t in backward.terms}) is held
