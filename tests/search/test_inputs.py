"""The split search's inputs (areal_alloc.search.inputs), built without argparse (issue 29,
item 1): from a user's values alone, or from an experiment with them over it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from areal_alloc.catalogue import find_gpu, find_model
from areal_alloc.compose import compose_file
from areal_alloc.errors import AllocationValidationError
from areal_alloc.estimate.system import GPUSpec, Hardware
from areal_alloc.experiment.read import read_experiment
from areal_alloc.search.inputs import Given, SearchInputs, from_experiment, from_flags
from areal_alloc.search.split import SplitSearch, search, suggest

H100 = find_gpu("H100-80GB")
GPU = GPUSpec(H100.name, H100.memory_bytes)
EXPERIMENTS = Path(__file__).parents[2] / "conf/app/experiment"


def _grpo(given: Given) -> SearchInputs:
    experiment = read_experiment(compose_file(str(EXPERIMENTS / "grpo_2x8.yaml")))
    return from_experiment(experiment, given, capacity=16, gpus_per_node=8, pace=None)


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        # suggest's defaults: 512 sequences of 1,024 + 16,384 (the reference's
        # max_new_tokens), asynchronous, a ref, megatron and sglang
        (
            Given(model="Qwen3-8B", gpus=32, gpu=GPU),
            (512, 1024, 16384, True, False, "asynchronous", "megatron", "sglang", "none"),
        ),
        (
            Given(
                model="Qwen3-8B",
                gpus=32,
                gpu=GPU,
                batch_size=30,
                n_samples=8,
                gen_len=2048,
                no_ref=True,
                critic=True,
                sync=True,
                train_backend="fsdp",
                rollout_backend="vllm",
                recompute="full",
            ),
            (240, 1024, 2048, False, True, "synchronous", "fsdp", "vllm", "full"),
        ),
    ],
)
def test_from_flags(given: Given, expected: tuple[object, ...]) -> None:
    inputs = from_flags(given)
    shape = inputs.shape
    assert (
        shape.batch,
        shape.prompt_len,
        shape.gen_len,
        shape.ref,
        shape.critic,
        shape.mode,
        inputs.train_backend,
        inputs.rollout_backend,
        inputs.recompute,
    ) == expected
    assert (inputs.cap_note, inputs.from_config, inputs.current) == (None, False, None)


@pytest.mark.parametrize(
    ("given", "message"),
    [
        (Given(gpus=32, gpu=GPU), "--model is needed (or an experiment --config that sets it)"),
        (
            Given(model="Qwen3-8B", gpu=GPU),
            "--gpus is needed (or an experiment --config that sets it)",
        ),
        (
            Given(model="Qwen3-8B", gpus=32),
            "--gpu is needed (or an experiment --config that sets it)",
        ),
        (
            Given(model="Qwen3-8B", gpus=32, gpu=GPU, prompt_len=40_000),
            "--prompt-len 40,000 is not below the reference's default gconfig.max_tokens "
            "32,768 (prompt and completion together): such a prompt leaves no token to "
            "generate (areal/infra/remote_inf_engine.py raises); give a shorter --prompt-len "
            "or pass --config with a larger gconfig.max_tokens",
        ),
        (
            Given(model="Qwen3-8B", gpus=32, gpu=GPU, batch_size=1 << 21, n_samples=1 << 20),
            "train_dataset.batch_size=2,097,152 × gconfig.n_samples=1,048,576 = "
            "2,199,023,255,552 sequences per step: the limit is 1,099,511,627,776 (--batch-size, "
            "--n-samples)",
        ),
    ],
)
def test_from_flags_refuses(given: Given, message: str) -> None:
    with pytest.raises(AllocationValidationError) as raised:
        from_flags(given)
    assert str(raised.value) == message


def test_the_generation_is_capped_after_the_prompt_with_a_note() -> None:
    inputs = from_flags(Given(model="Qwen3-8B", gpus=32, gpu=GPU, prompt_len=30_000))
    assert inputs.shape.gen_len == 32_768 - 30_000
    assert inputs.cap_note == (
        "the reference's default gconfig.max_tokens 32,768 caps the generation after a "
        "30,000-token prompt at 32,768 − 30,000 = 2,768 tokens, not gconfig.max_new_tokens "
        "16,384 (areal/infra/remote_inf_engine.py l.942-944 at cbff54d6)"
    )


def test_from_experiment_reads_the_run_and_the_engines() -> None:
    inputs = _grpo(Given(gpu=GPU))
    shape = inputs.shape
    # actor.path's last part (not on this machine), the plan's 16 GPUs on 8-GPU nodes,
    # train_dataset.batch_size 64 × gconfig.n_samples 8 of max_length 1,024 + 8,192
    assert (inputs.model, inputs.gpus, inputs.gpus_per_node) == ("Qwen2.5-7B-Instruct", 16, 8)
    assert (shape.batch, shape.prompt_len, shape.gen_len, shape.ref, shape.critic) == (
        512,
        1024,
        8192,
        True,
        False,
    )
    assert (inputs.train_backend, inputs.rollout_backend) == ("fsdp", "sglang")
    # the actor's own mb_spec and gradient_checkpointing, the ref's settings its own
    assert (inputs.training.tokens_per_micro_batch, inputs.training.recompute) == (16384, "full")
    assert inputs.ref_training is not None
    assert inputs.ref_training.optimizer is None
    assert inputs.from_config
    assert inputs.execution_note.startswith(
        "; the actor's 16,384 tokens per micro-batch and recomputation full are the config's"
    )


def test_the_flags_win_over_the_experiment() -> None:
    given = Given(
        model="Qwen3-8B",
        gpu=GPU,
        gpus=32,
        gpus_per_node=4,
        batch_size=16,
        no_ref=True,
        tokens=8192,
        recompute="selective",
        train_backend="megatron",
        context_length=16384,
    )
    inputs = _grpo(given)
    assert (inputs.model, inputs.gpus, inputs.gpus_per_node) == ("Qwen3-8B", 32, 4)
    assert (inputs.shape.batch, inputs.shape.ref, inputs.train_backend) == (128, False, "megatron")
    assert (inputs.training.tokens_per_micro_batch, inputs.training.recompute) == (
        8192,
        "selective",
    )
    # both given: no note that the config's settings were taken
    assert inputs.execution_note == ""
    assert inputs.inference.context_length == 16384


def test_the_search_takes_the_inputs_as_suggest_takes_its_arguments() -> None:
    inputs = from_flags(Given(model="Qwen3-1.7B", gpus=32, gpu=GPU, batch_size=32, gen_len=2048))
    arch = find_model(inputs.model)
    hardware = Hardware.from_gpu(H100, gpus_per_node=8)
    by_inputs = search(inputs, arch, hardware, top=2)
    by_arguments = suggest(
        arch,
        32,
        GPU.capacity,
        hardware,
        inputs.shape,
        training=inputs.training,
        inference=inputs.inference,
        top=2,
    )
    assert [p.to_dict() for p in by_inputs] == [p.to_dict() for p in by_arguments]
    assert len(by_inputs) == 2


def test_a_split_search_estimates_each_share_once(monkeypatch: pytest.MonkeyPatch) -> None:
    from areal_alloc.search import split
    from areal_alloc.search.ranking import fastest_layouts

    searched: list[int] = []

    def counted(*args: Any, **kwargs: Any) -> Any:
        searched.append(args[1])  # the share's GPU count
        return fastest_layouts(*args, **kwargs)

    monkeypatch.setattr(split, "fastest_layouts", counted)
    inputs = from_flags(Given(model="Qwen3-1.7B", gpus=32, gpu=GPU, batch_size=32, no_ref=True))
    found = SplitSearch(
        find_model(inputs.model),
        inputs.gpus,
        GPU.capacity,
        Hardware.from_gpu(H100, gpus_per_node=8),
        inputs.shape,
        ("megatron", "sglang"),
        (("actor", inputs.training),),
        (inputs.training, inputs.inference),
    )
    first = found.proposals(3)
    once = len(searched)
    # a second ranking of the same search estimates nothing anew: the same layouts
    assert [p.to_dict() for p in found.proposals(3)] == [p.to_dict() for p in first]
    assert len(searched) == once
    assert once
    assert set(found.best_rollout) <= set(found.splits)


def test_one_gpu_cannot_be_split() -> None:
    inputs = from_flags(Given(model="Qwen3-1.7B", gpus=1, gpu=GPU))
    with pytest.raises(AllocationValidationError) as raised:
        search(inputs, find_model(inputs.model), Hardware.from_gpu(H100, gpus_per_node=8))
    assert str(raised.value) == "1 GPU(s): a rollout and a trainer need at least 2"
