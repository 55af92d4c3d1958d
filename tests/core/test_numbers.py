"""The one reader of numbers: every value gives a number inside its bound or one line."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st

from areal_alloc.errors import AllocationError, AllocationValidationError
from areal_alloc.limits import MAX_COUNT, MAX_NODES
from areal_alloc.numbers import MAX_NUMBER_TEXT, is_number_text, quote, read_float, read_int

# --- integers -----------------------------------------------------------------------

COUNT = "must be an integer from 1 to 1,099,511,627,776"


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (8192, 8192),
        ("8192", 8192),
        (" 8192 ", 8192),  # as OmegaConf's int fields convert
        ("+5", 5),
        ("1_000", 1000),
        (1, 1),
        (MAX_COUNT, MAX_COUNT),
        (str(MAX_COUNT), MAX_COUNT),
    ],
)
def test_integers_are_read(value: object, expected: int) -> None:
    assert read_int(value, "k") == expected


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (True, f"k=true: {COUNT}, not a boolean"),
        (False, f"k=false: {COUNT}, not a boolean"),
        ("true", f"k='true': {COUNT}"),
        (2.0, f"k=2.0: {COUNT}"),  # an int field of a structured config refuses it
        (2.5, f"k=2.5: {COUNT}"),
        ("8192.0", f"k='8192.0': {COUNT}"),
        ("1e3", f"k='1e3': {COUNT}"),
        ("0x10", f"k='0x10': {COUNT}"),
        ("٤", f"k='٤': {COUNT}"),  # Arabic-Indic four: ASCII digits only, as backend strings
        ("４", f"k='４': {COUNT}"),  # a full-width four
        ("²", f"k='²': {COUNT}"),  # isdigit() says yes, int() says no
        ("", f"k='': {COUNT}"),
        ("abc", f"k='abc': {COUNT}"),
        (None, f"k=NoneType: {COUNT}"),
        ([1], f"k=[1]: {COUNT}"),
        ({"a": 1}, f"k={{'a': 1}}: {COUNT}"),
        (0, f"k=0: {COUNT}"),
        (-3, f"k=-3: {COUNT}"),
        ("-3", f"k='-3': {COUNT}"),
        (MAX_COUNT + 1, "k=1,099,511,627,777: the limit is 1,099,511,627,776"),
        (str(MAX_COUNT + 1), "k='1099511627777': the limit is 1,099,511,627,776"),
        (10**30, "k=a 31-digit number: the limit is 1,099,511,627,776"),
        pytest.param(
            10**5000, "k=a 5001-digit number: the limit is 1,099,511,627,776", id="1e5000"
        ),
        pytest.param(-(10**5000), f"k=a negative 5001-digit number: {COUNT}", id="-1e5000"),
        ("1" * 400, "k=a 400-digit number: the limit is 1,099,511,627,776"),
        ("9" * 5000, "k=a 5000-digit number: the limit is 1,099,511,627,776"),
        ("-" + "9" * 5000, f"k=a negative 5000-digit number: {COUNT}"),
        ("x" * 100_000, f"k='{'x' * 59}…' (100,000 characters): {COUNT}"),  # errors.shown
        (float("nan"), f"k=nan: {COUNT}"),
        (float("inf"), f"k=inf: {COUNT}"),
    ],
)
def test_integers_are_refused_in_one_line(value: object, message: str) -> None:
    with pytest.raises(AllocationValidationError) as info:
        read_int(value, "k")
    assert info.value.message == message


NODES = {"minimum": 1, "maximum": MAX_NODES}


@pytest.mark.parametrize(
    ("value", "kwargs", "message"),
    [
        (0, NODES, "cluster.n_nodes=0: must be an integer from 1 to 131,072"),
        (
            "eight",
            {"minimum": 0, "maximum": 1024, "example": 8},
            "cluster.n_nodes='eight': must be an integer from 0 to 1,024, e.g. cluster.n_nodes=8",
        ),
        (10**8, NODES, "cluster.n_nodes=100,000,000: the limit is 131,072"),
    ],
)
def test_the_bound_is_named(value: object, kwargs: dict[str, int], message: str) -> None:
    with pytest.raises(AllocationValidationError) as info:
        read_int(value, "cluster.n_nodes", **kwargs)
    assert info.value.message == message


def test_a_flag_value_is_shown_as_typed() -> None:
    # argparse adds "argument --gen-len: " itself
    with pytest.raises(AllocationValidationError) as info:
        read_int("1099511627777")
    assert info.value.message == "1099511627777: the limit is 1,099,511,627,776"
    with pytest.raises(AllocationValidationError) as info:
        read_int("abc")
    assert info.value.message == f"'abc': {COUNT}"


# --- floats -------------------------------------------------------------------------

FRACTION = "must be a number above 0 and at most 1"


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (0.9, 0.9),
        ("0.9", 0.9),
        (" .5 ", 0.5),
        ("1e-3", 0.001),
        (1, 1.0),
        ("1", 1.0),
        ("5.e-1", 0.5),
    ],
)
def test_floats_are_read(value: object, expected: float) -> None:
    assert read_float(value, "f", minimum=0, maximum=1, above=True) == expected


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (True, f"f=true: {FRACTION}, not a boolean"),
        (0, f"f=0: {FRACTION}"),
        (0.0, f"f=0.0: {FRACTION}"),
        (-1, f"f=-1: {FRACTION}"),
        ("abc", f"f='abc': {FRACTION}"),
        ("nan", f"f='nan': {FRACTION}"),
        ("-inf", f"f='-inf': {FRACTION}"),
        ("Infinity", f"f='Infinity': {FRACTION}"),
        (float("nan"), f"f=nan: {FRACTION}"),
        (float("inf"), "f=inf: the limit is 1"),
        ("1e400", "f='1e400': the limit is 1"),  # finite text, too large for a float
        ("-1e400", f"f='-1e400': {FRACTION}"),
        (1.5, "f=1.5: the limit is 1"),
        (10**400, "f=a 401-digit number: the limit is 1"),  # no OverflowError from float()
        (-(10**400), f"f=a negative 401-digit number: {FRACTION}"),
        ("1" * 400, "f=a 400-digit number: the limit is 1"),
        ("0." + "1" * 400, f"f='0.{'1' * 57}…' (402 characters): {FRACTION}"),
        ("٠.٥", f"f='٠.٥': {FRACTION}"),
        ("1_0.5", "f='1_0.5': the limit is 1"),
        ([0.5], f"f=[0.5]: {FRACTION}"),
    ],
)
def test_floats_are_refused_in_one_line(value: object, message: str) -> None:
    with pytest.raises(AllocationValidationError) as info:
        read_float(value, "f", minimum=0, maximum=1, above=True)
    assert info.value.message == message


def test_a_unit_and_a_closed_bound_are_said() -> None:
    with pytest.raises(AllocationValidationError) as info:
        read_float(-1, "cluster.memory_reserve_gib", minimum=0, maximum=1024, unit="GiB")
    assert info.value.message == (
        "cluster.memory_reserve_gib=-1: must be a number of GiB from 0 to 1,024"
    )
    with pytest.raises(AllocationValidationError) as info:
        read_float("2000", "cluster.memory_reserve_gib", minimum=0, maximum=1024, unit="GiB")
    assert info.value.message == "cluster.memory_reserve_gib='2000': the limit is 1,024 GiB"
    assert read_float(0, "r", minimum=0, maximum=1024) == 0.0  # 0 is inside a closed bound


@pytest.mark.parametrize(
    ("text", "expected"),
    [("80", True), ("1e3", True), ("nan", True), (".5", True), ("H100", False), ("٨٠", False)],
)
def test_number_text(text: str, expected: bool) -> None:
    assert is_number_text(text) is expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (True, "true"),
        (1234567, "1,234,567"),
        (10**24, "a 25-digit number"),
        (10**24 - 1, "999,999,999,999,999,999,999,999"),  # 24 digits are still shown
        (0.5, "0.5"),
        ("a" * 60, f"'{'a' * 60}'"),
        ("a" * 61, f"'{'a' * 59}…' (61 characters)"),
        (
            list(range(100)),
            "[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, … (390 characters)",
        ),
        (object(), "object"),
    ],
)
def test_quote(value: object, expected: str) -> None:
    assert quote(value) == expected


def test_digit_counts_are_exact_at_powers_of_ten() -> None:
    for digits in (25, 100, 400, 4300, 4301, 5000):
        assert quote(10 ** (digits - 1)) == f"a {digits}-digit number"
        assert quote(10**digits - 1) == f"a {digits}-digit number"


# --- properties ---------------------------------------------------------------------

VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.integers(min_value=-(10**6000), max_value=10**6000),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=300),
    st.text(alphabet="0123456789+-._eE infa", max_size=MAX_NUMBER_TEXT + 50),
    st.from_regex(r"\A[+-]?[0-9]{1,6000}\Z"),
    st.lists(st.integers(), max_size=3),
)


def _outcome(read: Callable[[], float]) -> float | str:
    """The number read, or the message of the one AllocationError (any other exception
    fails the test)."""
    try:
        return read()
    except AllocationError as error:
        return error.message


@given(VALUES, st.integers(min_value=-5, max_value=10), st.integers(min_value=0, max_value=2**50))
def test_any_value_gives_an_integer_in_its_bound_or_one_line(
    value: object, minimum: int, span: int
) -> None:
    maximum = minimum + span
    got = _outcome(lambda: read_int(value, "key", minimum=minimum, maximum=maximum))
    if isinstance(got, str):
        assert got.startswith("key=")
        assert "\n" not in got
        assert len(got) < 300
    else:
        assert type(got) is int
        assert minimum <= got <= maximum


@given(VALUES, st.booleans())
def test_any_value_gives_a_finite_float_in_its_bound_or_one_line(
    value: object, above: bool
) -> None:
    got = _outcome(lambda: read_float(value, "key", minimum=0, maximum=1e6, above=above))
    if isinstance(got, str):
        assert got.startswith("key=")
        assert "\n" not in got
        assert len(got) < 300
    else:
        assert type(got) is float
        assert math.isfinite(got)
        assert got > 0 if above else got >= 0
        assert got <= 1e6
