"""Hypothesis: every valid allocation round-trips; garbage raises only AllocationError."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable

from hypothesis import assume, example, given, settings
from hypothesis import strategies as st

from areal_alloc import (
    AllocationError,
    ModelAllocation,
    ParallelStrategy,
)
from areal_alloc.legacy import parse_allocation_mode
from areal_alloc.model import BACKEND_DIMS

sizes = st.sampled_from([1, 1, 2, 3, 4, 8, 16])
names = st.none() | st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,8}", fullmatch=True)


@st.composite
def allocations(draw: st.DrawFn) -> ModelAllocation:
    backend = draw(st.sampled_from(sorted(BACKEND_DIMS)))
    allowed = BACKEND_DIMS[backend]
    dims = {letter: draw(sizes) if letter in allowed else 1 for letter in "dtpce"}
    etp = draw(sizes) if backend in ("megatron", "archon") else 1
    try:
        parallel = ParallelStrategy(
            tensor_parallel_size=dims["t"],
            pipeline_parallel_size=dims["p"],
            data_parallel_size=dims["d"],
            context_parallel_size=dims["c"],
            expert_parallel_size=dims["e"],
            expert_tensor_parallel_size=etp,
        )
    except AllocationError:
        assume(False)
        raise
    return ModelAllocation(backend, draw(names), parallel)


@settings(max_examples=400, deadline=None)
@given(allocations())
def test_every_valid_allocation_round_trips(alloc: ModelAllocation) -> None:
    assert ModelAllocation.from_str(str(alloc)) == alloc


ALPHABET = "dtpcex0123456789:[]()|+ .fsdpmegatronsglangvllmattnffnarchonDT_-\t"
mutations = st.text(alphabet=ALPHABET, max_size=60)


def _rejection_seconds(parse: Callable[[str], object], text: str) -> float:
    start = time.perf_counter()
    with contextlib.suppress(AllocationError):
        parse(text)
    return time.perf_counter() - start


def _only_allocation_errors(text: str) -> None:
    for parse in (ModelAllocation.from_str, parse_allocation_mode):
        # any exception other than AllocationError fails the test here
        elapsed = _rejection_seconds(parse, text)
        if elapsed > 0.002:  # a shared machine stalls now and then: a slow input stays slow
            elapsed = min(_rejection_seconds(parse, text) for _ in range(3))
        assert elapsed < 0.002, f"{text!r} took {elapsed * 1e3:.2f} ms"


@settings(max_examples=1500, deadline=None)
@given(mutations)
@example("megatron:(attn:d2|ffn:d2")
@example("((((((")
@example("prcphon:(attn:d8c2|ffn:d2t8)5")
@example("fsdp:d" + "9" * 990)
def test_random_strings_raise_only_allocation_errors(text: str) -> None:
    _only_allocation_errors(text)


@st.composite
def mutated(draw: st.DrawFn) -> str:
    alloc = draw(allocations())
    text = list(str(alloc))
    for _ in range(draw(st.integers(1, 3))):
        position = draw(st.integers(0, len(text)))
        action = draw(st.sampled_from(["insert", "delete", "replace"]))
        char = draw(st.sampled_from(ALPHABET))
        if action == "insert":
            text.insert(position, char)
        elif text and position < len(text):
            if action == "delete":
                del text[position]
            else:
                text[position] = char
    return "".join(text)


@settings(max_examples=1500, deadline=None)
@given(mutated())
def test_mutated_valid_strings_raise_only_allocation_errors(text: str) -> None:
    _only_allocation_errors(text)


@settings(max_examples=200, deadline=None)
@given(st.one_of(st.integers(), st.floats(), st.binary(), st.lists(st.integers()), st.none()))
def test_non_strings_raise_allocation_errors(value: object) -> None:
    for parse in (ModelAllocation.from_str, parse_allocation_mode):
        try:
            parse(value)  # type: ignore[arg-type]
        except AllocationError:
            continue
        raise AssertionError(f"{value!r} was accepted")
