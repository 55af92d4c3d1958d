"""The disk weight update's file-system speed: a stated assumption, a setting (--disk-gbps,
AREAL_ALLOC_DISK_GBPS, the hook's disk_gbps, cluster.disk_gbps)."""

from __future__ import annotations

from typing import Any

import pytest

from areal_alloc.catalogue import find_gpu, find_model
from areal_alloc.estimate.rl_step import weight_update
from areal_alloc.estimate.system import DEFAULT_DISK_GBPS, Hardware, build_hardware
from areal_alloc.settings import Settings

QWEN = find_model("Qwen3-8B")
SIZE = QWEN.parameters.total * 2  # bf16 bytes written, then read


@pytest.mark.parametrize(
    ("disk_gbps", "seconds", "said"),
    [
        (None, 2 * SIZE / (DEFAULT_DISK_GBPS * 1e9), "at an assumed 2 GB/s (--disk-gbps)"),
        (8.0, 2 * SIZE / 8e9, "at 8 GB/s (--disk-gbps)"),
    ],
)
def test_the_disk_update_writes_and_reads_the_weights_at_the_file_systems_speed(
    disk_gbps: float | None, seconds: float, said: str
) -> None:
    hardware = Hardware.from_gpu(find_gpu("H100-80GB"), 8, disk_gbps=disk_gbps)
    term = weight_update(QWEN, "disk", hardware, inside_node=False)
    assert term.seconds == pytest.approx(seconds)
    assert term.formula.endswith(said)


@pytest.mark.parametrize(
    ("flags", "environ", "expected"),
    [
        ({}, {}, DEFAULT_DISK_GBPS),
        ({"disk_gbps": 5}, {}, 5.0),
        ({}, {"AREAL_ALLOC_DISK_GBPS": "3.5"}, 3.5),
        ({"disk_gbps": 5}, {"AREAL_ALLOC_DISK_GBPS": "3.5"}, 5.0),  # the flag first
    ],
)
def test_the_setting_reaches_the_hardware(
    flags: dict[str, object], environ: dict[str, str], expected: float
) -> None:
    settings = Settings.from_sources(
        flags={"gpu": "H100-80GB", **flags}, environ=environ, detect=False
    )
    hardware = build_hardware(settings.resolve(), 8, None)
    assert hardware is not None
    assert hardware.disk_gbps == expected


@pytest.mark.parametrize(
    ("actor", "term"),
    [
        # v1: the written mode (xccl by default); v2 ignores it: disk with LoRA, else awex
        # (areal/trainer/rl_trainer.py _init_impl l.380-399 at cbff54d6)
        ({}, "weight update (xccl)"),
        ({"weight_update_mode": "disk"}, "weight update (disk)"),
        ({"_version": "v2"}, "weight update (awex)"),
        ({"_version": "v2", "weight_update_mode": "disk"}, "weight update (awex)"),
        ({"_version": "v2", "use_lora": True}, "weight update (disk)"),
    ],
)
def test_the_pace_takes_the_transport_the_trainer_picks(actor: dict[str, Any], term: str) -> None:
    from areal_alloc import validate
    from areal_alloc.settings import Settings

    version = {"_version": actor["_version"]} if "_version" in actor else {}
    config = {
        "cluster": {"n_nodes": 1, "n_gpus_per_node": 8},
        "rollout": {"backend": "sglang:d4", **version},
        "actor": {
            "backend": "fsdp:d4",
            "path": "Qwen/Qwen3-1.7B",
            "gradient_checkpointing": True,
            "mb_spec": {"max_tokens_per_mb": 8192},
            **actor,
        },
    }
    gpu = Settings.from_sources(flags={"gpu": "H100-80GB"})
    pace = validate(config, on_memory="warn", settings=gpu).to_dict()["pace"]
    assert [t["name"] for t in pace["step_terms"] if t["name"].startswith("weight")] == [term]
