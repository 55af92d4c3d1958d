"""The GPU probe of the reference's FSDP engine (benchmarks/probe_fsdp.py) on a CPU: a tiny
untied Qwen3 from a config.json, gloo, world size 1, recomputation on, a micro-batch padded
and split into two log-prob chunks, the training step and the forward-only pass, and the rows
written into a copy of the data file, which the accuracy benchmark then answers.

Skipped unless torch and transformers import; AREAL_ALLOC_REQUIRE_TORCH=1 (CI) makes their
absence a failure.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from benchmarks import probe_fsdp
from benchmarks.measured import DATA, KINDS, compare, load

if not os.environ.get("AREAL_ALLOC_REQUIRE_TORCH"):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")

ROOT = Path(__file__).resolve().parents[2]
TOKENS = 1100  # padded to 1,280 (a multiple of 256): two chunks of 1,024 rows


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], dict[str, Any]]:
    """One CPU run: what it printed to --out, and the data file it wrote."""
    tmp = tmp_path_factory.mktemp("probe")
    config = tmp / "tiny-untied" / "config.json"
    config.parent.mkdir()
    config.write_text(json.dumps(dict(probe_fsdp.TINY, tie_word_embeddings=False)))
    data = tmp / "measurements.json"
    shutil.copy(DATA, data)
    out = tmp / "out.json"
    command = [sys.executable, str(ROOT / "benchmarks" / "probe_fsdp.py"), "--device", "cpu"]
    command += ["--model", str(config), "--tokens", str(TOKENS), "--recompute", "full"]
    command += ["--steps", "1", "--compile-backend", "eager", "--out", str(out)]
    command += ["--write", "--data", str(data)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(out.read_text()), load(data)


def test_a_case_gives_three_rows_of_the_reference_kinds(
    run: tuple[dict[str, Any], dict[str, Any]],
) -> None:
    printed, _ = run
    assert printed["failed"] == {}
    assert [(r["id"], r["kind"], r["measured"]["unit"]) for r in printed["rows"]] == [
        ("probe-cpu-tiny-untied-1100-full-memory", "reference_fsdp_memory", "GiB"),
        ("probe-cpu-tiny-untied-1100-full-step", "reference_fsdp_step", "s"),
        ("probe-cpu-tiny-untied-1100-full-forward", "reference_fsdp_forward", "s"),
    ]
    assert {r["kind"] for r in printed["rows"]} <= set(KINDS)


def test_the_rows_carry_the_settings_and_every_phase(
    run: tuple[dict[str, Any], dict[str, Any]],
) -> None:
    printed, _ = run
    memory, step, forward = printed["rows"]
    inputs = memory["inputs"]
    assert inputs["gpu"] == "cpu"
    assert inputs["seq_len"] == TOKENS
    assert inputs["activation_checkpointing"] == "full"
    assert inputs["layout"] == {"d": 1}
    assert inputs["memory_metric"].startswith("process peak resident memory")
    probe = memory["probe"]
    assert (probe["tokens"], probe["padded_tokens"], probe["recompute"]) == (TOKENS, 1280, True)
    # untied: the embedding and the output layer are two matrices of vocab × hidden
    vocab, hidden = int(probe_fsdp.TINY["vocab_size"]), int(probe_fsdp.TINY["hidden_size"])
    assert probe["parameters"] > 2 * vocab * hidden
    assert list(probe["phases"]) == ["load", "first_step", "steps", "forward"]
    for phase in probe["phases"].values():
        assert phase["process_peak_rss_gib"] > 0
        assert phase["device_used_gib"] is None  # a CPU has no device memory to read
    assert memory["measured"]["value"] == probe["phases"]["steps"]["process_peak_rss_gib"]
    assert step["measured"]["value"] == probe["step_s"] > 0
    assert forward["measured"]["value"] == probe["forward_s"] > 0
    assert len(probe["phases"]["steps"]["seconds"]) == 1


def test_the_source_names_the_machine_and_the_versions(
    run: tuple[dict[str, Any], dict[str, Any]],
) -> None:
    printed, _ = run
    ((name, source),) = printed["source"].items()
    assert name.startswith("areal-alloc-probe-cpu-")
    assert source["commit"] == probe_fsdp.AREAL
    assert source["machine"]["gpu"] == "cpu"
    assert set(source["versions"]) == {"torch", "transformers"}
    assert "torch.compile backend eager" in source["note"]
    assert {r["source"] for r in printed["rows"]} == {name}


def test_the_rows_are_written_into_the_data_file(
    run: tuple[dict[str, Any], dict[str, Any]],
) -> None:
    printed, data = run
    assert data["rows"][-3:] == printed["rows"]
    assert data["sources"] | printed["source"] == data["sources"]
    assert len(data["rows"]) == len(load()["rows"]) + 3


@pytest.mark.parametrize("suffix", ["memory", "step", "forward"])
def test_the_measured_h200_rows_are_compared(suffix: str) -> None:
    """The probe's own H200 rows in the data file go through the accuracy benchmark."""
    row = next(r for r in load()["rows"] if r["id"] == f"probe-h200-Qwen3-8B-8192-full-{suffix}")
    assert compare(load(), row).estimate is not None


@pytest.mark.parametrize(
    ("model", "expected"),
    [
        ("Qwen/Qwen3-8B", ("Qwen/Qwen3-8B", 4096, False)),
        ("qwen3-0.6b", ("Qwen/Qwen3-0.6B", 1024, True)),
        (None, ("tiny-qwen3", 64, True)),
    ],
)
def test_a_model_is_a_catalogue_entry_or_the_tiny_one(
    model: str | None, expected: tuple[str, int, bool]
) -> None:
    name, config = probe_fsdp.model_config(model)
    assert (name, config["hidden_size"], config["tie_word_embeddings"]) == expected


@pytest.mark.parametrize(
    ("torch_name", "expected"),
    [
        ("NVIDIA H200", ("H200", "")),
        ("NVIDIA Q9000", ("NVIDIA Q9000", "'NVIDIA Q9000' is not in areal_alloc's GPU catalogue")),
    ],
)
def test_the_device_is_named_as_the_catalogue_names_it(
    torch_name: str, expected: tuple[str, str]
) -> None:
    assert probe_fsdp.gpu_name(torch_name) == expected
