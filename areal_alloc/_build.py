"""Syntax records to layouts, judging what the string means.

Plain functions, run after parsing: each rejection quotes the value, points at
its column, says what is allowed and shows the arithmetic. The result is the
parts of an allocation (backend, name, :class:`ParallelStrategy`);
``model.ModelAllocation.from_str`` puts them together and keeps the memo.
"""

from __future__ import annotations

from areal_alloc._syntax import RawComponent, RawDim, RawPart
from areal_alloc.errors import (
    AllocationError,
    AllocationValidationError,
    InvalidAllocationModeError,
)
from areal_alloc.errors import shown as quoted
from areal_alloc.limits import MAX_GPUS, grouped
from areal_alloc.strategy import ParallelStrategy
from areal_alloc.vocab import (
    BACKEND_DIMS,
    DIM_NAMES,
    HYBRID_BACKENDS,
    PART_DIMS,
    did_you_mean,
    dimension_not_supported,
    missing_hybrid_backend,
    name_problem,
    unknown_backend,
)

__all__ = ["build_parts", "read_dims", "suggest_backend"]


def _fail(message: str, text: str, column: int | None = None) -> AllocationValidationError:
    return AllocationValidationError(message, text, column)


def suggest_backend(sizes: dict[str, int]) -> str:
    """The training backend the old automatic choice took: fsdp unless p or e > 1."""
    return "megatron" if sizes.get("p", 1) > 1 or sizes.get("e", 1) > 1 else "fsdp"


def read_dims(dims: tuple[RawDim, ...], text: str, allowed: str, owner: str) -> dict[str, int]:
    """Read dimension tokens into ``{letter: size}``, rejecting bad letters and sizes.

    ``owner`` is the backend (``fsdp``) or hybrid part (``attn``) the dims belong
    to; a letter outside ``allowed`` is accepted only with size 1.
    """
    sizes: dict[str, int] = {}
    seen: dict[str, RawDim] = {}
    for dim in dims:
        token = dim.letter + dim.digits
        letter = dim.letter
        if letter not in DIM_NAMES:
            if letter.lower() in DIM_NAMES:
                raise _fail(
                    f"dimension letters are lower case: write "
                    f"{letter.lower() + dim.digits!r}, not {token!r}",
                    text,
                    dim.column,
                )
            raise _fail(
                f"unknown dimension {letter!r} in {token!r}; dimensions are "
                f"d (data), t (tensor), p (pipeline), c (context), e (expert)",
                text,
                dim.column,
            )
        if dim.digits.startswith("0"):
            if dim.digits.strip("0") == "":
                raise _fail(
                    f"{DIM_NAMES[letter]} parallel size must be ≥ 1, got {token!r}",
                    text,
                    dim.column,
                )
            raise _fail(
                f"size {dim.digits!r} of {letter} has a leading zero; "
                f"write {letter + dim.digits.lstrip('0')!r}",
                text,
                dim.column + 1,
            )
        if letter in seen:
            first = seen[letter]
            raise _fail(
                f"{DIM_NAMES[letter]} parallelism ({letter}) is given twice in {owner}: "
                f"{first.letter + first.digits!r} at column {first.column} and "
                f"{token!r} at column {dim.column}; write each dimension once",
                text,
                dim.column,
            )
        seen[letter] = dim
        size = int(dim.digits) if len(dim.digits) <= 24 else MAX_GPUS + 1
        if size > MAX_GPUS:
            shown = token if len(token) <= 26 else f"{letter}<{len(dim.digits)} digits>"
            raise _fail(
                f"{DIM_NAMES[letter]} parallel size {shown} is over the limit of "
                f"{grouped(MAX_GPUS)} GPUs",
                text,
                dim.column,
            )
        if size > 1 and letter not in allowed:
            if owner in PART_DIMS:
                other = "ffn" if owner == "attn" else "attn"
                raise _fail(
                    f"{owner} does not take {DIM_NAMES[letter]} parallelism ({token}); "
                    f"{owner} takes {', '.join(allowed)}; put {letter} in the {other} part",
                    text,
                    dim.column,
                )
            raise _fail(dimension_not_supported(owner, letter, size), text, dim.column)
        sizes[letter] = size
    return sizes


def _written(dims: tuple[RawDim, ...]) -> str:
    return "".join(d.letter + d.digits for d in dims)


def _component_text(raw: RawComponent) -> str:
    """The component as written, without spaces (for messages)."""
    if raw.hybrid is not None:
        layout = "(" + "|".join(f"{p.label}:{_written(p.dims)}" for p in raw.hybrid) + ")"
    else:
        layout = _written(raw.dims)
    name = f"[{raw.name}]" if raw.name is not None else ""
    head = f"{raw.backend or ''}{name}"
    return f"{head}:{layout}" if head else layout


def _missing_backend(raw: RawComponent, text: str) -> AllocationValidationError:
    spec = _component_text(raw)
    if raw.hybrid is not None:
        return _fail(missing_hybrid_backend(spec), text, raw.column)
    if raw.name is not None:
        example = f"fsdp{spec}"
        why = "the backend comes before the name"
    else:
        sizes = {d.letter: int(d.digits) for d in raw.dims if d.digits.isdigit()}
        example = f"{suggest_backend(sizes)}:{spec}"
        why = "the backend says which engine runs the layout"
    return _fail(
        f"Backend must be explicitly specified in {quoted(spec)}: {why}; write e.g. {example!r}",
        text,
        raw.column,
    )


def _check_backend(backend: str, text: str, column: int) -> None:
    if backend not in BACKEND_DIMS:
        raise _fail(unknown_backend(backend), text, column)


def _with_text(error: AllocationError, text: str) -> AllocationValidationError:
    cls = type(error) if isinstance(error, AllocationValidationError) else AllocationValidationError
    return cls(f"{error.message} in {quoted(text.strip())}", text, error.column)


def _plain_strategy(raw: RawComponent, backend: str, text: str) -> ParallelStrategy:
    sizes = read_dims(raw.dims, text, BACKEND_DIMS[backend], backend)
    try:
        return ParallelStrategy(
            tensor_parallel_size=sizes.get("t", 1),
            pipeline_parallel_size=sizes.get("p", 1),
            data_parallel_size=sizes.get("d", 1),
            context_parallel_size=sizes.get("c", 1),
            expert_parallel_size=sizes.get("e", 1),
        )
    except AllocationValidationError as error:
        raise _with_text(error, text) from None


def _product(sizes: dict[str, int], letters: str) -> tuple[str, int]:
    """``('d4·t2·p1·c1', 8)``: the product written out, and its value."""
    total = 1
    for letter in letters:
        total *= sizes[letter]
    return "·".join(f"{letter}{sizes[letter]}" for letter in letters), total


def _hybrid_strategy(
    parts: tuple[RawPart, RawPart], backend: str, text: str, column: int
) -> ParallelStrategy:
    if backend not in HYBRID_BACKENDS:
        raise _fail(
            f"hybrid attn/ffn layouts are for {' and '.join(HYBRID_BACKENDS)} only; "
            f"{backend} takes {', '.join(BACKEND_DIMS[backend])}",
            text,
            column,
        )
    by_label: dict[str, RawPart] = {}
    for part in parts:
        if part.label not in PART_DIMS:
            hint = did_you_mean(part.label, PART_DIMS)
            raise _fail(
                f"unknown part {part.label!r} in a hybrid layout; {hint}"
                f"write BACKEND:(attn:DIMS|ffn:DIMS)",
                text,
                part.column,
            )
        if part.label in by_label:
            raise _fail(
                f"part {part.label!r} is given twice; a hybrid layout has one attn "
                f"part and one ffn part",
                text,
                part.column,
            )
        by_label[part.label] = part
    if parts[0].label == "ffn":
        attn_text, ffn_text = (f"{p.label}:{_written(p.dims)}" for p in (parts[1], parts[0]))
        raise _fail(
            f"attn comes first in a hybrid layout: write "
            f"{backend}:({attn_text}|{ffn_text}), not ffn before attn",
            text,
            parts[0].column,
        )
    attn_part, ffn_part = by_label["attn"], by_label["ffn"]
    attn = read_dims(attn_part.dims, text, PART_DIMS["attn"], "attn")
    ffn = read_dims(ffn_part.dims, text, PART_DIMS["ffn"], "ffn")
    attn = {letter: attn.get(letter, 1) for letter in "dtpc"}
    pp = attn["p"]
    if "p" in ffn and ffn["p"] != pp:
        raise _fail(
            f"Pipeline parallel size of attn and ffn must be identical: "
            f"attn p{pp} ≠ ffn p{ffn['p']} in {quoted(text.strip())}",
            text,
            ffn_part.column,
        )
    ffn.setdefault("p", pp)
    ffn.setdefault("e", 1)
    ffn.setdefault("t", 1)
    attn_formula, world = _product(attn, "dtpc")
    if "d" not in ffn:
        shown, model_parallel = _product(ffn, "etp")
        if world % model_parallel:
            raise InvalidAllocationModeError(
                f"cannot derive ffn d: attn world {attn_formula} = {world} is not "
                f"divisible by ffn {shown} = {model_parallel} in {quoted(text.strip())}",
                text,
                ffn_part.column,
            )
        ffn["d"] = world // model_parallel
    ffn_formula, ffn_world = _product(ffn, "detp")
    if ffn_world != world:
        raise InvalidAllocationModeError(
            f"World size of attn and ffn must be identical: attn {attn_formula} = "
            f"{world} ≠ ffn {ffn_formula} = {ffn_world} in {quoted(text.strip())}",
            text,
            ffn_part.column,
        )
    return ParallelStrategy(
        tensor_parallel_size=attn["t"],
        pipeline_parallel_size=pp,
        data_parallel_size=attn["d"],
        context_parallel_size=attn["c"],
        expert_parallel_size=ffn["e"],
        expert_tensor_parallel_size=ffn["t"],
    )


def build_parts(
    raw: RawComponent, text: str, name: str | None = None
) -> tuple[str, str | None, ParallelStrategy]:
    """Judge one parsed component: its backend, its name and its layout.

    ``name``, when given, overrides the name the string holds.
    """
    if raw.backend is None:
        raise _missing_backend(raw, text)
    backend = raw.backend
    _check_backend(backend, text, raw.column)
    if raw.hybrid is not None:
        parallel = _hybrid_strategy(raw.hybrid, backend, text, raw.column)
    else:
        parallel = _plain_strategy(raw, backend, text)
    final_name = raw.name if name is None else name
    if final_name is not None:
        problem = name_problem(final_name)
        if problem is not None:
            raise _fail(problem, text, raw.column + len(backend) + 1 if name is None else None)
    return backend, final_name, parallel
