"""A stand-in for ``python -m areal.infra.launcher.local SCRIPT --config FILE …``.

The reference's launchers read the same arguments (the script first, skipped by
parse_cli_args) and then start the script; this one loads the config and prints.
"""

from __future__ import annotations

import sys

from train import main

if __name__ == "__main__":
    print("LAUNCHER")
    sys.exit(main(sys.argv[1:]))
