"""A stand-in for ``python -m areal.infra.launcher.local SCRIPT --config FILE …``.

A launcher reads the same arguments (the script first), then starts the script
with the rest; this one runs it in-process.
"""

from __future__ import annotations

import runpy
import sys

if __name__ == "__main__":
    print("LAUNCHER", sys.argv[1:])
    script, *rest = sys.argv[1:]
    sys.argv = [script, *rest]
    runpy.run_path(script, run_name="__main__")
