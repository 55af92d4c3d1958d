"""OmegaConf resolvers under the ``alloc`` namespace.

``${alloc.world_size:SPEC}``, ``${alloc.dim:SPEC,tp}``, ``${alloc.total_gpus:}`` and
``${alloc.layouts:BACKEND,GPUS}`` (with ``model=…,gpu=…``: only the layouts that fit
its memory). They are registered idempotently on
``import areal_alloc`` and when Hydra scans our plugin. This module imports only
omegaconf; the parser is loaded when a resolver first runs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from omegaconf import OmegaConf

from areal_alloc.errors import AllocationValidationError, clipped, shown
from areal_alloc.limits import MAX_GPUS
from areal_alloc.numbers import is_number_text, read_int

__all__ = ["DIM_ALIASES", "RESOLVERS", "register_resolvers"]

#: Names accepted by ``${alloc.dim:SPEC,NAME}`` and the attribute each reads.
DIM_ALIASES: dict[str, str] = {
    "tp": "tp_size",
    "pp": "pp_size",
    "dp": "dp_size",
    "cp": "cp_size",
    "ep": "ep_size",
    "etp": "etp_size",
    "edp": "edp_size",
    "world": "world_size",
    "world_size": "world_size",
    "instances": "instances",
    "instance_size": "instance_size",
}


def _allocation(spec: object) -> Any:
    from areal_alloc.model import ModelAllocation

    return ModelAllocation.from_str(spec if not isinstance(spec, int) else str(spec))  # type: ignore[arg-type]


def world_size(spec: object) -> int:
    """``${alloc.world_size:fsdp:d4t2}`` → 8."""
    return int(_allocation(spec).parallel.world_size)


def dim(spec: object, name: object) -> int:
    """``${alloc.dim:sglang:d2t4,tp}`` → 4.

    Names: tp pp dp cp ep etp edp world instances instance_size.
    """
    if not isinstance(name, str) or name not in DIM_ALIASES:
        raise AllocationValidationError(
            f"alloc.dim: unknown dimension name {shown(name)}; use one of {', '.join(DIM_ALIASES)}"
        )
    allocation = _allocation(spec)
    attr = DIM_ALIASES[name]
    if attr == "instances":
        return int(allocation.n_instances)
    if attr == "instance_size":
        return int(allocation.instance_size)
    return int(getattr(allocation.parallel, attr))


def total_gpus(*, _root_: Any) -> int:
    """``${alloc.total_gpus:}`` → GPUs the whole config needs (colocated engines counted once)."""
    from areal_alloc.plan import plan_config
    from areal_alloc.settings import Settings

    # a count of GPUs: whether the reference's loader takes every key is the hook's and the
    # commands' check (areal_alloc.experiment.reference_keys), not this resolver's
    counting = Settings(given=(("reference_version", "off", "${alloc.total_gpus:}"),))
    return plan_config(_root_, settings=counting).total_gpus


def layouts(backend: object, gpus: object, *options: object) -> str:
    """``${alloc.layouts:fsdp,8}`` → ``fsdp:d8,fsdp:d4t2,…``, a sweep value list.

    Extra ``key=value`` arguments are constraints, e.g. ``max_tp=4`` or ``gpus_per_node=8``;
    ``model=Qwen3-8B,gpu=H100-80GB`` (with ``tokens=N``, ``recompute=full``) keeps only
    the layouts whose estimated memory per GPU fits.
    """
    from areal_alloc.search.fitting import fitting_layouts
    from areal_alloc.search.layouts import enumerate_layouts, parse_constraints

    count = _gpu_count(gpus)
    memory = {"model", "gpu", "tokens", "recompute"}
    fit_options = {
        key.strip(): value.strip()
        for key, _, value in (str(o).partition("=") for o in options)
        if key.strip() in memory
    }
    rest = [o for o in options if str(o).partition("=")[0].strip() not in memory]
    constraints = parse_constraints(rest)
    if fit_options:
        if "model" not in fit_options or "gpu" not in fit_options:
            raise AllocationValidationError(
                "alloc.layouts: the memory filter needs both model=… and gpu=…"
            )
        fitting = fitting_layouts(str(backend), count, constraints, **fit_options)  # type: ignore[arg-type]
        if not fitting:
            raise AllocationValidationError(
                f"alloc.layouts: no {backend} layout of {count} GPUs fits "
                f"{clipped(fit_options['model'])} on {clipped(fit_options['gpu'])}; try more GPUs, "
                f"recompute=full or fewer tokens"
            )
        return ",".join(fitting)
    return ",".join(enumerate_layouts(str(backend), count, constraints))  # type: ignore[arg-type]


def _gpu_count(gpus: object) -> object:
    """A GPU count written as digits becomes an int (the one reader of numbers); anything
    else is left for the layout search to refuse in its own words."""
    if not isinstance(gpus, str) or not is_number_text(gpus):
        return gpus
    return read_int(gpus, "alloc.layouts: gpus", maximum=MAX_GPUS)


RESOLVERS: dict[str, Callable[..., Any]] = {
    "alloc.world_size": world_size,
    "alloc.dim": dim,
    "alloc.total_gpus": total_gpus,
    "alloc.layouts": layouts,
}


def register_resolvers() -> None:
    """Register every ``alloc.*`` resolver that is not registered yet (safe to call again)."""
    for name, function in RESOLVERS.items():
        if not OmegaConf.has_resolver(name):
            OmegaConf.register_new_resolver(name, function)
