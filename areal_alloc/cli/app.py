"""The ``areal-alloc`` Hydra app: compose an experiment and print its allocation plan."""

from __future__ import annotations

import os
import sys

import hydra
from hydra.errors import HydraException
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from areal_alloc.cli.args import usage_error
from areal_alloc.cli.render import render_plan
from areal_alloc.compose import hydra_error_line
from areal_alloc.errors import AllocationError, shown
from areal_alloc.plan import plan_config
from areal_alloc.settings import Settings

__all__ = ["run_app"]

CONFIG_PATH = "pkg://areal_alloc.conf.app"


def _hook_settings() -> Settings | None:
    """The hook's own parameters (``hydra.callbacks.areal_alloc.on_memory=off``, ``gpu`` …),
    so the app prints the plan the hook checked."""
    from hydra.core.hydra_config import HydraConfig

    if not HydraConfig.initialized():
        return None
    hook = HydraConfig.get().callbacks.get("areal_alloc")
    params = OmegaConf.to_container(hook) if isinstance(hook, DictConfig) else None
    if not isinstance(params, dict):
        return None
    return Settings.from_sources(hook={str(k): v for k, v in params.items()})


def show_plan(cfg: DictConfig) -> None:
    try:
        plan = plan_config(cfg, settings=_hook_settings())
    except AllocationError as error:  # the hook normally stops this earlier
        raise SystemExit(f"areal-alloc: {error}") from None
    output = cfg.get("output", "text")
    if output == "json":
        import json

        print(json.dumps(plan.to_dict(), indent=1))
    elif output == "text":
        print(render_plan(plan))
    elif output == "html":  # the report (areal_alloc.report), one self-contained page
        from areal_alloc.report import render_report

        print(render_report(plan.to_dict()), end="")
    else:
        raise SystemExit(f"areal-alloc: output={shown(output)}: must be 'text', 'json' or 'html'")


@hydra.main(config_path=CONFIG_PATH, config_name="config", version_base="1.3")
def _hydra_app(cfg: DictConfig) -> None:
    show_plan(cfg)


def run_app(argv: list[str]) -> int:
    """Run the Hydra app with ``argv`` as its command line.

    Hydra's own errors (an unknown experiment, a key that is not in the config, an
    override it cannot parse) become one line naming the option and its choices,
    instead of Hydra's block with the config search path; ``HYDRA_FULL_ERROR=1``
    still gives Hydra's full stack trace.
    """
    sys.argv = [sys.argv[0], *argv]
    _check_flags(argv)
    if os.environ.get("HYDRA_FULL_ERROR") == "1":
        _hydra_app()
        return 0
    previous = os.environ.get("HYDRA_FULL_ERROR")
    os.environ["HYDRA_FULL_ERROR"] = "1"  # Hydra then raises its error instead of printing it
    try:
        _hydra_app()
    except (HydraException, OmegaConfBaseException) as error:
        raise SystemExit(f"areal-alloc: {hydra_error_line(error)}") from None
    except OSError as error:  # Hydra looking for a config file: e.g. a name too long to be one
        if isinstance(error, BrokenPipeError):
            raise
        name = f": {shown(error.filename)}" if error.filename else ""
        raise SystemExit(f"areal-alloc: cannot read the config: {error.strerror}{name}") from None
    finally:
        if previous is None:
            del os.environ["HYDRA_FULL_ERROR"]
        else:
            os.environ["HYDRA_FULL_ERROR"] = previous
    return 0


def _check_flags(argv: list[str]) -> None:
    """Hydra's own flags (``--cfg``, ``--info`` …), checked first: a usage error is one line.

    Hydra's parser would print its usage block; ``hydra._internal.utils.get_args_parser``
    is the parser ``@hydra.main`` itself uses (hydra-core 1.3).
    """
    from hydra._internal.utils import get_args_parser

    parser = get_args_parser()
    parser.error = lambda message: usage_error("areal-alloc", message)  # type: ignore[method-assign]
    flags = parser.parse_args(argv)
    rerun = flags.experimental_rerun
    if rerun is not None and not os.path.isfile(rerun):  # Hydra: a ValueError traceback
        usage_error("areal-alloc", f"argument --experimental-rerun: no such file {shown(rerun)}")
