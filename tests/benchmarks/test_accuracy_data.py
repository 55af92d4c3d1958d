"""The data file of published measurements (``benchmarks/measurements.json``) and the
benchmark that reads it (``benchmarks/accuracy.py``).

The file's schema is ``benchmarks/MEASUREMENTS.md``: every row names a source the file
describes, quotes the line its figure is read from, and gives the figure with a unit the
schema lists; the benchmark answers every row, with an estimate or the reason it has none,
and docs/accuracy.md shows its summary.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from benchmarks import accuracy
from benchmarks.measured import KINDS, compare_all, load, rows, summary

DATA = load()
ROWS = rows(DATA)
ACCURACY_PAGE = Path(__file__).parents[2] / "docs" / "accuracy.md"
README = Path(__file__).parents[2] / "README.md"


def test_the_kinds_are_the_schemas() -> None:
    assert set(DATA["schema"]["kinds"]) == set(KINDS)


def test_row_ids_are_unique() -> None:
    ids = [row["id"] for row in ROWS]
    assert len(ids) == len(set(ids)), sorted(i for i in ids if ids.count(i) > 1)


@pytest.mark.parametrize("row", ROWS, ids=[row["id"] for row in ROWS])
def test_every_row_has_a_source_a_quote_and_a_unit(row: dict[str, Any]) -> None:
    assert row["kind"] in DATA["schema"]["kinds"]
    assert row["source"] in DATA["sources"]
    assert isinstance(row["quote"], str)
    assert row["quote"].strip()
    measured = row["measured"]
    assert measured["unit"] in DATA["schema"]["units"]
    assert isinstance(measured["value"], (int, float))
    assert measured["value"] > 0
    if measured["unit"] == "blocks":
        assert row["tokens_per_block"] > 0
    assert row["inputs"]["model"]
    assert row["inputs"]["gpu"]


@pytest.mark.parametrize("name", sorted(DATA["sources"]))
def test_every_source_says_where_it_is(name: str) -> None:
    source = DATA["sources"][name]
    assert source.get("repo") or source.get("paper")
    assert source.get("path") or source.get("url_or_table")
    # a repository snapshot is read at a commit; a thread is named by its address
    assert source.get("commit") or str(source.get("url_or_table", "")).startswith("http")


@pytest.mark.parametrize("name", sorted(DATA["models"]))
def test_every_model_has_a_source_and_a_quote(name: str) -> None:
    model = DATA["models"][name]
    assert model["source"]
    assert model["quote"]
    assert model["config"]["hidden_size"] > 0


def test_the_benchmark_answers_every_row(capsys: pytest.CaptureFixture[str]) -> None:
    assert accuracy.main(["--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    answered = {row["id"]: row for row in printed["rows"]}
    assert list(answered) == [row["id"] for row in ROWS]
    for row in answered.values():  # an estimate with its error, or the reason there is none
        if row["compared"]:
            assert row["estimate"] > 0, row
            assert row["error"] is not None, row
        else:
            assert row["reason"], row
    assert [s["kind"] for s in printed["summary"]] == [k for k in KINDS if rows(DATA, k)]


def test_one_kind_is_its_rows_only(capsys: pytest.CaptureFixture[str]) -> None:
    assert accuracy.main(["--json", "--kind", "kv_tokens"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert [row["id"] for row in printed["rows"]] == [r["id"] for r in rows(DATA, "kv_tokens")]


def test_the_text_lists_every_row_and_the_goals(capsys: pytest.CaptureFixture[str]) -> None:
    assert accuracy.main([]) == 0
    out = capsys.readouterr().out
    for row in ROWS:
        assert row["id"] in out
    assert "median ≤ 25%, worst ≤ 50%" in out  # the RL-step goal of issue 17


@pytest.mark.parametrize("page", [ACCURACY_PAGE, README], ids=["docs/accuracy.md", "README.md"])
def test_the_docs_show_the_accuracy_table(page: Path) -> None:
    table = accuracy.markdown(summary(compare_all(DATA)))
    assert table in page.read_text(encoding="utf-8"), table


def _shown(row: dict[str, Any]) -> dict[str, float]:
    return {str(t["name"]): float(t["seconds"]) for t in row["terms"] if not t.get("hidden")}


def test_a_decode_row_is_its_terms(capsys: pytest.CaptureFixture[str]) -> None:
    """Generated tokens over the terms not hidden: batch × output length / their sum."""
    assert accuracy.main(["--json", "--kind", "decode_tps"]) == 0
    printed = {r["id"]: r for r in json.loads(capsys.readouterr().out)["rows"]}
    compared = [row for row in rows(DATA, "decode_tps") if printed[row["id"]]["compared"]]
    assert compared
    for row in compared:
        answer = printed[row["id"]]
        tokens = row["inputs"]["batch"] * row["inputs"]["output_len"]
        assert answer["estimate"] == pytest.approx(tokens / sum(_shown(answer).values()))


def test_an_rl_step_row_is_its_sides_in_its_mode(capsys: pytest.CaptureFixture[str]) -> None:
    """Asynchronous: the slower side + the update; colocated: the sum + the update + the
    offload/onload (the modes of areal_alloc.estimate.rl_step.step_seconds)."""
    assert accuracy.main(["--json", "--kind", "rl_step"]) == 0
    printed = {r["id"]: r for r in json.loads(capsys.readouterr().out)["rows"]}
    compared = [row for row in rows(DATA, "rl_step") if printed[row["id"]]["compared"]]
    assert compared
    for row in compared:
        terms = _shown(printed[row["id"]])
        generation, training = terms.pop("generation"), terms.pop("training side")
        rest = sum(terms.values())  # the weight update, and a colocated step's switch
        sides = (
            max(generation, training)
            if row["inputs"]["mode"] == "asynchronous"
            else generation + training
        )
        assert printed[row["id"]]["estimate"] == pytest.approx(sides + rest), row["id"]


def test_a_colocated_row_refits_in_place(capsys: pytest.CaptureFixture[str]) -> None:
    """NeMo RL's colocated runs refit by CUDA IPC on the same GPU: the reference's awex
    update, never the disk write the config needs to pass the reference's rules."""
    assert accuracy.main(["--json", "--kind", "rl_step"]) == 0
    printed = {r["id"]: r for r in json.loads(capsys.readouterr().out)["rows"]}
    colocated = [
        row
        for row in rows(DATA, "rl_step")
        if row["inputs"]["mode"] == "colocated" and printed[row["id"]]["compared"]
    ]
    assert colocated
    for row in colocated:
        names = [str(t["name"]) for t in printed[row["id"]]["terms"]]
        assert "weight update (awex)" in names, row["id"]
        assert "weight update (disk)" not in names, row["id"]


def test_an_lmdeploy_row_is_timed_as_its_benchmark(capsys: pytest.CaptureFixture[str]) -> None:
    """profile_generation.py (InternLM/lmdeploy 4818dac37, the rows' TurboMind v0.1.0a1)
    counts every request's output tokens, the first one included, and TurboMind prefills the
    prompt but its last token, which the first decode step takes: the estimate is batch ×
    output / (prefill of prompt − 1 tokens + output decode steps), with no prefill for a
    one-token prompt; other sources prefill the whole prompt."""
    assert accuracy.main(["--json", "--kind", "decode_tps"]) == 0
    printed = {r["id"]: r for r in json.loads(capsys.readouterr().out)["rows"]}
    compared = [row for row in rows(DATA, "decode_tps") if printed[row["id"]]["compared"]]
    lmdeploy = [r for r in compared if r["source"].startswith("lmdeploy")]
    assert lmdeploy  # both rules are checked: LMDeploy's and the others'
    assert len(lmdeploy) < len(compared)
    for row in compared:
        answer = printed[row["id"]]
        batch, output = row["inputs"]["batch"], row["inputs"]["output_len"]
        steps, prompt = output, row["inputs"]["prompt_len"]
        prefilled = prompt - 1 if row in lmdeploy else prompt
        decode = [t for t in answer["terms"] if str(t["name"]).startswith("decode ")]
        assert decode, row["id"]
        for term in decode:
            assert str(term["formula"]).startswith(f"{steps:,} steps × "), (row["id"], term)
        formula = next(t["formula"] for t in answer["terms"] if t["name"] == "prefill compute")
        assert f" × {batch * prefilled:,} prompt tokens + " in str(formula), (row["id"], formula)
        prefill = _shown(answer)["prefill compute"]
        step = sum(float(t["seconds"]) for t in decode if not t.get("hidden")) / steps
        assert answer["estimate"] == pytest.approx(batch * output / (prefill + steps * step))


def test_the_reference_fsdp_steps_are_counted_as_they_were_allocated() -> None:
    """Issue 28 item 2: every measured step of the reference's FSDP engine, with and
    without recomputation, against torch's own allocator peak (max_memory_allocated):
    the Hugging Face layer and the step's phases within the goal, and no step that ran
    refused."""
    compared = compare_all(DATA)
    allocated = next(k for k in summary(compared) if k.kind == "reference_fsdp_allocated")
    assert allocated.met, allocated
    assert allocated.compared == 18
    refused = [
        r.id for r in compared if r.kind == "reference_fsdp_memory" and "DOES NOT FIT" in r.note
    ]
    assert refused == []
