"""The strict schema ``areal_alloc/schema``, built only when a config asks for it.

Storing a structured config in Hydra's ConfigStore converts the dataclass tree
at once, on every start of every Hydra app in the environment. This config
source answers for the one config ``areal_alloc/schema`` and builds it on
``load_config``, so apps that do not use the schema never pay for it. Hydra
imports this module on every start, so it imports nothing of ours at the top.
"""

from __future__ import annotations

from hydra.core.object_type import ObjectType
from hydra.plugins.config_source import ConfigLoadError, ConfigResult, ConfigSource

GROUP = "areal_alloc"
NAME = "schema"


class AllocSchemaSource(ConfigSource):
    """``areal-alloc-schema://``: one config, ``areal_alloc/schema``, package ``_global_``."""

    @staticmethod
    def scheme() -> str:
        return "areal-alloc-schema"

    @staticmethod
    def _name(config_path: str) -> str:
        path = config_path.strip("/")
        return path[: -len(".yaml")] if path.endswith(".yaml") else path

    def load_config(self, config_path: str) -> ConfigResult:
        if not self.is_config(config_path):
            raise ConfigLoadError(f"areal-alloc-schema: no config {config_path!r}")
        from omegaconf import OmegaConf

        from areal_alloc.schema import ExperimentConfig

        return ConfigResult(
            provider=self.provider,
            path=self.full_path(),
            config=OmegaConf.structured(ExperimentConfig),
            header={"package": "_global_"},
        )

    def available(self) -> bool:
        return True

    def is_group(self, config_path: str) -> bool:
        return self._name(config_path) in ("", GROUP)

    def is_config(self, config_path: str) -> bool:
        return self._name(config_path) == f"{GROUP}/{NAME}"

    def list(self, config_path: str, results_filter: ObjectType | None) -> list[str]:
        name = self._name(config_path)
        if name == "" and results_filter in (None, ObjectType.GROUP):
            return [GROUP]
        if name == GROUP and results_filter in (None, ObjectType.CONFIG):
            return [NAME]
        return []
