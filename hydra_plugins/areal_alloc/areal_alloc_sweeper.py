"""Hydra's basic sweeper, minus the jobs areal-alloc's hook found invalid.

The validation hook switches a sweep to this sweeper when
``hydra.callbacks.areal_alloc.on_invalid=skip`` and some jobs are invalid; it
passes the skipped jobs' override lists in ``hydra.sweeper.skip``.
"""

from __future__ import annotations

from collections.abc import Sequence

from hydra._internal.core_plugins.basic_sweeper import BasicSweeper


class SkipInvalidSweeper(BasicSweeper):
    def __init__(
        self,
        max_batch_size: int | None,
        params: dict[str, str] | None = None,
        skip: Sequence[Sequence[str]] | None = None,
    ) -> None:
        super().__init__(max_batch_size=max_batch_size, params=params)
        self.skip = {tuple(job) for job in skip or ()}

    def get_job_batch(self) -> Sequence[Sequence[str]]:
        while True:
            batch = [job for job in super().get_job_batch() if tuple(job) not in self.skip]
            if batch or self.is_done():
                return batch
