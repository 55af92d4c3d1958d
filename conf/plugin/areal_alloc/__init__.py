"""Kept for pyproject's package list: ``areal_alloc/validate`` is served by the config
source in ``hydra_plugins/areal_alloc/areal_alloc_schema_source.py`` (built from a dict:
no YAML read on every start)."""
