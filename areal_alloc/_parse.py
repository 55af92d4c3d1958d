"""Text to syntax records: lark's LALR parser over ``grammar.lark``, built once, lazily.

A string parsed in an earlier run comes from ``_cache`` without lark. Otherwise
lark is imported on the first parse, never on ``import areal_alloc`` (Hydra
imports our plugin in every app, and most apps never parse an allocation), and a
lean loop drives lark's own tables. Syntax errors come from lark itself and become
:class:`AllocationSyntaxError` with the column and a hint for the usual mistakes;
what the string *means* is judged in ``_build``.
"""

from __future__ import annotations

import functools
import re
from typing import Any, Literal, NamedTuple, cast

from areal_alloc._cache import lookup, remember
from areal_alloc._syntax import RawComponent, RawDim, RawPart
from areal_alloc.errors import (
    AllocationError,
    AllocationSyntaxError,
    AllocationValidationError,
)
from areal_alloc.errors import shown as quoted
from areal_alloc.limits import MAX_LENGTH
from areal_alloc.vocab import missing_hybrid_backend

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


class _Token(NamedTuple):
    """A token as the lean loop makes it: what the callbacks below read of lark's Token."""

    type: str
    value: str
    column: int


def _column(token: Any) -> int:
    return token.column if token.column is not None else 1


_ONE_DIM = re.compile(r"([A-Za-z])([0-9]+)")


def _layout_fields(layout: tuple[Any, ...]) -> dict[str, Any]:
    if isinstance(layout[0], RawPart):
        return {"hybrid": layout}
    return {"dims": layout}


# The callbacks: syntax to records, nothing else. Each takes the children of its
# rule (anonymous tokens such as ':' already left out by lark) as one list.


def _dims(tokens: list[Any]) -> tuple[RawDim, ...]:
    """Split each ``DIMS`` token (``d4t2``) into its dimensions, each with its column."""
    return tuple(
        RawDim(m.group(1), m.group(2), _column(t) + m.start())
        for t in tokens
        for m in _ONE_DIM.finditer(t.value)
    )


def _with_backend(children: list[Any]) -> RawComponent:
    backend = children[0]
    name = children[1][0] if len(children) == 3 else None
    return RawComponent(backend.value, name, _column(backend), **_layout_fields(children[-1]))


def _name_only(children: list[Any]) -> RawComponent:
    name, layout = children
    return RawComponent(None, name[0], name[1] - 1, **_layout_fields(layout))


def _bare(children: list[Any]) -> RawComponent:
    layout = children[0]
    first = layout[0]
    column = first.column - 1 if isinstance(first, RawPart) else first.column
    return RawComponent(None, None, column, **_layout_fields(layout))


def _name(children: list[Any]) -> tuple[str, int]:
    return (children[0].value, _column(children[0]))


def _part(children: list[Any]) -> RawPart:
    label, dims = children
    return RawPart(label.value, _column(label), dims)


def _build() -> Any:
    """lark's parser, analysed from the grammar in this process (about 10 ms).

    Never from lark's grammar cache: that cache is a pickle, and unpickling a
    file is running it. Importing lark costs 40–90 ms anyway, and a string parsed
    in an earlier run needs neither (``_cache``).
    """
    from importlib.resources import files

    from lark import Lark, Transformer

    class ToRaw(Transformer[Any, Any]):
        """Maps each rule to its record; holds no state."""

        single = staticmethod(lambda children: children[0])
        legacy = staticmethod(tuple)
        group = staticmethod(tuple)
        with_backend = staticmethod(_with_backend)
        name_only = staticmethod(_name_only)
        bare = staticmethod(_bare)
        name = staticmethod(_name)
        hybrid = staticmethod(tuple)
        part = staticmethod(_part)
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
    )


@functools.cache
def _parser() -> Any:
    return _build()


class _LeanParser:
    """lark's own LALR tables, contextual terminals and callbacks, driven without its wrappers.

    ``grammar.lark`` stays the one definition of the syntax: the parse table, the
    terminal regexes per parser state (lark's contextual lexer) and the callbacks
    that build the records all come from the lark parser built from it. Only the
    loop that feeds tokens is written here, which saves lark's per-call setup
    (lexer thread, parser state, interactive error hooks). On anything unexpected
    it returns None, and the caller asks lark itself, whose exception carries the
    exact column and expected terminals for the message.
    """

    def __init__(self, lark: Any) -> None:
        from lark.parsers.lalr_analysis import Shift

        frontend = lark.parser
        inner = frontend.parser.parser
        self._lexers = frontend.lexer.lexers
        self._start = inner.parse_table.start_states
        self._end = inner.parse_table.end_states
        # The parse table with each reduction resolved once: (symbols it pops, its
        # callback, the rule it reduces to) instead of a rule looked up per use.
        self._states: dict[Any, dict[str, tuple[bool, Any]]] = {
            state: {
                token: (True, arg)
                if action is Shift
                else (False, (len(arg.expansion), inner.callbacks[arg], arg.origin.name))
                for token, (action, arg) in actions.items()
            }
            for state, actions in inner.parse_table.states.items()
        }
        self._scanners: dict[int, tuple[list[Any], Any]] = {}

    def _scanner(self, state: int) -> tuple[list[Any], Any]:
        """The compiled terminal regexes lark's contextual lexer uses in ``state``."""
        found = self._scanners.get(state)
        if found is None:
            lexer = self._lexers[state]
            found = self._scanners[state] = (list(lexer.scanner._mres), lexer.ignore_types)
        return found

    def parse(self, text: str, start: str) -> Any:
        states = self._states
        state_stack = [self._start[start]]
        values: list[Any] = []
        end_state = self._end[start]
        position, length = 0, len(text)
        while True:
            if position < length:
                patterns, ignore = self._scanner(state_stack[-1])
                for pattern in patterns:
                    match = pattern.match(text, position)
                    if match is not None:
                        break
                else:
                    return None
                value, kind = match.group(0), match.lastgroup or ""
                if kind in ignore:
                    position += len(value)
                    continue
                token = _Token(kind, value, position + 1)
                position += len(value)
            else:
                token = _Token("$END", "", position + 1)
            while True:
                action = states[state_stack[-1]].get(token.type)
                if action is None:
                    return None
                shift, arg = action
                if shift:
                    if token.type == "$END":
                        return None
                    state_stack.append(arg)
                    values.append(token)
                    break
                size, callback, origin = arg
                if size:
                    children = values[-size:]
                    del state_stack[-size:]
                    del values[-size:]
                else:
                    children = []
                values.append(callback(children))
                state_stack.append(states[state_stack[-1]][origin][1])
                if token.type == "$END" and state_stack[-1] == end_state:
                    return values[-1]


@functools.cache
def _lean() -> _LeanParser:
    return _LeanParser(_parser())


def _check_text(text: object, what: str) -> str:
    if not isinstance(text, str):
        raise AllocationValidationError(
            f"{what} must be a string such as 'fsdp:d4t2', got {type(text).__name__} {quoted(text)}"
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
        f"{what} {quoted(text)} holds {char!r} ({name}) at column {index + 1}; only plain ASCII "
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
    seen = lookup(start, text)  # parsed in an earlier run: no lark at all
    if seen is not None:
        return seen
    from lark.exceptions import UnexpectedInput

    result = _lean().parse(text, start)
    if result is None:
        try:  # lark itself, for its exact error (or, should the lean loop ever refuse, the result)
            result = _parser().parse(text, start=start)
        except UnexpectedInput as exc:
            raise _explain(text, exc, start) from None
    remember(start, text, result)
    return result


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

    where = f"at column {column} of {quoted(text)}"
    before = text[: max(column - 1, 0)]
    depth = before.count("(") - before.count(")")
    open_paren = before.rfind("(")
    if depth <= 0:
        expected -= {"RPAR", "VBAR"} if start == "single" else {"RPAR"}
    if start == "single":
        expected.discard("PLUS")
    if before.rstrip()[-1:].isdigit() and kind != "$END":
        expected.add("DIMS")  # the dimensions could go on: DIMS is one token for the whole run

    if kind == "$END" and "RPAR" in expected and open_paren >= 0:
        return AllocationSyntaxError(
            f"unbalanced parentheses in {quoted(text)}: the '(' at column {open_paren + 1} "
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
            f"e.g. {quoted(text[: column - 1] + ':' + text[column:])}",
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
