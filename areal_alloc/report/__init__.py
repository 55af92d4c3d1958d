"""The plan as one self-contained HTML page (issue 19): ``areal-alloc report``,
``areal-alloc output=html`` and the hook's ``hydra.callbacks.areal_alloc.report=true``.

:func:`render_report` draws a plan's JSON dict (``Plan.to_dict()``, what ``check --json``
prints): the cluster's nodes and GPUs with each engine's place, each training engine's
rank groups (those ``explain --json`` lists), each engine's memory terms against its GPU
and the RL step's timeline, with the JSON embedded. The page is inline HTML, CSS and SVG
with a few lines of script; it fetches nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from areal_alloc.report._page import render_report

__all__ = ["render_report"]


def __getattr__(name: str) -> Any:
    """``render_report``, imported on first use: the text node map reads ``_grid`` alone."""
    if name == "render_report":
        from areal_alloc.report._page import render_report

        return render_report
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
