"""The command at its limits: closed pipes, absurd sizes; one clear answer, quickly."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from areal_alloc import AllocationValidationError, validate
from tests.conftest import MainCli

# --- closed pipes -----------------------------------------------------------------

PRINTING = [
    ["layouts", "megatron", "1024", "--experts"],
    ["explain", "megatron:(attn:d4p2t2c2|ffn:d2p2t4e2)"],
    ["migrate", "sglang:d4+fsdp:d4"],
    [],  # the Hydra app
    ["experiment=moe_32", "output=json"],
]


@pytest.mark.parametrize("args", PRINTING)
def test_a_pipe_closed_before_we_write_ends_quietly(
    tmp_path: Path, args: list[str], command: str
) -> None:
    read, write = os.pipe()
    os.close(read)  # the reader is gone before the first byte: every write fails
    try:
        done = subprocess.run(
            [command, *args], cwd=tmp_path, stdout=write, stderr=subprocess.PIPE, timeout=120
        )
    finally:
        os.close(write)
    assert done.stderr.decode() == ""  # no traceback, no "Exception ignored"
    assert done.returncode == -signal.SIGPIPE  # as `yes | head` ends


def test_a_reader_that_closes_early(tmp_path: Path, command: str) -> None:
    # about 600 kB of layouts: far more than a pipe holds, so the writer must meet
    # the closed pipe whatever the timing
    process = subprocess.Popen(
        [command, "layouts", "megatron", "4096", "--hybrid"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert process.stdout is not None
    assert process.stderr is not None
    assert process.stdout.readline() == b"megatron:d4096\n"
    process.stdout.close()
    stderr = process.stderr.read()
    assert process.wait(timeout=120) == -signal.SIGPIPE
    assert stderr == b""


# --- absurd sizes -----------------------------------------------------------------

HUGE = "99999999999999999999"


@pytest.mark.parametrize(
    ("args", "stderr"),
    [
        (
            ["explain", f"megatron:d{HUGE}"],
            f"areal-alloc explain: data parallel size d{HUGE} is over the limit of "
            f"1,048,576 GPUs\n    megatron:d{HUGE}\n             ^\n",
        ),
        (
            ["explain", "megatron:d100000000t8"],
            "areal-alloc explain: data parallel size d100000000 is over the limit of "
            "1,048,576 GPUs\n    megatron:d100000000t8\n             ^\n",
        ),
        (
            ["layouts", "megatron", HUGE],
            "areal-alloc layouts: argument gpus: 99999999999999999999: the limit is 1,048,576 "
            "(see areal-alloc layouts --help)\n",
        ),
        (
            ["cluster.n_nodes=100000000"],
            "areal-alloc: cluster.n_nodes=100,000,000: the limit is 131,072\n",
        ),
        (
            [f"rollout.backend=sglang:d{HUGE}", f"cluster.n_nodes={HUGE}"],
            "areal-alloc: cluster.n_nodes=99,999,999,999,999,999,999: the limit is 131,072\n",
        ),
        (  # token counts have their own, larger limit (2**40): 2M-token steps are common
            ["layouts", "megatron", "16", "--rank", "--tokens-per-step", HUGE],
            "areal-alloc layouts: argument --tokens-per-step: 99999999999999999999: the limit "
            "is 1,099,511,627,776 (see areal-alloc layouts --help)\n",
        ),
        (
            ["suggest", "--model", "Qwen3-8B", "--gpus", "16", "--gen-len", "1099511627777"],
            "areal-alloc suggest: argument --gen-len: 1099511627777: the limit is "
            "1,099,511,627,776 (see areal-alloc suggest --help)\n",
        ),
        (
            ["layouts", "sglang", "8", "--max-tp", "0"],
            "areal-alloc layouts: argument --max-tp: 0: must be an integer from 1 to 1,048,576 "
            "(see areal-alloc layouts --help)\n",
        ),
    ],
)
def test_absurd_sizes_get_one_clear_error(
    tmp_path: Path, args: list[str], stderr: str, main_cli: MainCli
) -> None:
    done = main_cli(*args)
    assert done.returncode in (1, 2)
    assert done.stderr.endswith(stderr)
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize(
    "flags",
    [
        ["--tokens-per-step", "4194304", "--tokens", "8192"],  # a 4M-token pretraining step
        ["--tokens-per-step", "1099511627776", "--tokens", "1"],  # the limit itself
        ["--seq-len", "1099511627776"],
    ],
)
def test_large_token_counts_get_an_estimate(flags: list[str], main_cli: MainCli) -> None:
    done = main_cli("layouts", "megatron", "16", "--model", "Qwen3-8B", "--gpu", "H100-80GB",
               "--rank", "--json", "--top", "1", *flags)  # fmt: skip
    assert done.returncode == 0, done.stderr
    (best,) = json.loads(done.stdout)
    assert best["step_seconds"] > 0


@pytest.mark.parametrize(
    ("yaml", "message"),
    [
        (
            f"actor:\n  backend: fsdp:d8\ncluster:\n  n_nodes: {HUGE}\n",
            "cluster.n_nodes=99,999,999,999,999,999,999: the limit is 131,072",
        ),
        (
            f"actor:\n  backend: fsdp:d{HUGE}\ncluster:\n  n_nodes: 1\n",
            f"actor.backend='fsdp:d{HUGE}': data parallel size d{HUGE} is over the limit "
            f"of 1,048,576 GPUs",
        ),
        (
            "actor:\n  backend: fsdp:d8\ncluster:\n  n_nodes: 131072\n  n_gpus_per_node: 1024\n",
            "cluster.n_nodes=131072 × cluster.n_gpus_per_node=1024 = 134,217,728 GPUs is over "
            "the limit of 1,048,576",
        ),
    ],
)
def test_check_rejects_absurd_files(
    tmp_path: Path, yaml: str, message: str, main_cli: MainCli
) -> None:
    (tmp_path / "exp.yaml").write_text(yaml)
    done = main_cli("check", "exp.yaml")
    assert done.returncode == 1
    assert done.stderr.splitlines()[0] == f"areal-alloc check: {message}"
    with pytest.raises(AllocationValidationError) as info:
        validate(OmegaConf.load(tmp_path / "exp.yaml"))
    assert info.value.message == message


def test_a_huge_cluster_gets_a_summarised_node_map(tmp_path: Path, main_cli: MainCli) -> None:
    done = main_cli("cluster.n_nodes=131072", "rollout.backend=sglang:d100000t2")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) < 40  # a summary: not one line per node of 131,072
    assert "  nodes 0–24999       R R r r R R r r" in lines
    assert "  nodes 25001–131071  · · · · · · · ·" in lines
    assert "  R/r = rollout sglang:d100000t2, 100000 instances of 2 GPUs  (nodes 0–24999)" in lines


def test_explain_of_a_million_ranks_lists_a_few_groups(tmp_path: Path, main_cli: MainCli) -> None:
    done = main_cli("explain", "megatron:d1024p8t8c16")
    assert done.returncode == 0, done.stderr
    assert "  tp        8       131,072  [0, 1, 2, 3, 4, 5, 6, 7] " in done.stdout
    assert "(131,069 more)" in done.stdout
    as_json = main_cli("explain", "megatron:d1024p8t8c16", "--json")
    data = __import__("json").loads(as_json.stdout)
    assert data["rank_group_counts"]["tp"] == {"size": 8, "count": 131072, "omitted": 129024}
    assert len(data["rank_groups"]["tp"]) == 2048  # 16,384 ranks listed per kind


def test_too_many_layouts_asks_for_constraints(tmp_path: Path, main_cli: MainCli) -> None:
    done = main_cli("layouts", "megatron", "720720", "--hybrid")
    assert done.returncode == 1
    assert done.stderr.startswith("areal-alloc layouts: ")
    assert "narrow the search" in done.stderr
