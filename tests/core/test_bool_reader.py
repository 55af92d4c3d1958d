"""The config's bool settings read as OmegaConf's bool fields convert them.

:func:`areal_alloc._config.read_bool` mirrors omegaconf 2.3's
``BooleanNode._validate_and_convert_impl`` (the version the reference's loader runs,
AReaL cbff54d6): every value below goes through both, and they agree on taking it, on the
bool, and on refusing it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from omegaconf.errors import ValidationError
from omegaconf.nodes import BooleanNode

from areal_alloc import AllocationValidationError
from areal_alloc._config import read_bool
from areal_alloc.cli import main

_BOOL = (
    "must be true or false (OmegaConf's bool fields also take yes/no, y/n, on/off in any "
    "case, and integers: 0 is false, any other true)"
)


def _omegaconf(value: object) -> bool | None:
    """OmegaConf's own conversion: the bool, or None where it refuses the value."""
    try:
        return bool(BooleanNode()._validate_and_convert_impl(value))
    except ValidationError:
        return None


def _ours(value: object) -> bool | None:
    """Ours: the bool, or None where it refuses the value (in its one line)."""
    try:
        return read_bool(value, "actor.gradient_checkpointing")
    except AllocationValidationError as error:
        message = error.message
    if not (message.startswith("actor.gradient_checkpointing=") and message.endswith(_BOOL)):
        raise AssertionError(f"not the reader's line: {message}")
    return None


TABLE: list[tuple[object, bool | None]] = [
    (True, True),
    (False, False),
    (0, False),
    (1, True),
    (3, True),  # any int: non-zero is true (`entropy_requires_grad: 3`)
    (-1, True),
    (10**30, True),
    ("0", False),
    ("1", True),
    ("-7", True),
    ("+0", False),
    (" 1 ", True),  # int() takes blanks around
    ("\t0\n", False),
    ("1_000", True),  # and underscores between digits
    ("0_0", False),
    ("١", True),  # and any Unicode digit
    ("yes", True),
    ("Y", True),
    ("On", True),
    ("TRUE", True),
    ("no", False),
    ("N", False),
    ("oFF", False),
    ("False", False),
    (" yes", None),  # the words are not stripped
    ("yes ", None),
    ("", None),
    ("maybe", None),
    ("t", None),
    ("f", None),
    ("1.0", None),  # int() refuses a float's text
    ("1.5", None),
    ("0x1", None),
    ("1__0", None),
    ("9" * 5000, None),  # past int()'s 4,300 digits
    (1.0, None),  # a float, even a whole one
    (0.0, None),
    (1.5, None),
    (float("nan"), None),
    (None, None),
    ([1], None),
    ({"a": 1}, None),
    (b"1", None),
]


@pytest.mark.parametrize(("value", "expected"), TABLE)
def test_the_table_reads_as_omegaconf_converts(value: object, expected: bool | None) -> None:
    assert _omegaconf(value) == expected
    assert _ours(value) == expected


@given(
    st.one_of(
        st.booleans(),
        st.integers(),
        st.floats(allow_nan=False),
        st.text(max_size=12),
        st.integers().map(str),
        st.sampled_from(["yes", "y", "on", "true", "no", "n", "off", "false"]).flatmap(
            lambda word: st.sampled_from(
                [word, word.upper(), word.title(), f" {word}", f"{word}\n"]
            )
        ),
        st.from_regex(r"\A[ \t]*[+-]?[0-9](_?[0-9])*[ \t]*\Z"),
        st.floats().map(str),
    )
)
def test_any_value_reads_as_omegaconf_converts(value: Any) -> None:
    assert _ours(value) == _omegaconf(value)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("maybe", f"actor.gradient_checkpointing='maybe': {_BOOL}"),
        (1.5, f"actor.gradient_checkpointing=1.5: {_BOOL}"),
        (1.0, f"actor.gradient_checkpointing=1.0: {_BOOL}"),
        (
            "x" * 1000,
            "actor.gradient_checkpointing='" + "x" * 59 + "…' (1,000 characters): " + _BOOL,
        ),
    ],
)
def test_a_refused_value_is_one_line(value: object, message: str) -> None:
    with pytest.raises(AllocationValidationError) as info:
        read_bool(value, "actor.gradient_checkpointing")
    assert info.value.message == message


@pytest.mark.parametrize(
    ("written", "code", "said"),
    [
        # the reference's loader takes these (run through it: AReaL cbff54d6)
        ("3", 0, ""),
        ("'1_0'", 0, ""),
        ("y", 0, ""),  # YAML 1.1 reads y as a string; OmegaConf's bool field takes it
        ("' 0 '", 0, ""),
        # and refuses these in OmegaConf's words, at the merge (the strict-key check)
        (
            "1.0",
            1,
            "actor.megatron.entropy_requires_grad=1.0: the reference's loader (areal cbff54d6) "
            "refuses it: Value '1.0' is not a valid bool (type float) (the field is bool); "
            "give true or false (or yes/no, y/n, on/off in any case, or an integer: 0 is false)",
        ),
        (
            "' yes'",
            1,
            "actor.megatron.entropy_requires_grad=' yes': the reference's loader (areal "
            "cbff54d6) refuses it: Value ' yes' is not a valid bool (type str) (the field is "
            "bool); give true or false (or yes/no, y/n, on/off in any case, or an integer: 0 "
            "is false)",
        ),
    ],
)
def test_a_config_reads_its_flags_as_the_reference_does(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], written: str, code: int, said: str
) -> None:
    experiment = tmp_path / "exp.yaml"
    experiment.write_text(
        "cluster: {n_nodes: 1, n_gpus_per_node: 8}\n"
        f"actor: {{backend: 'megatron:d8', megatron: {{entropy_requires_grad: {written}}}}}\n"
    )
    assert main(["check", "--quiet", "--on-memory", "off", str(experiment)]) == code
    err = capsys.readouterr().err
    assert err == (f"areal-alloc check: {said}\n" if code else "")
