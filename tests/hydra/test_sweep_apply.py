"""``sweep._apply`` (a job's overrides on a copy of the composed config) equals Hydra's compose.

The sweep check builds each job cheaply instead of composing it; here every job
of each sweep is also composed by Hydra itself, and the two configs must be
equal, or both must fail.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hydra import compose, initialize_config_dir
from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra.core.global_hydra import GlobalHydra
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import OmegaConf

from areal_alloc.sweep import _apply

BASE = """\
cluster:
  n_nodes: 2
  n_gpus_per_node: 8
rollout:
  backend: sglang:d2t4
actor:
  backend: fsdp:d8
  kl_ctl: 0.1
  optimizer: {lr: 1.0e-6, type: adam}
ref:
  backend: ""
  scheduling_strategy: {type: colocation, target: actor}
"""

HYBRID = "'megatron:(attn:d4p2t2c2|ffn:d2p2t4e2)'"

SWEEPS = [
    ["actor.backend=fsdp:d4t2"],
    ["+critic.backend=fsdp:d4"],
    ["++ref.backend=fsdp:d8", "++critic.backend=fsdp:d2"],
    ["~ref"],
    ["~ref.scheduling_strategy"],
    ["~actor.kl_ctl=0.1"],
    [f"actor.backend={HYBRID}"],
    ["actor={backend: fsdp:d4, kl_ctl: 0}"],  # a dict value merges into the section
    ["actor.optimizer={lr: 2.0e-6}"],
    ["hydra.job.name=x", "actor.backend=fsdp:d2"],  # hydra.* leaves the task config alone
    # choice and range sweeps: every job
    ["actor.backend=fsdp:d8,fsdp:d4t2,fsdp:d2t4"],
    ["cluster.n_nodes=range(1,4)", "rollout.backend=sglang:d1t2,sglang:d2t2"],
    [f"actor.backend=choice(fsdp:d8,{HYBRID})"],
    ["+critic.backend=fsdp:d4,fsdp:d8", "~ref"],
    # what Hydra refuses, _apply refuses too
    ["critic.backend=fsdp:d4"],  # not in the config: needs +
    ["+actor.backend=fsdp:d2"],  # already there: needs ++ or no +
    ["~ref.nothing"],
    ["~actor.kl_ctl=0.5"],  # delete only when the value matches
]


@pytest.fixture
def conf(tmp_path: Path) -> Iterator[Path]:
    (tmp_path / "base.yaml").write_text(BASE)
    GlobalHydra.instance().clear()
    with initialize_config_dir(str(tmp_path), version_base="1.3"):
        yield tmp_path
    GlobalHydra.instance().clear()


def _jobs(arguments: list[str]) -> list[list[str]]:
    overrides = OverridesParser.create().parse_overrides(arguments)
    batches = BasicSweeper.split_arguments(overrides, None)
    return [list(job) for batch in batches for job in batch]


def _hydra(job: list[str]) -> Any:
    try:
        return OmegaConf.to_container(compose("base", overrides=job))
    except Exception as error:
        return ("error", type(error).__name__)


def _ours(base: Any, job: list[str]) -> Any:
    cfg = copy.deepcopy(base)
    try:
        _apply(cfg, OverridesParser.create().parse_overrides(job))
    except Exception as error:
        return ("error", type(error).__name__)
    return OmegaConf.to_container(cfg)


@pytest.mark.parametrize("sweep", SWEEPS, ids=[" ".join(s) for s in SWEEPS])
def test_apply_equals_hydra_compose(conf: Path, sweep: list[str]) -> None:
    base = compose("base")
    jobs = _jobs(sweep)
    assert jobs
    for job in jobs:
        assert _ours(base, job) == _hydra(job), job


def test_the_comparison_sees_differences(conf: Path) -> None:
    # guards the test: a different override gives a different config
    base = compose("base")
    assert _ours(base, ["actor.backend=fsdp:d4"]) != _hydra(["actor.backend=fsdp:d2"])
    assert _hydra(["critic.backend=fsdp:d4"]) == ("error", "ConfigCompositionException")
