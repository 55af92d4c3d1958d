"""A stand-in training script: loads its config as the reference's parse_cli_args does.

It reads --config FILE and the overrides with argparse.parse_known_args (a
leading *.py argument skipped), composes the file with Hydra's compose API from
the file's folder, then prints its argv and what it loaded, echoes one line of
stdin when ECHO_STDIN is set (the environment passes through), and exits with status 7.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from hydra import compose, initialize_config_dir


def load(argv: list[str]) -> object:
    parser = argparse.ArgumentParser()
    parser.add_argument("--config", required=True)
    if argv and argv[0].endswith(".py"):
        argv = argv[1:]
    args, overrides = parser.parse_known_args(argv)
    file = Path(args.config).absolute()
    with initialize_config_dir(config_dir=str(file.parent), job_name="app", version_base=None):
        return compose(config_name=file.name.split(".yaml")[0], overrides=overrides)


def main(argv: list[str]) -> int:
    cfg = load(argv)
    print("ARGV", argv)
    print("LOADED actor.backend", cfg.actor.backend)  # type: ignore[attr-defined]
    if os.environ.get("ECHO_STDIN"):
        print("STDIN", sys.stdin.readline().strip())
    return 7


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
