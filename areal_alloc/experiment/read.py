"""One reading of the experiment: a composed config to one frozen, typed
:class:`~areal_alloc.experiment.records.Experiment`.

A config comes as a DictConfig (``hydra.compose``, ``OmegaConf.load``), a plain
mapping, or the dataclass objects the reference's ``load_expr_config`` returns;
every key is read once, through ``areal_alloc._config`` and the one reader of
numbers, with the reference's defaults (``areal_alloc.defaults``), by the reader of
its section (:mod:`areal_alloc.experiment.sections`: the cluster, the engines'
backends and scheduling, each training engine's section and its parts, the run and
its start-up keys, the model an engine runs). :func:`read_experiment` runs them in
order, after the loader's refusals (:mod:`areal_alloc.experiment.nulls`,
:mod:`areal_alloc.experiment.loader`). What reads an experiment after this (the
plan's checks, memory, speed, ``suggest --config``) takes the record
(:mod:`areal_alloc.experiment.records`), never the raw config.

Reference: areal-project/AReaL at cbff54d645d2cd8ee1f1c358a82f3f473588433d
(areal/api/cli_args.py for every key and default).
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from areal_alloc._config import child, is_mapping
from areal_alloc.errors import AllocationValidationError
from areal_alloc.experiment.loader import refuse_at_load
from areal_alloc.experiment.nulls import refuse_nulls
from areal_alloc.experiment.records import Experiment
from areal_alloc.experiment.reference_keys import check_reference_keys
from areal_alloc.experiment.sections.cluster import read_cluster
from areal_alloc.experiment.sections.details import with_details
from areal_alloc.experiment.sections.engines import (
    apply_run_rules,
    engine_version,
    legacy_check,
    not_inference_keys,
    read_engines,
)
from areal_alloc.experiment.sections.run import read_run, read_startup, trainer_kind
from areal_alloc.experiment.sections.scheduling import read_scheduling

if TYPE_CHECKING:
    from areal_alloc.settings import Settings

__all__ = ["Experiment", "read_experiment"]


def read_experiment(
    cfg: object,
    settings: Settings | None = None,
    *,
    reference: str | None = None,
    app_keys: tuple[str, ...] = (),
) -> Experiment:
    """Read ``cfg`` once; one error line naming the key for anything it cannot read.

    ``settings``: resolve the GPU and speeds now (see :meth:`Experiment.resolved`).
    ``reference``, ``app_keys``: the reference version the keys are checked against (None:
    ``AREAL_ALLOC_REFERENCE_VERSION``, else the newest; ``off``: not checked) and an app's
    own top-level keys (areal_alloc.experiment.reference_keys).
    """
    if not is_mapping(cfg):
        raise AllocationValidationError(
            f"expected a config mapping (DictConfig, dict or a dataclass instance), "
            f"got {type(cfg).__name__}"
        )
    legacy_check(cfg)
    key_warnings = check_reference_keys(cfg, reference, app_keys)
    refuse_nulls(cfg)
    refuse_at_load(cfg)
    cluster = read_cluster(cfg)
    read, warnings = read_engines(cfg)
    warnings = key_warnings + warnings
    warnings += not_inference_keys(cfg)
    engines = apply_run_rules(cfg, read)
    engines = [with_details(cfg, e) for e in engines]
    engines = [replace(e, version=engine_version(cfg, e)) for e in engines]
    run = read_run(cfg)
    actor = child(cfg, "actor")
    mode = child(actor, "weight_update_mode") if is_mapping(actor) else None
    version = child(actor, "_version") if is_mapping(actor) else None
    experiment = Experiment(
        cluster,
        tuple(engines),
        run,
        tuple(warnings),
        None if mode is None else str(mode),
        None if version is None else str(version),
        cfg,
        read_startup(cfg, *trainer_kind(cfg, engines)),
        read_scheduling(cfg, [(e.key, e.path, e.allocation.backend) for e in engines]),
    )
    return experiment.resolved(settings) if settings is not None else experiment
