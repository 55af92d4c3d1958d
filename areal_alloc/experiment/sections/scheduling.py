"""What the experiment asks of the schedulers and puts in host memory, read once.

The keys only the host estimate (``areal_alloc.estimate.host``) reads, with the
reference's defaults (areal/api/cli_args.py, AReaL cbff54d6):

- each engine's ``scheduling_spec`` (``TrainEngineConfig`` l.1398, ``InferenceEngineConfig``
  l.2573: a list of one or two ``SchedulingSpec``, the first the worker's, which is what
  the schedulers read: ``areal/infra/controller/rollout_controller.py`` l.183-190,
  ``train_controller.py`` l.277-281, ``areal/infra/utils/launcher.py``
  ``get_scheduling_spec`` l.116-130); of it ``cpu`` ("Number of CPU cores required per
  GPU", default 8), ``gpu`` (default 0) and ``mem`` ("Amount of memory (GB) required per
  GPU", default 32), ``SchedulingSpec`` l.1150-1162;
- ``<engine>.megatron.disable_grad_buffers_cpu_backup`` (``MegatronEngineConfig``
  l.1089-1096, default false): torch_memory_saver keeps no CPU copy of the gradient buffers.

The servers' ``cpu_offload_gb`` is read with the rest of their sections
(``sections.servers``).

``scheduler.type``, ``enable_offload``, ``fsdp.offload_params``,
``fsdp.memory_efficient_load`` and ``weight_update_mode`` are read where the rest of
their sections are (``experiment.read``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from areal_alloc._config import child, is_mapping, keys, read_bool, section, shown
from areal_alloc.errors import AllocationValidationError
from areal_alloc.experiment.sections.values import at
from areal_alloc.limits import MAX_COUNT
from areal_alloc.numbers import read_int

__all__ = [
    "DEFAULT_SPEC",
    "SchedulingSection",
    "WorkerSpec",
    "read_scheduling",
]


@dataclass(frozen=True, slots=True)
class WorkerSpec:
    """An engine's ``scheduling_spec[0]``: CPUs and memory (GB, which the schedulers
    multiply by 1024**3: ``areal/infra/scheduler/ray.py`` l.1393-1395, 1448) per GPU, and
    its ``gpu``; ``written`` when the engine's section gives a ``scheduling_spec``."""

    cpu: int = 8
    gpu: int = 0
    mem: int = 32
    written: bool = False


#: ``SchedulingSpec()``'s own defaults (cli_args.py l.1150-1162).
DEFAULT_SPEC = WorkerSpec()


@dataclass(frozen=True, slots=True)
class SchedulingSection:
    """What the host estimate reads of the experiment besides its other sections."""

    #: each engine's ``scheduling_spec[0]``, by engine key, in the engines' order
    specs: tuple[tuple[str, WorkerSpec], ...] = ()
    #: the Megatron engines that set ``megatron.disable_grad_buffers_cpu_backup: true``
    no_grad_backup: tuple[str, ...] = ()

    def spec(self, key: str) -> WorkerSpec:
        return dict(self.specs).get(key, DEFAULT_SPEC)


def _first_spec(node: object, path: str) -> WorkerSpec:
    """``<path>.scheduling_spec[0]`` (a list of one or two mappings), or the defaults."""
    specs = child(node, "scheduling_spec") if node is not None else None
    if specs is None:
        return DEFAULT_SPEC
    key = f"{path}.scheduling_spec"
    if is_mapping(specs) or isinstance(specs, (str, bytes)) or not hasattr(specs, "__len__"):
        raise AllocationValidationError(
            f"{key}={shown(specs)}: must be a list of one or two SchedulingSpec sections "
            f"(- cpu: 8\n  gpu: 1\n  mem: 32), as the reference's TrainEngineConfig and "
            f"InferenceEngineConfig take it".replace("\n", " ")
        )
    items = list(specs)
    if not items:
        return DEFAULT_SPEC  # the loader's __post_init__ refuses an empty list ("1 or 2")
    first = items[0]
    if not is_mapping(first):
        raise AllocationValidationError(
            f"{key}[0]={shown(first)}: must be a section (cpu, gpu, mem …)"
        )
    values: dict[str, int] = {}
    written = keys(first)
    for name in ("cpu", "gpu", "mem"):
        raw = child(first, name)
        if raw is None and name in written:  # SchedulingSpec's int fields take no None
            raise AllocationValidationError(
                f"{key}[0].{name}=None: the reference's SchedulingSpec.{name} is an int "
                f"(default {getattr(DEFAULT_SPEC, name)}); give a number or leave it out"
            )
        if raw is not None:
            values[name] = read_int(raw, f"{key}[0].{name}", minimum=0, maximum=MAX_COUNT)
    return WorkerSpec(
        values.get("cpu", DEFAULT_SPEC.cpu),
        values.get("gpu", DEFAULT_SPEC.gpu),
        values.get("mem", DEFAULT_SPEC.mem),
        True,
    )


def read_scheduling(cfg: object, engines: Sequence[tuple[str, str, str]]) -> SchedulingSection:
    """The section for ``engines``: (key, the section holding its backend, its backend)
    each, e.g. ``("rollout", "rollout", "sglang")``."""
    specs: list[tuple[str, WorkerSpec]] = []
    no_grad_backup: list[str] = []
    for key, path, backend in engines:
        node = at(cfg, path)
        node = node if is_mapping(node) else None
        specs.append((key, _first_spec(node, path)))
        if backend == "megatron" and node is not None:
            megatron = section(node, "megatron", f"{path}.megatron")
            raw = child(megatron, "disable_grad_buffers_cpu_backup") if megatron else None
            if raw is not None and read_bool(
                raw, f"{path}.megatron.disable_grad_buffers_cpu_backup"
            ):
                no_grad_backup.append(key)
    return SchedulingSection(tuple(specs), tuple(no_grad_backup))
