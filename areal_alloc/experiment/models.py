"""Where the model an engine runs is named in the config, by the reference's rules.

The actor, critic, ref and teacher run their own ``path``; the rollout's
servers load ``sglang.model_path`` or ``vllm.model`` (areal/trainer/rl_trainer.py
``_init_rollout`` builds the server arguments from them; the examples set them to
``${actor.path}``), else the actor's model; a teacher served by the rollout
engines loads ``teacher.path`` (``_init_teacher_rollout``). An engine may also
give its own ``model_shape``; the experiment's top-level ``model_shape`` stands for
the actor's model (not the teacher's). Reference: areal-project/AReaL at
``REFERENCE_COMMIT``.
"""

from __future__ import annotations

from typing import NamedTuple

from areal_alloc._config import child, is_mapping, unset

__all__ = ["ModelSource", "model_sources"]


class ModelSource(NamedTuple):
    """One place a config names an engine's model: a ``model_shape`` section or a path."""

    kind: str  # "model_shape" or "path"
    key: str  # the dotted key it was read from, for messages
    value: object


#: The server config each inference backend loads its model from (areal/api/cli_args.py
#: SGLangConfig.model_path, vLLMConfig.model at cbff54d6).
SERVER_MODEL_KEYS: dict[str, tuple[str, str]] = {
    "sglang": ("sglang", "model_path"),
    "vllm": ("vllm", "model"),
}


def model_sources(
    cfg: object, engine_key: str, section_key: str, backend: str
) -> list[ModelSource]:
    """Every place naming ``engine_key``'s model, first to last (the first that resolves wins).

    ``section_key`` is the section holding the engine's backend (``teacher.rollout``
    for a teacher served by inference engines; otherwise the engine's own key);
    ``backend`` is the engine's backend name (``sglang``, ``megatron``, ...).
    """
    found: list[ModelSource] = []
    sections = [(section_key, _section(cfg, section_key))]
    if section_key != engine_key:
        sections.append((engine_key, child(cfg, engine_key)))
    for key, node in sections:
        if not is_mapping(node):
            continue
        shape = child(node, "model_shape")
        if not unset(shape):
            found.append(ModelSource("model_shape", f"{key}.model_shape", shape))
        path = child(node, "path")
        if isinstance(path, str) and path:
            found.append(ModelSource("path", f"{key}.path", path))
    server = SERVER_MODEL_KEYS.get(backend)
    if server is not None and engine_key in ("rollout", "teacher"):
        # areal/trainer/rl_trainer.py _init_rollout / _init_teacher_rollout (cbff54d6): the
        # servers load sglang.model_path / vllm.model; a teacher's path replaces it
        path = child(child(cfg, server[0]), server[1])
        if isinstance(path, str) and path:
            found.append(ModelSource("path", ".".join(server), path))
    if engine_key == "teacher":
        return found  # another model: the actor's never stands in for it
    if engine_key != "actor":
        path = child(child(cfg, "actor"), "path")
        if isinstance(path, str) and path:
            found.append(ModelSource("path", "actor.path", path))
    top = child(cfg, "model_shape")
    if not unset(top):
        found.append(ModelSource("model_shape", "model_shape", top))
    return found


def _section(cfg: object, dotted: str) -> object:
    node: object = cfg
    for part in dotted.split("."):
        node = child(node, part)
    return node
