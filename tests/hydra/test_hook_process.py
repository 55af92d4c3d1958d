"""The hook in a user's own Hydra app ends a run in one line: Ctrl-C, and errors not of ours.

Each test runs ``tests/apps/user_app`` in a subprocess with one function of
areal-alloc replaced: by one that says READY and waits on stdin (the test then sends
SIGINT), or by one that fails as a bug would.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import interrupt_when_ready

APP = Path(__file__).parents[1] / "apps" / "user_app" / "my_app.py"
TIMEOUT = 120

#: The user app, with ``{module}.{name}`` replaced by ``{replacement}``.
_APP = """
import runpy, sys
sys.path.insert(0, {folder!r})
import {module} as target
real = target.{name}
{replacement}
target.{name} = replaced
sys.argv = [{app!r}, *sys.argv[1:]]
runpy.run_path({app!r}, run_name="__main__")
"""

BLOCKING = """
def replaced(*args, **kwargs):
    print("READY", file=sys.stderr, flush=True)
    sys.stdin.read()
    return real(*args, **kwargs)
"""

FAILING = """
def replaced(*args, **kwargs):
    raise ZeroDivisionError("integer division or modulo by zero")
"""


def app_code(module: str, name: str, replacement: str) -> str:
    return _APP.format(
        folder=str(APP.parent), module=module, name=name, replacement=replacement, app=str(APP)
    )


def environment(tmp_path: Path) -> dict[str, str]:
    markers = tmp_path / "markers"
    markers.mkdir(exist_ok=True)
    return {**os.environ, "MARKER_DIR": str(markers), "HYDRA_FULL_ERROR": "0"}


@pytest.mark.parametrize(
    ("module", "name", "args"),
    [
        ("areal_alloc.hydra_hook", "plan_config", []),  # a run: on_run_start
        ("areal_alloc.sweep", "plan_config", ["-m", "actor.backend=fsdp:d8,fsdp:d4t2"]),
        # composing a sweep job (its overrides applied to the base config)
        ("areal_alloc.sweep", "_apply", ["-m", "actor.backend=fsdp:d8,fsdp:d4t2"]),
    ],
)
def test_sigint_in_the_hook_ends_with_one_line_and_130(
    module: str, name: str, args: list[str], tmp_path: Path
) -> None:
    returncode, out, err = interrupt_when_ready(
        ["-c", app_code(module, name, BLOCKING), *args], tmp_path, environment(tmp_path)
    )
    assert (returncode, out, err) == (130, "", "areal-alloc: interrupted\n")
    assert list((tmp_path / "markers").iterdir()) == []  # the job never ran


def test_an_unexpected_error_names_the_engine_and_its_model_file(tmp_path: Path) -> None:
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(
        json.dumps(
            {
                "model_type": "qwen2",
                "hidden_size": 1024,
                "num_hidden_layers": 8,
                "num_attention_heads": 16,
                "num_key_value_heads": 8,
                "intermediate_size": 4096,
                "vocab_size": 32000,
            }
        )
    )
    code = app_code("areal_alloc.estimate.engines", "training_memory", FAILING)
    done = subprocess.run(
        [sys.executable, "-c", code, f"+actor.path={model}"],
        cwd=tmp_path,
        env=environment(tmp_path),
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr == (
        f"areal-alloc: actor (model {model / 'config.json'}): could not validate the allocation "
        "(ZeroDivisionError: integer division or modulo by zero); stopping rather than "
        "running an unchecked job\n"
    )


RECURSING = """
def replaced(*args, **kwargs):
    raise RecursionError("maximum recursion depth exceeded")
"""


@pytest.mark.parametrize(
    ("replacement", "line"),
    [
        (
            FAILING,
            "areal-alloc: the experiment 'config': could not validate the allocation "
            "(ZeroDivisionError: integer division or modulo by zero); stopping rather than "
            "running an unchecked job",
        ),
        (
            RECURSING,
            "areal-alloc: the experiment 'config': nested too deeply to read (or an "
            "interpolation refers to itself)",
        ),
    ],
)
def test_an_unexpected_error_outside_a_model_names_the_experiment(
    replacement: str, line: str, tmp_path: Path
) -> None:
    code = app_code("areal_alloc.hydra_hook", "plan_config", replacement)
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        env=environment(tmp_path),
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert (done.returncode, done.stdout, done.stderr) == (1, "", line + "\n")
