"""The one reader of files: every file gives its value or one error line naming it and why."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from areal_alloc import files
from areal_alloc.cli import main
from areal_alloc.compose import compose_file
from areal_alloc.errors import AllocationError, AllocationValidationError
from areal_alloc.files import CONFIG_JSON, YAML, read_json, read_yaml
from areal_alloc.model_shape import ModelShape, read_config_json
from tests.conftest import COMMAND

#: A config.json of a small dense model, as Hugging Face writes it.
CONFIG = {
    "architectures": ["Qwen2ForCausalLM"],
    "hidden_size": 896,
    "intermediate_size": 4864,
    "num_attention_heads": 14,
    "num_hidden_layers": 24,
    "num_key_value_heads": 2,
    "vocab_size": 151936,
    "tie_word_embeddings": True,
}


def _make(kind: str, path: Path) -> Path:
    """A file system object of ``kind`` at ``path``."""
    if kind == "folder":
        path.mkdir()
    elif kind == "loop":
        path.symlink_to(path)
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "dangling":
        path.symlink_to(path.parent / "nowhere")
    elif kind == "zero":
        path.symlink_to("/dev/zero")
    elif kind == "huge":
        with path.open("wb") as f:
            f.truncate(200 * 2**20)  # sparse: no disk used
    elif kind == "just_over":
        with path.open("wb") as f:
            f.truncate(CONFIG_JSON.limit + 1)
    elif kind != "missing":
        path.write_bytes(
            kind.encode("utf-8") if not kind.startswith("b:") else bytes.fromhex(kind[2:])
        )
    return path


# --- the reasons, exactly -------------------------------------------------------------

JSON_ERRORS = [
    ("missing", "does not exist"),
    ("dangling", "does not exist"),
    ("folder", "is a folder, not a file"),
    ("loop", "is a symlink loop"),
    ("fifo", "is a FIFO, not a file"),
    ("zero", "is a character device, not a file"),
    ("huge", "is 210 MB, over the 4 MB limit"),
    ("just_over", "is 4,000,001 bytes, over the 4 MB limit"),
    ("b:ff7b7d", "is not UTF-8 text (byte 0xff at 0)"),
    ("", "is not valid JSON: Expecting value: line 1 column 1 (char 0)"),
    (
        "{nope",
        "is not valid JSON: Expecting property name enclosed in double quotes: line 1 column 2 "
        "(char 1)",
    ),
    ("[" * 65 + "]" * 65, "nests over the limit of 64 levels"),
    ("[" * 100_000, "nests over the limit of 64 levels"),
    ('[{"a": ' * 33 + "1" + "}]" * 33, "nests over the limit of 64 levels"),
    ("[ " * 65 + "] " * 65, "nests over the limit of 64 levels"),
    (
        '{"n": ' + "9" * 5000 + "}",
        "holds a number of 5,000 characters (99999999999999999999…), over the limit of 100",
    ),
    (
        '{"x": 1.' + "5" * 200 + "}",
        "holds a number of 202 characters (1.555555555555555555…), over the limit of 100",
    ),
]


@pytest.mark.parametrize(("content", "reason"), JSON_ERRORS)
def test_json_files_refused_in_one_line(tmp_path: Path, content: str, reason: str) -> None:
    path = _make(content, tmp_path / "config.json")
    with pytest.raises(AllocationValidationError) as info:
        read_json(path, CONFIG_JSON)
    assert info.value.message == f"model config {str(path)!r} {reason}"


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads any file")
def test_an_unreadable_file(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text("{}")
    path.chmod(0)
    with pytest.raises(AllocationValidationError) as info:
        read_json(path)
    assert info.value.message == f"model config {str(path)!r} cannot be read: permission denied"


@pytest.mark.parametrize(
    ("content", "value"),
    [
        ('{"a": [1, {"b": "[[[[[[["}]}', {"a": [1, {"b": "[[[[[[["}]}),  # brackets in strings
        ('\ufeff{"a": 1}', {"a": 1}),  # a byte-order mark
        ('{"x": 1e999}', {"x": float("inf")}),  # the reader of numbers judges values
        ("[" * 64 + "]" * 64, json.loads("[" * 64 + "]" * 64)),
        ('{"n": ' + "9" * 100 + "}", {"n": int("9" * 100)}),
    ],
)
def test_json_files_read(tmp_path: Path, content: str, value: object) -> None:
    path = tmp_path / "config.json"
    path.write_text(content, encoding="utf-8")
    assert read_json(path) == value


YAML_ERRORS = [
    ("missing", "does not exist"),
    ("folder", "is a folder, not a file"),
    ("fifo", "is a FIFO, not a file"),
    ("zero", "is a character device, not a file"),
    ("huge", "is 210 MB, over the 1 MB limit"),
    (
        "a: &a [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]\n"
        + "".join(
            f"{b}: &{b} [{', '.join([f'*{a}'] * 10)}]\n"
            for a, b in zip("abcdefgh", "bcdefghi", strict=True)
        )
        + "i2: *i\n",
        "has more YAML nodes than the limit of 5,000 (keys, values and list items, aliases "
        "expanded)",
    ),
    ("a: &a [*a]\n", "uses the alias *a inside its own anchor &a (a recursive structure)"),
    ("a: *b\n", "uses the alias *b before any anchor &b"),
    ("a: " + "[" * 65 + "]" * 65, "nests over the limit of 64 levels"),
    ("a: " + "[" * 300_000 + "]" * 300_000, "nests over the limit of 64 levels"),
    (
        "a: &a " + "[" * 40 + "]" * 40 + "\nb: " + "[" * 30 + "*a" + "]" * 30,
        "nests over the limit of 64 levels once its aliases are expanded",
    ),
    # libyaml's words (PyYAML's wheels carry it; without it PyYAML's own words differ)
    ("a: [1, 2\n", "is not valid YAML: did not find expected ',' or ']' (line 2, column 1)"),
    (
        "a: 1\n a: 2\n",
        "is not valid YAML: mapping values are not allowed in this context (line 2, column 3)",
    ),
]


@pytest.mark.parametrize(("content", "reason"), YAML_ERRORS)
def test_yaml_files_refused_in_one_line(tmp_path: Path, content: str, reason: str) -> None:
    if reason.startswith("is not valid YAML") and not yaml.__with_libyaml__:
        pytest.skip("PyYAML without libyaml words its errors differently")
    path = _make(content, tmp_path / "exp.yaml")
    with pytest.raises(AllocationValidationError) as info:
        read_yaml(path, YAML)
    assert info.value.message == f"experiment file {str(path)!r} {reason}"


def test_shared_aliases_are_counted_once_each_use(tmp_path: Path) -> None:
    # 9 nodes of a, used 4 times by b: the count is exact, and nothing is built
    path = tmp_path / "exp.yaml"
    path.write_text("a: &a {x: 1, y: [1, 2]}\nb: [*a, *a, *a, *a]\n")
    text, nodes = read_yaml(path)
    # root 1 + keys a, b 2 + a's mapping 6 (itself, x, 1, y, the list, 1, 2 = 7) ...
    assert nodes == 1 + 2 + 7 + 1 + 4 * 7
    assert text.startswith("a: &a")


# --- properties -----------------------------------------------------------------------

KINDS = ["folder", "loop", "dangling", "missing", "zero"]


def _message_of(path: Path, as_yaml: bool) -> str | None:
    """None when the file reads, else its error's text."""
    try:
        if as_yaml:
            read_yaml(path)
        else:
            read_json(path)
    except AllocationError as error:
        return str(error)
    return None


@settings(max_examples=150, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(content=st.one_of(st.binary(max_size=300), st.sampled_from(KINDS)), as_yaml=st.booleans())
def test_any_bytes_or_file_kind_give_a_value_or_one_line(
    tmp_path_factory: pytest.TempPathFactory, content: bytes | str, as_yaml: bool
) -> None:
    folder = tmp_path_factory.mktemp("any")
    path = folder / "file"
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        _make(content, path)
    message = _message_of(path, as_yaml)
    if message is not None:
        assert "\n" not in message
        assert message.startswith(f"{'experiment file' if as_yaml else 'model config'} ")
        assert str(path) in message


@settings(max_examples=100)
@given(
    value=st.recursive(
        st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
        lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
        max_leaves=20,
    )
)
def test_any_json_value_within_the_bounds_reads_back(value: object) -> None:
    text = json.dumps(value)
    assert files.parse_json(text, CONFIG_JSON, "x") == value


# --- read once per process --------------------------------------------------------------


def test_a_file_is_read_once_until_it_changes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(CONFIG))
    reads: list[object] = []
    real = files._read

    def counting(p: object, kind: files.Kind) -> object:
        reads.append(p)
        return real(p, kind)  # type: ignore[arg-type]

    monkeypatch.setattr(files, "_read", counting)
    for _ in range(5):  # as the plan and each engine's estimate read it
        assert ModelShape.from_hf_config(tmp_path).num_layers == 24
    assert len(reads) == 1
    path.write_text(json.dumps({**CONFIG, "num_hidden_layers": 12}))
    os.utime(path, ns=(1, 1))  # a new modification time even on a coarse clock
    assert ModelShape.from_hf_config(path).num_layers == 12
    assert len(reads) == 2


def test_read_config_json_names_the_file(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text("[1, 2]")
    with pytest.raises(AllocationValidationError) as info:
        read_config_json(tmp_path)
    assert (
        info.value.message == f"model config {str(tmp_path / 'config.json')!r} is not a JSON object"
    )


# --- through the command line ---------------------------------------------------------


def _experiment(folder: Path, extra: str = "") -> Path:
    path = folder / "exp.yaml"
    path.write_text(
        "cluster: {n_nodes: 1, n_gpus_per_node: 8}\n"
        "rollout: {backend: 'sglang:d2t2'}\n"
        "actor: {backend: 'fsdp:d4'}\n" + extra
    )
    return path


BOMB = "a: &a [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]\n" + "".join(
    f"{b}: &{b} [{', '.join([f'*{a}'] * 10)}]\n"
    for a, b in zip("abcdefgh", "bcdefghi", strict=True)
)
TOO_MANY = (
    "has more YAML nodes than the limit of 5,000 (keys, values and list items, aliases expanded)"
)


def _commands(path: Path) -> list[list[str]]:
    return [
        ["check", str(path)],
        ["suggest", "--config", str(path)],
        ["preflight", "--", sys.executable, "train.py", "--config", str(path)],
    ]


@pytest.mark.parametrize("command", range(3))
def test_an_alias_bomb_is_refused_by_every_command(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: int
) -> None:
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text(BOMB)
    argv = _commands(bomb)[command]
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert err == f"areal-alloc {argv[0]}: experiment file {str(bomb)!r} {TOO_MANY}\n"


def test_a_bomb_in_the_defaults_list_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "actor").mkdir()
    (tmp_path / "actor" / "bomb.yaml").write_text(BOMB)
    (tmp_path / "actor" / "fsdp.yaml").write_text("backend: 'fsdp:d4'\n")
    main_file = tmp_path / "exp.yaml"
    main_file.write_text(
        "defaults:\n  - actor: fsdp\n  - _self_\n"
        "cluster: {n_nodes: 1, n_gpus_per_node: 8}\nrollout: {backend: 'sglang:d2t2'}\n"
    )
    assert compose_file(str(main_file)).actor.backend == "fsdp:d4"  # composed as by Hydra
    assert main(["check", str(main_file), "actor=bomb"]) == 1
    shown_path = str(tmp_path / "actor" / "bomb.yaml")
    assert capsys.readouterr().err == (
        f"areal-alloc check: experiment file {shown_path!r} {TOO_MANY}\n"
    )


def test_the_files_of_one_composition_share_the_node_limit(tmp_path: Path) -> None:
    (tmp_path / "actor").mkdir()
    (tmp_path / "actor" / "big.yaml").write_text(
        "backend: 'fsdp:d4'\n" + "".join(f"k{i}: {i}\n" for i in range(1500))
    )
    main_file = tmp_path / "exp.yaml"
    main_file.write_text(
        "defaults:\n  - actor: big\n  - _self_\n" + "".join(f"j{i}: {i}\n" for i in range(1200))
    )
    with pytest.raises(AllocationError) as info:
        compose_file(str(main_file))
    big = str(tmp_path / "actor" / "big.yaml")
    assert info.value.message == (
        f"experiment file {big!r} has more YAML nodes than the limit of 5,000 (keys, values "
        f"and list items, aliases expanded; 2,407 in the files composed before it)"
    )


@pytest.mark.parametrize(
    ("kind", "reason"),
    [
        ("missing", "does not exist"),
        ("folder", "is a folder, not a file"),
        ("loop", "is a symlink loop"),
    ],
)
def test_check_names_what_the_experiment_file_is(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: str, reason: str
) -> None:
    path = _make(kind, tmp_path / "exp.yaml")
    assert main(["check", str(path)]) == 1
    assert capsys.readouterr().err == f"areal-alloc check: experiment file {str(path)!r} {reason}\n"


def test_a_huge_config_json_is_refused_before_it_is_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model = tmp_path / "model"
    model.mkdir()
    _make("huge", model / "config.json")
    assert main(["layouts", "megatron", "8", "--model-config", str(model)]) == 1
    assert capsys.readouterr().err == (
        f"areal-alloc layouts: model config {str(model / 'config.json')!r} is 210 MB, over "
        f"the 4 MB limit\n"
    )


# --- FIFOs and devices: in a process with a timeout, so a regression fails, not hangs ----


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    """The installed ``areal-alloc ARGS``, failing after 30 s instead of hanging: the
    answer is due in well under a second."""
    try:
        return subprocess.run(
            [COMMAND, *args], capture_output=True, text=True, timeout=30, check=False
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"areal-alloc {' '.join(args)} hung (a FIFO read?)")


def test_a_fifo_config_json_is_refused_not_waited_for(tmp_path: Path) -> None:
    model = tmp_path / "model"
    model.mkdir()
    fifo = model / "config.json"
    os.mkfifo(fifo)
    expected = f"model config {str(fifo)!r} is a FIFO, not a file"
    done = _run("layouts", "megatron", "8", "--model-config", str(model))
    assert (done.returncode, done.stderr) == (1, f"areal-alloc layouts: {expected}\n")
    done = _run("explain", "fsdp:d8", "--model", str(fifo), "--gpu", "H100-80GB")
    assert (done.returncode, done.stderr) == (1, f"areal-alloc explain: {expected}\n")
    # the model named as the reference names it (areal-alloc's model_shape is refused by its loader)
    experiment = _experiment(tmp_path, f"sglang: {{model_path: {model}}}\n")
    done = _run("check", str(experiment))
    assert (done.returncode, done.stderr) == (1, f"areal-alloc check: {expected}\n")


def test_a_fifo_experiment_file_is_refused(tmp_path: Path) -> None:
    fifo = tmp_path / "exp.yaml"
    os.mkfifo(fifo)
    for args in _commands(fifo):
        done = _run(*args)
        assert (done.returncode, done.stderr) == (
            1,
            f"areal-alloc {args[0]}: experiment file {str(fifo)!r} is a FIFO, not a file\n",
        )


def test_dev_zero_as_a_config_json(tmp_path: Path) -> None:
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").symlink_to("/dev/zero")
    done = _run("explain", "fsdp:d8", "--model", str(model), "--gpu", "H100-80GB")
    assert (done.returncode, done.stderr) == (
        1,
        f"areal-alloc explain: model config {str(model / 'config.json')!r} is a character "
        f"device, not a file\n",
    )
