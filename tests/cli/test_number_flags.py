"""Every numeric flag through the one reader of numbers: one line, the bound named, exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from areal_alloc.cli import main

#: these experiments name the GPU with areal-alloc's own cluster.gpu, which the reference's
#: loader refuses: the strict-key check is off here (tests/cli/test_reference_keys.py tests it)
pytestmark = pytest.mark.usefixtures("reference_off")


RANK = ["layouts", "megatron", "8", "--model", "Qwen3-8B", "--gpu", "H100-80GB", "--rank"]
SUGGEST = ["suggest", "--model", "Qwen3-8B", "--gpus", "16", "--gpu", "H100-80GB"]
COUNT = "must be an integer from 1 to 1,099,511,627,776"
GPUS = "must be an integer from 1 to 1,048,576"
SPEED = "must be a number above 0 and at most 1,000,000"
FRACTION = "must be a number above 0 and at most 1"
SPEED_LIMIT = "the limit is 1,000,000"


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, list[str]]:
    """``areal-alloc ARGV`` in process: its exit code and its stderr lines."""
    try:
        code = main(argv)
    except SystemExit as exit:  # argparse's usage errors end here
        code = exit.code if isinstance(exit.code, int) else 1
    return code, capsys.readouterr().err.splitlines()


def usage(command: str, message: str) -> list[str]:
    """The one line of a usage error (cli/args.py: CommandParser.error)."""
    return [f"areal-alloc {command}: {message} (see areal-alloc {command} --help)"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        # speeds: above 0 and finite, never replaced by the catalogue's figure
        ([*RANK, "--peak-tflops", "0"], f"argument --peak-tflops: 0: {SPEED}"),
        ([*RANK, "--peak-tflops", "1e400"], f"argument --peak-tflops: 1e400: {SPEED_LIMIT}"),
        ([*RANK, "--hbm-tbps", "inf"], f"argument --hbm-tbps: inf: {SPEED}"),
        ([*RANK, "--nvlink-gbps", "-1"], f"argument --nvlink-gbps: -1: {SPEED}"),
        ([*RANK, "--nvlink-gbps", "nan"], f"argument --nvlink-gbps: nan: {SPEED}"),
        ([*SUGGEST, "--nvlink-gbps", "-1"], f"argument --nvlink-gbps: -1: {SPEED}"),
        ([*SUGGEST, "--inter-node-gbps", "abc"], f"argument --inter-node-gbps: 'abc': {SPEED}"),
        # fractions: (0, 1]
        ([*RANK, "--compute-efficiency", "1.5"], "argument --compute-efficiency: 1.5: the limit is 1"),  # noqa: E501
        ([*RANK, "--comm-efficiency", "0x1"], f"argument --comm-efficiency: '0x1': {FRACTION}"),
        ([*RANK, "--mem-fraction", "0"], f"argument --mem-fraction: 0: {FRACTION}"),
        ([*RANK, "--mem-fraction", "true"], f"argument --mem-fraction: 'true': {FRACTION}"),
        # GiB: a closed bound (0 is allowed)
        (
            ["explain", "fsdp:d8", "--model", "Qwen3-8B", "--memory-reserve-gib", "2000"],
            "argument --memory-reserve-gib: 2000: the limit is 1,024",
        ),
        (
            ["explain", "fsdp:d8", "--model", "Qwen3-8B", "--memory-reserve-gib", "-1"],
            "argument --memory-reserve-gib: -1: must be a number from 0 to 1,024",
        ),
        # counts: ASCII digits, the bound named, any length answered in one line
        (["layouts", "megatron", "٤"], f"argument gpus: '٤': {GPUS}"),
        (["layouts", "megatron", "8", "--top", "４"], f"argument --top: '４': {GPUS}"),
        (["layouts", "megatron", "8", "--gpus-per-node", "0"], f"argument --gpus-per-node: 0: {GPUS}"),  # noqa: E501
        ([*RANK, "--tokens", "1e3"], f"argument --tokens: 1e3: {COUNT}"),
        ([*RANK, "--context-length", "-5"], f"argument --context-length: -5: {COUNT}"),
        (
            [*RANK, "--tokens", "9" * 400],
            "argument --tokens: a 400-digit number: the limit is 1,099,511,627,776",
        ),
        (
            [*RANK, "--tokens-per-step", "9" * 5000],
            "argument --tokens-per-step: a 5000-digit number: the limit is 1,099,511,627,776",
        ),
        ([*SUGGEST, "--batch-size", "2.5"], f"argument --batch-size: 2.5: {COUNT}"),
        ([*SUGGEST, "--top", "1" * 30], f"argument --top: {'1' * 30}: the limit is 1,048,576"),
    ],
)  # fmt: skip
def test_a_bad_number_flag_is_one_usage_line(
    args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, lines = run(args, capsys)
    assert (code, lines) == (2, usage(args[0], message))


def test_a_gpu_memory_flag_names_its_bound(capsys: pytest.CaptureFixture[str]) -> None:
    code, lines = run(["explain", "fsdp:d8", "--model", "Qwen3-8B", "--gpu", "0"], capsys)
    assert (code, lines) == (
        1,
        [
            "areal-alloc explain: GPU memory '0' (--gpu): must be a number of GiB above 0 and "
            "at most 65,536"
        ],
    )


def test_speeds_given_are_used_not_replaced(capsys: pytest.CaptureFixture[str]) -> None:
    # --peak-tflops is the figure used (0 was once replaced by the catalogue's 989)
    steps = []
    for peak in ("100", "900"):
        assert main([*RANK, "--peak-tflops", peak, "--json", "--top", "1"]) == 0
        (best,) = json.loads(capsys.readouterr().out)
        steps.append(best["step_seconds"])
    assert steps[0] > steps[1] > 0


def test_a_gpu_not_in_the_catalogue_is_described_by_flags(
    capsys: pytest.CaptureFixture[str],
) -> None:
    flags = [
        "--peak-tflops",
        "300",
        "--hbm-tbps",
        "2",
        "--top",
        "1",
        "--recompute",
        "full",
        "--json",
    ]
    code = main(["layouts", "fsdp", "8", "--model", "Qwen3-4B", "--gpu", "96", "--rank", *flags])
    assert code == 0
    (best,) = json.loads(capsys.readouterr().out)
    assert best["step_seconds"] > 0


def test_suggest_reads_a_batch_as_check_does(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # train_dataset.batch_size written as a string: check converts it, so does suggest
    base = "actor:\n  backend: megatron:d8\n  path: Qwen/Qwen3-8B\nrollout:\n  backend: sglang:d8\n"
    base += "cluster:\n  n_nodes: 2\n  n_gpus_per_node: 8\n  gpu: H100-80GB\n"
    batches = []
    for batch in ("'64'", "64"):
        (tmp_path / "exp.yaml").write_text(
            f"{base}train_dataset:\n  batch_size: {batch}\ngconfig:\n  n_samples: 4\n"
        )
        config = str(tmp_path / "exp.yaml")
        # the config sets no micro-batch budget (each rank's whole share would not fit)
        flags = ["--tokens", "16384", "--recompute", "full", "--json", "--top", "1"]
        assert main(["suggest", "--config", config, *flags]) == 0
        (proposal,) = json.loads(capsys.readouterr().out)["proposals"]
        batches.append(proposal)
    assert batches[0] == batches[1]
    (tmp_path / "exp.yaml").write_text(f"{base}gconfig: abc\n")
    code, lines = run(["suggest", "--config", str(tmp_path / "exp.yaml")], capsys)
    assert (code, lines) == (
        1,
        ["areal-alloc suggest: gconfig='abc': must be a section (a mapping of keys), not str"],
    )
