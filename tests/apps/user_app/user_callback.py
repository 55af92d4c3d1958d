from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback


class Mine(Callback):
    def on_job_start(self, config: Any, **kwargs: Any) -> None:
        Path(os.environ["MARKER_DIR"], "user-callback-ran").write_text("yes")
