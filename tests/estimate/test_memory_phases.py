"""Memory by phase (issue 17 item 3): each engine's peak over the phases it goes through.

The phases and what is resident in each follow the reference's trainer and engines
(areal/trainer/rl_trainer.py and areal/engine/fsdp_engine.py at areal-project/AReaL@
cbff54d645d2cd8ee1f1c358a82f3f473588433d; the rules are cited beside
``areal_alloc.estimate.memory.PHASES`` and ``areal_alloc.estimate.engines``). Expected
relations are written from those rules: which terms each phase holds, and which
colocated engine is beside it, never our own figures copied back.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from areal_alloc.catalogue import find_model
from areal_alloc.errors import AllocationError
from areal_alloc.estimate.activations import hf_activation_bytes_per_token
from areal_alloc.estimate.execution import GIB
from areal_alloc.estimate.memory import PHASES, MemoryEstimate, Term
from areal_alloc.plan import plan_config
from tests.conftest import MainCli

#: these experiments name the GPU or the model with areal-alloc's own keys (cluster.gpu,
#: model_shape), which the reference's loader refuses: the strict-key check is off here
#: (tests/cli/test_reference_keys.py tests it)
pytestmark = pytest.mark.usefixtures("reference_off")


ROOT = Path(__file__).parents[2]
EXPERIMENTS = sorted((ROOT / "areal_alloc/conf/app/experiment").glob("*.yaml"))
QWEN3_8B = 8_190_735_360  # parameters (tests/estimate/test_memory.py: the Hub's exact count)
COLOCATE = {"type": "colocation", "target": "actor"}


def _cfg(**extra: Any) -> dict[str, Any]:
    """An 8B actor on one node of H100s and a rollout on the other; ``a__b=v`` sets a.b."""
    cfg: dict[str, Any] = {
        "cluster": {"n_nodes": 2, "n_gpus_per_node": 8, "gpu": "H100-80GB"},
        "actor": {
            "backend": "fsdp:d8",
            "path": "Qwen/Qwen3-8B",
            "gradient_checkpointing": True,
            "mb_spec": {"max_tokens_per_mb": 16384},
        },
        "rollout": {"backend": "sglang:d4t2", "max_concurrent_rollouts": 64},
    }
    for dotted, value in extra.items():
        node = cfg
        *parents, last = dotted.split("__")
        for part in parents:
            node = node.setdefault(part, {})
        node[last] = value
    return cfg


def _terms(memory: MemoryEstimate, phase: str) -> tuple[Term, ...]:
    return next(p.terms for p in memory.phases if p.name == phase)


def _sum(memory: MemoryEstimate, phase: str, *names: str) -> int:
    return sum(t.bytes for t in _terms(memory, phase) if t.name in names)


STATES = ("weights", "gradients", "optimizer")
Check = Callable[[dict[str, MemoryEstimate]], None]


def _fsdp_actor(m: dict[str, MemoryEstimate]) -> None:
    actor = m["actor"]
    # fsdp_engine.py _create_device_model: the whole model in float32 on every GPU
    assert _sum(actor, "load", "load") == QWEN3_8B * 4
    assert actor.phase_bytes["load"] == QWEN3_8B * 4 + 4 * GIB
    # the optimizer step: states, gradients, master weights; the activations freed
    step = _sum(actor, "backward", *STATES, "reserve")
    assert actor.phase_bytes["optimizer_step"] == step
    assert actor.phase_bytes["backward"] == step + _sum(actor, "backward", "activations", "logits")


def _recompute_logprob(m: dict[str, MemoryEstimate]) -> None:
    actor = m["actor"]
    arch = find_model("Qwen/Qwen3-8B")
    # the FSDP engine runs Hugging Face's modeling code
    one_layer = hf_activation_bytes_per_token(
        arch, moe=False, tp=1, sequence_parallel=False, recompute="none"
    )[0]
    # its forward keeps what stays between phases, one layer's working set and the
    # bf16 logits (no gradient): 2 B a logit
    assert actor.phase_bytes["forward"] == (
        actor.phase_bytes["optimizer_step"]
        + int(16384 * one_layer)
        + int(16384 * arch.vocab_size * 2)
    )
    assert actor.phase_bytes["forward"] < actor.phase_bytes["backward"]


def _loads_at_peak(m: dict[str, MemoryEstimate]) -> None:
    actor = m["actor"]
    assert actor.phase_bytes["load"] > actor.phase_bytes["backward"]
    assert actor.terms == _terms(actor, "load")
    assert any(" peaks while loading" in a for a in actor.assumptions)


def _megatron_actor(m: dict[str, MemoryEstimate]) -> None:
    actor = m["actor"]
    # Megatron builds its gradient buffers and its optimizer's float32 main params with
    # the model, the two Adam states at the first step: 4 of the optimizer's 12 B a
    # parameter are there after loading
    optimizer = _sum(actor, "backward", "optimizer")
    held = _sum(actor, "backward", "weights", "gradients", "reserve")
    assert actor.phase_bytes["load"] == held + optimizer * 4 // 12
    assert actor.phase_bytes["optimizer_step"] == held + optimizer
    assert actor.at_load == actor.phase_bytes["load"] - 4 * GIB
    assert actor.term("load") == 0


def _ref_forward(m: dict[str, MemoryEstimate]) -> None:
    ref = m["ref"]
    assert ref.phase_bytes["load"] == _sum(ref, "forward", "weights", "reserve")
    logits = _terms(ref, "forward")[2]
    assert logits.name == "logits"
    assert logits.bytes == 16384 * find_model("Qwen/Qwen3-8B").vocab_size * 2  # bf16, no grad
    assert _sum(ref, "forward", "gradients", "optimizer") == 0


def _ref_loads(m: dict[str, MemoryEstimate]) -> None:
    ref = m["ref"]
    assert ref.phase_bytes["load"] == QWEN3_8B * 4 + 4 * GIB > ref.phase_bytes["forward"]


def _sglang(m: dict[str, MemoryEstimate]) -> None:
    rollout = m["rollout"]
    assert rollout.phase_bytes["load"] == _sum(rollout, "generation", "weights", "reserve")
    # SGLang's pool is mem_fraction_static (0.9) of the memory its reserve leaves, so in
    # generation it holds 0.9 × (79.18 GiB − reserve) with the reserve beside it
    device, reserve = int(79.18 * GIB), _sum(rollout, "generation", "reserve")
    weights = _sum(rollout, "generation", "weights")
    pool = int(0.9 * (device - reserve) - weights)
    assert _sum(rollout, "generation", "kv_cache") == pool
    assert rollout.phase_bytes["generation"] == weights + pool + reserve > int(0.9 * device)
    assert rollout.kv_cache is not None
    assert rollout.kv_cache.tokens


def _vllm(m: dict[str, MemoryEstimate]) -> None:
    rollout = m["rollout"]
    # the profile run's activation peak is generation's, not the load's
    assert _sum(rollout, "generation", "activations") > 0
    assert _sum(rollout, "load", "activations") == 0


def _colocated_ref(m: dict[str, MemoryEstimate]) -> None:
    actor, ref = m["actor"], m["ref"]
    # the actor loads first (rl_trainer.py lines 311-327): nothing beside its load;
    # ref stays beside every later phase (ref.offload=false)
    assert _sum(actor, "load", "colocated") == 0
    assert _sum(actor, "backward", "colocated") == ref.resident > 0
    assert _sum(actor, "optimizer_step", "colocated") == ref.resident
    # ref loads beside the actor's loaded weights (FSDP: no gradient or state yet) and
    # runs its forward beside the actor's weights and states
    assert _sum(ref, "load", "colocated") == actor.at_load > 0
    assert _sum(ref, "forward", "colocated") == actor.resident > actor.at_load


def _ref_offloaded(m: dict[str, MemoryEstimate]) -> None:
    actor, ref = m["actor"], m["ref"]
    # ref.offload: onloaded only around its forward (rl_trainer.py lines 729-745)
    assert all(_sum(actor, p.name, "colocated") == 0 for p in actor.phases)
    assert _sum(ref, "forward", "colocated") == actor.resident
    # offloading starts after every training engine loaded (line 490)
    assert _sum(ref, "load", "colocated") == actor.at_load


def _actor_offloaded(m: dict[str, MemoryEstimate]) -> None:
    actor, ref = m["actor"], m["ref"]
    # actor.offload: onloaded after ref's forward (line 783), but loaded before it
    assert _sum(ref, "forward", "colocated") == 0
    assert _sum(ref, "load", "colocated") == actor.at_load
    assert _sum(actor, "backward", "colocated") == ref.resident


def _rollout_on_actor(m: dict[str, MemoryEstimate]) -> None:
    actor, rollout = m["actor"], m["rollout"]
    # actor and rollout colocated: the actor is offloaded before the servers start
    # (lines 333-335) and between its phases, the rollout outside generation
    assert all(_sum(rollout, p.name, "colocated") == 0 for p in rollout.phases)
    assert all(_sum(actor, p.name, "colocated") == 0 for p in actor.phases)


def _critic_beside_rollout(m: dict[str, MemoryEstimate]) -> None:
    critic, rollout = m["critic"], m["rollout"]
    # the critic loads before the servers start and is offloaded by critic.offload
    # only (line 490, after them): the server loads beside its weights, serves beside
    # its weights and states
    assert _sum(rollout, "load", "colocated") == critic.at_load > 0
    assert _sum(rollout, "generation", "colocated") == critic.resident
    # the critic's values are a forward pass beside the server's claim
    assert _sum(critic, "forward", "colocated") == int(0.4 * int(79.18 * GIB))
    assert _sum(critic, "forward", "logits") == 0  # a value head, no vocabulary


_CRITIC = {
    "backend": "fsdp:d8",
    "path": "Qwen/Qwen3-8B",
    "is_critic": True,
    "gradient_checkpointing": True,
    "mb_spec": {"max_tokens_per_mb": 16384},
    "scheduling_strategy": {"type": "colocation", "target": "rollout"},
}

ROWS: list[tuple[str, dict[str, Any], dict[str, tuple[str, tuple[str, ...]]], Check]] = [
    (
        "fsdp actor",
        # 64 × 4 / d8 = 32 sequences a rank: several micro-batches (a lone one would start
        # its backward without gradients)
        _cfg(train_dataset__batch_size=64, gconfig__n_samples=4),
        {
            "actor": ("backward", ("load", "backward", "backward_end", "optimizer_step")),
            "rollout": ("generation", ("load", "generation")),
        },
        _fsdp_actor,
    ),
    (
        "fsdp actor recomputing its log-probs",
        _cfg(actor__recompute_logprob=True),
        {"actor": ("backward", ("load", "forward", "backward", "backward_end", "optimizer_step"))},
        _recompute_logprob,
    ),
    (
        "fsdp actor whose load is its peak",
        _cfg(actor__mb_spec={"max_tokens_per_mb": 1024}, actor__gradient_checkpointing=False),
        {"actor": ("load", ("load", "backward", "backward_end", "optimizer_step"))},
        _loads_at_peak,
    ),
    (
        "megatron actor",
        _cfg(actor__backend="megatron:d2p2t2"),
        {"actor": ("backward", ("load", "backward", "optimizer_step"))},
        _megatron_actor,
    ),
    (
        "ref forward-only, memory-efficient load",
        {
            "cluster": {"n_nodes": 1, "n_gpus_per_node": 8, "gpu": "H100-80GB"},
            "ref": {
                "backend": "fsdp:d8",
                "path": "Qwen/Qwen3-8B",
                "mb_spec": {"max_tokens_per_mb": 16384},
                "fsdp": {"memory_efficient_load": True},
            },
        },
        {"ref": ("forward", ("load", "forward"))},
        _ref_forward,
    ),
    (
        "ref forward-only, whole model loaded",
        {
            "cluster": {"n_nodes": 1, "n_gpus_per_node": 8, "gpu": "H100-80GB"},
            "ref": {"backend": "fsdp:d8", "path": "Qwen/Qwen3-8B"},
        },
        {"ref": ("load", ("load", "forward"))},
        _ref_loads,
    ),
    (
        "sglang rollout",
        _cfg(),
        {"rollout": ("generation", ("load", "generation"))},
        _sglang,
    ),
    (
        "vllm rollout",
        _cfg(rollout__backend="vllm:d4t2"),
        {"rollout": ("generation", ("load", "generation"))},
        _vllm,
    ),
    (
        "actor + ref colocated",
        _cfg(ref={"backend": "", "scheduling_strategy": COLOCATE}),
        {
            "actor": ("backward", ("load", "backward", "backward_end", "optimizer_step")),
            "ref": ("load", ("load", "forward")),
        },
        _colocated_ref,
    ),
    (
        "actor + ref colocated, ref offloaded",
        _cfg(
            enable_offload=True,
            ref={"backend": "", "scheduling_strategy": COLOCATE, "offload": True},
        ),
        {"actor": ("backward", ("load", "backward", "backward_end", "optimizer_step"))},
        _ref_offloaded,
    ),
    (
        "actor + ref colocated, actor offloaded",
        _cfg(
            enable_offload=True,
            actor__offload=True,
            ref={
                "backend": "",
                "scheduling_strategy": COLOCATE,
                "fsdp": {"memory_efficient_load": True},
            },
        ),
        {"ref": ("forward", ("load", "forward"))},
        _actor_offloaded,
    ),
    (
        "rollout colocated with the actor",
        _cfg(
            cluster__n_nodes=1,
            enable_offload=True,
            actor__weight_update_mode="disk",
            rollout__backend="sglang:d8",
            rollout__scheduling_strategy=COLOCATE,
        ),
        {
            "actor": ("backward", ("load", "backward", "backward_end", "optimizer_step")),
            "rollout": ("generation", ("load", "generation")),
        },
        _rollout_on_actor,
    ),
    (
        "critic colocated with the rollout",
        _cfg(rollout__backend="sglang:d8", critic=_CRITIC, sglang={"mem_fraction_static": 0.4}),
        {
            # no logits: FSDP2's unsharded embedding gradient and the checkpoints at the
            # backward's end outweigh one recomputed layer
            "critic": (
                "backward_end",
                ("load", "forward", "backward", "backward_end", "optimizer_step"),
            ),
            "rollout": ("generation", ("load", "generation")),
        },
        _critic_beside_rollout,
    ),
]


@pytest.mark.parametrize(
    ("cfg", "expected", "check"), [r[1:] for r in ROWS], ids=[r[0] for r in ROWS]
)
def test_each_engine_peaks_in_its_phase(
    cfg: dict[str, Any], expected: dict[str, tuple[str, tuple[str, ...]]], check: Check
) -> None:
    plan = plan_config(cfg, on_memory="warn")
    memory = {e.key: e.memory for e in plan.engines if e.memory is not None}
    for key, (peak, phases) in expected.items():
        m = memory[key]
        assert (m.phase, tuple(m.phase_bytes)) == (peak, phases), key
        assert m.total == m.phase_bytes[peak] == max(m.phase_bytes.values())
        assert m.terms == _terms(m, peak)
    check(memory)


def test_a_load_phase_over_its_gpu_names_what_loaded_before_it() -> None:
    # a Megatron actor builds its gradient buffers and main params with the model, and
    # the ref loads beside them: actor.offload moves the actor off only after every training
    # engine has loaded (rl_trainer.py lines 311-335), so offloading is no fix here
    cfg = {
        "cluster": {"n_nodes": 1, "n_gpus_per_node": 8, "gpu_memory_gib": 40},
        "enable_offload": True,
        "actor": {
            "backend": "megatron:d8",
            "path": "Qwen/Qwen3-8B",
            "offload": True,
            "mb_spec": {"max_tokens_per_mb": 1024},
        },
        "ref": {"backend": "", "scheduling_strategy": COLOCATE},
    }
    plan = plan_config(cfg, on_memory="warn")
    ref, actor = plan["ref"].memory, plan["actor"].memory
    assert ref is not None
    assert actor is not None
    assert ref.phase == "load"
    assert _sum(ref, "load", "colocated") == actor.at_load < actor.resident
    assert _sum(ref, "forward", "colocated") == 0  # offloaded while ref runs
    (refusal,) = [w for w in plan.warnings if w.startswith("ref.backend=")]
    # bf16 weights, float32 gradients and main params /d8, no Adam state yet:
    # (2 + 4 + 4/8) B × 8,190,735,360 = 49.6 GiB
    assert refusal.endswith(
        "largest term colocated 49.6 GiB (actor's loaded weights, gradient buffers and "
        "main params (built with the model) stay on these GPUs while ref loads (every training "
        "engine loads before any is offloaded)); separate the colocated engine or raise t/p "
        "(engines load before any offload)"
    )


# --- the plan's JSON: total == phases[phase] == max(phases) -------------------------------


def _invariants(data: dict[str, Any]) -> int:
    """Check every estimated engine of a plan's JSON; the number checked."""
    checked = 0
    for engine in data["engines"]:
        memory = engine["memory"]
        if memory is None:
            continue
        phases = memory["phases"]
        assert list(phases) == [p for p in PHASES if p in phases]  # in the run's order
        assert phases["load"] > 0
        assert memory["phase"] in phases
        assert memory["total"] == phases[memory["phase"]] == max(phases.values())
        checked += 1
    return checked


MODELS = ("Qwen/Qwen3-0.6B", "Qwen/Qwen3-8B", "Qwen/Qwen2.5-7B")
GPUS = ("H100-80GB", "A100-40GB", "L40S")


def _experiment(path: Path) -> dict[str, Any]:
    cfg: dict[str, Any] = yaml.safe_load(path.read_text(encoding="utf-8"))
    cfg.pop("hydra", None)  # grpo_2x8's GPU, the hook's parameter: given as cluster.gpu
    return cfg


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])
@given(
    path=st.sampled_from(EXPERIMENTS),
    model=st.sampled_from(MODELS),
    gpu=st.sampled_from(GPUS),
    flags=st.fixed_dictionaries(
        {
            "recompute_logprob": st.booleans(),
            "actor_offload": st.booleans(),
            "ref_offload": st.booleans(),
            "efficient_load": st.booleans(),
        }
    ),
)
def test_the_built_in_experiments_peak_in_a_phase(
    path: Path, model: str, gpu: str, flags: dict[str, bool]
) -> None:
    cfg = _experiment(path)
    moe = "e2" in str(cfg["actor"]["backend"])
    cfg["cluster"]["gpu"] = gpu
    cfg["actor"]["path"] = "Qwen/Qwen3-30B-A3B" if moe else model
    cfg["actor"]["recompute_logprob"] = flags["recompute_logprob"]
    cfg["actor"]["fsdp"] = {"memory_efficient_load": flags["efficient_load"]}
    if flags["actor_offload"] or flags["ref_offload"]:
        cfg["enable_offload"] = True
        cfg["actor"]["offload"] = flags["actor_offload"]
        if "ref" in cfg:
            cfg["ref"]["offload"] = flags["ref_offload"]
    for key in ("ref", "critic"):
        if key in cfg:
            cfg[key].setdefault("path", cfg["actor"]["path"])
    try:
        data = plan_config(cfg, on_memory="warn").to_dict()
    except AllocationError:  # a layout the model's shape refuses: not this property's
        assume(False)
        return
    assert _invariants(data) >= 1


@st.composite
def _layouts(draw: st.DrawFn) -> dict[str, Any]:
    """A run of random layouts: an FSDP or Megatron actor, a rollout, maybe a ref and a
    critic, each colocated or not, with the flags that move engines off the GPU."""
    powers = st.sampled_from((1, 2, 4))
    d, t = draw(powers), draw(powers)
    if draw(st.booleans()):
        actor = f"fsdp:d{d}t{t}"
        world = d * t
    else:
        p = draw(powers)
        actor, world = f"megatron:d{d}p{p}t{t}", d * p * t
    rd, rt = draw(powers), draw(powers)
    server = draw(st.sampled_from(("sglang", "vllm")))
    on_actor = draw(st.booleans()) and rd * rt == world
    rollout: dict[str, Any] = {"backend": f"{server}:d{rd}t{rt}"}
    if on_actor:
        rollout["scheduling_strategy"] = COLOCATE
    gpus = world + (0 if on_actor else rd * rt)
    cfg: dict[str, Any] = {
        "cluster": {
            "n_nodes": math.ceil(gpus / 8) + 1,
            "n_gpus_per_node": 8,
            "gpu": draw(st.sampled_from(GPUS)),
        },
        "enable_offload": True,
        "actor": {
            "backend": actor,
            "path": draw(st.sampled_from(MODELS)),
            "gradient_checkpointing": draw(st.booleans()),
            "mb_spec": {"max_tokens_per_mb": draw(st.sampled_from((1024, 8192, 32768)))},
            "offload": draw(st.booleans()),
            "recompute_logprob": draw(st.booleans()),
            "weight_update_mode": "disk",
        },
        "rollout": rollout,
    }
    if draw(st.booleans()):
        cfg["ref"] = {
            "backend": "",
            "scheduling_strategy": COLOCATE,
            "offload": draw(st.booleans()),
            "fsdp": {"memory_efficient_load": draw(st.booleans())},
        }
    if draw(st.booleans()):
        cfg["critic"] = {
            "backend": actor,
            "is_critic": True,
            "scheduling_strategy": COLOCATE,
            "offload": draw(st.booleans()),
        }
    return cfg


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])
@given(cfg=_layouts())
def test_random_layouts_peak_in_a_phase(cfg: dict[str, Any]) -> None:
    try:
        data = plan_config(cfg, on_memory="warn").to_dict()
    except AllocationError:  # a layout the model or the reference refuses
        assume(False)
        return
    assert _invariants(data) >= 2


# --- the command: the plan's text and JSON, explain -----------------------------------------

#: the widest row of the default plan's memory table before phases were added
#: (docs/cli.md at 888d79e): the table stays within it
OLD_ROW = (
    "  rollout  72.0 GiB  yes   kv_cache 67.2 GiB  14,336 B/token, 5,035,389 tokens = 153 × 32,768"
)


def test_the_plan_names_each_engines_peak_phase(main_cli: MainCli) -> None:
    done = main_cli()
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("memory per GPU"))
    rows = lines[start + 1 : lines.index("", start)]
    header = "engine   per GPU   fits  peak phase  largest term       KV cache per instance"
    assert rows[0] == "  " + header
    phase = {row.split()[0]: row.split()[4] for row in rows[1:]}  # after "72.0 GiB yes"
    assert phase == {"rollout": "generation", "actor": "backward", "ref": "load"}
    assert max(len(row) for row in rows) <= len(OLD_ROW)


def test_the_plans_json_has_each_engines_phases(main_cli: MainCli) -> None:
    import json

    done = main_cli("output=json")
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert _invariants(data) == 3
    ref = next(e for e in data["engines"] if e["key"] == "ref")["memory"]
    assert (ref["phase"], list(ref["phases"])) == ("load", ["load", "forward"])


def test_explain_shows_the_phases(main_cli: MainCli) -> None:
    import json

    args = ("fsdp:d8", "--model", "Qwen/Qwen3-8B", "--gpu", "H100-80GB", "--tokens", "16384")
    done = main_cli("explain", *args, "--recompute", "full", "--json")
    assert done.returncode == 0, done.stderr
    memory = json.loads(done.stdout)["memory"]
    assert memory["phase"] == "backward"
    assert list(memory["phases"]) == ["load", "backward", "backward_end", "optimizer_step"]
    assert memory["total"] == memory["phases"]["backward"]
    assert memory["phases"]["load"] == QWEN3_8B * 4 + 4 * GIB
    held = sum(memory[name] for name in ("weights", "gradients", "optimizer", "reserve"))
    assert memory["phases"]["optimizer_step"] == held
    text = main_cli("explain", *args, "--recompute", "full").stdout
    # 8,190,735,360 × 4 B = 30.5 GiB, + the 4 GiB reserve
    assert "  phases (the terms above are the peak, backward):" in text
    assert "    load            34.5 GiB  load 30.5 GiB + reserve" in text
    assert "  optimizer_step  " in text
    assert text.index("phases (") < text.index("  total ")
    served = json.loads(
        main_cli(
            "explain", "sglang:d1t2", "--model", "Qwen/Qwen3-8B", "--gpu", "H100-80GB", "--json"
        ).stdout
    )["memory"]
    assert (served["phase"], list(served["phases"])) == ("generation", ["load", "generation"])
