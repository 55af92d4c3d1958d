"""Host time as a term of its own (``areal_alloc.estimate.speed_host``): per decoder layer
and pass for the engines that run Hugging Face code, the longer of host and GPU; and a
forward-only engine timed as one forward pass, in ``explain`` as in the plan's pace."""

from __future__ import annotations

import json

import pytest

from areal_alloc.catalogue import find_gpu, find_model
from areal_alloc.estimate.speed import StepEstimate
from areal_alloc.estimate.speed_host import BACKWARD_S, FORWARD_S, OPTIMIZER_S
from areal_alloc.estimate.speed_training import training_step
from areal_alloc.estimate.system import Hardware
from areal_alloc.model import ModelAllocation
from tests.conftest import MainCli

H200 = Hardware.from_gpu(find_gpu("H200"), 8)


def _step(
    backend: str, model: str, tokens: int, recompute: str, forward_only: bool = False
) -> StepEstimate:
    parallel = ModelAllocation.from_str(f"{backend}:d1").parallel
    return training_step(
        backend,
        find_model(model),
        parallel,
        H200,
        tokens_per_step=tokens,
        tokens_per_micro_batch=tokens,
        sequence_length=tokens,
        recompute=recompute,
        forward_only=forward_only,
    )


# (backend, model, tokens, recompute, forward only) → the host term's name and seconds
@pytest.mark.parametrize(
    ("backend", "model", "tokens", "recompute", "forward_only", "name", "host"),
    [
        # host-bound: forward, recomputation, backward per layer + the optimizer step
        (
            "fsdp",
            "Qwen3-0.6B",
            8192,
            "full",
            False,
            "host (beyond the GPU)",
            28 * (2 * FORWARD_S + BACKWARD_S + OPTIMIZER_S),
        ),
        (
            "fsdp",
            "Qwen3-1.7B",
            4096,
            "none",
            False,
            "host (beyond the GPU)",
            28 * (FORWARD_S + BACKWARD_S + OPTIMIZER_S),
        ),
        ("fsdp", "Qwen3-0.6B", 8192, "full", True, "host (beyond the GPU)", 28 * FORWARD_S),
        # GPU-bound: hidden under the GPU's time
        ("fsdp", "Qwen3-8B", 16384, "full", True, "host", 36 * FORWARD_S),
        ("archon", "Qwen3-8B", 16384, "full", False, "host", 36 * (4 * FORWARD_S + OPTIMIZER_S)),
    ],
)
def test_host_time_is_a_term_and_the_step_the_longer(
    backend: str,
    model: str,
    tokens: int,
    recompute: str,
    forward_only: bool,
    name: str,
    host: float,
) -> None:
    step = _step(backend, model, tokens, recompute, forward_only)
    term = next(t for t in step.terms if t.name.startswith("host"))
    gpu = sum(t.seconds for t in step.terms if not t.name.startswith("host") and not t.hidden)
    assert term.name == name
    assert "measured by this project on an NVIDIA H200" in term.formula
    assert step.seconds == pytest.approx(max(gpu, host))
    assert term.hidden == (host <= gpu)


def test_the_measured_figures_per_layer() -> None:
    assert pytest.approx((2.22e-3, 4.44e-3, 5.18e-3), abs=1e-5) == (
        FORWARD_S,
        BACKWARD_S,
        OPTIMIZER_S,
    )


def test_megatron_has_no_host_term() -> None:
    step = _step("megatron", "Qwen3-0.6B", 8192, "full")
    assert not [t for t in step.terms if t.name.startswith("host")]


def test_a_forward_pass_is_the_forward_third_of_the_compute() -> None:
    trained = _step("megatron", "Qwen3-8B", 16384, "none")
    forward = _step("megatron", "Qwen3-8B", 16384, "full", forward_only=True)
    # GEMMs 3 → 1 forward, the flash attention 3.5 → 1: under a third of the step
    assert forward.terms[0].seconds < trained.terms[0].seconds / 3
    assert forward.terms[0].formula.endswith("(a forward pass)")


def test_explain_times_a_forward_only_engine_as_a_forward(main_cli: MainCli) -> None:
    """Issue 28: Qwen3-8B at 32,768 tokens on an H200 was shown 6.31 s (a training step)
    where the reference's engine measured 1.62 s for the forward."""
    done = main_cli(
        *("explain", "fsdp:d1", "--model", "Qwen3-8B", "--gpu", "H200", "--tokens", "32768"),
        *("--tokens-per-step", "32768", "--seq-len", "32768", "--optimizer", "none", "--json"),
    )
    assert done.returncode == 0
    training = json.loads(done.stdout)["training"]
    assert training["step_seconds"] == pytest.approx(1.97, abs=0.01)
    assert [t["name"] for t in training["terms"]] == ["compute", "element-wise", "host"]
