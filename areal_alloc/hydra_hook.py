"""The validation hook: a Hydra callback that stops a bad run before it starts.

Enable it with one line in a defaults list: ``- areal_alloc/validate``.

Hydra 1.3 turns an ordinary exception raised in a callback into a warning and
runs the job anyway, so a rejection here raises :class:`SystemExit`: one clear
message on stderr, exit code 1, no traceback, and (from ``on_run_start`` and
``on_multirun_start``) no output directory yet.
"""

from __future__ import annotations

import contextlib
import functools
import sys
from typing import TYPE_CHECKING, Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf, open_dict, read_write

from areal_alloc.errors import (
    EXIT_INTERRUPTED,
    INTERRUPTED,
    AllocationError,
    clipped,
    reading_of,
    shown,
)
from areal_alloc.numbers import read_names

if TYPE_CHECKING:
    from areal_alloc.settings import Settings

__all__ = ["SKIPPING_SWEEPER", "ValidateAllocations"]

SKIPPING_SWEEPER = "hydra_plugins.areal_alloc.areal_alloc_sweeper.SkipInvalidSweeper"
_BASIC_SWEEPER = "hydra._internal.core_plugins.basic_sweeper.BasicSweeper"
PREFIX = "areal-alloc: "


def __getattr__(name: str) -> Any:
    """``plan_config``, imported on first use: a run whose verdict is known needs no plan."""
    if name == "plan_config":
        from areal_alloc.plan import plan_config

        return plan_config
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _app_keys(value: object) -> list[str] | None:
    """The hook's ``app_keys`` as a plain list (its repr goes into the verdict key)."""
    names = read_names(value)
    if names is None:
        raise SystemExit(
            f"{PREFIX}hydra.callbacks.areal_alloc.app_keys={shown(value)}: must be a "
            f"comma-separated string of the app's own top-level keys (output,round) or a "
            f"list of them"
        )
    return list(names) or None


def _catalogue_files(value: object) -> list[str] | None:
    """The hook's ``catalogue``: one path, or a list of them (None: none given)."""
    if value is None or value == "":
        return None
    if isinstance(value, str):
        paths: list[object] | None = [value]
    elif isinstance(value, (bytes, dict)) or not hasattr(value, "__iter__"):
        paths = None
    else:  # a list, or Hydra's ListConfig
        paths = list(value)
    names = [p for p in paths or () if isinstance(p, str) and p]
    if paths is None or len(names) != len(paths):
        raise SystemExit(
            f"{PREFIX}hydra.callbacks.areal_alloc.catalogue={shown(value)}: must be a "
            f"path to a catalogue file (JSON) or a list of them"
        )
    return names


def _interrupted() -> SystemExit:
    """Ctrl-C while checking: one line and exit 130, as the areal-alloc command ends.

    Hydra would otherwise print a long KeyboardInterrupt traceback (or, inside its
    composition, report it as an error of the config).
    """
    print(INTERRUPTED, file=sys.stderr, flush=True)
    return SystemExit(EXIT_INTERRUPTED)


def _internal(error: Exception, config_name: object = None) -> str:
    """One line for an error that is not one of ours: where it happened, and what it was.

    The key (and the model's file) come from :func:`areal_alloc.errors.reading`; otherwise
    the experiment is named.
    """
    first = str(error).splitlines()[0] if str(error) else ""
    mark = reading_of(error)
    if mark is not None:
        key, file = mark
        where = f"{key} (model {clipped(file, 200)})" if file and file != key else key
    elif isinstance(config_name, str) and config_name:
        where = f"the experiment {shown(config_name)}"
    else:
        where = "the experiment"
    return (
        f"{PREFIX}{where}: could not validate the allocation ({type(error).__name__}: "
        f"{clipped(first, 200)}); stopping rather than running an unchecked job"
    )


class ValidateAllocations(Callback):
    """Validate every engine's allocation at compose time, for runs and whole sweeps.

    ``on_invalid``: ``fail`` (default) stops the run, or the whole sweep when any
    job is invalid; ``skip`` launches the valid jobs of a sweep and lists the
    skipped ones. ``on_memory``: an engine predicted over its GPU memory (or a
    KV cache that cannot hold one sequence) makes the run invalid (``fail``, the
    default), is printed as a warning (``warn``), or is not estimated (``off``).

    ``gpu`` (a catalogue name or GiB), ``peak_tflops``, ``hbm_tbps``, ``nvlink_gbps``,
    ``inter_node_gbps``, ``disk_gbps``, ``compute_efficiency``, ``comm_efficiency``,
    ``reference_version`` (``1.0.4``, ``cbff54d6``, ``off``) is the reference whose loader
    the experiment's keys are checked against, ``app_keys`` the app's own top-level keys it
    skips (areal_alloc.experiment.reference_keys). ``catalogue``: a JSON file (or a list)
    of the user's own GPUs and models (areal_alloc.catalogue.add_files; also
    ``AREAL_ALLOC_CATALOGUE``). ``report=true`` writes the plan as one
    HTML page, ``plan.html``, into each job's output folder (a run's, and every job's of a
    multirun) when the job starts.

    ``host_memory_gib`` and ``host_cpus``: one node's host memory and CPUs, which the
    scheduler requests and what the run keeps in host memory are checked against
    (``areal_alloc.estimate.host``); without them this machine's are taken, as a guess.

    ``memory_reserve_gib`` and ``on_memory`` are areal-alloc's settings
    (``areal_alloc.settings``): given here they win over the environment
    (``AREAL_ALLOC_GPU`` …), nvidia-smi and the config's ``cluster`` keys, and
    they stay under ``hydra.``, out of the task's config.
    """

    def __init__(
        self,
        on_invalid: str = "fail",
        verbose: bool = False,
        on_memory: str | None = None,
        gpu: str | float | None = None,
        peak_tflops: float | str | None = None,
        hbm_tbps: float | str | None = None,
        nvlink_gbps: float | str | None = None,
        inter_node_gbps: float | str | None = None,
        disk_gbps: float | str | None = None,
        compute_efficiency: float | str | None = None,
        comm_efficiency: float | str | None = None,
        memory_reserve_gib: float | str | None = None,
        mean_gen_len: int | str | None = None,
        host_memory_gib: float | str | None = None,
        host_cpus: int | str | None = None,
        reference_version: str | None = None,
        app_keys: str | list[str] | None = None,
        report: bool | str = False,
        catalogue: str | list[str] | None = None,
    ) -> None:
        if on_invalid not in ("fail", "skip"):
            raise SystemExit(
                f"{PREFIX}hydra.callbacks.areal_alloc.on_invalid={on_invalid!r}: "
                f"must be 'fail' or 'skip'"
            )
        if on_memory not in (None, "fail", "warn", "off"):
            raise SystemExit(
                f"{PREFIX}hydra.callbacks.areal_alloc.on_memory={on_memory!r}: "
                f"must be 'fail', 'warn' or 'off'"
            )
        if str(report).lower() not in ("true", "false"):
            raise SystemExit(
                f"{PREFIX}hydra.callbacks.areal_alloc.report={shown(report)}: must be true or false"
            )
        self.on_invalid = on_invalid
        self.verbose = verbose
        #: write ``plan.html`` (areal_alloc.report) into each job's output folder
        self.report = str(report).lower() == "true"
        self._hook_settings: dict[str, object] = {
            "on_memory": on_memory,
            "gpu": gpu,
            "peak_tflops": peak_tflops,
            "hbm_tbps": hbm_tbps,
            "nvlink_gbps": nvlink_gbps,
            "inter_node_gbps": inter_node_gbps,
            "disk_gbps": disk_gbps,
            "compute_efficiency": compute_efficiency,
            "comm_efficiency": comm_efficiency,
            "memory_reserve_gib": memory_reserve_gib,
            "mean_gen_len": mean_gen_len,
            "host_memory_gib": host_memory_gib,
            "host_cpus": host_cpus,
            "reference_version": reference_version,
            # the app's own top-level keys, skipped by the strict-key check (a list, not
            # Hydra's ListConfig: the verdict key takes its repr)
            "app_keys": _app_keys(app_keys),
            # a user's catalogue files (areal_alloc.catalogue.add_files), read with the
            # settings: in the verdict key, so a changed list checks again
            "catalogue": _catalogue_files(catalogue),
        }

    @functools.cached_property
    def settings(self) -> Settings:
        """The hook's parameters with the environment (built on first use: a run whose
        verdict is known never needs them)."""
        from areal_alloc.settings import Settings

        files = self._hook_settings.get("catalogue")
        if isinstance(files, list) and files:
            from areal_alloc.catalogue import add_files

            add_files([str(f) for f in files])
        hook = {k: v for k, v in self._hook_settings.items() if k != "catalogue"}
        return Settings.from_sources(hook=hook)

    def _verdict_key(self, config: DictConfig) -> str | None:
        """The digest a PASS of ``config`` is kept under (``areal_alloc._verdicts``): the
        environment's ``AREAL_ALLOC_*`` are in it, the hook's parameters, where nvidia-smi
        is (the GPU it reports may be the one checked against) and this machine's memory
        and CPUs (a detected host may warn: ``_verdicts.host_identity``) are added here."""
        import shutil

        from areal_alloc import _verdicts

        if not _verdicts.enabled():
            return None
        params = sorted((k, repr(v)) for k, v in self._hook_settings.items())
        hook = (
            self.on_invalid,
            self.verbose,
            params,
            shutil.which("nvidia-smi"),
            _verdicts.host_identity(),
        )
        return _verdicts.verdict_key(config, hook)

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        # the fast path: an allocation validated before (a PASS), replayed without the plan
        try:
            key = self._verdict_key(config)
            if key is not None:
                from areal_alloc._verdicts import lookup

                seen = lookup(key)
                if seen is not None:
                    for line in seen:
                        print(line, file=sys.stderr)
                    return
        except KeyboardInterrupt:
            raise _interrupted() from None
        except Exception:  # only a cache: the full check decides
            key = None
        try:  # the full path (the module's plan_config: a test may replace it)
            plan = sys.modules[__name__].plan_config(config, settings=self.settings)
        except AllocationError as error:
            raise SystemExit(f"{PREFIX}{error}") from None
        except KeyboardInterrupt:
            raise _interrupted() from None
        except RecursionError:  # a config nested (or referring to itself) beyond reading
            raise SystemExit(
                f"{PREFIX}the experiment {shown(kwargs.get('config_name') or 'config')}: "
                f"nested too deeply to read (or an interpolation refers to itself)"
            ) from None
        except Exception as error:  # Hydra would turn it into a warning and run anyway
            raise SystemExit(_internal(error, kwargs.get("config_name"))) from None
        lines = [f"{PREFIX}warning: {line}" for line in plan.warnings]
        lines += [f"{PREFIX}assumed: {line}" for line in plan.assumptions]
        for line in lines:
            print(line, file=sys.stderr)
        if key is not None:
            from areal_alloc._verdicts import remember

            with contextlib.suppress(Exception):  # only a cache
                remember(key, lines)

    def on_job_start(self, config: DictConfig, **kwargs: Any) -> None:
        """``report=true``: ``plan.html`` into the job's output folder (it exists by now).

        A report that cannot be written is said in one line and the job runs: the
        allocation was checked already, the page is an extra.
        """
        if not self.report:
            return
        try:
            import os

            from areal_alloc.report import render_report  # only when asked for: light hook

            folder = str(config.hydra.runtime.output_dir)
            path = os.path.join(folder, "plan.html")
            plan = sys.modules[__name__].plan_config(config, settings=self.settings)
            page = render_report(plan.to_dict())  # before the file: no empty page left
            try:
                with open(path, "w", encoding="utf-8") as out:
                    out.write(page)
            except OSError:  # a page cut short (a full disk) is not left behind either
                if os.path.isfile(path):
                    with contextlib.suppress(OSError):
                        os.unlink(path)
                raise
        except KeyboardInterrupt:
            raise _interrupted() from None
        except OSError as error:
            where = shown(getattr(error, "filename", None) or "plan.html")
            print(
                f"{PREFIX}cannot write the report {where}: {error.strerror or error}",
                file=sys.stderr,
            )
        except Exception as error:  # Hydra would print a traceback-like warning
            print(
                f"{PREFIX}could not write the report plan.html ({type(error).__name__}: "
                f"{clipped(str(error).splitlines()[0] if str(error) else '', 200)})",
                file=sys.stderr,
            )

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        try:
            self._check_sweep(config)
        except SystemExit:
            raise
        except KeyboardInterrupt:
            raise _interrupted() from None
        except Exception as error:  # Hydra would turn it into a warning and launch anyway
            raise SystemExit(_internal(error, kwargs.get("config_name"))) from None

    def _check_sweep(self, config: DictConfig) -> None:
        from areal_alloc.sweep import check_sweep  # multirun only: Hydra's sweeper machinery

        target = config.hydra.sweeper.get("_target_")
        if target not in (_BASIC_SWEEPER, SKIPPING_SWEEPER):
            # Optuna, Nevergrad …: they choose the jobs as they go, so only the
            # fixed part of the config can be checked now.
            self.on_run_start(config)
            print(
                f"{PREFIX}{target} chooses its jobs while it runs: checked the fixed part of "
                f"the config only",
                file=sys.stderr,
            )
            return
        try:
            checks = check_sweep(config, settings=self.settings)
        except AllocationError as error:  # the base config itself is broken
            raise SystemExit(f"{PREFIX}{error}") from None
        bad = [c for c in checks if not c.ok]
        if self.verbose:
            print(f"{PREFIX}checked {len(checks)} sweep jobs", file=sys.stderr)
        if not bad:
            return
        lines = [
            f"{PREFIX}job {c.index} [{clipped(' '.join(c.overrides), 200)}]: {c.error.message}"
            for c in bad
            if c.error is not None
        ]
        if self.on_invalid == "fail":
            lines.append(
                f"{PREFIX}{len(bad)} of {len(checks)} sweep jobs are invalid; nothing was "
                f"launched (set hydra.callbacks.areal_alloc.on_invalid=skip to run the "
                f"valid ones)"
            )
            raise SystemExit("\n".join(lines))
        if len(bad) == len(checks):
            lines.append(f"{PREFIX}all {len(checks)} sweep jobs are invalid; nothing to launch")
            raise SystemExit("\n".join(lines))
        for line in lines:
            print(line.replace(": job", ": skipping job", 1), file=sys.stderr)
        print(
            f"{PREFIX}skipping {len(bad)} invalid of {len(checks)} sweep jobs; "
            f"launching {len(checks) - len(bad)}",
            file=sys.stderr,
        )
        # The sweeper is built from this very config right after this callback.
        current = OmegaConf.to_container(config.hydra.sweeper, resolve=False)
        sweeper: dict[Any, Any] = dict(current) if isinstance(current, dict) else {}
        sweeper.update(_target_=SKIPPING_SWEEPER, skip=[list(c.raw) for c in bad])
        with read_write(config.hydra), open_dict(config.hydra):
            config.hydra.sweeper = OmegaConf.create(sweeper)
