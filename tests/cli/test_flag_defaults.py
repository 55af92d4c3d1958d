"""One flag, one meaning, one default (issue 17 item 5: "flags are the same on every
command"): every command's parser gives a shared flag the default of the one table
(``areal_alloc.defaults``) and says it in its help, and the estimates use it."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from typing import Any

import pytest

from areal_alloc.cli import calibrate, check, explain, layouts, suggest
from areal_alloc.cli.args import CommandParser
from areal_alloc.defaults import (
    CONTEXT_LENGTH,
    MICRO_BATCH_TOKENS,
    NEW_TOKENS,
    PROMPT_TOKENS,
    RECOMPUTE,
    SAMPLES,
    STEP_PROMPTS,
    TOKENS_PER_STEP,
)
from tests.conftest import MainCli

#: each command, with the fewest words its parser takes
COMMANDS: dict[str, tuple[Callable[[list[str]], int], list[str]]] = {
    "explain": (explain.explain, ["fsdp:d8"]),
    "layouts": (layouts.layouts, ["megatron", "8"]),
    "calibrate": (calibrate.calibrate, []),
    "suggest": (suggest.suggest_command, []),
    "check": (check.check, []),
}

#: (flag, the default the table gives, what its help says of it, the meaning every
#: command's help of it shares); a parsed default of None means "not given": the table's
#: default (suggest --config: the experiment's own key first, as its help says)
TABLE: tuple[tuple[str, object, str, str], ...] = (
    (
        "--tokens",
        MICRO_BATCH_TOKENS,
        f"default {MICRO_BATCH_TOKENS:,}",
        "tokens per micro-batch (mb_spec.max_tokens_per_mb",
    ),
    ("--recompute", RECOMPUTE, f"default {RECOMPUTE}", "(gradient_checkpointing)"),
    (
        "--tokens-per-step",
        TOKENS_PER_STEP,
        f"default {TOKENS_PER_STEP:,}",
        "training tokens per optimizer step",
    ),
    (
        "--seq-len",
        None,
        f"default the micro-batch tokens, at most {CONTEXT_LENGTH:,}",
        "sequence length for attention (training",
    ),
    (
        "--context-length",
        CONTEXT_LENGTH,
        f"default {CONTEXT_LENGTH:,}",
        "sglang.context_length / vllm.max_model_len",
    ),
    (
        "--prompt-len",
        PROMPT_TOKENS,
        f"default {PROMPT_TOKENS:,}",
        "prompt tokens per sequence (train_dataset.max_length",
    ),
    (
        "--gen-len",
        NEW_TOKENS,
        f"default {NEW_TOKENS:,}",
        "the longest generation per sequence, gconfig.max_new_tokens",
    ),
    ("--batch", None, "", "sequences decoded together per instance"),
    ("--gpu", None, "default AREAL_ALLOC_GPU", "a GPU name such as H100-80GB"),
    ("--mean-gen-len", None, "default the longest", "mean generated tokens per sequence"),
    ("--no-calibration", False, "", "leave out a stored calibration"),
)

#: which command has which shared flag (calibrate fits one measurement: no plan's
#: lengths, no stored calibration to leave out; layouts ranks training and decode alone)
_ALL = {f for f, *_ in TABLE}
HAS = {
    "explain": _ALL,
    "layouts": _ALL - {"--batch", "--prompt-len", "--gen-len", "--mean-gen-len"},
    "calibrate": _ALL - {"--prompt-len", "--gen-len", "--mean-gen-len", "--no-calibration"},
    "suggest": _ALL - {"--batch", "--tokens-per-step", "--seq-len"},
    "check": {"--gpu", "--mean-gen-len", "--no-calibration"},
}


class _Parsed(Exception):
    def __init__(self, parser: argparse.ArgumentParser) -> None:
        self.parser = parser


def _parser(monkeypatch: pytest.MonkeyPatch, command: str) -> argparse.ArgumentParser:
    """The parser ``command`` builds, caught as it parses its words."""

    def caught(self: argparse.ArgumentParser, *_: Any, **__: Any) -> Any:
        raise _Parsed(self)

    monkeypatch.setattr(CommandParser, "parse_args", caught)
    monkeypatch.setattr(CommandParser, "parse_intermixed_args", caught)
    run, words = COMMANDS[command]
    with pytest.raises(_Parsed) as found:
        run(words)
    return found.value.parser


def _actions(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    return {flag: a for a in parser._actions for flag in a.option_strings}


@pytest.mark.parametrize(
    ("command", "flag", "default", "said", "meaning"),
    [(c, *row) for c in COMMANDS for row in TABLE if row[0] in HAS[c]],
)
def test_a_shared_flag_has_the_tables_default_and_says_it(
    monkeypatch: pytest.MonkeyPatch,
    command: str,
    flag: str,
    default: object,
    said: str,
    meaning: str,
) -> None:
    action = _actions(_parser(monkeypatch, command))[flag]
    assert action.default in (None, default), (command, flag, action.default)
    text = " ".join((action.help or "").split())
    assert meaning in text, (command, flag, text)
    assert said in text, (command, flag, text)


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_has_the_shared_flags_the_table_says(
    monkeypatch: pytest.MonkeyPatch, command: str
) -> None:
    shared = {f for f, *_ in TABLE} & set(_actions(_parser(monkeypatch, command)))
    if command == "suggest":  # its --batch is only there to say it is not suggest's
        shared -= {"--batch"}
    assert shared == HAS[command]


@pytest.mark.parametrize("flag", ["--gpu", "--mean-gen-len", "--no-calibration"])
def test_a_shared_flags_help_is_one_text(monkeypatch: pytest.MonkeyPatch, flag: str) -> None:
    helps = {
        command: _actions(_parser(monkeypatch, command))[flag].help
        for command in COMMANDS
        if flag in HAS[command]
    }
    assert len(set(helps.values())) == 1, helps


def test_suggests_batch_size_and_n_samples_have_the_tables_defaults(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    actions = _actions(_parser(monkeypatch, "suggest"))
    assert "train_dataset.batch_size" in (actions["--batch-size"].help or "")
    assert f"else {STEP_PROMPTS}" in (actions["--batch-size"].help or "")
    assert "gconfig.n_samples" in (actions["--n-samples"].help or "")
    assert f"else {SAMPLES}" in (actions["--n-samples"].help or "")
    assert actions["--batch"].help == argparse.SUPPRESS  # not in suggest --help


def test_suggest_batch_is_a_usage_error_naming_the_new_flags(main_cli: MainCli) -> None:
    done = main_cli("suggest", "--model", "Qwen3-8B", "--gpus", "8", "--batch", "512")
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == (
        "areal-alloc suggest: --batch is not suggest's: give --batch-size "
        "(train_dataset.batch_size, prompts per step) and --n-samples (gconfig.n_samples); "
        "--batch is one inference instance's sequences in flight in explain and calibrate "
        "(see areal-alloc suggest --help)\n"
    )


SUGGEST = ("suggest", "--model", "Qwen3-8B", "--gpus", "16", "--gpu", "H100-80GB", "--json")


def test_suggest_without_flags_is_suggest_with_the_tables_defaults(main_cli: MainCli) -> None:
    bare = main_cli(*SUGGEST)
    assert bare.returncode == 0, bare.stderr
    given = main_cli(
        *SUGGEST,
        *("--tokens", str(MICRO_BATCH_TOKENS), "--recompute", RECOMPUTE),
        *("--batch-size", str(STEP_PROMPTS), "--n-samples", str(SAMPLES)),
        *("--prompt-len", str(PROMPT_TOKENS), "--gen-len", str(NEW_TOKENS)),
        *("--context-length", str(CONTEXT_LENGTH)),
    )
    assert json.loads(given.stdout) == json.loads(bare.stdout)


def test_suggest_steps_batch_size_times_n_samples_sequences(main_cli: MainCli) -> None:
    text = SUGGEST[:-1]
    done = main_cli(*text, "--batch-size", "64", "--n-samples", "8", "--top", "1")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("16 × H100-80GB, Qwen3-8B: 512 sequences of 1,024 + 16,384")


def _explained(main_cli: MainCli, *args: str) -> dict[str, Any]:
    done = main_cli("explain", *args, "--model", "Qwen3-8B", "--gpu", "H100-80GB", "--json")
    assert done.returncode == 0, done.stderr
    found: dict[str, Any] = json.loads(done.stdout)
    return found


def test_explain_trains_with_the_tables_defaults(main_cli: MainCli) -> None:
    trained = _explained(main_cli, "megatron:d4t2", "--tokens-per-step", str(TOKENS_PER_STEP))
    training = trained["training"]
    assert (training["tokens_per_micro_batch"], training["recompute"]) == (
        MICRO_BATCH_TOKENS,
        RECOMPUTE,
    )
    assert training["sequence_length"] == min(MICRO_BATCH_TOKENS, CONTEXT_LENGTH)
    bare = _explained(main_cli, "megatron:d4t2", "--seq-len", str(CONTEXT_LENGTH))
    assert bare["training"]["tokens_per_step"] == TOKENS_PER_STEP


def test_explain_generates_with_the_tables_defaults(main_cli: MainCli) -> None:
    generated = _explained(main_cli, "sglang:d1t2", "--batch", "8")["generation"]
    assert (generated["prompt_len"], generated["gen_len"]) == (PROMPT_TOKENS, NEW_TOKENS)
    assert (
        f"prompts of {PROMPT_TOKENS:,} tokens (--prompt-len not given)"
        in (generated["assumptions"])
    )
    given = _explained(
        main_cli,
        *("sglang:d1t2", "--batch", "8"),
        *("--prompt-len", str(PROMPT_TOKENS), "--gen-len", str(NEW_TOKENS)),
    )["generation"]
    assert given["tokens_per_second"] == generated["tokens_per_second"]


def test_the_tables_defaults_are_the_references_where_it_has_one() -> None:
    # TrainEngineConfig.gradient_checkpointing = False (areal/api/cli_args.py@cbff54d6
    # line 1302); max_tokens_per_mb has no finite default (1e12), so MICRO_BATCH_TOKENS is
    # areal-alloc's own: one sequence of the default context length
    assert (RECOMPUTE, MICRO_BATCH_TOKENS) == ("none", CONTEXT_LENGTH)
