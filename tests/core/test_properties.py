"""Hypothesis: every valid allocation round-trips; garbage raises only AllocationError."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

from areal_alloc import (
    AllocationError,
    ModelAllocation,
    ParallelStrategy,
)
from areal_alloc.legacy import parse_allocation_mode
from areal_alloc.vocab import BACKEND_DIMS
from tests.conftest import examples

# small sizes, and sizes up to the documented bound (areal_alloc.limits.MAX_GPUS)
sizes = st.one_of(
    st.sampled_from([1, 1, 2, 3, 4, 8, 16]),
    st.sampled_from([2**k for k in range(5, 21)]),
)
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


#: allocations() filters out most of what it draws by design (only valid layouts): on a
#: tenth of the examples Hypothesis may call that too much filtering, by chance
FILTERED = [HealthCheck.filter_too_much]


@pytest.mark.slow
@settings(max_examples=examples(400), deadline=None, suppress_health_check=FILTERED)
@given(allocations())
def test_every_valid_allocation_round_trips(alloc: ModelAllocation) -> None:
    assert ModelAllocation.from_str(str(alloc)) == alloc


ALPHABET = "dtpcex0123456789:[]()|+ .fsdpmegatronsglangvllmattnffnarchonDT_-\t"
mutations = st.text(alphabet=ALPHABET, max_size=60)


def _check_error(text: str, error: AllocationError) -> None:
    """An error points inside the text (or just past it) and quotes what it rejects."""
    if error.column is not None:
        assert 1 <= error.column <= len(text) + 1, (text, error.column)
        assert error.text == text
        shown = str(error).splitlines()
        assert len(shown) == 3
        assert shown[2].index("^") == 4 + error.column - 1
    assert "\n" not in error.message, error.message  # one line


def _only_allocation_errors(text: str) -> None:
    for parse in (ModelAllocation.from_str, parse_allocation_mode):
        # any exception other than AllocationError fails the test here
        try:
            parsed = parse(text)
        except AllocationError as error:
            _check_error(text, error)
            continue
        # accepted: the canonical form parses back to the same thing
        assert parse(str(parsed)) == parsed


@pytest.mark.slow
@settings(max_examples=examples(1500), deadline=None)
@given(mutations)
@example("megatron:(attn:d2|ffn:d2")
@example("((((((")
@example("prcphon:(attn:d8c2|ffn:d2t8)5")
@example("fsdp:d" + "9" * 990)
@example("fsdp:d\uff14t2")
@example("megatron:d100000000t8")
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


@pytest.mark.slow
@settings(max_examples=examples(1500), deadline=None)
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


# --- legacy strings, rank groups and whole configs --------------------------------


@st.composite
def legacy_modes(draw: st.DrawFn) -> str:
    text = ""
    anchor: ModelAllocation | None = None
    for index in range(draw(st.integers(1, 4))):
        if anchor is not None and draw(st.booleans()):
            # colocate with the group's anchor: the same layout under a new name
            member = ModelAllocation(anchor.backend, f"c{index}", anchor.parallel)
            text += "|" + str(member)
            continue
        alloc = draw(allocations())
        anchor = ModelAllocation(alloc.backend, f"c{index}", alloc.parallel)
        text += ("+" if text else "") + str(anchor)
    return text


@pytest.mark.slow
@settings(max_examples=examples(200), deadline=None, suppress_health_check=FILTERED)
@given(legacy_modes())
def test_legacy_modes_round_trip(text: str) -> None:
    mode = parse_allocation_mode(text)
    assert parse_allocation_mode(str(mode)) == mode
    assert mode.world_size == sum(
        a.parallel.world_size for a in mode.allocations if not a.scheduling_strategy.is_colocated
    )


@pytest.mark.slow
@settings(max_examples=examples(200), deadline=None, suppress_health_check=FILTERED)
@given(allocations(), st.sampled_from(["tp-cp-ep-dp-pp", "tp-cp-ep-pp-dp"]))
def test_rank_groups_partition_the_world(alloc: ModelAllocation, order: str) -> None:
    from areal_alloc import AllocationValidationError
    from areal_alloc.rankgroups import all_rank_groups

    assume(alloc.parallel.world_size <= 4096)  # every group of every kind is built here
    try:
        groups = all_rank_groups(alloc, order)
    except AllocationValidationError:
        assume(False)  # a layout Megatron itself refuses in this order
        raise
    world = list(range(alloc.parallel.world_size))
    for name, ranks in groups.items():
        assert sorted(r for g in ranks for r in g) == world, name
        assert len({len(g) for g in ranks}) == 1, name


values = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-2, 20),
    st.sampled_from(
        [
            "",
            "fsdp:d4",
            "sglang:d2t4",
            "megatron:d2p2",
            "colocation",
            "actor",
            "separation",
            "rollout",
            "train",
            "vllm:d1t2",
            "fsdp.d4",
            "x",
        ]
    ),
)
sections = st.dictionaries(
    st.sampled_from(
        [
            "backend",
            "scheduling_strategy",
            "engine_type",
            "rollout",
            "train",
            "kl_ctl",
            "weight_update_mode",
            "path",
            "model_shape",
            "type",
            "target",
            "num_layers",
        ]
    ),
    st.recursive(
        values,
        lambda inner: st.dictionaries(
            st.sampled_from(["backend", "type", "target", "num_layers", "n_nodes"]),
            inner,
            max_size=3,
        ),
        max_leaves=6,
    ),
    max_size=5,
)
configs = st.dictionaries(
    st.sampled_from(
        [
            "actor",
            "critic",
            "ref",
            "rollout",
            "teacher",
            "cluster",
            "model_shape",
            "allocation_mode",
            "other",
        ]
    ),
    st.one_of(sections, values),
    max_size=6,
)


@pytest.mark.slow
@settings(max_examples=examples(500), deadline=None)
@given(configs)
def test_any_config_gives_a_plan_or_an_allocation_error(config: dict[str, object]) -> None:
    from omegaconf import OmegaConf

    from areal_alloc import validate

    for form in (config, OmegaConf.create(config)):
        try:
            plan = validate(form)
        except AllocationError as error:
            rejected: AllocationError | None = error
        else:
            rejected = None
        if rejected is not None:
            assert "\n" not in rejected.message, rejected.message
            continue
        separated = [e for e in plan.engines if e.active and e.gpus]
        assert plan.total_gpus == sum(e.allocation.parallel.world_size for e in separated)
        assert plan.cpu_only or plan.total_gpus <= plan.capacity
        # every separated engine is placed on exactly its GPUs, none shared between two
        placed = {p.key: p.size for p in plan.placements}
        assert plan.cpu_only or placed == {e.key: e.gpus for e in separated}
        runs = sorted(run for p in plan.placements for run in p.runs)
        assert all(a[1] <= b[0] for a, b in itertools.pairwise(runs))


@pytest.mark.slow
@settings(max_examples=examples(300), deadline=None)
@given(
    st.sampled_from(["fsdp", "megatron", "sglang"]),
    st.integers(1, 2**64),
    st.integers(1, 2**64),
    st.integers(0, 2**64),
)
def test_sizes_of_any_magnitude_give_a_plan_or_a_bounded_error(
    backend: str, dp: int, n_nodes: int, per_node: int
) -> None:
    from areal_alloc import validate
    from areal_alloc.limits import MAX_GPUS

    key = "rollout" if backend == "sglang" else "actor"
    config = {
        key: {"backend": f"{backend}:d{dp}"},
        "cluster": {"n_nodes": n_nodes, "n_gpus_per_node": per_node},
    }
    try:
        plan = validate(config)
    except AllocationError as error:
        message = error.message
    else:
        message = ""
    if message:
        assert any(word in message for word in ("limit", "need", "fit")), message
        return
    assert dp <= MAX_GPUS
    assert plan.capacity <= MAX_GPUS
    if not plan.cpu_only:
        from areal_alloc.cli.render import render_plan

        assert len(render_plan(plan).splitlines()) < 70  # a summarised node map


@pytest.mark.slow
@settings(max_examples=examples(1500), deadline=None)
@given(st.one_of(mutations, mutated(), legacy_modes()), st.sampled_from(["single", "legacy"]))
def test_the_lean_loop_parses_exactly_as_lark(text: str, start: str) -> None:
    """The lean LALR loop over lark's tables gives lark's result, or steps aside for its error."""
    from lark.exceptions import UnexpectedInput

    from areal_alloc._parse import _lean, _parser

    lean = _lean().parse(text, start)
    try:
        expected = _parser().parse(text, start=start)
    except UnexpectedInput:
        assert lean is None, text
        return
    assert lean == expected, text
