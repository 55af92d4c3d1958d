"""How every run of ``areal-alloc`` ends: one line, the right exit code, whatever happens.

Usage errors, Hydra's errors, over-long values and refused orders are answered in
process through ``main(argv)``; what only a process shows (SIGINT, a full disk, a
closed stdout, a reader that goes away) runs the installed command.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from areal_alloc.cli import EXIT_INTERRUPTED, main
from areal_alloc.errors import WINDOW, clipped, digits, render_caret, shown
from areal_alloc.limits import readable
from tests.conftest import interrupt_when_ready

EXPERIMENT = (
    "cluster:\n  n_nodes: 1\n  n_gpus_per_node: 8\nactor:\n  backend: fsdp:d8\n"
    "  optimizer:\n    lr: 1.0e-5\n"
)


@pytest.fixture
def experiment(tmp_path: Path) -> Path:
    path = tmp_path / "exp.yaml"
    path.write_text(EXPERIMENT)
    return path


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


# --- usage errors: one line, the subcommand's --help named, exit 2 ---------------------

LONG_WORD = "y" * 5000

USAGE_ERRORS = [
    (
        ["layouts", "fsdp"],
        "areal-alloc layouts: the following arguments are required: gpus "
        "(see areal-alloc layouts --help)",
    ),
    (
        ["explain"],
        "areal-alloc explain: the following arguments are required: spec "
        "(see areal-alloc explain --help)",
    ),
    (
        ["layouts", "fsdp", "8", "--recompute", "most"],
        "areal-alloc layouts: argument --recompute: invalid choice: 'most' (choose from "
        "'none', 'selective', 'full', 'op') (see areal-alloc layouts --help)",
    ),
    (
        ["check", "x.yaml", "--on-memory", "maybe"],
        "areal-alloc check: argument --on-memory: invalid choice: 'maybe' (choose from "
        "'fail', 'warn', 'off') (see areal-alloc check --help)",
    ),
    (
        ["explain", "fsdp:d4", "--bogus"],
        "areal-alloc explain: unrecognized arguments: --bogus (see areal-alloc explain --help)",
    ),
    (
        ["layouts", "fsdp", "8", LONG_WORD, "zz"],
        f"areal-alloc layouts: unrecognized arguments: {'y' * 79}… (5,000 characters) zz "
        "(see areal-alloc layouts --help)",
    ),
]


@pytest.mark.parametrize(("argv", "line"), USAGE_ERRORS)
def test_usage_errors_are_one_line_and_exit_2(
    argv: list[str], line: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(argv, capsys) == (2, "", line + "\n")


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        (["--nope"], "areal-alloc: unrecognized arguments: --nope (see areal-alloc --help)"),
        (
            ["--experimental-rerun", "/nonexistent/config.pickle"],
            "areal-alloc: argument --experimental-rerun: no such file "
            "'/nonexistent/config.pickle' (see areal-alloc --help)",
        ),
        (
            ["--cfg", "nope"],
            "areal-alloc: argument --cfg/-c: invalid choice: 'nope' (choose from 'job', "
            "'hydra', 'all') (see areal-alloc --help)",
        ),
    ],
)
def test_hydras_own_flags_are_one_line_usage_errors(
    argv: list[str], line: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "argv", ["areal-alloc"])
    assert run(argv, capsys) == (2, "", line + "\n")


def test_help_still_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(["explain", "--help"], capsys)
    assert (code, err) == (0, "")
    assert out.startswith("usage: areal-alloc explain")


# --- flags and overrides in any order ---------------------------------------------------


@pytest.mark.parametrize(
    "argv",
    [
        ["{file}", "--quiet", "cluster.n_nodes=2"],
        ["--quiet", "{file}", "cluster.n_nodes=2"],
        ["{file}", "cluster.n_nodes=2", "--quiet"],
    ],
)
def test_check_takes_flags_between_files_and_overrides(
    argv: list[str], experiment: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = [a.format(file=experiment) for a in argv]
    assert run(["check", *args], capsys) == (0, "", "")


def test_check_reads_an_override_after_a_flag(
    experiment: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(["check", str(experiment), "--json", "cluster.n_nodes=2"], capsys)
    assert (code, err) == (0, "")
    assert '"n_nodes": 2' in out


# --- preflight with an empty command word ------------------------------------------------


@pytest.mark.parametrize("word", ["", " "])
def test_preflight_refuses_an_empty_command_word(
    word: str, experiment: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(["preflight", "--", word, "--config", str(experiment)], capsys) == (
        1,
        "",
        f"areal-alloc preflight: the launch command starts with an empty word {word!r}: "
        "write areal-alloc preflight -- COMMAND …, e.g. -- python3 train.py --config FILE\n",
    )


def test_preflight_refuses_a_config_flag_without_a_file(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["preflight", "--", "python3", "train.py", "--config"], capsys) == (
        1,
        "",
        "areal-alloc preflight: the launch command's --config has no FILE after it: write "
        "--config path/to/experiment.yaml, then key=value overrides\n",
    )


# --- Hydra's errors from our app: one line with the option and the choices ----------------

APP_ERRORS = [
    (
        ["experiment=nope"],
        "areal-alloc: experiment=nope: no such experiment; choose one of distill_teacher, "
        "grpo_1x8, grpo_2x8, moe_32, ppo_critic",
    ),
    (
        ["experiment="],
        "areal-alloc: experiment=: no such experiment; choose one of distill_teacher, "
        "grpo_1x8, grpo_2x8, moe_32, ppo_critic",
    ),
    (
        ["experiment=grpo_1x8", "actor.nope=1"],
        "areal-alloc: actor.nope=1: no key 'actor.nope' in the config (in actor; its keys: "
        "backend, optimizer, kl_ctl); to add it write +actor.nope=1",
    ),
    (
        ["actor.backend=["],
        "areal-alloc: 'actor.backend=[': cannot parse this override: no viable alternative "
        "at input '[' (the grammar: https://hydra.cc/docs/advanced/override_grammar/basic/)",
    ),
    (
        ["--config-name", "nope"],
        "areal-alloc: config 'nope' not found (named by --config-name or a defaults list)",
    ),
    (["~nope"], "areal-alloc: Could not delete from config. 'nope' does not exist."),
]


@pytest.mark.parametrize(("argv", "line"), APP_ERRORS)
def test_hydra_errors_of_the_app_are_one_line(
    argv: list[str], line: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "argv", ["areal-alloc"])
    monkeypatch.delenv("HYDRA_FULL_ERROR", raising=False)
    assert run(argv, capsys) == (1, "", line + "\n")
    assert "HYDRA_FULL_ERROR" not in os.environ  # set only while Hydra runs


@pytest.mark.parametrize(
    ("text", "overrides", "line"),
    [
        (
            "defaults:\n  - nope\n  - _self_\n" + EXPERIMENT,
            [],
            "config 'nope' not found (named by --config-name or a defaults list)",
        ),
        (
            EXPERIMENT,
            ["actor.nope=1"],
            "actor.nope=1: no key 'actor.nope' in the config (in actor; its keys: backend, "
            "optimizer); to add it write +actor.nope=1",
        ),
    ],
)
def test_hydras_errors_composing_a_checked_file_are_one_line(
    text: str, overrides: list[str], line: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "exp.yaml"
    path.write_text(text)
    assert run(["check", str(path), *overrides], capsys) == (
        1,
        "",
        f"areal-alloc check: {path}: cannot be composed: {line}\n",
    )


def test_an_unknown_experiment_in_a_sweep_names_its_job(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "argv", ["areal-alloc"])
    monkeypatch.delenv("HYDRA_FULL_ERROR", raising=False)
    code, out, err = run(["-m", "experiment=nope,grpo_1x8"], capsys)
    assert (code, out) == (1, "")
    assert err.splitlines()[0] == (
        "areal-alloc: job 0 [experiment=nope]: experiment=nope: no such experiment; choose one "
        "of distill_teacher, grpo_1x8, grpo_2x8, moe_32, ppo_critic"
    )


# --- over-long values: cut, with their length ------------------------------------------------


def test_a_long_syntax_error_shows_a_window_around_the_caret(
    capsys: pytest.CaptureFixture[str],
) -> None:
    spec = "fsdp:" + "d4" * 400 + "x"
    code, out, err = run(["explain", spec], capsys)
    assert (code, out) == (1, "")
    assert err.splitlines() == [
        f"areal-alloc explain: unexpected 'x' at column 806 of 'fsdp:{'d4' * 27}…' "
        "(806 characters); expected a dimension such as d4",
        "    …" + "d4" * 35 + "x",  # the last 71 characters, after one … for the rest
        "    " + " " * 71 + "^",
    ]


def test_a_100_kb_backend_is_quoted_cut(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "argv", ["areal-alloc"])
    spec = "fsdp:d" + "4" * 100_000
    code, out, err = run([f"actor.backend={spec}"], capsys)
    assert (code, out) == (1, "")
    assert err == (
        f"areal-alloc: actor.backend='fsdp:d{'4' * 53}…' (100,006 characters): allocation "
        "string is 100006 characters long; the limit is 1000\n"
    )


LONG = "z" * 20_000
CUT = f"'{'z' * 59}…' (20,000 characters)"


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        (
            [
                "+actor.scheduling_strategy.type=colocation",
                f"+actor.scheduling_strategy.target={LONG}",
            ],
            f"areal-alloc: actor.scheduling_strategy.target={CUT}: no such engine; configured "
            "engines: rollout, ref",
        ),
        ([f"output={LONG}"], f"areal-alloc: output={CUT}: must be 'text', 'json' or 'html'"),
    ],
)
def test_long_values_in_the_app_are_quoted_cut(
    argv: list[str], line: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "argv", ["areal-alloc"])
    assert run(argv, capsys) == (1, "", line + "\n")


@pytest.mark.parametrize(
    ("argv", "start"),
    [
        (
            ["layouts", "fsdp", "8", "--model", "Qwen3-8B", "--gpu", "q" * 3000],
            f"areal-alloc layouts: unknown GPU '{'q' * 59}…' (3,000 characters): known GPUs: ",
        ),
        (["explain", "q" * 3000], "areal-alloc explain: allocation string is 3000 characters"),
    ],
)
def test_long_values_in_commands_are_quoted_cut(
    argv: list[str], start: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(argv, capsys)
    assert (code, out) == (1, "")
    assert err.startswith(start)
    assert len(err.splitlines()) == 1
    assert len(err) < 400


def test_a_long_sweep_value_is_cut_in_its_job_line(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "argv", ["areal-alloc"])
    spec = "fsdp:d" + "4" * 20_000
    argv = ["-m", f"actor.backend=fsdp:d8,{spec}", "hydra.callbacks.areal_alloc.on_memory=off"]
    code, out, err = run(argv, capsys)
    assert (code, out) == (1, "")
    job, summary = err.splitlines()
    assert job == (
        f"areal-alloc: job 1 [actor.backend=fsdp:d{'4' * 179}… (20,020 characters)]: "
        f"actor.backend='fsdp:d{'4' * 53}…' (20,006 characters): allocation string is 20006 "
        "characters long; the limit is 1000"
    )
    assert summary.startswith("areal-alloc: 1 of 2 sweep jobs are invalid; nothing was launched")


SELF = "its value refers to itself (through an interpolation or resolver)"


@pytest.mark.parametrize(
    "backend",
    ["${actor.backend}", "fsdp:d${alloc.total_gpus:}", "${alloc.world_size:${actor.backend}}"],
)
def test_a_self_referencing_value_is_said_once(
    backend: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "self.yaml"
    path.write_text(EXPERIMENT.replace("backend: fsdp:d8", f"backend: '{backend}'"))
    assert run(["check", str(path)], capsys) == (
        1,
        "",
        f"areal-alloc check: actor.backend: cannot be resolved: {SELF}\n",
    )


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (
            "${alloc.layouts:fsdp," + "x" * 38_000 + "}",
            "GPU count must be an integer ≥ 1, got 'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"
            "xxxxxxxxxxxxxxxxxxx…' (38,000 characters)",
        ),
        (
            "${alloc.layouts:fsdp,'" + "9" * 38_000 + "'}",
            "alloc.layouts: gpus=a 38000-digit number: the limit is 1,048,576",
        ),
        (
            "${alloc.layouts:fsdp,8,'" + "x" * 38_000 + "'}",
            "unknown layout constraint 'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"
            "xxxx…' (38,000 characters); use key=value with key one of experts, gpus_per_node, "
            "hybrid, max_cp, max_dp, max_ep, max_pp, max_tp, min_dp, num_attention_heads, "
            "num_experts, num_key_value_heads, num_layers",
        ),
        (
            "${alloc.dim:fsdp:d4," + "x" * 38_000 + "}",
            "alloc.dim: unknown dimension name 'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"
            "xxxxxxxxxxxx…' (38,000 characters); use one of tp, pp, dp, cp, ep, etp, edp, "
            "world, world_size, instances, instance_size",
        ),
    ],
)
def test_resolver_errors_quote_long_arguments_cut(value: str, message: str) -> None:
    from omegaconf import OmegaConf

    from areal_alloc._config import child
    from areal_alloc.errors import AllocationError

    config = OmegaConf.create({"actor": {"backend": value}})
    with pytest.raises(AllocationError) as info:
        child(config.actor, "backend")
    assert str(info.value) == f"actor.backend: cannot be resolved: {message}"


@pytest.mark.parametrize(
    ("value", "text"),
    [
        ("fsdp:d4", "'fsdp:d4'"),
        ("x" * 60, repr("x" * 60)),
        ("x" * 61, f"'{'x' * 59}…' (61 characters)"),
        ("it's" * 100, '"' + ("it's" * 15)[:59] + '…" (400 characters)'),
        (10**30, "a 31-digit number"),
        (-(10**30), "a 31-digit number"),
        (12, "12"),
        (True, "True"),
        (
            [1] * 100,
            "[1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1… (300 characters)",
        ),
    ],
)
def test_shown(value: object, text: str) -> None:
    assert shown(value) == text


@given(st.integers(min_value=-(10**5000), max_value=10**5000))
def test_digits_counts_past_pythons_str_limit(number: int) -> None:
    old = sys.get_int_max_str_digits()
    sys.set_int_max_str_digits(0)
    try:
        assert digits(number) == len(str(abs(number)))
    finally:
        sys.set_int_max_str_digits(old)


@pytest.mark.parametrize(
    ("number", "text"),
    [(1_048_576, "1,048,576"), (10**24 - 1, f"{10**24 - 1:,}"), (10**24, "a 25-digit number")],
)
def test_readable(number: int, text: str) -> None:
    assert readable(number) == text
    assert readable(10**10_000) == "a 10001-digit number"  # str() would refuse it


def test_clipped() -> None:
    assert clipped("abc", 3) == "abc"
    assert clipped("abcd", 3) == "ab… (4 characters)"


@given(st.text(alphabet="abcd:()|", min_size=0, max_size=400), st.integers(-5, 410))
def test_the_caret_points_at_its_character_in_a_bounded_line(text: str, column: int) -> None:
    shown_line, caret_line = render_caret(text, column, indent="").split("\n")
    assert len(shown_line) <= WINDOW + 2
    at = len(caret_line) - 1
    assert caret_line == " " * at + "^"
    target = max(1, min(column, len(text) + 1)) - 1  # 0-based, len(text) = past the end
    if target < len(text):
        assert shown_line[at] == text[target]
    else:
        assert at == len(shown_line)


# --- Megatron orders: upper case is refused with the spelling to use ------------------------


def test_an_upper_case_order_megatron_refuses_gets_the_lower_case_spelling(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, err = run(["explain", "megatron:d8t2p2", "--order", "TP-CP-EP-DP-PP"], capsys)
    assert (code, out.splitlines()[-1]) == (
        1,
        "rank groups: megatron-core refuses this layout in order TP-CP-EP-DP-PP",
    )
    assert err == (
        "areal-alloc explain: order 'TP-CP-EP-DP-PP' ends with 'PP', not 'pp': megatron-core "
        "names the rank groups in any case but checks that ending case-sensitively, and with "
        "dp 8 ≠ edp 16 it refuses this layout; write 'tp-cp-ep-dp-pp'\n"
    )


def test_an_upper_case_order_megatron_accepts_is_read(capsys: pytest.CaptureFixture[str]) -> None:
    upper = run(["explain", "megatron:d8t2p2", "--order", "TP-CP-EP-DP-pp"], capsys)
    lower = run(["explain", "megatron:d8t2p2", "--order", "tp-cp-ep-dp-pp"], capsys)
    assert upper[0] == lower[0] == 0
    assert upper[1].replace("TP-CP-EP-DP-pp", "tp-cp-ep-dp-pp") == lower[1]


# --- what only a process shows ----------------------------------------------------------------

#: Runs ``areal_alloc.cli.main`` with one function replaced by one that says READY on
#: stderr and then waits on stdin: the test interrupts it there, at a known point.
_BLOCKING = """
import sys
import {module} as target
real = target.{name}
def blocking(*args, **kwargs):
    print("READY", file=sys.stderr, flush=True)
    sys.stdin.read()
    return real(*args, **kwargs)
target.{name} = blocking
from areal_alloc.cli import main
sys.exit(main(sys.argv[1:]))
"""

TIMEOUT = 120
NO_MEMORY = "hydra.callbacks.areal_alloc.on_memory=off"


def interrupted(code: str, args: list[str], cwd: Path, env: dict[str, str] | None = None) -> str:
    """Run ``code``, wait for its READY, send SIGINT; return what it printed after READY."""
    returncode, out, err = interrupt_when_ready(["-c", code, *args], cwd, env)
    assert returncode == EXIT_INTERRUPTED, err
    return out + err


@pytest.mark.parametrize(
    ("module", "name", "args"),
    [
        ("areal_alloc.cli.check", "compose_file", ["check", "{file}"]),
        ("hydra", "compose", ["check", "{file}"]),  # inside Hydra's composition of the file
        ("areal_alloc.cli.check", "compose_file", ["preflight", "--", "x.py", "--config", "f"]),
        ("areal_alloc.cli.explain", "memory_estimate", ["explain", "fsdp:d4"]),
        # inside Hydra's run of our app (memory not estimated: the plan is not the point)
        ("areal_alloc.cli.app", "show_plan", [NO_MEMORY]),
    ],
)
def test_sigint_ends_with_one_line_and_130(
    module: str, name: str, args: list[str], experiment: Path, tmp_path: Path
) -> None:
    code = _BLOCKING.format(module=module, name=name)
    argv = [a.format(file=experiment) for a in args]
    assert interrupted(code, argv, tmp_path) == "areal-alloc: interrupted\n"


DEV_FULL = Path("/dev/full")


@pytest.mark.skipif(not DEV_FULL.exists(), reason="needs /dev/full")
@pytest.mark.parametrize(
    "args",
    [["explain", "--help"], ["explain", "fsdp:d4"], ["check", "{file}"], [NO_MEMORY], ["--help"]],
)
def test_a_full_disk_is_one_line_and_exit_1(
    args: list[str], command: str, experiment: Path, tmp_path: Path
) -> None:
    argv = [a.format(file=experiment) for a in args]
    with DEV_FULL.open("w") as full:
        done = subprocess.run(
            [command, *argv],
            stdout=full,
            stderr=subprocess.PIPE,
            text=True,
            timeout=TIMEOUT,
            cwd=tmp_path,
        )
    assert (done.returncode, done.stderr) == (
        1,
        "areal-alloc: cannot write the output: No space left on device\n",
    )


CLOSED = "areal-alloc: cannot write the output: standard output is closed\n"


def _close_stdout() -> None:
    os.close(1)


@pytest.mark.parametrize(
    ("args", "code", "stderr"),
    [
        (
            ["check", "{file}"],
            1,
            "areal-alloc: cannot write the output: standard output is closed\n",
        ),
        (
            ["explain", "fsdp:d4"],
            1,
            "areal-alloc: cannot write the output: standard output is closed\n",
        ),
        (["check", "--quiet", "{file}"], 0, ""),  # nothing to print: nothing lost
    ],
)
def test_a_closed_stdout_is_a_write_error(
    args: list[str], code: int, stderr: str, command: str, experiment: Path
) -> None:
    argv = [a.format(file=experiment) for a in args]
    done = subprocess.run(
        [command, *argv],
        stderr=subprocess.PIPE,
        text=True,
        timeout=TIMEOUT,
        preexec_fn=_close_stdout,  # the child closes its own fd 1 before it starts
    )
    assert (done.returncode, done.stderr) == (code, stderr)


def test_a_reader_that_goes_away_ends_it_silently(command: str) -> None:
    # 1.6 MB of JSON: far more than a pipe holds, so the command is still writing
    process = subprocess.Popen(
        [command, "explain", "megatron:d65536", "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert process.stdout is not None
    assert process.stderr is not None
    assert process.stdout.readline() == b"{\n"
    process.stdout.close()  # as `| head -1` does
    err = process.stderr.read()
    assert process.wait(timeout=TIMEOUT) == -signal.SIGPIPE
    assert err == b""
