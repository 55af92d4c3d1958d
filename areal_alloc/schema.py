"""Structured-config dataclasses for the engines, registered in Hydra's ConfigStore.

The default is lenient: experiment YAMLs carry many keys areal-alloc does not
own (optimizer, mb_spec, …), and the validation hook type-checks only the
fields it owns. Users who want every unknown key rejected put the strict schema
in their defaults list: ``- areal_alloc/schema``. It declares exactly the keys
the plan reads, with the reference's names (areal/api/cli_args.py); every field
defaults to null, and an engine section left all-null is an engine nobody
configured, so the schema accepts every config the plain hook accepts.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from areal_alloc.kinds import SchedulingStrategyType

__all__ = [
    "ActorConfig",
    "ClusterConfig",
    "EngineConfig",
    "ExperimentConfig",
    "ModelShapeConfig",
    "SchedulingConfig",
    "TeacherConfig",
    "register_configs",
]


@dataclass
class SchedulingConfig:
    """``separation`` (own GPUs) or ``colocation`` onto ``target`` (an engine key)."""

    type: SchedulingStrategyType = SchedulingStrategyType.separation
    target: str | None = None
    fork: bool | None = None  # the reference's process-isolation flag; not read here


@dataclass
class ModelShapeConfig:
    """The model sizes a layout must divide, or ``path`` to a local model folder."""

    path: str | None = None
    num_layers: int | None = None
    num_attention_heads: int | None = None
    num_key_value_heads: int | None = None
    num_experts: int | None = None
    vocab_size: int | None = None
    virtual_pipeline_size: int | None = None


@dataclass
class EngineConfig:
    """One engine: its backend string and scheduling (null: not configured)."""

    backend: str | None = None
    scheduling_strategy: SchedulingConfig = field(default_factory=SchedulingConfig)
    path: str | None = None
    model_shape: ModelShapeConfig = field(default_factory=ModelShapeConfig)


@dataclass
class ActorConfig(EngineConfig):
    """The actor, with the run settings that decide which other engines exist."""

    kl_ctl: float | None = None
    weight_update_mode: str | None = None
    _version: str | None = None


@dataclass
class TeacherConfig(EngineConfig):
    """The teacher: ``engine_type`` selects ``rollout`` or ``train``; flat ``backend`` is older."""

    engine_type: str | None = None
    rollout: EngineConfig = field(default_factory=EngineConfig)
    train: EngineConfig = field(default_factory=EngineConfig)


@dataclass
class ClusterConfig:
    """The cluster; null sizes take the reference's defaults (32 nodes × 8 GPUs)."""

    n_nodes: int | None = None
    n_gpus_per_node: int | None = None


@dataclass
class ExperimentConfig:
    """The strict schema: every engine, the cluster and the model shape, nothing else."""

    rollout: EngineConfig = field(default_factory=EngineConfig)
    teacher: TeacherConfig = field(default_factory=TeacherConfig)
    actor: ActorConfig = field(default_factory=ActorConfig)
    critic: EngineConfig = field(default_factory=EngineConfig)
    ref: EngineConfig = field(default_factory=EngineConfig)
    cluster: ClusterConfig = field(default_factory=ClusterConfig)
    model_shape: ModelShapeConfig = field(default_factory=ModelShapeConfig)
    # Declared so the deprecated key reaches the hook's migration message
    # instead of a generic "not in struct" error.
    allocation_mode: str | None = None


def register_configs() -> None:
    """Store the strict schema as ``areal_alloc/schema`` (safe to call again)."""
    from hydra.core.config_store import ConfigStore

    ConfigStore.instance().store(
        group="areal_alloc", name="schema", node=ExperimentConfig, package="_global_"
    )
