"""The one RL-step model (areal_alloc.estimate.rl_step): each term against its formula, the plan
and ``suggest --config`` agreeing, and no proposal under its physical floor."""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from areal_alloc.catalogue import find_gpu, find_model
from areal_alloc.errors import AllocationError
from areal_alloc.estimate import rl_step
from areal_alloc.estimate.execution import (
    ServerLimit,
    StepShape,
    TrainingSettings,
    sequences_in_flight,
)
from areal_alloc.estimate.speed_inference import generation
from areal_alloc.estimate.system import Hardware
from areal_alloc.experiment.records import RunConfig
from areal_alloc.model import ModelAllocation
from areal_alloc.search.split import RunShape, suggest
from areal_alloc.settings import Settings
from tests.conftest import Cli, MainCli

#: these experiments name the GPU or the model with areal-alloc's own keys (cluster.gpu,
#: model_shape), which the reference's loader refuses: the strict-key check is off here
#: (tests/cli/test_reference_keys.py tests it)
pytestmark = pytest.mark.usefixtures("reference_off")


ROOT = Path(__file__).resolve().parents[2]
H100 = Hardware.from_gpu(find_gpu("H100-80GB"), 8)  # 989 TFLOP/s, 3.35 TB/s, NVLink 900 GB/s
QWEN = find_model("Qwen3-8B")
P = QWEN.parameters.total  # parameters; bf16 weights are 2 × P bytes

DECODE_BATCH = [
    # (sequences, instances, KV tokens, mean context, sequences in flight), batch
    ((512, 2, None, 5120, None), 256),  # the step's share: 512 / 2
    ((512, 2, 1_000_000, 5000, None), 200),  # what the KV holds: 1,000,000 // 5,000
    ((512, 2, None, 5120, 256), 128),  # 256 in flight over 2 instances
    ((512, 2, None, 5120, 1536), 768),  # η > 0: more than the step's 512 in flight
    ((512, 2, 1_000_000, 5000, 1536), 200),  # ... still what the KV holds
    ((100_000, 1, 10**9, 10, None), 100_000),  # no fixed cap (it was 256)
    ((1, 4, None, 10, None), 1),  # fewer sequences than instances: at least one
    ((100, 1, 50, 100, None), 1),  # a KV cache under one sequence: still one
    ((512, 2, None, 5120, None, 128), 128),  # the server runs 128 at once (max_num_seqs)
    ((512, 2, 1_000_000, 5000, None, 256), 200),  # ... the KV cache binds first
]


@pytest.mark.parametrize(("given", "expected"), DECODE_BATCH)
def test_decode_batch(given: tuple[int, ...], expected: int) -> None:
    assert rl_step.decode_batch(*given) == expected


IN_FLIGHT = [
    # (train_dataset.batch_size, gconfig.n_samples, max_concurrent_rollouts, η), sequences:
    # n_samples × min(max_concurrent_rollouts (default the batch), (η + 1) × the batch),
    # the staleness manager's bound in rollouts of n_samples sequences (AReaL cbff54d6)
    ((64, 8, 256, None), 8 * 64),  # η 0: one batch of prompts, 512 sequences (was 256)
    ((64, 8, None, 0), 8 * 64),  # max_concurrent_rollouts unset: the batch
    ((64, 8, 32, 0), 8 * 32),  # 32 rollouts of 8 sequences
    ((64, 8, 256, 2), 8 * 192),  # η 2: min(256, 3 × 64) = 192 rollouts
    ((64, 8, None, 8), 8 * 64),  # η 8 and no max_concurrent_rollouts: still one batch
    ((256, 4, 256, 1), 4 * 256),  # min(256, 2 × 256)
    ((1, 1, 100_000, 0), 1),  # one prompt of one sample per step: one in flight
]


@pytest.mark.parametrize(("given", "expected"), IN_FLIGHT)
def test_sequences_in_flight(given: tuple[int, int, int | None, int | None], expected: int) -> None:
    batch, samples, concurrent, eta = given
    run = RunConfig(
        batch_size=batch,
        n_samples=samples,
        max_concurrent_rollouts=concurrent,
        max_head_offpolicyness=eta,
    )
    assert sequences_in_flight(run) == expected


def test_an_asynchronous_batch_stays_full_across_steps() -> None:
    # 512 sequences on one instance, 1,536 in flight (η 2): the batch is 1,536 and the step's
    # share takes a third of a wave; synchronous, the step drains: a whole wave of 512
    def gen(synchronous: bool, in_flight: int) -> rl_step.Generation:
        return rl_step.rollout(
            QWEN,
            ModelAllocation.from_str("sglang:d1").parallel,
            H100,
            sequences=512,
            instances=1,
            prompt=100,
            max_new_tokens=1000,
            mean_gen_len=1000,
            kv_tokens=None,
            kv_bytes_per_token=0,
            in_flight=in_flight,
            synchronous=synchronous,
        )

    fast = gen(False, 1536)
    assert fast.batch == 1536
    assert fast.waves == pytest.approx(1 / 3)
    assert fast.throughput_seconds == pytest.approx(fast.estimate.seconds / 3)
    drained = gen(True, 512)
    assert (drained.batch, drained.waves) == (512, 1)
    assert drained.throughput_seconds == drained.estimate.seconds


NVLINK = 900 / 2 * 1e9 * 0.7  # one direction at the default 0.7 of peak
NETWORK = 200 / 8 * 1e9 * 0.7  # one 200 Gb/s port at 0.7

WEIGHT_UPDATE = [
    (("xccl", True), 2 * P / NVLINK),
    (("xccl", False), 2 * P / NETWORK),
    (("awex", True), 2 * P / NVLINK / 8),  # 8 training GPUs send a shard each
    (("disk", True), 2 * 2 * P / 2e9),
]


@pytest.mark.parametrize(("given", "seconds"), WEIGHT_UPDATE)
def test_weight_update(given: tuple[str, bool], seconds: float) -> None:
    mode, inside = given
    term = rl_step.weight_update(QWEN, mode, H100, inside_node=inside, senders=8)
    assert term.seconds == pytest.approx(seconds)
    assert mode in term.name


def test_offload_onload_over_pcie() -> None:
    # 30 GiB of the training engine's and 16 GiB of the rollout's weights per GPU, each
    # off and back once a step over PCIe 4.0 x16 (32 GB/s)
    term = rl_step.switch(H100, 30 * 2**30, 16 * 2**30)
    assert term.seconds == pytest.approx(2 * (30 + 16) * 2**30 / 32e9)


def test_a_colocated_switch_moves_the_training_engines_whole_memory(main_cli: MainCli) -> None:
    """The reference pauses every allocation of a colocated training engine with a CPU
    backup (torch_memory_saver): weights, gradients and optimizer states move, not only the
    bf16 weights; the rollout moves its own weights per GPU."""
    config = str(ROOT / "tests/data/reference/math__gsm8k_grpo_awex_colocate.yaml")
    checked = main_cli("check", config, "--gpu", "H100-80GB", "--json")
    assert checked.returncode == 0, checked.stderr
    data = json.loads(checked.stdout)
    plan = data[0] if isinstance(data, list) else data
    assert plan["pace"]["mode"] == "colocated"
    memory = {e["key"]: e["memory"] for e in plan["engines"] if e.get("memory")}
    training = sum(memory["actor"][k] for k in ("weights", "gradients", "optimizer"))
    assert plan["pace"]["switch_seconds"] == pytest.approx(
        2 * (training + memory["rollout"]["weights"]) / 32e9
    )


_COLOCATED_FSDP = """
enable_offload: true
cluster: {n_nodes: 1, n_gpus_per_node: 8, gpu: H100-80GB}
actor:
  backend: fsdp:d8
  path: Qwen/Qwen3-8B
  weight_update_mode: disk
  gradient_checkpointing: false
  optimizer: {type: adam}
  mb_spec: {max_tokens_per_mb: 1024}
  fsdp: {memory_efficient_load: %s}
rollout:
  backend: sglang:d8
  scheduling_strategy: {type: colocation, target: actor}
"""
# Qwen3-8B on fsdp:d8, per GPU: float32 weights 6.85 GiB (with the gathered layers),
# float32 gradients 3.81 GiB, AdamW states 7.63 GiB = 18.29 GiB; the rollout's bf16
# weights 15.26 GiB; 2 × (18.29 + 15.26) GiB / 32 GB/s = 2.25 s
_MOVED = (
    "  offload/onload  2.25 s (2 × (training 18.29 GiB of weights, gradients and optimizer "
    "+ rollout weights 15.26 GiB) per GPU / PCIe 32 GB/s)"
)
SWITCH = [
    # (fsdp.memory_efficient_load, the actor's peak phase), the offload/onload line: the
    # same states move whatever phase sets the peak (it printed "training 0.00 GiB" for a
    # peak at load, and left the gradients out of a peak in the backward)
    (("false", "load"), _MOVED),
    (("true", "backward"), _MOVED),
]


@pytest.mark.parametrize(("given", "expected"), SWITCH)
def test_the_switch_moves_the_actors_states_whatever_its_peak(
    main_cli: MainCli, tmp_path: Path, given: tuple[str, str], expected: str
) -> None:
    """torch_memory_saver pauses every allocation of the training engine's process with a
    CPU backup (areal/utils/offload.py lines 43-46, FSDPEngine.offload in
    areal/engine/fsdp_engine.py lines 928-948, AReaL cbff54d6): its weights, gradients and
    optimizer states, not a difference of phase peaks."""
    efficient, phase = given
    config = tmp_path / "colocated.yaml"
    config.write_text(_COLOCATED_FSDP % efficient)
    text = main_cli("check", str(config))
    assert text.returncode == 0, text.stderr
    assert f"  actor    {'34.5' if phase == 'load' else '27.0'} GiB  yes   {phase}" in text.stdout
    assert expected in text.stdout.splitlines()


STEP = [
    (("asynchronous", 10.0, 20.0, 1.0, 5.0), 21.0),  # the slower side + the update
    (("synchronous", 10.0, 20.0, 1.0, 5.0), 31.0),  # the sum + the update
    (("colocated", 10.0, 20.0, 1.0, 5.0), 36.0),  # the sum + update + offload/onload
]


@pytest.mark.parametrize(("given", "seconds"), STEP)
def test_step_seconds(given: tuple[str, float, float, float, float], seconds: float) -> None:
    assert rl_step.step_seconds(*given) == seconds


MODES = [
    ((None, False), "synchronous"),  # max_head_offpolicyness's default 0
    ((0, False), "synchronous"),
    ((2, False), "asynchronous"),
    ((2, True), "colocated"),
]


@pytest.mark.parametrize(("given", "mode"), MODES)
def test_mode_of(given: tuple[int | None, bool], mode: str) -> None:
    assert rl_step.mode_of(*given) == mode


def _one_sequence(synchronous: bool) -> rl_step.Generation:
    return rl_step.rollout(
        QWEN,
        ModelAllocation.from_str("sglang:d1").parallel,
        H100,
        sequences=1,
        instances=1,
        prompt=0,
        max_new_tokens=1000,
        mean_gen_len=10,
        kv_tokens=None,
        kv_bytes_per_token=0,
        synchronous=synchronous,
    )


def test_a_synchronous_step_waits_for_its_longest_sequence() -> None:
    gen = _one_sequence(synchronous=True)
    # batch 1 is memory-bound: every weight read once per token at 0.7 of 3.35 TB/s
    assert gen.floor_seconds == pytest.approx(1000 * 2 * P / (3.35e12 * 0.7))
    assert gen.seconds == pytest.approx(gen.floor_seconds)  # one sequence: all at batch 1
    # the mean length (10 tokens) sets only the throughput
    alloc = ModelAllocation.from_str("sglang:d1")
    mean = generation(
        QWEN, alloc.parallel, H100, batch=1, prompt_len=0, gen_len=10, kv_bytes_per_token=0
    )
    assert gen.throughput_seconds == pytest.approx(mean.seconds)
    assert _one_sequence(synchronous=False).seconds == gen.throughput_seconds


def test_the_long_tail_adds_the_steps_past_the_mean_at_batch_one() -> None:
    # 64 sequences of mean 100 tokens, the longest 1,000: the throughput at batch 64, then
    # 900 more decode steps of the longest one at batch 1 (a step's cost a + b × alive)
    kv = 100_000  # bytes per token: batch 64 reads more than batch 1
    args = dict(sequences=64, instances=1, prompt=0, kv_tokens=None, kv_bytes_per_token=kv)
    parallel = ModelAllocation.from_str("sglang:d1").parallel
    gen = rl_step.rollout(QWEN, parallel, H100, max_new_tokens=1000, mean_gen_len=100, **args)  # type: ignore[arg-type]
    step = (2 * P + 500 * kv) / (3.35e12 * 0.7)  # batch 1: the weights, one KV at context 500
    assert gen.tail_seconds == pytest.approx(900 * step)
    assert gen.seconds == pytest.approx(gen.throughput_seconds + 900 * step)
    assert gen.seconds > gen.floor_seconds  # the first 100 steps ran at batch 64
    drained = rl_step.rollout(
        QWEN,
        parallel,
        H100,
        max_new_tokens=1000,
        mean_gen_len=100,
        synchronous=False,
        **args,  # type: ignore[arg-type]
    )
    assert drained.seconds == drained.throughput_seconds  # asynchronous: no tail


def test_a_synchronous_wave_holds_its_sequences_whole_lengths_in_the_kv_cache() -> None:
    # 128 sequences of mean 3,000 tokens: a wave that starts together ends holding 128 ×
    # 3,000 tokens, more than 290,000: 96 at once; staggered, the mean context 1,500: all 128
    args = dict(sequences=128, instances=1, prompt=0, kv_tokens=290_000, kv_bytes_per_token=1)
    parallel = ModelAllocation.from_str("sglang:d1").parallel
    wave = rl_step.rollout(QWEN, parallel, H100, max_new_tokens=4000, mean_gen_len=3000, **args)  # type: ignore[arg-type]
    assert (wave.batch, wave.waves) == (96, 2)
    staggered = rl_step.rollout(
        QWEN,
        parallel,
        H100,
        max_new_tokens=4000,
        mean_gen_len=3000,
        synchronous=False,
        **args,  # type: ignore[arg-type]
    )
    assert staggered.batch == 128


SERVER_LIMITS = [
    # (backend, max_num_seqs, max_running_requests, context_length, KV tokens), limit
    (("vllm", None, None, 32768, None), 256),  # the reference's vLLMConfig default
    (("vllm", 128, None, 32768, 10**6), 128),  # as written
    (("sglang", None, None, 32768, None), None),  # no KV pool known: no bound
    (("sglang", None, 64, 32768, None), 64),
    (("sglang", None, None, 32768, 10**5), 2048),  # 10**5 / 32,768 × 512 = 1,562: at least 2,048
    (("sglang", None, None, 32768, 10**6), 4096),  # 15,625: at most 4,096
    (("sglang", None, None, 32768, 3000), 1500),  # KV tokens // 2
    (("sglang", None, 10**5, 4096, 10**6), 4096),  # as written, within the request pool
]


@pytest.mark.parametrize(("given", "limit"), SERVER_LIMITS)
def test_the_servers_own_bound(
    given: tuple[str, int | None, int | None, int, int | None], limit: int | None
) -> None:
    backend, seqs, running, context, kv = given
    found, rule = ServerLimit(seqs, running, context).per_instance(backend, kv)
    assert found == limit
    assert bool(rule) == (limit is not None)


def test_a_server_without_a_row_has_no_borrowed_bound() -> None:
    """A server the estimates have no model of is refused, not given another's rule."""
    from areal_alloc.estimate.backends import NoEstimateModel

    with pytest.raises(NoEstimateModel, match="add its row to SERVERS"):
        ServerLimit(8, 8, 32768).per_instance("tensorrt-llm", None)


AGREEING = [
    "conf/app/experiment/grpo_2x8.yaml",
    "tests/data/real_grpo.yaml",
    "tests/data/reference/math__gsm8k_grpo.yaml",
    "tests/data/reference/math__gsm8k_grpo_megatron.yaml",
    "tests/data/reference/math__gsm8k_ppo.yaml",
    "tests/data/reference/dte__gsm8k_grpo_qwen3_30b_a3b.yaml",
]
PACE_KEYS = ("generate_seconds", "train_seconds", "step_seconds", "mode")


@pytest.mark.parametrize("path", AGREEING)
def test_the_plan_and_suggest_give_the_same_figures(main_cli: MainCli, path: str) -> None:
    config = str(ROOT / path)
    checked = main_cli("check", config, "--gpu", "H100-80GB", "--json")
    assert checked.returncode == 0, checked.stderr
    data = json.loads(checked.stdout)
    pace = (data[0] if isinstance(data, list) else data)["pace"]
    suggested = main_cli("suggest", "--config", config, "--gpu", "H100-80GB", "--json")
    assert suggested.returncode == 0, suggested.stderr
    current = json.loads(suggested.stdout)["current"]
    assert {k: current[k] for k in PACE_KEYS} == {k: pace[k] for k in PACE_KEYS}
    assert pace["mode"] in rl_step.MODES


def test_mean_gen_len_changes_the_plan_and_is_said(main_cli: MainCli) -> None:
    config = str(ROOT / "conf/app/experiment/grpo_2x8.yaml")
    args = ("check", config, "--gpu", "H100-80GB", "--json")
    full = json.loads(main_cli(*args).stdout)
    short = json.loads(main_cli(*args, "--mean-gen-len", "1024").stdout)
    full, short = (d[0] if isinstance(d, list) else d for d in (full, short))
    assert short["pace"]["generate_seconds"] < full["pace"]["generate_seconds"]
    assert (
        "mean generation length 1,024 tokens (from --mean-gen-len)" in short["pace"]["assumptions"]
    )
    assert any("(the maximum;" in a for a in full["pace"]["assumptions"])


def test_mean_gen_len_from_the_environment_at_start_up(cli: Cli) -> None:
    # the environment is read when the process starts: only a process shows it
    config = str(ROOT / "conf/app/experiment/grpo_2x8.yaml")
    env = {**os.environ, "AREAL_ALLOC_MEAN_GEN_LEN": "512", "AREAL_ALLOC_DETECT": "0"}
    done = cli("check", config, "--gpu", "H100-80GB", "--json", env=env)
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    pace = (data[0] if isinstance(data, list) else data)["pace"]
    assert (
        "mean generation length 512 tokens (from AREAL_ALLOC_MEAN_GEN_LEN)" in pace["assumptions"]
    )


MEAN_GEN_LEN = [
    # (flags, hook, environment), (value, source): the first source that gives it
    (
        ({"mean_gen_len": 100}, {"mean_gen_len": 200}, {"AREAL_ALLOC_MEAN_GEN_LEN": "300"}),
        (100, "--mean-gen-len"),
    ),
    (
        ({}, {"mean_gen_len": "200"}, {"AREAL_ALLOC_MEAN_GEN_LEN": "300"}),
        (200, "hydra.callbacks.areal_alloc.mean_gen_len"),
    ),
    (({}, {}, {"AREAL_ALLOC_MEAN_GEN_LEN": "300"}), (300, "AREAL_ALLOC_MEAN_GEN_LEN")),
]


@pytest.mark.parametrize(("given", "expected"), MEAN_GEN_LEN)
def test_mean_gen_len_sources(
    given: tuple[dict[str, object], dict[str, object], dict[str, str]],
    expected: tuple[int, str],
) -> None:
    flags, hook, environ = given
    found = (
        Settings.from_sources(flags, hook, environ, detect=False)
        .resolve(
            {"cluster": {"mean_gen_len": 5}}  # no cluster key: the reference's loader refuses it
        )
        .mean_gen_len
    )
    assert found is not None
    assert (found.value, found.source) == expected
    assert Settings.from_sources(environ={}, detect=False).resolve().mean_gen_len is None


def test_a_bad_mean_gen_len_is_one_line() -> None:
    with pytest.raises(AllocationError) as caught:
        Settings.from_sources({"mean_gen_len": 0.5}, environ={}, detect=False).resolve()
    assert str(caught.value) == "--mean-gen-len=0.5: must be an integer from 1 to 1,099,511,627,776"


MODELS = ["Qwen3-0.6B", "Qwen3-8B", "Qwen2.5-1.5B"]


@settings(max_examples=12, deadline=None)
@given(
    model=st.sampled_from(MODELS),
    nodes=st.sampled_from([1, 2, 4]),
    batch=st.integers(min_value=1, max_value=2048),
    gen_len=st.integers(min_value=64, max_value=16384),
)
def test_no_proposal_under_its_physical_floor(
    model: str, nodes: int, batch: int, gen_len: int
) -> None:
    arch = find_model(model)
    shape = RunShape.of(batch=batch, prompt_len=512, gen_len=gen_len, asynchronous=False)
    proposals = suggest(
        arch,
        8 * nodes,
        find_gpu("H100-80GB").memory_bytes,
        H100,
        shape,
        training=TrainingSettings(tokens_per_micro_batch=16384, recompute="full"),
        top=3,
    )
    for p in proposals:
        parallel = p.rollout.parallel
        # one read of every weight per generated token at peak HBM bandwidth
        weights_per_gpu = arch.parameters.total * 2 / parallel.tp_size
        floor = gen_len * weights_per_gpu / (H100.hbm_tbps * 1e12)
        assert p.generate_seconds >= floor
        assert p.step_seconds >= floor
        # no more instances or data-parallel ranks than the step has sequences
        assert parallel.dp_size <= batch
        assert p.actor.parallel.dp_size <= batch


def test_the_hook_takes_mean_gen_len(monkeypatch: pytest.MonkeyPatch) -> None:
    from areal_alloc.hydra_hook import ValidateAllocations

    monkeypatch.delenv("AREAL_ALLOC_MEAN_GEN_LEN", raising=False)
    found = ValidateAllocations(mean_gen_len=300).settings.resolve().mean_gen_len
    assert found is not None
    assert (found.value, found.source) == (300, "hydra.callbacks.areal_alloc.mean_gen_len")


def test_a_synchronous_step_is_never_below_its_floor() -> None:
    # one sequence of mean 100 tokens, the longest 1,000: the throughput reads its KV at
    # the mean's context (50), the floor at the longest's (500), so throughput + tail
    # (900 steps at 500) falls short of the floor's 1,000 steps at 500 by 100 steps' KV
    parallel = ModelAllocation.from_str("sglang:d1").parallel
    args = dict(sequences=1, instances=1, prompt=0, kv_tokens=None, kv_bytes_per_token=100_000)
    gen = rl_step.rollout(QWEN, parallel, H100, max_new_tokens=1000, mean_gen_len=100, **args)  # type: ignore[arg-type]
    assert gen.seconds == gen.floor_seconds
    assert gen.tail_seconds == pytest.approx(gen.floor_seconds - gen.throughput_seconds)


def _step(**changes: Any) -> StepShape:
    """512 sequences of 1,024 + 1,024 tokens, asynchronous (η 1), with ``changes``."""
    base = StepShape(
        sequences=512,
        prompt=1024,
        new_tokens=1024,
        mean=1024,
        recompute_logprob=False,
        offpolicyness=1,
        colocated=False,
        max_concurrent=None,
    )
    return dataclasses.replace(base, **changes)


def _terms(step: object) -> dict[str, float]:
    return {t.name: t.seconds for t in step.terms}  # type: ignore[attr-defined]


def test_each_ppo_minibatch_is_its_own_optimizer_step() -> None:
    # ppo_update runs train_batch once per minibatch (areal/trainer/ppo/actor.py l.454-457):
    # 4 minibatches are 4 steps over a quarter of the tokens each, so the GEMMs cost what
    # one step over all the tokens costs, while the gradient sync (Megatron's: a
    # reduce-scatter and an all-gather of the parameters, whatever the tokens) and the
    # pipeline's fill and drain are paid 4 times
    from dataclasses import replace

    from areal_alloc.estimate.speed_training import training_step

    arch = find_model("Qwen3-8B")
    parallel = ModelAllocation.from_str("megatron:d2p4").parallel
    shape = _step(recompute_logprob=True, minibatches=4)
    settings = TrainingSettings(tokens_per_micro_batch=8192)
    four = rl_step.training_pace("actor", "megatron", parallel, arch, H100, shape, settings)
    one = rl_step.training_pace(
        "actor", "megatron", parallel, arch, H100, replace(shape, minibatches=1), settings
    )
    tokens = 512 * 2048
    quarter = training_step(
        "megatron",
        arch,
        parallel,
        H100,
        tokens_per_step=tokens // 4,
        tokens_per_micro_batch=8192,
        sequence_length=2048,
    )
    four_terms, one_terms = _terms(four.estimate), _terms(one.estimate)
    quarter_terms = _terms(quarter)
    assert four_terms["compute"] == pytest.approx(one_terms["compute"], rel=1e-9)
    assert four_terms["data parallel"] == pytest.approx(4 * one_terms["data parallel"], rel=1e-9)
    assert four_terms["pipeline bubble"] == pytest.approx(4 * quarter_terms["pipeline bubble"])
    assert four_terms["pipeline bubble"] > one_terms["pipeline bubble"]
    # the log-prob forward is one compute_logp over the whole step, not per minibatch
    assert four_terms["log-prob recomputation"] == one_terms["log-prob recomputation"]
    # the log-prob forward is one forward pass over all the tokens (no optimizer: forward only)
    from areal_alloc.estimate.speed_training import settings_step

    whole = replace(settings, optimizer=None, tokens_per_micro_batch=settings.forward_tokens)
    forward = settings_step(
        "megatron", arch, parallel, H100, whole, tokens=tokens, sequence_length=2048
    )
    assert one_terms["log-prob recomputation"] == pytest.approx(forward.seconds)
    assert four.seconds == pytest.approx(4 * quarter.seconds + forward.seconds)
    said = four.estimate.assumptions[-1]
    assert said.startswith("actor.ppo_n_minibatches=4: 4 optimizer steps per RL step, each")
    assert four.what == (
        "4 optimizer steps (ppo_n_minibatches) over 1,048,576 tokens + one forward to "
        "recompute the log-probs"
    )
    # a forward-only engine (the ref) runs one forward over the step whatever the count
    ref = TrainingSettings(tokens_per_micro_batch=8192, optimizer=None)
    assert (
        rl_step.training_pace("ref", "megatron", parallel, arch, H100, shape, ref).seconds
        == rl_step.training_pace(
            "ref", "megatron", parallel, arch, H100, replace(shape, minibatches=1), ref
        ).seconds
    )


def test_the_critic_runs_its_values_forward_and_its_own_minibatches() -> None:
    # rl_trainer.py l.723: compute_values, one forward over the step, before ppo_update's
    # critic.ppo_n_minibatches optimizer steps (critic.py l.63-66)
    from dataclasses import replace

    arch = find_model("Qwen3-8B")
    parallel = ModelAllocation.from_str("megatron:d2p4").parallel
    shape = _step(minibatches=4, critic_minibatches=2)
    trains = TrainingSettings(tokens_per_micro_batch=8192, recompute="full")
    forward = TrainingSettings(tokens_per_micro_batch=8192, recompute="full", optimizer=None)
    critic = rl_step.training_pace("critic", "megatron", parallel, arch, H100, shape, trains)
    ref = rl_step.training_pace("ref", "megatron", parallel, arch, H100, shape, forward)
    terms = _terms(critic.estimate)
    # the values forward is the ref's forward on the same layout: nothing recomputed
    assert terms["value forward"] == pytest.approx(ref.seconds)
    assert critic.what.startswith("2 optimizer steps (ppo_n_minibatches)")
    assert critic.what.endswith(" + one forward for the values")
    assert "areal/trainer/ppo/critic.py l.63-66" in critic.estimate.assumptions[-1]
    # the actor's count is not the critic's
    two = rl_step.training_pace(
        "critic", "megatron", parallel, arch, H100, replace(shape, minibatches=1), trains
    )
    assert two.seconds == critic.seconds


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("minibatches", 0, "minibatches=0: must be an integer from 1 to 1,099,511,627,776"),
        (
            "critic_minibatches",
            -2,
            "critic_minibatches=-2: must be an integer from 1 to 1,099,511,627,776",
        ),
    ],
)
def test_a_run_shapes_minibatches_are_whole_numbers(field: str, value: int, message: str) -> None:
    with pytest.raises(AllocationError) as info:
        RunShape.of(**{field: value})  # type: ignore[arg-type]
    assert info.value.message == message
    assert RunShape.of(minibatches="2").step.minibatches == 2  # type: ignore[arg-type]


def test_a_forced_single_minibatch_is_said() -> None:
    # reuse_train_logp forces ppo_n_minibatches to 1 with a warning (areal/api/cli_args.py
    # l.1911-1923): the pace takes one optimizer step and says why
    from areal_alloc.plan import plan_config

    config = {
        "cluster": {"n_nodes": 2, "n_gpus_per_node": 8, "gpu": "H100-80GB"},
        "rollout": {"backend": "sglang:d8"},
        "actor": {
            "backend": "fsdp:d8",
            "path": "Qwen/Qwen3-8B",
            "ppo_n_minibatches": 4,
            "use_decoupled_loss": True,
            "prox_logp_method": "reuse_train_logp",
            "gradient_checkpointing": True,
            "mb_spec": {"max_tokens_per_mb": 16384},
        },
    }
    plan = plan_config(config)
    pace = plan.pace
    assert pace is not None
    actor = next(e for e in pace.engines if e.key == "actor")
    # the reference's defaults: batch_size 1 × n_samples 1 sequence of 1,024 (assumed) +
    # 16,384 tokens; and no extra forward (reuse_train_logp skips it)
    assert actor.what == "one optimizer step over 17,408 tokens"
    assert (
        "actor.prox_logp_method=reuse_train_logp: actor.ppo_n_minibatches=4 taken as 1, as "
        "PPOActorConfig.__post_init__ forces it with a warning (areal/api/cli_args.py "
        "l.1911-1923 at cbff54d6)"
    ) in plan.assumptions
