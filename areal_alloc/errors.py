"""The one error tree of areal-alloc.

Every error is an :class:`AllocationError`, itself a :class:`ValueError`, so code
that already catches ``ValueError`` keeps working. An error knows the text it is
about and, when it can point at it, the 1-based column of the offending
character; ``str(error)`` is the one-line message followed by the text with a
caret under that column.

Every value a message quotes goes through :func:`shown`, the one place that cuts
an over-long value (and states its length), so no message grows with its input.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager, suppress

__all__ = [
    "EXIT_INTERRUPTED",
    "INTERRUPTED",
    "SHOWN",
    "WINDOW",
    "AllocationError",
    "AllocationSyntaxError",
    "AllocationValidationError",
    "InvalidAllocationModeError",
    "clipped",
    "digits",
    "reading",
    "reading_of",
    "render_caret",
    "shown",
]

#: Exit code after Ctrl-C (SIGINT), for the command and the hook alike: 128 + 2, as
#: shells report a process SIGINT ended.
EXIT_INTERRUPTED = 130
#: The one line Ctrl-C ends a run with.
INTERRUPTED = "areal-alloc: interrupted"
#: Characters of a value a message quotes; a longer value is cut and its length stated.
SHOWN = 60
#: Characters of text shown around a caret; a longer text is shown as a window around it.
WINDOW = 72


def clipped(text: str, limit: int = SHOWN) -> str:
    """``text`` itself, or its first ``limit`` characters, ``…`` and its length.

    ``clipped("x" * 100_000)`` → ``'xxx…xxx… (100,000 characters)'``: the one rule for a
    long text in a message (values through :func:`shown`, whole lines in the command).
    """
    if len(text) <= limit:
        return text
    return f"{text[: max(limit - 1, 1)]}… ({len(text):,} characters)"


def digits(number: int) -> int:
    """How many decimal digits ``number`` has, without ``str()`` (refused past 4,300 digits)."""
    n = abs(number)
    if n < 10:
        return 1
    count = int(math.log10(n)) + 1  # a float: off by one near powers of ten, checked below
    if n < 10 ** (count - 1):
        count -= 1
    elif n >= 10**count:
        count += 1
    return count


def shown(value: object, limit: int = SHOWN) -> str:
    """A value as a message quotes it: its ``repr``, cut when long with its length stated.

    ``shown('fsdp:d4')`` → ``"'fsdp:d4'"``; a 100,000-character string →
    ``"'fsdp:d4444…' (100,000 characters)"``; a 400-digit integer → ``'a 400-digit number'``.
    """
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**24:
        return f"a {digits(value)}-digit number"
    if isinstance(value, str):
        if len(value) <= limit:
            return repr(value)
        quoted = repr(value[: limit - 1])
        return f"{quoted[:-1]}…{quoted[-1]} ({len(value):,} characters)"
    try:
        text = repr(value)
    except Exception:  # a repr that fails (or recurses) says at least what the value is
        text = f"<{type(value).__name__}>"
    return clipped(text, limit)


def render_caret(text: str, column: int, indent: str = "    ") -> str:
    """Return ``text`` and a caret under its 1-based ``column``, on two lines.

    A text longer than :data:`WINDOW` is shown as a window of that many characters around
    the column, ``…`` marking what is left out on either side.
    """
    column = max(1, min(column, len(text) + 1))
    start = 0
    if len(text) > WINDOW:
        start = max(0, min(column - 1 - WINDOW // 2, len(text) + 1 - WINDOW))
        end = start + WINDOW
        window = text[start:end]
        before = "…" if start > 0 else ""
        after = "…" if end < len(text) else ""
        text = before + window + after
        column = column - start + len(before)
    # one printable character per character, so that the caret stays in its column
    printable = "".join(c if c.isprintable() else "?" for c in text.replace("\t", " "))
    return f"{indent}{printable}\n{indent}{' ' * (column - 1)}^"


_READING = "areal_alloc_reading"


@contextmanager
def reading(key: str, file: str | None = None) -> Iterator[None]:
    """Mark what is being read: an unexpected error inside carries the key (and the file).

    Code that must stop on any error, such as the Hydra hook, names them with
    :func:`reading_of`; the innermost mark wins. Errors of this tree already name their key.
    """
    try:
        yield
    except AllocationError:
        raise
    except Exception as error:
        if getattr(error, _READING, None) is None:
            with suppress(AttributeError):  # an exception type with __slots__
                setattr(error, _READING, (key, file))
        raise


def reading_of(error: BaseException) -> tuple[str, str | None] | None:
    """The ``(key, file)`` :func:`reading` marked ``error`` with, or None."""
    mark = getattr(error, _READING, None)
    return mark if isinstance(mark, tuple) else None


class AllocationError(ValueError):
    """Root of every error areal-alloc raises about an allocation."""

    message: str
    text: str | None
    column: int | None

    def __init__(self, message: str, text: str | None = None, column: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.text = text
        self.column = column

    def __str__(self) -> str:
        if self.text is None or self.column is None:
            return self.message
        return f"{self.message}\n{render_caret(self.text, self.column)}"

    def __reduce__(self) -> tuple[object, ...]:
        # Keep errors picklable across process-based launchers.
        return (type(self), (self.message, self.text, self.column))


class AllocationSyntaxError(AllocationError):
    """The text is not a well-formed allocation string."""

    text: str
    column: int

    def __init__(self, message: str, text: str, column: int) -> None:
        super().__init__(message, text, column)


class AllocationValidationError(AllocationError):
    """The text is well formed, but the layout it describes is not allowed."""


class InvalidAllocationModeError(AllocationValidationError):
    """Attention and expert layouts of a hybrid layout disagree on world size.

    Kept for code written against the reference implementation.
    """
