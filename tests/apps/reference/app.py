"""A user's Hydra app that hands its task config to the reference's own loader.

Run with ``--config-dir DIR --config-name NAME``. Each job prints one line:
``LOADED {json}`` (the config it was given, and the reference's dataclass it became)
or ``REFUSED {json}`` (the reference's error). The schema is the reference's
``GRPOConfig`` (areal/api/cli_args.py of the published wheel; see reference.py).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import hydra
from omegaconf import DictConfig, OmegaConf

sys.path.insert(0, str(Path(__file__).parents[3]))  # the repository: tests.apps.reference

from tests.apps.reference.reference import (
    load_as_the_reference,
    load_cli_args,
    wheel_path,
)

_SCHEMA: list[Any] = []


def _schema() -> Any:
    if not _SCHEMA:  # once per process: every job of a multirun shares it
        _SCHEMA.append(load_cli_args(wheel_path()).GRPOConfig)
    return _SCHEMA[0]


@hydra.main(config_path=None, config_name=None, version_base="1.3")
def main(cfg: DictConfig) -> None:
    given = OmegaConf.to_container(cfg, resolve=False)
    try:
        loaded = load_as_the_reference(cfg, _schema())
    except Exception as error:  # the reference's own refusal, reported, not raised
        first = str(error).splitlines()[0] if str(error) else ""
        print(
            "REFUSED " + json.dumps({"error": f"{type(error).__name__}: {first}", "config": given})
        )
        return
    print("LOADED " + json.dumps({"type": type(loaded).__name__, "config": given}))


if __name__ == "__main__":
    main()
