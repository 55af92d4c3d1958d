"""The one reader of numbers: every setting, flag and config.json value goes through it.

:func:`read_int` and :func:`read_float` take what a config or a command line
holds (an ``int``, a ``float``, or a string) and return a number inside a named
bound, or raise one :class:`AllocationValidationError` whose one-line message
names the key (or, for a flag, lets argparse name it), quotes the value (cut
when long, with its length) and says what is allowed:

- a boolean is not a number (``max_tokens_per_mb=true`` is refused, not read as 1);
- strings convert as a structured config converts them (OmegaConf's ``IntegerNode``
  and ``FloatNode``: surrounding blanks, a sign, ``_`` between digits), but only
  ASCII digits, as backend strings (``'٤'`` is refused);
- integers are integers: ``2.5``, ``8192.0`` and ``'1e3'`` are not (as an ``int``
  field of a structured config refuses them);
- floats are finite: ``nan`` and ``inf`` are refused;
- the bound is stated: ``the limit is 1,099,511,627,776``;
- huge values (a 5,000-digit string or integer) are answered in one line: their
  length is checked before ``int()`` or ``float()`` sees them, so neither
  ``OverflowError`` nor Python's integer-string-length hint can surface.
"""

from __future__ import annotations

import functools
import math
import re
from collections import abc

from areal_alloc.errors import AllocationValidationError, digits, shown
from areal_alloc.limits import MAX_COUNT, grouped

__all__ = [
    "MAX_NUMBER_TEXT",
    "MAX_SPEED",
    "bounds",
    "divisors",
    "is_number_text",
    "quote",
    "read_float",
    "read_int",
    "read_names",
]

#: Characters of a number written as a string; longer ones are refused unread.
MAX_NUMBER_TEXT = 100

#: Every speed (TFLOP/s, TB/s, GB/s, Gb/s) is above 0 and at most this: a thousand
#: times any published figure (B200: 2,250 dense BF16 TFLOP/s, 1,800 GB/s NVLink).
MAX_SPEED = 1_000_000.0

#: Digits the integers of a message keep before they are counted instead.
_SHOWN_DIGITS = 24


@functools.cache
def divisors(n: int) -> tuple[int, ...]:
    """The divisors of ``n`` ≥ 1, ascending (cached: the layout search asks again and again)."""
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return tuple(sorted({*small, *(n // d for d in small)}))


_INTEGER = re.compile(r"[+-]?[0-9]+(?:_[0-9]+)*")
_DIGITS = r"[0-9]+(?:_[0-9]+)*"
_FLOAT = re.compile(rf"[+-]?(?:{_DIGITS}(?:\.(?:{_DIGITS})?)?|\.{_DIGITS})(?:[eE][+-]?{_DIGITS})?")
_NOT_FINITE = re.compile(r"[+-]?(?:inf|infinity|nan)", re.IGNORECASE)


def _shown_int(number: int) -> str:
    if abs(number) < 10**_SHOWN_DIGITS:
        return grouped(number)
    sign = "negative " if number < 0 else ""
    return f"a {sign}{digits(number)}-digit number"


def quote(value: object) -> str:
    """A value as a message shows it: numbers as numbers, strings quoted, long ones cut."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return _shown_int(value)
    if isinstance(value, float):
        return repr(value)  # 2.0 stays 2.0: an integer setting shows why it was refused
    if isinstance(value, str):
        text = value.strip()
        if _INTEGER.fullmatch(text) and len(text.lstrip("+-")) > _SHOWN_DIGITS:
            sign = "negative " if text.startswith("-") else ""
            return f"a {sign}{len(text.lstrip('+-').replace('_', ''))}-digit number"
        return shown(value)
    # a list or a mapping, OmegaConf's ListConfig and DictConfig too: quoted as written
    containers = (list, tuple, dict, abc.Sequence, abc.Mapping)
    return shown(value) if isinstance(value, containers) else type(value).__name__


def _number(bound: float) -> str:
    bound = float(bound)
    if bound.is_integer() and abs(bound) < 1e15:
        return grouped(int(bound))
    return f"{bound:g}"


def bounds(
    minimum: float, maximum: float, *, above: bool = False, integer: bool = False, unit: str = ""
) -> str:
    """What is allowed, in words: ``an integer from 1 to 131,072``, ``a number above 0 and
    at most 1``, ``a number of GiB from 0 to 1,024``."""
    if integer:
        return f"an integer from {grouped(int(minimum))} to {grouped(int(maximum))}"
    kind = f"a number of {unit}" if unit else "a number"
    if above:
        return f"{kind} above {_number(minimum)} and at most {_number(maximum)}"
    return f"{kind} from {_number(minimum)} to {_number(maximum)}"


def _typed(text: str) -> bool:
    return bool(_FLOAT.fullmatch(text) or _NOT_FINITE.fullmatch(text))


def is_number_text(text: str) -> bool:
    """True for text written as a number (``80``, ``1e3``, ``nan``; ASCII only): what a
    reader of numbers should answer, rather than a lookup of names."""
    return _typed(text.strip())


def _fail(name: str, value: object, rule: str) -> AllocationValidationError:
    if name:
        subject = f"{name}={quote(value)}"
    elif isinstance(value, str) and len(value) <= 40 and _typed(value.strip()):
        subject = value.strip()  # a flag's number as typed (argparse names the flag)
    else:
        subject = quote(value)
    return AllocationValidationError(f"{subject}: {rule}")


def read_int(
    value: object,
    name: str = "",
    *,
    minimum: int = 1,
    maximum: int = MAX_COUNT,
    example: int | None = None,
) -> int:
    """An integer from ``minimum`` to ``maximum``, or one error naming ``name``.

    ``value`` is an ``int`` or a string of ASCII digits (blanks around, a sign and
    ``_`` between digits allowed, as a structured config's int field converts it);
    a boolean, a float or anything else is refused. ``name`` is the key
    (``actor.mb_spec.max_tokens_per_mb``); empty for a flag, whose name argparse adds.
    """
    allowed = f"must be {bounds(minimum, maximum, integer=True)}"
    hint = f", e.g. {name}={example}" if example is not None and name else ""
    if isinstance(value, bool):
        raise _fail(name, value, f"{allowed}, not a boolean{hint}")
    allowed += hint
    if isinstance(value, str):
        text = value.strip()
        if not _INTEGER.fullmatch(text):
            raise _fail(name, value, allowed)
        if len(text) > MAX_NUMBER_TEXT:  # checked before int(): no digit-limit error
            raise _fail(name, value, allowed if text.startswith("-") else _limit(maximum))
        number = int(text)
    elif isinstance(value, int):
        number = value
    else:
        raise _fail(name, value, allowed)
    if number > maximum:
        raise _fail(name, value, _limit(maximum))
    if number < minimum:
        raise _fail(name, value, allowed)
    return number


def _limit(maximum: float) -> str:
    return f"the limit is {_number(float(maximum))}"


def read_float(
    value: object,
    name: str = "",
    *,
    minimum: float,
    maximum: float,
    above: bool = False,
    unit: str = "",
) -> float:
    """A finite number from ``minimum`` (excluded when ``above``) to ``maximum``, in
    ``unit`` (named in the message: ``GiB``).

    ``value`` is an ``int``, a ``float`` or a string written as a number in ASCII
    (``0.9``, ``1e3``, ``.5``); booleans, ``nan``, ``inf`` and anything else are refused.
    """
    allowed = f"must be {bounds(minimum, maximum, above=above, unit=unit)}"
    limit = f"the limit is {_number(maximum)}" + (f" {unit}" if unit else "")
    if isinstance(value, bool):
        raise _fail(name, value, f"{allowed}, not a boolean")
    if isinstance(value, str):
        text = value.strip()
        if _NOT_FINITE.fullmatch(text) or not _FLOAT.fullmatch(text):
            raise _fail(name, value, allowed)
        if len(text) > MAX_NUMBER_TEXT:  # refused unread, as integers are
            if _INTEGER.fullmatch(text) and not text.startswith("-"):
                raise _fail(name, value, limit)
            raise _fail(name, value, allowed)
        number = float(text)  # at most 100 ASCII characters: never raises
        if math.isinf(number):  # '1e400': a finite text too large for a float
            raise _fail(name, value, limit if number > 0 else allowed)
    elif isinstance(value, int):
        if value > maximum:  # compared as integers: no OverflowError from float()
            raise _fail(name, value, limit)
        if value < minimum:
            raise _fail(name, value, allowed)
        number = float(value)
    elif isinstance(value, float):
        number = value
    else:
        raise _fail(name, value, allowed)
    if math.isnan(number):
        raise _fail(name, value, allowed)
    if number > maximum:
        raise _fail(name, value, limit)
    if number < minimum or (above and number == minimum):
        raise _fail(name, value, allowed)
    return number


def read_names(value: object) -> tuple[str, ...] | None:
    """Names given as one comma-separated string (``output,round``: a setting's, a flag's)
    or a list of them (a Hydra ListConfig too); ``()`` when not given, None when it is
    neither (the caller's one line names the setting)."""
    if value is None or value == "":
        return ()
    if isinstance(value, str):
        names = [name.strip() for name in value.split(",")]
    elif isinstance(value, (list, tuple)) or type(value).__name__ == "ListConfig":
        names = [str(name).strip() for name in value]  # type: ignore[attr-defined]
    else:
        return None
    return tuple(name for name in names if name)
