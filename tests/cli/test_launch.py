"""Where the reference's users launch: preflight, check of several files, pre-commit."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from areal_alloc import AllocationError
from areal_alloc.compose import read_launch_args, script_args
from tests.conftest import MainCli

ROOT = Path(__file__).parents[2]
LAUNCH = Path(__file__).parents[1] / "apps" / "launch"

GOOD = (
    "cluster:\n  n_nodes: 1\n  n_gpus_per_node: 8\n"
    "rollout:\n  backend: sglang:d2t2\nactor:\n  backend: fsdp:d4\n"
)


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    for name in ("train.py", "fake_launcher.py"):
        shutil.copy(LAUNCH / name, tmp_path / name)
    (tmp_path / "exp.yaml").write_text(GOOD)
    return tmp_path


Preflight = Callable[..., "subprocess.CompletedProcess[str]"]


@pytest.fixture
def preflight(workdir: Path, command: str) -> Preflight:
    """``preflight(*launch_command, stdin=None)``: areal-alloc preflight -- COMMAND, in workdir."""

    def run(*launch: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "ECHO_STDIN": "1"} if stdin is not None else None
        return subprocess.run(
            [command, "preflight", "--", *launch],
            cwd=workdir,
            env=env,
            input=stdin,
            capture_output=True,
            text=True,
            timeout=120,
        )

    return run


SCRIPT_ARGS = [
    (["python3", "train.py", "--config", "e.yaml", "a=1"], ["--config", "e.yaml", "a=1"]),
    (["python3", "-u", "-X", "dev", "train.py", "--config", "e.yaml"], ["--config", "e.yaml"]),
    (
        ["python3", "-m", "areal.infra.launcher.local", "train.py", "--config", "e.yaml"],
        ["train.py", "--config", "e.yaml"],
    ),
    (
        ["torchrun", "--nproc-per-node", "8", "train.py", "--config", "e.yaml", "a=1"],
        ["--config", "e.yaml", "a=1"],
    ),
    (["./train.py", "--config", "e.yaml"], ["--config", "e.yaml"]),
    (["areal-train", "--config", "e.yaml", "a=1"], ["--config", "e.yaml", "a=1"]),
]


@pytest.mark.parametrize(("command", "expected"), SCRIPT_ARGS)
def test_script_args_of_every_launch_form(command: list[str], expected: list[str]) -> None:
    assert script_args(command) == expected


@pytest.mark.parametrize(
    ("argv", "config", "overrides"),
    [
        (["--config", "e.yaml", "a=1", "+b=2"], "e.yaml", ("a=1", "+b=2")),
        (["train.py", "--config", "e.yaml", "a=1"], "e.yaml", ("a=1",)),  # script skipped
        (["--config=e.yaml", "--unknown", "a=1"], "e.yaml", ("a=1",)),  # unknown flags ignored
    ],
)
def test_launch_args_as_the_reference_reads_them(
    argv: list[str], config: str, overrides: tuple[str, ...]
) -> None:
    launch = read_launch_args(argv)
    assert (launch.config, launch.overrides) == (config, overrides)


def test_a_command_without_config_says_what_was_expected() -> None:
    with pytest.raises(AllocationError, match="the launch command has no --config FILE"):
        read_launch_args(["train.py", "actor.backend=fsdp:d4"])


def test_a_good_config_runs_the_command_unchanged(workdir: Path, preflight: Preflight) -> None:
    argv = ["--config", "exp.yaml", "actor.backend=fsdp:d2t2"]
    done = preflight(sys.executable, "train.py", *argv, stdin="hello\n")
    assert done.returncode == 7, done.stderr  # the command's own exit status
    assert done.stdout == (
        f"ARGV {argv!r}\nLOADED actor.backend fsdp:d2t2\nSTDIN hello\n"
    )  # the command's stdout is its own: the plan went to stderr
    assert done.stderr.startswith("exp.yaml: 1 node × 8 GPUs = 8 GPUs\n")
    assert "  actor    fsdp:d2t2    d2 t2" in done.stderr


def test_the_launcher_module_form(workdir: Path, preflight: Preflight) -> None:
    done = preflight(
        sys.executable,
        "-m",
        "fake_launcher",
        "train.py",
        "--config",
        "exp.yaml",
        "rollout.backend=sglang:d1t4",
    )
    assert done.returncode == 7, done.stderr
    assert done.stdout.splitlines()[:3] == [
        "LAUNCHER ['train.py', '--config', 'exp.yaml', 'rollout.backend=sglang:d1t4']",
        "ARGV ['--config', 'exp.yaml', 'rollout.backend=sglang:d1t4']",
        "LOADED actor.backend fsdp:d4",
    ]


@pytest.mark.parametrize(
    ("overrides", "stderr"),
    [
        (
            ["actor.backend=fsdp:d99p3"],
            "areal-alloc preflight: actor.backend='fsdp:d99p3': FSDP backend only supports "
            "data/tensor/context parallelism (d, t, c), got pipeline parallelism (p3); use "
            "megatron or archon for p",
        ),
        (
            ["actor.backend=fsdp:d8"],
            "areal-alloc preflight: the engines need 12 GPUs but the cluster has "
            "cluster.n_nodes=1 × cluster.n_gpus_per_node=8 = 8: rollout sglang:d2t2 4 + "
            "actor fsdp:d8 8 = 12",
        ),
        (
            ["actor.bakend=fsdp:d8"],
            "areal-alloc preflight: exp.yaml: cannot be composed: actor.bakend=fsdp:d8: no key "
            "'actor.bakend' in the config (in actor; its keys: backend); to add it write "
            "+actor.bakend=fsdp:d8\n",
        ),
    ],
)
def test_a_bad_config_never_starts_the_command(
    workdir: Path, overrides: list[str], stderr: str, preflight: Preflight
) -> None:
    done = preflight(sys.executable, "train.py", "--config", "exp.yaml", *overrides)
    assert done.returncode == 1
    assert done.stdout == ""  # never started
    assert done.stderr.startswith(stderr)
    assert "Traceback" not in done.stderr


def test_a_command_without_config(workdir: Path, preflight: Preflight) -> None:
    done = preflight(sys.executable, "train.py", "actor.backend=fsdp:d4")
    assert done.returncode == 1
    assert done.stdout == ""
    assert done.stderr.startswith("areal-alloc preflight: the launch command has no --config")


def test_a_command_that_does_not_exist(workdir: Path, preflight: Preflight) -> None:
    done = preflight("no-such-launcher-xyz", "--config", "exp.yaml")
    assert done.returncode == 127
    assert done.stderr.endswith(
        "areal-alloc preflight: cannot run 'no-such-launcher-xyz': No such file or directory\n"
    )


# --- check, several files at once ------------------------------------------------------


def test_check_several_files(tmp_path: Path, main_cli: MainCli) -> None:
    (tmp_path / "good.yaml").write_text(GOOD)
    (tmp_path / "bad.yaml").write_text(GOOD.replace("fsdp:d4", "fsdp:d4p2"))
    (tmp_path / "base.yaml").write_text(GOOD)
    (tmp_path / "derived.yaml").write_text("defaults:\n  - base\n  - _self_\n")
    done = main_cli("check", "good.yaml", "bad.yaml", "--config", "derived.yaml")
    assert done.returncode == 1
    assert done.stderr.splitlines() == [
        "areal-alloc check: bad.yaml: actor.backend='fsdp:d4p2': FSDP backend only supports "
        "data/tensor/context parallelism (d, t, c), got pipeline parallelism (p2); use "
        "megatron or archon for p",
        "    fsdp:d4p2",
        "           ^",
        "areal-alloc check: 1 of 3 files failed: bad.yaml",
    ]
    titles = [line for line in done.stdout.splitlines() if "GPUs = " in line]
    assert titles == [
        "derived.yaml: 1 node × 8 GPUs = 8 GPUs",
        "good.yaml: 1 node × 8 GPUs = 8 GPUs",
    ]


def test_check_skips_files_without_engines_when_asked(tmp_path: Path, main_cli: MainCli) -> None:
    (tmp_path / "good.yaml").write_text(GOOD)
    (tmp_path / "other.yaml").write_text("name: ci\non: push\n")
    args = ["check", "good.yaml", "other.yaml"]
    strict = main_cli(*args)
    assert strict.returncode == 1
    assert "other.yaml: no engine found" in strict.stderr
    lenient = main_cli(*args, "--skip-without-engines")
    assert lenient.returncode == 0, lenient.stderr
    # an engine that cannot be resolved is not "no engine": it is reported, by key
    (tmp_path / "broken.yaml").write_text("actor: ${nothing}\n")
    broken = main_cli("check", "broken.yaml", "--skip-without-engines")
    assert (broken.returncode, broken.stderr) == (
        1,
        "areal-alloc check: actor: cannot be resolved: Interpolation key 'nothing' not found\n",
    )


# --- pre-commit ---------------------------------------------------------------------------


def _git(cwd: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args],
        cwd=cwd,
        check=True,
        capture_output=True,
    )


# pre-commit builds the package and installs it with its dependencies from the package
# index into an environment of its own (5-18 s here, mostly pip and the network): what the
# hook does is tested above in process; this, that .pre-commit-hooks.yaml installs and
# runs, is left to .ci/run's second phase (-m install), beside its other installs
@pytest.mark.install
@pytest.mark.skipif(not (ROOT / ".git").exists(), reason="needs this project's git checkout")
@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_the_pre_commit_hook_with_try_repo(tmp_path: Path) -> None:
    pre_commit = Path(sys.executable).with_name("pre-commit")
    if not pre_commit.exists():
        pytest.skip("pre-commit is not installed (pip install -e '.[test]')")
    sample = tmp_path / "configs"
    (sample / "experiments").mkdir(parents=True)
    (sample / "experiments" / "good.yaml").write_text(GOOD)
    (sample / "experiments" / "bad.yaml").write_text(GOOD.replace("fsdp:d4", "fsdp:d4p2"))
    (sample / "ci.yaml").write_text("name: ci\n")
    _git(sample, "init", "-q")
    _git(sample, "add", ".")
    env = {**os.environ, "PRE_COMMIT_HOME": str(tmp_path / "cache"), "SKIP": ""}

    # one try-repo (each builds and installs the package in a new environment of its
    # own): the good file and the file without engines pass, only the bad one fails
    files = ["experiments/good.yaml", "experiments/bad.yaml", "ci.yaml"]
    done = subprocess.run(
        [str(pre_commit), "try-repo", str(ROOT), "areal-alloc-check", "--files", *files],
        cwd=sample,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert "- exit code: 1" in lines, done.stdout + done.stderr
    said = [line for line in lines[lines.index("- exit code: 1") + 1 :] if line.strip()]
    assert (
        "areal-alloc check: experiments/bad.yaml: actor.backend='fsdp:d4p2': FSDP backend only "
        "supports data/tensor/context parallelism (d, t, c), got pipeline parallelism (p2); "
        "use megatron or archon for p" in said
    ), done.stdout
    # nothing else: the error's caret lines and the count of failed files, bad.yaml alone
    # (pre-commit may share the files among parallel runs of the hook: one count each)
    counted = re.compile(r"areal-alloc check: 1 of [23] files failed: experiments/bad\.yaml")
    for line in said:
        assert (
            line.startswith(" ")
            or line.startswith("areal-alloc check: experiments/bad.yaml: ")
            or counted.fullmatch(line)
        ), done.stdout
