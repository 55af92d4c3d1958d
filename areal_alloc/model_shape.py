"""The model's shape, and what Megatron and the inference servers would reject at run time.

A :class:`ModelShape` comes from a config section (``model_shape: {num_layers: 28,
…}``) or a local Hugging Face ``config.json``. :func:`check_shape` compares it
with a layout: attention heads and KV heads against tensor parallelism, layers
against pipeline × virtual pipeline stages, experts against expert parallelism.
"""

from __future__ import annotations

import errno
import os
import stat
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from areal_alloc.defaults import ARCHON_STAGES_PER_RANK
from areal_alloc.errors import AllocationValidationError
from areal_alloc.files import CONFIG_JSON, read_json, shown
from areal_alloc.limits import MAX_COUNT
from areal_alloc.model import ModelAllocation
from areal_alloc.numbers import divisors, read_int
from areal_alloc.strategy import ParallelStrategy
from areal_alloc.vocab import INFERENCE_BACKENDS

__all__ = [
    "CONFIG_KEYS",
    "ModelShape",
    "archon_mesh_problem",
    "check_shape",
    "config_values",
    "engine_micro_batches",
    "engine_shape",
    "even_split_builds",
    "language_model",
    "layout_problems",
    "local_config",
    "local_path",
    "minibatch_micro_batches",
    "read_config_json",
    "read_model_config",
    "shape_problems",
]

#: The one table of the config.json keys each size is read from, first found wins. The
#: shape checks (:class:`ModelShape`) and the memory estimate
#: (:class:`areal_alloc.architecture.Architecture`) both read through
#: :func:`config_values`, so a Falcon-style ``n_head_kv`` or a Megatron-style
#: ``num_query_groups`` means the same KV heads to both. Sources: transformers'
#: LlamaConfig, Qwen2/Qwen3(Moe)Config, DeepseekV3Config, FalconConfig (``n_head_kv``,
#: ``multi_query``), GPT2Config (``n_embd``, ``n_layer``, ``n_head``), Megatron-LM's
#: TransformerConfig names.
CONFIG_KEYS: dict[str, tuple[str, ...]] = {
    "hidden_size": ("hidden_size", "n_embd", "d_model"),
    "num_layers": ("num_hidden_layers", "num_layers", "n_layer"),
    "num_attention_heads": ("num_attention_heads", "n_head"),
    "num_key_value_heads": ("num_key_value_heads", "num_query_groups", "n_head_kv"),
    "head_dim": ("head_dim", "kv_channels"),
    "intermediate_size": ("intermediate_size", "ffn_hidden_size"),
    "vocab_size": ("vocab_size", "padded_vocab_size"),
    "num_experts": ("num_experts", "n_routed_experts", "num_local_experts", "moe_num_experts"),
    "experts_per_token": ("num_experts_per_tok", "moe_router_topk"),
    "moe_intermediate_size": ("moe_intermediate_size", "moe_ffn_hidden_size"),
    "first_dense_layers": ("first_k_dense_replace",),
    "q_lora_rank": ("q_lora_rank",),
    "kv_lora_rank": ("kv_lora_rank",),
    "qk_nope_head_dim": ("qk_nope_head_dim",),
    "qk_rope_head_dim": ("qk_rope_head_dim",),
    "v_head_dim": ("v_head_dim",),
    # the positions the servers derive their longest context from (SGLang's
    # get_context_length, vLLM's derived max_model_len: the experiment.server_rules context rule)
    "max_position_embeddings": ("max_position_embeddings", "n_positions"),
    # not a config.json key: a model_shape section's schedule for the layer check
    "virtual_pipeline_size": ("virtual_pipeline_size", "virtual_pipeline_parallel_size"),
}

#: The sizes a layout must divide (the fields of :class:`ModelShape` read from a mapping).
_SHAPE_FIELDS = (
    "num_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "num_experts",
    "vocab_size",
    "virtual_pipeline_size",
)

#: Switches saying a config has one KV head (FalconConfig.multi_query, GPTBigCode's
#: multi_query, ChatGLM's multi_query_attention).
_MULTI_QUERY = ("multi_query", "multi_query_attention")


def language_model(data: Any) -> Any:
    """The language model's part of a config: a multimodal wrapper keeps it in
    ``text_config`` (its keys win over the wrapper's)."""
    text_config = data.get("text_config") if hasattr(data, "get") else None
    if isinstance(text_config, dict) and (
        "hidden_size" not in data or "num_attention_heads" not in data
    ):
        return {**data, **text_config}
    return data


def config_values(
    data: Any, source: str, names: tuple[str, ...], least: dict[str, int] | None = None
) -> dict[str, int]:
    """The sizes ``names`` of a config mapping, by :data:`CONFIG_KEYS` (first key found
    wins), each through the one reader of numbers and named by the key it was read from
    (``least``: a name's smallest value, 1 by default). A multi-query config (no KV-head
    key, ``multi_query: true``) has one KV head."""
    values: dict[str, int] = {}
    for name in names:
        for key in CONFIG_KEYS[name]:
            value = data.get(key)
            if value is not None:
                minimum = 1 if least is None else least.get(name, 1)
                values[name] = read_int(
                    value, f"{source}: {key}", minimum=minimum, maximum=MAX_COUNT
                )
                break
    if (
        "num_key_value_heads" in names
        and "num_key_value_heads" not in values
        and any(data.get(key) is True for key in _MULTI_QUERY)
    ):
        values["num_key_value_heads"] = 1
    return values


def read_model_config(path: str | Path) -> tuple[Path, Any]:
    """A local ``config.json`` (or its folder): its path and its language model's part."""
    file, data = read_config_json(path)
    return file, language_model(data)


@dataclass(frozen=True, slots=True)
class ModelShape:
    """The sizes of a model that a layout must divide. ``None``: unknown, not checked."""

    num_layers: int | None = None
    num_attention_heads: int | None = None
    num_key_value_heads: int | None = None
    num_experts: int | None = None
    vocab_size: int | None = None
    virtual_pipeline_size: int = 1
    source: str = "model_shape"
    #: the config's ``model_type`` (None: not given): the archon engine's Qwen3.5 builder
    #: ignores t, c and e (:data:`ARCHON_DATA_PARALLEL_ONLY`)
    model_type: str | None = None

    def __post_init__(self) -> None:
        for name in _SHAPE_FIELDS:
            value = getattr(self, name)
            if value is None:
                continue
            number = read_int(value, f"{self.source}: {name}", minimum=1, maximum=MAX_COUNT)
            if number is not value:  # "28" given directly: kept as the number it names
                object.__setattr__(self, name, number)
        heads, kv = self.num_attention_heads, self.num_key_value_heads
        if heads is not None and kv is not None and heads % kv:
            raise AllocationValidationError(
                f"{self.source}: num_key_value_heads={kv:,} must divide "
                f"num_attention_heads={heads:,} ({heads:,} % {kv:,} = {heads % kv:,})"
            )

    @classmethod
    def from_mapping(cls, data: Any, source: str = "model_shape") -> ModelShape:
        """Read a mapping with our names or Hugging Face's (``num_hidden_layers``…);
        every value through the one reader of numbers, named by the key it was read from."""
        values = config_values(data, source, _SHAPE_FIELDS) if hasattr(data, "get") else {}
        if "num_key_value_heads" not in values and "num_attention_heads" in values:
            values["num_key_value_heads"] = values["num_attention_heads"]
        kind = data.get("model_type") if hasattr(data, "get") else None
        return cls(**values, source=source, model_type=kind if isinstance(kind, str) else None)

    @classmethod
    def from_hf_config(cls, path: str | Path) -> ModelShape:
        """Read a local Hugging Face ``config.json`` (or the folder holding one)."""
        file, data = read_model_config(path)
        return cls.from_mapping(data, source=str(file))


def local_path(text: str | Path) -> Path | None:
    """``text`` as a local path with ``~`` expanded, or None where it cannot be one.

    Never raises: an unknown ``~user``, a NUL character or a name too long for the
    file system is "not a local path", which callers report in their own words.
    """
    try:
        path = Path(text).expanduser()
        path.exists()  # ValueError (NUL) or OSError (name too long) surface here
    except (OSError, ValueError, RuntimeError):
        return None
    return path


def local_config(text: str | Path) -> Path | None:
    """The ``config.json`` that ``text`` names (the file, or a folder holding one), if any.

    Anything at that path that is not a folder counts (a FIFO, a device, a symlink
    loop too), so that reading it gives the reason it cannot be read
    (:func:`read_config_json`) instead of the model being looked for elsewhere.
    """
    path = local_path(text)
    if path is None:
        return None
    for candidate in (path, path / "config.json"):
        try:
            if stat.S_ISDIR(os.stat(candidate).st_mode):
                continue
            return candidate
        except FileNotFoundError:
            continue
        except OSError as error:
            if error.errno == errno.ELOOP:
                return candidate  # the reader says "is a symlink loop"
            continue
        except ValueError:
            return None
    return None


def read_config_json(path: str | Path) -> tuple[Path, dict[str, Any]]:
    """A local ``config.json`` (or the folder holding one): its path and its JSON object.

    Read by :func:`areal_alloc.files.read_json` (a regular file of at most 16 MB,
    bounded nesting and numbers, read once per process); one error line otherwise.
    """
    file = local_path(path)
    if file is None:
        raise AllocationValidationError(
            f"model config {shown(str(path))} is not a usable local path"
        )
    try:
        if file.is_dir():
            file = file / "config.json"
    except OSError:
        pass
    data = read_json(file, CONFIG_JSON)
    if not isinstance(data, dict):
        raise AllocationValidationError(f"model config {shown(str(file))} is not a JSON object")
    return file, dict(data)


def shape_problems(allocation: ModelAllocation, shape: ModelShape) -> list[str]:
    """Every way ``allocation`` does not fit ``shape``, each with its numbers."""
    return layout_problems(allocation.backend, allocation.parallel, shape)


def engine_micro_batches(backend: str, pp: int, vpp: int, micro_batches: int | None) -> int | None:
    """The micro-batches the reference's engine runs with pipeline parallelism: its Megatron
    engine at least 2·pp (``min_n_mbs = 2 * pp_size``, areal/engine/megatron_engine.py
    l.2705–2716), its archon engine at least pp × stages per rank (archon_engine.py
    l.1209–1227), both a multiple of pp (``n_mbs_divisor=pp_size``); the config's
    ``mb_spec.n_mbs`` above that (``micro_batches``; None: set by the tokens, at least the
    minimum) (AReaL cbff54d6). Other engines and pp = 1: as given."""
    if pp <= 1 or backend not in ("megatron", "archon"):
        return micro_batches
    least = 2 * pp if backend == "megatron" else pp * max(vpp, 1)
    count = max(least, micro_batches or least)
    return -(-count // pp) * pp


def packed_groups(
    backend: str, pp: int, vpp: int, least: int, sequences: int, per_group: int
) -> int:
    """The micro-batches ``sequences`` whole sequences are packed into, ``per_group`` at most
    in each (seqpack's allocation under a tokens budget: whole sequences a group), at least
    ``least`` (``mb_spec.n_mbs``) and the engine's own count, a multiple of pp
    (:func:`engine_micro_batches`; areal/utils/seqpack.py ffd_allocate, AReaL cbff54d6)."""
    needed = max(least, -(-max(sequences, 1) // max(per_group, 1)))
    return engine_micro_batches(backend, pp, vpp, needed) or needed


def minibatch_micro_batches(backend: str, pp: int, vpp: int, n_mbs: int) -> int:
    """The micro-batches each of a trainer's ``ppo_n_minibatches`` minibatches is packed
    into at least (:func:`engine_micro_batches`, ``mb_spec.n_mbs`` otherwise; ``vpp``: the
    archon engine's stages per rank). A rank with fewer sequences than minibatches × that
    leaves a minibatch short, and the reference raises (the start-up rule
    ``minibatches_fill_their_micro_batches``)."""
    return engine_micro_batches(backend, pp, vpp, n_mbs) or n_mbs


def even_split_builds(num_layers: int, pp: int, vpp: int = 1) -> bool:
    """Whether megatron-core builds its even split without a layout (megatron-bridge's
    path): p divides the layers (transformer_block.py get_num_layers_to_build asserts it,
    core_v0.17.0 l.151–153) and vpp each rank's (megatron-bridge v0.4.0 gpt_provider.py
    ``provide`` l.241–245), at p = 1 too: the reference hands the provider any vpp > 1
    (areal/models/mcore/registry.py make_mcore_model l.433-435, AReaL cbff54d6)."""
    pp = max(pp, 1)
    return num_layers % pp == 0 and (num_layers // pp) % max(vpp, 1) == 0


def engine_shape(backend: str, shape: ModelShape) -> ModelShape:
    """``shape`` as ``backend`` runs it without a config's settings: the archon engine with
    its default schedule's virtual stages per rank (``defaults.ARCHON_STAGES_PER_RANK``,
    Interleaved1F1B's 2), which its ``virtual_pipeline_size`` holds; the others as given
    (megatron-core's vpp 1). A config's engine reads its own (``Engine.shape``)."""
    if backend == "archon":
        return replace(shape, virtual_pipeline_size=ARCHON_STAGES_PER_RANK)
    return shape


#: The training engines whose context parallelism is Ulysses sequence parallelism, which
#: scatters the attention heads over the c ranks (AReaL cbff54d6: the FSDP engine's
#: apply_monkey_patch, areal/models/transformers/ulyssess_patch.py l.165-177, called from
#: fsdp_engine.py initialize l.393 with sp_size = c; the archon engine's
#: validate_cp_constraints, areal/experimental/models/archon/utils.py l.64-93, called from
#: apply_cp, qwen2/infra/parallelize.py l.351 and qwen3/infra/parallelize.py l.523).
#: Megatron's context parallelism splits the sequence, not the heads.
ULYSSES_BACKENDS = ("fsdp", "archon")
#: The model types the archon engine builds data-parallel only: ``parallelize_qwen3_5``
#: warns "Qwen3.5 does not yet support Tensor Parallelism. TP will be ignored." (and the
#: same of CP and EP) and applies none of them, so no head check of t or c runs
#: (areal/experimental/models/archon/qwen3_5/infra/parallelize.py l.95-111 at cbff54d6;
#: the family's names: qwen3_5/spec.py)
ARCHON_DATA_PARALLEL_ONLY = ("qwen3_5", "qwen3_5_moe", "qwen3_5_moe_text", "qwen3_5_text")


def _first_sizes(dim: str, sizes: list[int]) -> str:
    """The first six ``sizes`` of a dimension as text ("c2, c4, …"; "none")."""
    return ", ".join(f"{dim}{n}" for n in sizes[:6]) + (", …" if len(sizes) > 6 else "") or "none"


def _ulysses_divisors(heads: int, kv: int | None, tp: int, backend: str) -> str:
    """The c > 1 whose Ulysses split the heads take, as text ("c2, c4"; "none")."""
    fits = [  # c must divide the heads
        c
        for c in divisors(heads)[1:]
        if not _ulysses_problems(backend, tp, c, heads, kv, hint=False)
    ]
    return _first_sizes("c", fits)


def _ulysses_problems(
    backend: str, tp: int, cp: int, heads: int | None, kv: int | None, hint: bool = True
) -> list[str]:
    """Why Ulysses context parallelism over ``cp`` ranks cannot split the heads.

    FSDP checks the model's heads (ulyssess_patch.py l.165-177): the attention heads divisible
    by c, the KV heads divisible by c or dividing it (then repeated). Archon checks the heads
    after tensor parallelism (archon/utils.py l.64-93): q = heads // t divisible by c; kv =
    KV heads // t divisible by c when at least c, else dividing c; its last check, c // kv
    dividing heads // KV heads, follows from those (c divides q and kv divides c). A model
    without head counts is not checked.
    """
    if heads is None:
        return []
    kv_heads = kv if kv is not None else heads
    if backend == "fsdp":
        said = f"the FSDP engine's Ulysses patch raises 'num_attention_heads {heads} must be "
        if heads % cp:
            found = (
                f"num_attention_heads={heads} is not divisible by context parallel size c{cp}: "
                f"{heads} % {cp} = {heads % cp}, and {said}divisible by ulysses_sp_size {cp}'"
            )
        elif kv_heads % cp and cp % kv_heads:
            found = (
                f"num_key_value_heads={kv_heads} and context parallel size c{cp}: neither "
                f"divides the other ({kv_heads} % {cp} = {kv_heads % cp}, {cp} % {kv_heads} = "
                f"{cp % kv_heads}), and the FSDP engine's Ulysses patch raises "
                f"'num_key_value_heads {kv_heads} must be divisible by ulysses_sp_size {cp} or "
                f"vice versa.'"
            )
        else:
            return []
    else:
        if heads % tp or kv_heads % tp:
            return []  # the tensor-parallel check above, which archon's apply_tp meets first
        q, local_kv = heads // tp, kv_heads // tp
        after = f" after t{tp}" if tp > 1 else ""
        if q % cp:
            found = (
                f"{q} attention heads{after} are not divisible by context parallel size c{cp}: "
                f"{q} % {cp} = {q % cp}, and the archon engine raises 'q_heads after TP ({q}) "
                f"must be divisible by cp_size ({cp})'"
            )
        elif local_kv >= cp and local_kv % cp:
            found = (
                f"{local_kv} KV heads{after} are not divisible by context parallel size c{cp}: "
                f"{local_kv} % {cp} = {local_kv % cp}, and the archon engine raises 'kv_heads "
                f"after TP ({local_kv}) must be divisible by cp_size ({cp})'"
            )
        elif local_kv < cp and cp % local_kv:
            found = (
                f"context parallel size c{cp} is not divisible by the {local_kv} KV heads"
                f"{after}: {cp} % {local_kv} = {cp % local_kv}, and the archon engine raises "
                f"'cp_size ({cp}) must be divisible by kv_heads after TP ({local_kv})'"
            )
        else:
            return []
    if hint:
        sizes = _ulysses_divisors(heads, kv, tp, backend)
        found += f"; use a context parallel size the heads take ({sizes})"
    return [found]


def _archon_expert_sizes(dp: int, cp: int, tp: int, etp: int) -> str:
    """The e > 1 archon's mesh takes with these d, c, t and etp, as text ("e2, e4"; "none")."""
    pool, unit = (dp * cp, cp) if etp == tp else (dp * cp * tp, cp * tp)
    # the multiples of ``unit`` that divide ``pool``: unit × each divisor of pool / unit
    # (counted from the divisors, not by walking to pool: a million GPUs answers at once)
    sizes = [unit * k for k in divisors(pool // unit) if unit * k > 1] if pool % unit == 0 else []
    return _first_sizes("e", sizes)


def archon_mesh_problem(dp: int, tp: int, cp: int, ep: int, etp: int) -> str | None:
    """Why the archon engine refuses this mesh, whatever the model, or None.

    ArchonParallelDims.__post_init__ (areal/experimental/models/archon/parallel_dims.py
    l.137-168, AReaL cbff54d6; dp_shard = d): etp is 1 or t; with e > 1 and etp = t, e
    borrows from d × c only (e a multiple of c, dividing d·c); with etp = 1 from d × c × t
    (e a multiple of c·t, dividing d·c·t). etp = t = 1 takes the first branch, as the
    reference's ``==`` does. That e divides d·c (or d·c·t) is the layout's own rule
    (strategy.ParallelStrategy: p·etp·e divides the world size d·t·p·c).
    """
    if etp not in (1, tp):
        return (
            f"the experts' tensor parallel size etp{etp} is neither 1 nor the attention's "
            f"t{tp}, and the archon engine raises 'etp must be 1 or equal to tp, got "
            f"etp={etp}, tp={tp}'; use etp1 or etp{tp}"
        )
    if ep <= 1:
        return None
    if etp == tp:  # parallel_dims.py l.145-156
        mode, unit, unit_text = "etp=tp", cp, "cp"
        unit_said, got = f"c{cp}", f"ep={ep}, cp={cp}"
    else:  # l.157-168
        mode, unit, unit_text = "etp=1", cp * tp, "cp * tp"
        unit_said, got = f"c{cp}·t{tp} = {cp * tp}", f"ep={ep}, cp={cp}, tp={tp}"
    if ep % unit == 0:
        return None
    return (
        f"e{ep} is not a multiple of {unit_said} ({ep} % {unit} = {ep % unit}), and the "
        f"archon engine raises 'When {mode}, ep must be divisible by {unit_text}, got {got}'; "
        f"use an expert parallel size this mesh takes ({_archon_expert_sizes(dp, cp, tp, etp)})"
    )


def layout_problems(backend: str, p: ParallelStrategy, shape: ModelShape) -> list[str]:
    """Every way the layout ``p`` of ``backend`` does not fit ``shape``."""
    inference = backend in INFERENCE_BACKENDS
    problems: list[str] = []
    tp = p.tp_size
    heads, kv = shape.num_attention_heads, shape.num_key_value_heads
    if backend == "archon" and shape.model_type in ARCHON_DATA_PARALLEL_ONLY:
        heads = kv = None  # t and c are ignored, not applied to the heads
    if heads is not None and heads % tp:
        problems.append(
            f"num_attention_heads={heads} is not divisible by tensor parallel size t{tp}: "
            f"{heads} % {tp} = {heads % tp}"
        )
    if kv is not None and tp > 1:
        if inference:
            if kv % tp and tp % kv:
                problems.append(
                    f"num_key_value_heads={kv} and tensor parallel size t{tp}: neither divides "
                    f"the other, so {backend} cannot shard or replicate the KV heads"
                )
        elif kv % tp:
            problems.append(
                f"num_key_value_heads={kv} is not divisible by tensor parallel size t{tp}: "
                f"{kv} % {tp} = {kv % tp}"
            )
    if p.cp_size > 1 and backend in ULYSSES_BACKENDS:
        problems.extend(_ulysses_problems(backend, tp, p.cp_size, heads, kv))
    stages = p.pp_size * shape.virtual_pipeline_size
    if backend == "megatron":
        # The reference's Megatron engine splits the layers unevenly, by parameters, over
        # the p·vpp stages (areal/engine/megatron_utils/pipeline_parallel.py
        # configure_pipeline_layer_splits, AReaL cbff54d6): only the first stage (with the
        # embedding) and the last (with the loss) may hold no decoder layer.
        if shape.num_layers is not None and p.pp_size > 1 and shape.num_layers < stages - 2:
            problems.append(
                f"num_layers={shape.num_layers} cannot fill p{p.pp_size}·"
                f"vpp{shape.virtual_pipeline_size} = {stages} pipeline stages: every stage "
                f"but the first and last needs a layer, so at least {stages - 2} layers"
            )
    elif backend == "archon":
        # The archon engine splits any number of layers over its p × (stages per rank)
        # virtual stages, the embedding and the output layer counted as one layer each,
        # and refuses more stages than that (generate_llm_fqn_per_model_part, areal/
        # experimental/models/archon/pipeline_parallel.py l.124-129, AReaL cbff54d6).
        layers = shape.num_layers
        if layers is not None and p.pp_size > 1 and stages > layers + 2:
            problems.append(
                f"num_layers={layers} cannot fill the archon engine's p{p.pp_size} × "
                f"{shape.virtual_pipeline_size} = {stages} virtual stages: {layers} layers + 1 "
                f"(embedding) + 1 (output) = {layers + 2} < {stages}"
            )
    elif inference:
        # vLLM and SGLang split the layers unevenly, one stage at least a layer (vllm/
        # distributed/utils.py get_pp_indices l.124-129 at vLLM 0.19.1; python/sglang/srt/
        # distributed/utils.py get_pp_indices l.122-133 at SGLang 0.5.10.post1;
        # estimate.memory_inference.pipeline_stages)
        if shape.num_layers is not None and p.pp_size > shape.num_layers:
            problems.append(
                f"num_layers={shape.num_layers} cannot fill p{p.pp_size} pipeline stages: "
                f"{backend} gives each stage at least one layer ({shape.num_layers} < "
                f"{p.pp_size})"
            )
    elif shape.num_layers is not None and stages > 1 and shape.num_layers % stages:
        problems.append(
            f"num_layers={shape.num_layers} is not divisible by p{p.pp_size}·"
            f"vpp{shape.virtual_pipeline_size} = {stages} pipeline stages: "
            f"{shape.num_layers} % {stages} = {shape.num_layers % stages}"
        )
    if shape.num_experts is not None and p.ep_size > 1 and shape.num_experts % p.ep_size:
        problems.append(
            f"num_experts={shape.num_experts} is not divisible by expert parallel size "
            f"e{p.ep_size}: {shape.num_experts} % {p.ep_size} = {shape.num_experts % p.ep_size}"
        )
    if shape.num_experts is None and p.ep_size > 1 and shape.num_layers is not None:
        problems.append(
            f"expert parallel size e{p.ep_size} needs a mixture-of-experts model, but "
            f"{shape.source} gives no number of experts"
        )
    return problems


def check_shape(allocation: ModelAllocation, shape: ModelShape, key: str = "backend") -> None:
    """Raise an :class:`AllocationValidationError` naming ``key`` when the shape does not fit."""
    problems = shape_problems(allocation, shape)
    if problems:
        raise AllocationValidationError(
            f"{key}={allocation.spec!r} does not fit the model ({shape.source}): "
            f"{'; '.join(problems)}"
        )
