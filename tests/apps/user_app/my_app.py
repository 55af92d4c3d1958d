"""A small user Hydra app that enables areal-alloc's hook with one defaults line."""

from __future__ import annotations

from pathlib import Path

import hydra
from omegaconf import DictConfig


@hydra.main(config_path="conf", config_name="config", version_base="1.3")
def main(cfg: DictConfig) -> None:
    marker = Path(cfg.marker_dir) / f"ran-{cfg.actor.backend.replace(':', '_')}"
    marker.write_text(str(cfg.get("total_gpus", "")))
    print(f"RAN actor.backend={cfg.actor.backend} total_gpus={cfg.total_gpus}")


if __name__ == "__main__":
    main()
