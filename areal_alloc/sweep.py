"""Every job of a Hydra sweep, checked before the first one launches.

Hydra's basic sweeper turns the sweep overrides (command line plus
``hydra.sweeper.params``) into a cartesian product of jobs. We compute the same
job list with Hydra's own functions, then build each job's config cheaply: a
copy of the already composed base config with the job's value overrides
applied. Only jobs that change a config group are composed in full, through
Hydra's config loader, as the sweeper itself would.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from omegaconf import DictConfig, OmegaConf

from areal_alloc.compose import hydra_error_line
from areal_alloc.errors import AllocationError, AllocationValidationError
from areal_alloc.plan import Plan, plan_config
from areal_alloc.settings import Settings

__all__ = ["JobCheck", "check_sweep", "sweep_jobs"]


def _shown(job: Sequence[str]) -> tuple[str, ...]:
    """Job overrides as the user typed them (Hydra escapes ':' and friends)."""
    import re

    return tuple(re.sub(r"\\(.)", r"\1", override) for override in job)


@dataclass(frozen=True, slots=True)
class JobCheck:
    """One sweep job: its overrides, and its plan or the error that rejects it."""

    index: int
    overrides: tuple[str, ...]
    raw: tuple[str, ...] = ()
    plan: Plan | None = None
    error: AllocationError | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


def _parser() -> Any:
    from hydra.core.override_parser.overrides_parser import OverridesParser

    return OverridesParser.create()


def sweep_jobs(config: DictConfig) -> list[list[str]]:
    """The override list of every job, in launch order, as Hydra's BasicSweeper makes it."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper

    sweeper = config.hydra.sweeper
    params = sweeper.get("params") if "params" in sweeper else None
    arguments: list[str] = []
    if params:
        resolved = OmegaConf.to_container(params, resolve=True)
        if isinstance(resolved, dict):
            arguments += [f"{k!s}={v}" for k, v in resolved.items()]
    task = OmegaConf.to_container(config.hydra.overrides.task, resolve=False)
    arguments += [str(item) for item in task] if isinstance(task, list) else []
    overrides = _parser().parse_overrides(arguments)
    batches = BasicSweeper.split_arguments(overrides, None)
    return [list(job) for batch in batches for job in batch]


def _base(config: DictConfig) -> DictConfig:
    keys = [k for k in config if k != "hydra"]
    return OmegaConf.masked_copy(config, keys)  # type: ignore[arg-type]


def _apply(cfg: DictConfig, overrides: Sequence[Any]) -> None:
    """Apply a job's value overrides to a copy of the composed config, as Hydra does.

    Hydra's own function does it (``ConfigLoaderImpl._apply_overrides_to_config``:
    ``=``, ``+``, ``++``, ``~`` with its errors and its merging of dict values), so
    a job checked here is the job Hydra composes; only the defaults-list part of
    composition is skipped, which is why jobs that change a config group are
    composed in full instead. ``hydra.*`` overrides do not touch the task's config.
    """
    from hydra._internal.config_loader_impl import ConfigLoaderImpl

    values = [
        o
        for o in overrides
        if o.package is None and not o.get_key_element().lstrip("+~").startswith("hydra.")
    ]
    ConfigLoaderImpl._apply_overrides_to_config(values, cfg)


def check_sweep(
    config: DictConfig, on_memory: str | None = None, settings: Settings | None = None
) -> list[JobCheck]:
    """Validate every job of the sweep described by a multirun ``config``.

    ``on_memory``: ``fail`` rejects a job whose engines do not fit their GPU memory;
    ``settings``: the GPU and the rest given outside the config (``plan_config``).
    """
    jobs = sweep_jobs(config)
    choices = set(config.hydra.runtime.choices.keys()) if "runtime" in config.hydra else set()
    parser = _parser()
    base = _base(config)
    results: list[JobCheck] = []
    # A sweep repeats each value in many jobs (a 40 × 50 sweep: 2,000 jobs of 90 distinct
    # overrides), and each override parses alone: parse each distinct one once.
    overrides: dict[str, Any] = {}

    def parse(job: Sequence[str]) -> list[Any]:
        for text in job:
            if text not in overrides:
                overrides[text] = parser.parse_overrides([text])[0]
        return [overrides[text] for text in job]

    for index, job in enumerate(jobs):
        parsed = parse(job)
        changes_group = any(
            o.get_key_element().lstrip("+~") in choices for o in parsed if not o.is_delete()
        )
        try:
            if changes_group:
                from hydra.core.global_hydra import GlobalHydra

                loader = GlobalHydra.instance().config_loader()
                try:
                    cfg = loader.load_sweep_config(config, list(job))
                except AllocationError:
                    raise
                except Exception as error:  # Hydra's own (experiment=nope), as the job gets it
                    raise AllocationValidationError(hydra_error_line(error)) from None
            else:
                cfg = copy.deepcopy(base)
                try:
                    _apply(cfg, parsed)
                except Exception as error:  # Hydra's own override error, as the job would get
                    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
                    raise AllocationValidationError(" ".join(lines)) from None
            plan = plan_config(cfg, on_memory, settings)
        except AllocationError as error:
            results.append(JobCheck(index, _shown(job), tuple(job), error=error))
            continue
        results.append(JobCheck(index, _shown(job), tuple(job), plan=plan))
    return results
