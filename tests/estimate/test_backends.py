"""Every choice the estimates make by backend comes from one table (estimate/backends.py):
a backend that parses but has no row there is refused where an estimate is asked for,
with one line that names what to add, instead of borrowing another backend's rules; and
a backend added as docs/architecture.md says ("A backend") is estimated by its row."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Callable
from dataclasses import fields
from pathlib import Path

import pytest

from areal_alloc.estimate.backends import (
    SERVERS,
    TRAINING,
    NoEstimateModel,
    server_model,
    training_model,
)
from areal_alloc.vocab import INFERENCE_BACKENDS, TRAINING_BACKENDS

REFUSAL = (
    "backend 'deepspeed' has no memory or speed model: add its row to TRAINING in "
    'areal_alloc/estimate/backends.py (docs/architecture.md, "A backend")'
)


def test_every_backend_that_parses_has_its_row() -> None:
    assert set(TRAINING) == set(TRAINING_BACKENDS)
    assert set(SERVERS) == set(INFERENCE_BACKENDS)
    for name, row in TRAINING.items():
        assert row.name == name
    for name, server in SERVERS.items():
        assert server.name == name


@pytest.mark.parametrize(
    ("lookup", "backend", "table"),
    [(training_model, "deepspeed", "TRAINING"), (server_model, "tgi", "SERVERS")],
)
def test_a_backend_without_a_row_is_refused_by_name(
    lookup: Callable[[str], object], backend: str, table: str
) -> None:
    with pytest.raises(NoEstimateModel) as raised:
        lookup(backend)
    assert raised.value.message == (
        f"backend {backend!r} has no memory or speed model: add its row to {table} in "
        'areal_alloc/estimate/backends.py (docs/architecture.md, "A backend")'
    )


# A user's process that adds a backend as docs/architecture.md says, before anything else
# of the package is imported, then runs the command line; ROW: also its estimates' row.
_ADDED = """\
import sys
from dataclasses import replace
import areal_alloc.vocab as vocab
vocab.BACKEND_DIMS["deepspeed"] = vocab.BACKEND_DIMS["fsdp"]
vocab.TRAINING_BACKENDS = (*vocab.TRAINING_BACKENDS, "deepspeed")
if ROW:
    from areal_alloc.estimate import backends
    backends.TRAINING["deepspeed"] = replace(backends.TRAINING["fsdp"], name="deepspeed")
from areal_alloc.cli import main
sys.exit(main(sys.argv[1:]))
"""


def _run(tmp_path: Path, row: bool, *args: str) -> subprocess.CompletedProcess[str]:
    script = tmp_path / "added.py"
    script.write_text(_ADDED.replace("ROW", str(row)), encoding="utf-8")
    return subprocess.run(
        [sys.executable, str(script), *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )


EXPERIMENT = (
    "cluster: {n_nodes: 1, n_gpus_per_node: 8}\n"
    "actor:\n  backend: deepspeed:d8\n  path: Qwen/Qwen3-8B\n"
)


@pytest.mark.parametrize(
    ("args", "prefix"),
    [
        # it parses: the layout and its rank groups need no estimate
        (("explain", "deepspeed:d8"), None),
        (
            ("explain", "deepspeed:d8", "--model", "Qwen3-8B", "--gpu", "H100-80GB"),
            "areal-alloc explain: ",
        ),
        (
            ("layouts", "deepspeed", "8", "--model", "Qwen3-8B", "--gpu", "H100-80GB", "--rank"),
            "areal-alloc layouts: ",
        ),
        (
            ("check", "exp.yaml", "--gpu", "H100-80GB"),
            "areal-alloc check: actor.backend='deepspeed:d8': ",
        ),
    ],
)
def test_a_new_backend_without_its_row_meets_the_refusal(
    tmp_path: Path, args: tuple[str, ...], prefix: str | None
) -> None:
    (tmp_path / "exp.yaml").write_text(EXPERIMENT, encoding="utf-8")
    done = _run(tmp_path, False, *args)
    if prefix is None:
        assert done.returncode == 0, done.stderr
        assert done.stdout.startswith("deepspeed:d8  (deepspeed, training)")
        return
    assert done.returncode == 1
    assert done.stderr.splitlines() == [prefix + REFUSAL]


def test_a_new_backend_with_its_row_is_estimated_by_it(tmp_path: Path) -> None:
    """Following both steps of the docs: its row copied from fsdp's, it is estimated as
    fsdp is, term by term."""
    args = ("--model", "Qwen3-8B", "--gpu", "H100-80GB", "--json")
    added = _run(tmp_path, True, "explain", "deepspeed:d8", *args)
    assert added.returncode == 0, added.stderr
    fsdp = _run(tmp_path, True, "explain", "fsdp:d8", *args)
    mine, theirs = json.loads(added.stdout)["memory"], json.loads(fsdp.stdout)["memory"]
    assert mine["total"] == theirs["total"]
    assert [t["bytes"] for t in mine["terms"]] == [t["bytes"] for t in theirs["terms"]]


def test_each_row_field_is_read_somewhere() -> None:
    """No dead column: every field of a row is a choice some estimate makes."""
    source = "\n".join(
        p.read_text(encoding="utf-8")
        for p in (Path(__file__).parents[2] / "areal_alloc").rglob("*.py")
        if p.name != "backends.py"
    )
    for row in (TRAINING["fsdp"], SERVERS["vllm"]):
        for field in fields(row):
            if field.name != "name":  # read off a row: model.x, e.model.x, server_model(b).x
                assert re.search(rf"(model|\))\.{field.name}\b", source), field.name
