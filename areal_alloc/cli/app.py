"""The ``areal-alloc`` Hydra app: compose an experiment and print its allocation plan."""

from __future__ import annotations

import sys

import hydra
from omegaconf import DictConfig

from areal_alloc.cli.render import render_plan
from areal_alloc.errors import AllocationError
from areal_alloc.plan import plan_config

__all__ = ["run_app"]

CONFIG_PATH = "pkg://areal_alloc.conf.app"


def show_plan(cfg: DictConfig) -> None:
    try:
        plan = plan_config(cfg)
    except AllocationError as error:  # the hook normally stops this earlier
        raise SystemExit(f"areal-alloc: {error}") from None
    output = cfg.get("output", "text")
    if output == "json":
        import json

        print(json.dumps(plan.to_dict(), indent=1))
    elif output == "text":
        print(render_plan(plan))
    else:
        raise SystemExit(f"areal-alloc: output={output!r}: must be 'text' or 'json'")


@hydra.main(config_path=CONFIG_PATH, config_name="config", version_base="1.3")
def _hydra_app(cfg: DictConfig) -> None:
    show_plan(cfg)


def run_app(argv: list[str]) -> int:
    """Run the Hydra app with ``argv`` as its command line."""
    sys.argv = [sys.argv[0], *argv]
    _hydra_app()
    return 0
