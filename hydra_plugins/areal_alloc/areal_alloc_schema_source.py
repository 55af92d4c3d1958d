"""areal-alloc's two configs, ``areal_alloc/validate`` and ``areal_alloc/schema``.

Hydra imports this module on every start of every Hydra app, so it imports
nothing of ours at the top.

``areal_alloc/validate`` (the hook, one line in a defaults list) is built from
:data:`VALIDATE`, not read from a YAML file: Hydra composes a config twice per
start and its pure-Python YAML reader took 0.6 ms for each read of that file.

``areal_alloc/schema``: storing a structured config in Hydra's ConfigStore converts
the dataclass tree at once, on every start of every Hydra app in the environment, so
it is built on ``load_config``: apps that do not use the schema never pay for it.
"""

from __future__ import annotations

from typing import Any

from hydra.core.object_type import ObjectType
from hydra.plugins.config_source import ConfigLoadError, ConfigResult, ConfigSource

GROUP = "areal_alloc"
NAME = "schema"
HOOK = "validate"

#: ``areal_alloc/validate``, package ``_global_``: the hook under ``hydra.callbacks``
#: (merged with the app's own callbacks, nothing added to the job's config). Every
#: parameter is listed, null when not given, so ``hydra.callbacks.areal_alloc.gpu=H800``
#: overrides it without a ``+``; what each means: docs/hydra.md, "The hook's parameters"
#: (and ``areal_alloc.hydra_hook.ValidateAllocations``).
VALIDATE: dict[str, Any] = {
    "hydra": {
        "callbacks": {
            "areal_alloc": {
                "_target_": "areal_alloc.hydra_hook.ValidateAllocations",
                "on_invalid": "fail",
                "verbose": False,
                "on_memory": None,
                "gpu": None,
                "peak_tflops": None,
                "hbm_tbps": None,
                "nvlink_gbps": None,
                "inter_node_gbps": None,
                "disk_gbps": None,
                "compute_efficiency": None,
                "comm_efficiency": None,
                "memory_reserve_gib": None,
                "mean_gen_len": None,
                "host_memory_gib": None,
                "host_cpus": None,
                "reference_version": None,
                "app_keys": None,
                "report": False,
                "catalogue": None,
            }
        }
    }
}


class AllocSchemaSource(ConfigSource):
    """``areal-alloc-schema://``: the configs ``areal_alloc/validate`` and
    ``areal_alloc/schema``, package ``_global_``."""

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

        if self._name(config_path) == f"{GROUP}/{HOOK}":
            config = OmegaConf.create(VALIDATE)  # copies: VALIDATE stays as it is
        else:
            from areal_alloc.schema import ExperimentConfig

            config = OmegaConf.structured(ExperimentConfig)
        return ConfigResult(
            provider=self.provider,
            path=self.full_path(),
            config=config,
            header={"package": "_global_"},
        )

    def available(self) -> bool:
        return True

    def is_group(self, config_path: str) -> bool:
        return self._name(config_path) in ("", GROUP)

    def is_config(self, config_path: str) -> bool:
        return self._name(config_path) in (f"{GROUP}/{NAME}", f"{GROUP}/{HOOK}")

    def list(self, config_path: str, results_filter: ObjectType | None) -> list[str]:
        name = self._name(config_path)
        if name == "" and results_filter in (None, ObjectType.GROUP):
            return [GROUP]
        if name == GROUP and results_filter in (None, ObjectType.CONFIG):
            return [HOOK, NAME]
        return []
