"""The one error tree of areal-alloc.

Every error is an :class:`AllocationError`, itself a :class:`ValueError`, so code
that already catches ``ValueError`` keeps working. An error knows the text it is
about and, when it can point at it, the 1-based column of the offending
character; ``str(error)`` is the one-line message followed by the text with a
caret under that column.
"""

from __future__ import annotations

__all__ = [
    "AllocationError",
    "AllocationSyntaxError",
    "AllocationValidationError",
    "InvalidAllocationModeError",
    "render_caret",
]


def render_caret(text: str, column: int, indent: str = "    ") -> str:
    """Return ``text`` and a caret under its 1-based ``column``, on two lines."""
    column = max(1, min(column, len(text) + 1))
    # one printable character per character, so that the caret stays in its column
    shown = "".join(c if c.isprintable() else "?" for c in text.replace("\t", " "))
    return f"{indent}{shown}\n{indent}{' ' * (column - 1)}^"


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
