"""The catalogue as data (issue 29, item 3): the built-in GPUs and models are package data
files read through one schema (areal_alloc/data/gpus.json, models.json), and a user adds
their own from a file (--catalogue, AREAL_ALLOC_CATALOGUE, the hook's catalogue), each bad
field refused in one line that names the file, the entry and the field."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from areal_alloc import catalogue
from areal_alloc.catalogue import (
    GPUS,
    MODELS,
    REPORTED_GIB,
    CatalogueError,
    add_files,
    find_gpu,
    find_model,
)

DATA = Path(catalogue.__file__).parent / "data"
COMMAND = shutil.which("areal-alloc") or "areal-alloc"


@pytest.mark.parametrize(
    ("name", "field", "value"),
    [
        # facts the tables held before they were data (their sources in the file)
        ("H100-80GB", "memory_gib", 80),
        ("H100-80GB", "bf16_tflops", 989),
        ("H200", "hbm_tbps", 4.8),
        ("A800", "nvlink_gbps", 400),
        ("L40S", "nvlink_gbps", None),
        ("RTX-4090", "bf16_tflops", None),
    ],
)
def test_the_gpus_data_holds_the_facts(name: str, field: str, value: float | None) -> None:
    assert getattr(find_gpu(name), field) == value


def test_every_gpu_has_its_reported_capacity_and_sources() -> None:
    assert REPORTED_GIB["h200"].gib == 139.801
    for gpu in GPUS.values():
        assert gpu.source
        assert [figure for figure, _ in gpu.cited] == [
            f for f in ("bf16_tflops", "hbm_tbps", "nvlink_gbps") if getattr(gpu, f) is not None
        ]


@pytest.mark.parametrize(
    ("model", "layers", "hidden"),
    [("Qwen3-8B", 36, 4096), ("Qwen/Qwen2.5-7B-Instruct", 28, 3584), ("Qwen3-30B-A3B", 48, 2048)],
)
def test_the_models_data_holds_the_facts(model: str, layers: int, hidden: int) -> None:
    arch = find_model(model)
    assert (arch.num_layers, arch.hidden_size) == (layers, hidden)


def test_the_package_data_is_every_entry_of_the_catalogue() -> None:
    """One home: the tables are the files' entries, nothing else (a user's added after)."""
    gpus = json.loads((DATA / "gpus.json").read_text(encoding="utf-8"))["gpus"]
    models = json.loads((DATA / "models.json").read_text(encoding="utf-8"))["models"]
    assert {g["name"].lower() for g in gpus} <= set(GPUS)
    assert {m["hub_id"].lower() for m in models} <= set(MODELS)
    assert len(gpus) == 10
    assert len(models) == 20


@pytest.fixture(autouse=True)
def _restored() -> Iterator[None]:
    """Each test's additions to the catalogue undone after it (the tables are the process's)."""
    tables = ("GPUS", "MODELS", "REPORTED_GIB", "POSITIONS", "_ALIASES", "_GPU_ALIASES", "_ADDED")
    saved = {name: type(getattr(catalogue, name))(getattr(catalogue, name)) for name in tables}
    yield
    for name, value in saved.items():
        table = getattr(catalogue, name)
        table.clear()
        table.update(value)


def _file(tmp_path: Path, data: object) -> Path:
    path = tmp_path / "mine.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


_FACT = {"value": 80, "text": "my sheet"}
_CONFIG = dict(MODELS["qwen/qwen3-8b"].config)

BAD = [
    (
        {"gpus": [{"name": "X1", "memory_gib": {"value": "lots", "text": "x"}}]},
        "gpus['X1'].memory_gib.value: 'lots' is not a number: give the memory in GiB, e.g. 80",
    ),
    (
        {"gpus": [{"name": "X1", "memory_gib": _FACT, "bf16_tflop": _FACT}]},
        "gpus[0].'bf16_tflop': unknown key; did you mean 'bf16_tflops'? allowed: name, aliases, "
        "memory_gib, reported_gib, bf16_tflops, hbm_tbps, nvlink_gbps",
    ),
    (
        {"gpus": [{"name": "X1", "memory_gib": {"value": 80}}]},
        "gpus['X1'].memory_gib: no source: give text (a page, a product name) or repo, path, "
        "commit and quote (missing repo, path, commit, quote)",
    ),
    (
        {"gpus": [{"name": "H100-80GB", "memory_gib": _FACT}]},
        "gpus['H100-80GB']: a built-in GPU's name: give yours another",
    ),
    (
        {"gpus": [{"memory_gib": _FACT}]},
        'gpus[0].name: None is not a name: give e.g. "B300"',
    ),
    (
        {
            "models": [
                {
                    "hub_id": "me/M",
                    "config": {**_CONFIG, "hidden_size": -1},
                    "config_source": {"text": "x"},
                }
            ]
        },
        "models['me/M'].config: me/M: hidden_size=-1: must be an integer from 1 to",
    ),
    (
        {"models": [{"hub_id": "M", "config": _CONFIG, "config_source": {"text": "x"}}]},
        "models[0].hub_id: 'M' is not a hub id: give e.g. \"org/Model-7B\"",
    ),
    (
        {"gpu": []},
        "'gpu': unknown key; did you mean 'gpus'? allowed: schema, gpus, models, positions",
    ),
]


@pytest.mark.parametrize(("data", "message"), BAD)
def test_a_bad_user_file_is_one_line_naming_the_field(
    tmp_path: Path, data: object, message: str
) -> None:
    path = _file(tmp_path, data)
    with pytest.raises(CatalogueError) as raised:
        add_files([path])
    assert raised.value.message.startswith(f"{path}: {message}")
    assert "\n" not in raised.value.message


_MINE = {
    "gpus": [
        {
            "name": "Z9",
            "aliases": ["z9-sxm"],
            "memory_gib": {"value": 96, "text": "my vendor's sheet"},
            "bf16_tflops": {"value": 1000, "text": "my vendor's sheet"},
            "hbm_tbps": {"value": 4, "text": "my vendor's sheet"},
        }
    ],
    "models": [
        {"hub_id": "me/Mine-8B", "config": _CONFIG, "config_source": {"text": "my config.json"}}
    ],
}


def _cli(
    tmp_path: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [COMMAND, *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        env={**os.environ, **(env or {})},
    )


@pytest.mark.parametrize("how", ["flag", "environment"])
def test_a_user_adds_a_gpu_and_a_model_from_a_file(tmp_path: Path, how: str) -> None:
    path = _file(tmp_path, _MINE)
    args = ["explain", "fsdp:d8", "--model", "Mine-8B", "--gpu", "z9-sxm", "--json"]
    if how == "flag":
        done = _cli(tmp_path, *args, "--catalogue", str(path))
    else:
        done = _cli(tmp_path, *args, env={"AREAL_ALLOC_CATALOGUE": str(path)})
    assert done.returncode == 0, done.stderr
    memory = json.loads(done.stdout)["memory"]
    assert memory["capacity"] == 96 * 2**30  # its nameplate: no reported figure given
    # the same model as the built-in Qwen3-8B it copies: the same estimate
    builtin = _cli(tmp_path, "explain", "fsdp:d8", "--model", "Qwen3-8B", "--gpu", "96", "--json")
    assert memory["weights"] == json.loads(builtin.stdout)["memory"]["weights"]


def test_the_hooks_catalogue_parameter_is_one_path_or_a_list() -> None:
    from areal_alloc.hydra_hook import _catalogue_files

    assert _catalogue_files("a.json") == ["a.json"]
    assert _catalogue_files(["a.json", "b.json"]) == ["a.json", "b.json"]
    assert _catalogue_files(None) is None
    with pytest.raises(SystemExit, match="catalogue=3: must be a path"):
        _catalogue_files(3)


def test_the_architecture_page_recipe_adds_a_gpu(tmp_path: Path) -> None:
    """docs/architecture.md's "A GPU": its example entry, as written there, is a GPU."""
    page = (Path(__file__).parents[2] / "docs" / "architecture.md").read_text(encoding="utf-8")
    example = page.split("**A GPU** is an entry of")[1].split("```json")[1].split("```")[0]
    entry = json.loads(example.replace("<40 hex>", "0" * 40))
    path = _file(tmp_path, {"gpus": [entry]})
    add_files([path])
    gpu = find_gpu("b300-sxm")
    assert (gpu.name, gpu.memory_gib, gpu.bf16_tflops) == ("B300", 288, 2250)
    assert catalogue.device_total(gpu).gib == 268.0


@pytest.mark.parametrize(("mine", "line"), [(True, "B300, 288.0 GiB"), (False, "'lots'")])
def test_the_hooks_catalogue_adds_a_gpu_in_a_hydra_app(
    tmp_path: Path, mine: bool, line: str
) -> None:
    """The areal-alloc app (a Hydra app with the hook): hydra.callbacks.areal_alloc.catalogue
    names the user's file; a bad field stops the run in one line."""
    entry = {"name": "B300", "memory_gib": {"value": 288 if mine else "lots", "text": "x"}}
    path = _file(tmp_path, {"gpus": [entry]})
    done = _cli(
        tmp_path,
        f"hydra.callbacks.areal_alloc.catalogue={path}",
        "hydra.callbacks.areal_alloc.gpu=B300",
    )
    assert (done.returncode == 0) is mine, done.stderr
    assert line in (done.stdout if mine else done.stderr)
