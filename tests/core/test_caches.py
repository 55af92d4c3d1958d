"""Caches that cannot be planted, a parse cache of the most recently used strings, and the
calibration store's bounds."""

from __future__ import annotations

import atexit
import json
import math
import os
import pickle
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from areal_alloc import _cache
from areal_alloc.catalogue import find_model
from areal_alloc.errors import AllocationValidationError
from areal_alloc.estimate import calibration
from tests.conftest import COMMAND


@pytest.fixture
def cache_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """``XDG_CACHE_HOME`` of this test: the cache folder is ``<it>/areal-alloc``."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.delenv("AREAL_ALLOC_NO_CALIBRATION", raising=False)
    return tmp_path


def _folder(home: Path, mode: int = 0o700) -> Path:
    folder = home / "areal-alloc"
    folder.mkdir(exist_ok=True)
    folder.chmod(mode)
    return folder


# --- the folder and its files -----------------------------------------------------------


def test_a_new_folder_is_made_private(cache_home: Path) -> None:
    assert _cache.cache_folder() == cache_home / "areal-alloc"
    assert stat.S_IMODE((cache_home / "areal-alloc").stat().st_mode) == 0o700


@pytest.mark.parametrize("mode", [0o777, 0o770, 0o722, 0o1777])
def test_a_folder_others_may_write_is_never_used(cache_home: Path, mode: int) -> None:
    folder = _folder(cache_home, mode)
    (folder / "x").write_bytes(b"planted")
    (folder / "x").chmod(0o600)
    assert _cache.cache_folder() is None
    assert _cache.read_private("x", 100) is None
    assert _cache.write_private("y", b"data") is None
    assert not (folder / "y").exists()


@pytest.mark.skipif(os.geteuid() != 0, reason="making a folder another user's needs root")
def test_another_users_folder_is_never_used(cache_home: Path) -> None:
    folder = _folder(cache_home)
    os.chown(folder, 65534, 65534)
    assert _cache.cache_folder() is None
    assert _cache.read_private("x", 100) is None


def test_a_symlinked_folder_is_never_used(
    cache_home: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    elsewhere = tmp_path_factory.mktemp("elsewhere")
    elsewhere.chmod(0o700)
    (cache_home / "areal-alloc").symlink_to(elsewhere)
    assert _cache.cache_folder() is None


@pytest.mark.parametrize("case", ["group_writable", "symlink", "fifo", "too_big", "ok"])
def test_only_the_users_own_regular_files_are_read(cache_home: Path, case: str) -> None:
    folder = _folder(cache_home)
    path = folder / "x"
    if case == "symlink":
        (folder / "target").write_bytes(b"data")
        path.symlink_to(folder / "target")
    elif case == "fifo":
        os.mkfifo(path, 0o600)  # O_NONBLOCK: refused without waiting for a writer
    else:
        path.write_bytes(b"data" * (100 if case == "too_big" else 1))
        path.chmod(0o660 if case == "group_writable" else 0o600)
    assert _cache.read_private("x", 100) == (b"data" if case == "ok" else None)


def test_written_files_are_private_and_replace_atomically(cache_home: Path) -> None:
    path = _cache.write_private("x", b"one")
    assert path == cache_home / "areal-alloc" / "x"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert _cache.write_private("x", b"two") == path
    assert _cache.read_private("x", 100) == b"two"
    assert sorted(p.name for p in path.parent.iterdir()) == ["x"]  # no temporary left
    assert _cache.remove_private("x")
    assert not path.exists()


# --- the planted pickle: it must never run ---------------------------------------------


class _Plant:
    """Unpickling this creates the marker file."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[object, ...]:
        return (Path.write_text, (self.marker, "planted code ran"))


@pytest.mark.parametrize("mode", [0o777, 0o700])
def test_a_planted_pickle_never_runs(tmp_path: Path, mode: int) -> None:
    home = tmp_path / "home"
    folder = home / "areal-alloc"
    folder.mkdir(parents=True)
    folder.chmod(mode)
    proof = tmp_path / "proof"
    pickle.loads(pickle.dumps(_Plant(proof)))  # the plant works: unpickled, it writes
    assert proof.exists()
    marker = tmp_path / "marker"
    payload = pickle.dumps(_Plant(marker))
    import lark

    version = "".join(map(str, sys.version_info[:2]))
    for name in (  # the grammar cache's name before, and plausible others
        f"grammar-lark{lark.__version__}-py{version}.cache",
        "calibration.json",
        *(p.name for p in folder.iterdir()),
    ):
        (folder / name).write_bytes(payload)
    env = {
        **os.environ,
        "XDG_CACHE_HOME": str(home),
        "AREAL_ALLOC_NO_PARSE_CACHE": "1",  # so lark and its grammar are needed
    }
    done = subprocess.run(
        [COMMAND, "explain", "fsdp:d2t2"], capture_output=True, text=True, env=env, timeout=60
    )
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout.startswith("fsdp:d2t2")
    assert not marker.exists()


def test_a_planted_parse_cache_in_an_open_folder_is_ignored(tmp_path: Path) -> None:
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path)}
    code = "import areal_alloc; print(areal_alloc.ModelAllocation.from_str('fsdp:d4t2'))"
    subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, check=True)
    folder = tmp_path / "areal-alloc"
    (cache,) = folder.glob("parsed-*.json")
    # a record that would make fsdp:d4t2 read as d8 … planted in a folder others may write
    planted = json.loads(cache.read_text())
    for row in planted["entries"]:
        row[2] = json.loads(json.dumps(row[2]).replace('"4"', '"8"'))
    cache.write_text(json.dumps(planted))
    folder.chmod(0o777)
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert (done.returncode, done.stdout, done.stderr) == (0, "fsdp:d4t2\n", "")


# --- the parse cache keeps the most recently used strings -------------------------------


def _fresh_store() -> _cache._Store:
    _cache._file.cache_clear()
    _cache._store.cache_clear()
    return _cache._store()


def test_the_parse_cache_keeps_the_most_recently_used(
    cache_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("AREAL_ALLOC_NO_PARSE_CACHE", raising=False)
    monkeypatch.setattr(atexit, "register", lambda f: f)  # saved by hand below
    store = _fresh_store()
    record = [None, None, 0, [["d", "1", 1]], None]
    for i in range(_cache.MAX_ENTRIES):
        store.remember("single", f"s{i}", record)
    assert store.lookup("single", "s0") is not None  # a hit refreshes the oldest
    store.remember("single", "new", record)  # evicts the oldest, now s1
    assert store.lookup("single", "s1") is None
    assert store.lookup("single", "s0") is not None
    store.save()
    again = _fresh_store()
    assert len(again.entries) == _cache.MAX_ENTRIES
    assert list(again.entries)[-2:] == [("single", "new"), ("single", "s0")]
    assert not again.dirty
    # a run that uses its usual (recent) strings changes nothing, so writes nothing
    assert again.lookup("single", "new") is not None
    assert again.lookup("single", "s255") is not None
    assert not again.dirty
    assert again.lookup("single", "s2") is not None  # aged into the older half
    assert again.dirty
    _cache._file.cache_clear()
    _cache._store.cache_clear()


# --- the calibration store ---------------------------------------------------------------

QWEN = find_model("Qwen3-8B")


@pytest.mark.parametrize(
    "value", [0.0, -0.5, 1.5, 1e-300, 0.0009, math.nan, math.inf, "0.5", True, None, [0.5]]
)
def test_a_stored_value_out_of_range_or_damaged_is_ignored(cache_home: Path, value: object) -> None:
    key = calibration._key(QWEN, "H100-80GB")
    entry = {"compute_efficiency": value, "compute_source": "planted"}
    text = json.dumps({key: entry}, allow_nan=True)
    assert _cache.write_private(calibration.FILE, text.encode()) is not None
    assert calibration.load(QWEN, "H100-80GB") is None
    assert calibration.entries() == []


def test_a_stored_value_in_range_is_used_unless_turned_off(
    cache_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stored = calibration.Calibration(compute_efficiency=0.001, compute_source="a step")
    assert calibration.save(QWEN, "H100-80GB", stored, model="Qwen3-8B") is not None
    assert calibration.load(QWEN, "H100-80GB") == stored
    assert calibration.entries() == [(calibration._key(QWEN, "H100-80GB"), "Qwen3-8B", stored)]
    monkeypatch.setenv("AREAL_ALLOC_NO_CALIBRATION", "1")
    assert calibration.load(QWEN, "H100-80GB") is None


@pytest.mark.parametrize("value", [0.0, 1e-300, 0.0009, 1.01, math.nan, math.inf])
def test_nothing_out_of_range_is_stored(cache_home: Path, value: float) -> None:
    with pytest.raises(AllocationValidationError):
        calibration.save(QWEN, "H100-80GB", calibration.Calibration(compute_efficiency=value))
    assert not (cache_home / "areal-alloc" / calibration.FILE).exists()


def test_a_planted_calibration_in_an_open_folder_is_not_used(cache_home: Path) -> None:
    stored = calibration.Calibration(hbm_efficiency=0.5, hbm_source="a rate")
    calibration.save(QWEN, "H100-80GB", stored)
    assert calibration.load(QWEN, "H100-80GB") == stored
    (cache_home / "areal-alloc").chmod(0o777)
    assert calibration.load(QWEN, "H100-80GB") is None


def test_a_fifo_as_the_calibration_store_is_ignored(tmp_path: Path) -> None:
    folder = _folder(tmp_path)
    os.mkfifo(folder / calibration.FILE, 0o600)
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path)}
    args = ["layouts", "megatron", "8", "--model", "Qwen3-8B", "--gpu", "H100-80GB", "--rank"]
    try:
        done = subprocess.run(
            [COMMAND, *args, "--top", "1"], capture_output=True, text=True, env=env, timeout=60
        )
    except subprocess.TimeoutExpired:
        pytest.fail("a FIFO as the calibration store hung the command")
    assert (done.returncode, done.stderr) == (0, "")
    assert "# calibrated" not in done.stdout


def test_forget_one_or_all(cache_home: Path) -> None:
    small = find_model("Qwen3-4B")
    calibration.save(QWEN, "H100-80GB", calibration.Calibration(compute_efficiency=0.4))
    calibration.save(small, "H100-80GB", calibration.Calibration(compute_efficiency=0.3))
    assert calibration.forget(small, "H100-80GB") == 1
    assert calibration.forget(small, "H100-80GB") == 0
    assert [e[0] for e in calibration.entries()] == [calibration._key(QWEN, "H100-80GB")]
    assert calibration.forget() == 1
    assert calibration.entries() == []
