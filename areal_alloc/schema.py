"""Structured-config dataclasses for the engines, registered in Hydra's ConfigStore.

The default is lenient: experiment YAMLs carry many keys areal-alloc does not
own (optimizer, mb_spec, path…), and the validation hook type-checks only the
fields it owns. Users who want unknown keys rejected put the strict schema in
their defaults list: ``- areal_alloc/schema``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from areal_alloc.kinds import SchedulingStrategyType

__all__ = [
    "ClusterConfig",
    "EngineConfig",
    "ExperimentConfig",
    "SchedulingConfig",
    "register_configs",
]


@dataclass
class SchedulingConfig:
    """``separation`` (own GPUs) or ``colocation`` onto ``target`` (an engine key)."""

    type: SchedulingStrategyType = SchedulingStrategyType.separation
    target: str | None = None


@dataclass
class EngineConfig:
    """One engine: its backend string and scheduling."""

    backend: str = ""
    scheduling_strategy: SchedulingConfig = field(default_factory=SchedulingConfig)


@dataclass
class ClusterConfig:
    n_nodes: int = 1
    n_gpus_per_node: int = 8


@dataclass
class ExperimentConfig:
    """The strict schema: rollout and actor, optional critic/ref/teacher, the cluster.

    critic, ref and teacher are untyped (``Any``) so that one command-line
    override adds them (``+critic.backend=fsdp:d4``); OmegaConf 2.3 cannot fill
    a ``None`` dataclass field from the command line. The hook checks them.
    """

    actor: EngineConfig = field(default_factory=EngineConfig)
    rollout: EngineConfig = field(default_factory=EngineConfig)
    critic: Any = None
    ref: Any = None
    teacher: Any = None
    cluster: ClusterConfig = field(default_factory=ClusterConfig)
    # Declared so the deprecated key reaches the hook's migration message
    # instead of a generic "not in struct" error.
    allocation_mode: str | None = None


def register_configs() -> None:
    """Store the strict schema as ``areal_alloc/schema`` (safe to call again)."""
    from hydra.core.config_store import ConfigStore

    ConfigStore.instance().store(
        group="areal_alloc", name="schema", node=ExperimentConfig, package="_global_"
    )
