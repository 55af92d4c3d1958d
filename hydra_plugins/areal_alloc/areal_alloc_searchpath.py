"""Puts areal-alloc's configs on every Hydra app's search path and registers its resolvers.

Hydra imports this module on every start of every Hydra app, so it imports
nothing heavy (no lark, no parser, not even the schema: ``areal_alloc/schema``
comes from a config source that builds it when a config asks for it) and never
raises.
"""

from __future__ import annotations

import warnings

from hydra.core.config_search_path import ConfigSearchPath
from hydra.plugins.search_path_plugin import SearchPathPlugin


class AllocSearchPathPlugin(SearchPathPlugin):
    """Appends areal-alloc's config source, ``areal-alloc-schema://``: the hook
    (``- areal_alloc/validate``) and the schema (``- areal_alloc/schema``)."""

    def manipulate_search_path(self, search_path: ConfigSearchPath) -> None:
        search_path.append(provider="areal-alloc", path="areal-alloc-schema://")


def _register() -> None:
    try:
        from areal_alloc.resolvers import register_resolvers

        register_resolvers()
    except Exception as error:  # never break somebody else's Hydra app
        warnings.warn(f"areal-alloc: plugin set-up failed: {error!r}", stacklevel=1)


_register()
