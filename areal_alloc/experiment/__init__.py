"""The experiment as the reference reads it: which model each engine runs, and its start-up rules.

``models`` says where an engine's model comes from (its own ``model_shape`` or
``path``, the rollout's ``sglang.model_path`` / ``vllm.model``, else
``actor.path``); ``shapes`` checks each engine's layout against that model;
``rules`` holds every rule the reference enforces before it spends GPU time,
each with its source file and snapshot commit. Importing the package loads
nothing: each module is imported where it is used.
"""

from __future__ import annotations

#: The reference's snapshot every rule of this package was read from
#: (github.com/areal-project/AReaL, main branch, 2026-08-22).
REFERENCE_COMMIT = "cbff54d645d2cd8ee1f1c358a82f3f473588433d"

__all__ = ["REFERENCE_COMMIT"]
