"""Text to syntax tree: lark's LALR parser over ``grammar.lark``, built once, lazily.

lark is imported on the first parse, never on ``import areal_alloc``: Hydra
imports our plugin in every app, and most apps never parse an allocation.
Syntax errors become :class:`AllocationSyntaxError` with the column and a hint
for the usual mistakes; what the string *means* is judged in ``_build``.
"""

from __future__ import annotations

import functools
import re
from typing import TYPE_CHECKING, Any, Literal, cast

from areal_alloc._syntax import RawComponent, RawDim, RawPart
from areal_alloc.errors import (
    AllocationError,
    AllocationSyntaxError,
    AllocationValidationError,
)
from areal_alloc.limits import MAX_LENGTH
from areal_alloc.vocab import missing_hybrid_backend

if TYPE_CHECKING:
    from lark import Token

__all__ = ["Groups", "parse_legacy", "parse_single"]

Groups = tuple[tuple[RawComponent, ...], ...]

_TERMINALS = {
    "COLON": "':'",
    "LSQB": "'['",
    "RSQB": "']'",
    "LPAR": "'('",
    "RPAR": "')'",
    "VBAR": "'|'",
    "PLUS": "'+'",
    "DIMS": "a dimension such as d4",
    "BACKEND": "a backend such as fsdp",
    "NAME": "a name",
    "$END": "the end",
}


def _column(token: Token) -> int:
    return token.column if token.column is not None else 1


_ONE_DIM = re.compile(r"([A-Za-z])([0-9]+)")


def _dims(*tokens: Token) -> tuple[RawDim, ...]:
    """Split each ``DIMS`` token (``d4t2``) into its dimensions, each with its column."""
    return tuple(
        RawDim(m.group(1), m.group(2), _column(t) + m.start())
        for t in tokens
        for m in _ONE_DIM.finditer(t.value)
    )


def _layout_fields(layout: tuple[Any, ...]) -> dict[str, Any]:
    if isinstance(layout[0], RawPart):
        return {"hybrid": layout}
    return {"dims": layout}


def _with_backend(backend: Token, *rest: Any) -> RawComponent:
    name = rest[0][0] if len(rest) == 2 else None
    return RawComponent(backend.value, name, _column(backend), **_layout_fields(rest[-1]))


def _name_only(name: tuple[str, int], layout: tuple[Any, ...]) -> RawComponent:
    return RawComponent(None, name[0], name[1] - 1, **_layout_fields(layout))


def _bare(layout: tuple[Any, ...]) -> RawComponent:
    first = layout[0]
    column = first.column - 1 if isinstance(first, RawPart) else first.column
    return RawComponent(None, None, column, **_layout_fields(layout))


def _build() -> Any:
    from importlib.resources import files

    from lark import Lark, Transformer, v_args

    # The transformer only maps syntax to records; it holds no state.
    @v_args(inline=True)
    class ToRaw(Transformer[Any, Any]):
        def single(self, component: RawComponent) -> RawComponent:
            return component

        def legacy(self, *groups: tuple[RawComponent, ...]) -> Groups:
            return groups

        def group(self, *components: RawComponent) -> tuple[RawComponent, ...]:
            return components

        with_backend = staticmethod(_with_backend)
        name_only = staticmethod(_name_only)
        bare = staticmethod(_bare)

        def name(self, token: Token) -> tuple[str, int]:
            return (token.value, _column(token))

        def hybrid(self, first: RawPart, second: RawPart) -> tuple[RawPart, RawPart]:
            return (first, second)

        def part(self, label: Token, dims: tuple[RawDim, ...]) -> RawPart:
            return RawPart(label.value, _column(label), dims)

        dims = staticmethod(_dims)

    grammar = files("areal_alloc").joinpath("grammar.lark").read_text(encoding="utf-8")
    return Lark(
        grammar,
        start=["single", "legacy"],
        parser="lalr",
        lexer="contextual",
        transformer=ToRaw(),
        propagate_positions=False,
        maybe_placeholders=False,
        cache=_cache_file(),
    )


def _cache_file() -> str | bool:
    """Where lark keeps the analysed grammar: a private folder of the user's cache.

    lark checks the grammar's hash and its own version before using the file, so
    a stale cache is rebuilt. Not /tmp: the cache is a pickle, and a shared
    folder would let another user plant one. Without a writable home, no cache.
    """
    import os
    import sys

    from lark import __version__ as lark_version

    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    folder = os.path.join(base, "areal-alloc")
    try:
        os.makedirs(folder, mode=0o700, exist_ok=True)
    except OSError:
        return False
    version = "".join(map(str, sys.version_info[:2]))
    return os.path.join(folder, f"grammar-lark{lark_version}-py{version}.cache")


@functools.cache
def _parser() -> Any:
    return _build()


def _check_text(text: object, what: str) -> str:
    if not isinstance(text, str):
        raise AllocationValidationError(
            f"{what} must be a string such as 'fsdp:d4t2', got {type(text).__name__} {text!r}"[:300]
        )
    if len(text) > MAX_LENGTH:
        raise AllocationValidationError(
            f"{what} is {len(text)} characters long; the limit is {MAX_LENGTH}"
        )
    if not text.strip():
        raise AllocationValidationError(
            f"{what} is empty; write BACKEND:DIMS, e.g. 'fsdp:d4t2' or 'sglang:d2t4'"
        )
    if not text.isascii() or not text.replace("\t", " ").isprintable():
        raise _odd_character(text, what)
    return text


def _odd_character(text: str, what: str) -> AllocationSyntaxError:
    """Name the first character outside printable ASCII, with its column and a fix."""
    import unicodedata

    index = next(
        i
        for i, char in enumerate(text)
        if not (char.isascii() and (char.isprintable() or char == "\t"))
    )
    char = text[index]
    name = unicodedata.name(char, f"U+{ord(char):04X}")
    plain = unicodedata.normalize("NFKC", char)
    hint = f"; write {plain!r}" if plain != char and plain.isascii() and plain.isprintable() else ""
    return AllocationSyntaxError(
        f"{what} {text!r} holds {char!r} ({name}) at column {index + 1}; only plain ASCII "
        f"letters, digits and ':[]()|+' are allowed{hint}",
        text,
        index + 1,
    )


def parse_single(text: object) -> RawComponent:
    """Parse one component (an engine's ``backend`` field) into its syntax record."""
    checked = _check_text(text, "allocation string")
    return cast(RawComponent, _parse(checked, "single"))


def parse_legacy(text: object) -> Groups:
    """Parse a legacy ``allocation_mode`` string into its groups of components."""
    checked = _check_text(text, "allocation_mode")
    return cast(Groups, _parse(checked, "legacy"))


def _parse(text: str, start: Literal["single", "legacy"]) -> Any:
    from lark.exceptions import UnexpectedInput

    try:
        return _parser().parse(text, start=start)
    except UnexpectedInput as exc:
        raise _explain(text, exc, start) from None


def _describe(expected: set[str]) -> str:
    names = sorted({_TERMINALS.get(e, e) for e in expected}) or [_TERMINALS["$END"]]
    if len(names) == 1:
        return names[0]
    return ", ".join(names[:-1]) + " or " + names[-1]


def _explain(text: str, exc: Any, start: str) -> AllocationError:
    """Turn lark's exception into one clear sentence with the column."""
    from lark.exceptions import UnexpectedCharacters, UnexpectedToken

    expected: set[str] = set()
    if isinstance(exc, UnexpectedCharacters):
        expected = set(exc.allowed or ())
        column = exc.column
        position = exc.pos_in_stream if exc.pos_in_stream is not None else column - 1
        found = text[position] if position < len(text) else ""
        kind = "CHAR"
    elif isinstance(exc, UnexpectedToken):
        expected = set(exc.expected or ())
        token = exc.token
        kind = token.type
        found = "" if kind == "$END" else str(token.value)
        column = token.column if kind != "$END" and token.column else len(text) + 1
    else:  # UnexpectedEOF
        expected = set(getattr(exc, "expected", ()) or ())
        kind, found, column = "$END", "", len(text) + 1

    where = f"at column {column} of {text!r}"
    before = text[: max(column - 1, 0)]
    depth = before.count("(") - before.count(")")
    open_paren = before.rfind("(")
    if depth <= 0:
        expected -= {"RPAR", "VBAR"} if start == "single" else {"RPAR"}
    if start == "single":
        expected.discard("PLUS")

    if kind == "$END" and "RPAR" in expected and open_paren >= 0:
        return AllocationSyntaxError(
            f"unbalanced parentheses in {text!r}: the '(' at column {open_paren + 1} "
            f"is never closed; add ')' after the ffn part",
            text,
            open_paren + 1,
        )
    if found == ")" and depth <= 0:
        return AllocationSyntaxError(
            f"unbalanced parentheses: the ')' {where} has no matching '('; "
            f"hybrid layouts are written BACKEND:(attn:DIMS|ffn:DIMS)",
            text,
            column,
        )
    if found == "." and "COLON" in expected:
        return AllocationSyntaxError(
            f"unexpected '.' {where}: use ':' between the backend and its dimensions, "
            f"e.g. {text[: column - 1] + ':' + text[column:]!r}",
            text,
            column,
        )
    if found in ("attn", "ffn") and "LPAR" in expected:
        return AllocationSyntaxError(
            f"a hybrid layout needs parentheses {where}: write "
            f"BACKEND:(attn:DIMS|ffn:DIMS), e.g. 'megatron:(attn:d4t2|ffn:d2e4)'",
            text,
            column,
        )
    if found == "|" and start == "single":
        head = text.lstrip().split(":", 1)[0].strip()
        if head in ("attn", "ffn"):
            layout = "(" + "".join(text.split()) + ")"
            return AllocationValidationError(missing_hybrid_backend(layout), text, 1)
        return AllocationSyntaxError(
            f"unexpected '|' {where}: an engine's backend field holds one component; "
            f"to share another engine's GPUs set its scheduling_strategy to "
            f"colocation with that target",
            text,
            column,
        )
    if found == "+" and start == "single":
        return AllocationSyntaxError(
            f"unexpected '+' {where}: one backend field holds one component; give each "
            f"engine its own backend field",
            text,
            column,
        )
    if depth > 0 and "BACKEND" in expected:
        expected = (expected - {"BACKEND"}) | {"'attn:' or 'ffn:'"}
    shown = f"{found!r}" if found else "end of input"
    return AllocationSyntaxError(
        f"unexpected {shown} {where}; expected {_describe(expected)}",
        text,
        column,
    )
