"""One training step of the reference's FSDP engine, measured, as rows of measurements.json.

Run on a GPU machine (torch and transformers installed; the model's shape from the catalogue
or a local config.json, random weights, no hub access):

    python benchmarks/probe_fsdp.py --model Qwen/Qwen3-1.7B --tokens 16384 --recompute full
    python benchmarks/probe_fsdp.py --cases 0.6B-2k-full,4B-8k-none --write

On a CPU (torch's gloo backend, one process, world size 1; a tiny Qwen3 built in-process):

    python benchmarks/probe_fsdp.py --device cpu --tokens 1100 --compile-backend eager

It builds the actor of ``fsdp:d1`` as AReaL cbff54d645d2cd8ee1f1c358a82f3f473588433d builds it
(each choice below cites its file and line there), runs one packed micro-batch of N tokens
through ``train_batch`` (log-probs and entropy, the PPO loss, backward, the grad-norm clip, the
optimizer step) and ``forward_batch`` (the no-grad log-prob pass of ``recompute_logprob``, a
ref, a teacher), and records per phase torch's max allocated and max reserved memory, the
device memory in use (total − free), and the seconds of a step and of a forward pass (a
warm-up, then the median of ``--steps``). Each case gives three rows (kinds
``reference_fsdp_memory``, ``reference_fsdp_step``, ``reference_fsdp_forward``) under one
source that names the machine and the versions; ``--write`` adds them to the data file, which
``benchmarks/accuracy.py`` compares like every other row. benchmarks/README.md says what is
reproduced and what is not.
"""

from __future__ import annotations

import argparse
import datetime
import gc
import json
import math
import os
import platform
import resource
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script

# The reference's launcher gives every worker CUDA_DEVICE_MAX_CONNECTIONS=1
# (areal/infra/utils/launcher.py:50); set before torch starts CUDA.
os.environ.setdefault("CUDA_DEVICE_MAX_CONNECTIONS", "1")

DATA = Path(__file__).resolve().parent / "measurements.json"
GIB = 1 << 30
AREAL = "cbff54d645d2cd8ee1f1c358a82f3f473588433d"

# --- the reference's defaults (areal/api/cli_args.py at AREAL) ------------------------------
COMPUTE_DTYPE = "bfloat16"  # TrainEngineConfig.dtype (cli_args.py:1305-1308)
REDUCE_DTYPE = "float32"  # TrainEngineConfig.grad_reduce_dtype (cli_args.py:1309-1311)
OPTIMIZER_DTYPE = (
    "float32"  # TrainEngineConfig.optimizer_dtype: weights and Adam (cli_args.py:1312)
)
ATTN_IMPL = "flash_attention_2"  # TrainEngineConfig.attn_impl (cli_args.py:1254-1256)
TEMPERATURE = 1.0  # TrainEngineConfig.temperature (cli_args.py:1276-1278)
LOGPROBS_CHUNK = 1024  # TrainEngineConfig.logprobs_chunk_size (cli_args.py:1279-1285)
LR, WEIGHT_DECAY = 1e-3, 0.01  # OptimizerConfig.lr, weight_decay (cli_args.py:391-392)
BETAS, ADAM_EPS = (0.9, 0.999), 1e-8  # OptimizerConfig.beta1/beta2/eps (cli_args.py:393-410)
GRAD_CLIP = 1.0  # OptimizerConfig.gradient_clipping (cli_args.py:454-456)
EPS_CLIP = 0.2  # PPOActorConfig.eps_clip (cli_args.py:1683-1685)
#: micro-batches are padded to a multiple of 256 tokens (areal/utils/data.py:819, 1027)
TOKENS_PER_PAGE = 256

#: A tiny Qwen3 for CPU runs (not a real model: small enough to run in seconds).
TINY: dict[str, Any] = {
    "model_type": "qwen3",
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "vocab_size": 1000,
    "tie_word_embeddings": True,
}
TINY_NAME = "tiny-qwen3"


@dataclass(frozen=True, slots=True)
class Case:
    """One measured configuration: a model, N tokens in one micro-batch, recomputation."""

    name: str
    model: str
    tokens: int
    recompute: bool

    @property
    def padded(self) -> int:
        return -(-self.tokens // TOKENS_PER_PAGE) * TOKENS_PER_PAGE


def _case(model: str, k: int, recompute: bool) -> Case:
    short = model.rsplit("/", 1)[-1]
    return Case(f"{short}-{k}k-{'full' if recompute else 'none'}", model, k * 1024, recompute)


#: Named GPU cases (``--cases``): they widen the shared H200 rows (shared/measured/README.md):
#: the host floor of small steps, no recomputation, longer micro-batches, other families.
CASES: dict[str, Case] = {
    c.name: c
    for c in (
        _case("Qwen/Qwen3-0.6B", 2, True),
        _case("Qwen/Qwen3-0.6B", 16, False),
        _case("Qwen/Qwen3-1.7B", 8, False),
        _case("Qwen/Qwen3-1.7B", 32, True),
        _case("Qwen/Qwen3-4B", 8, False),
        _case("Qwen/Qwen3-4B", 4, True),
        _case("Qwen/Qwen3-8B", 4, True),
        _case("Qwen/Qwen2.5-7B", 8, True),
        _case("meta-llama/Llama-3.1-8B", 8, True),
    )
}


# --- the model's shape --------------------------------------------------------------------


def model_config(model: str | None) -> tuple[str, dict[str, Any]]:
    """The model's name and config.json values: a local config.json (or a folder holding
    one), a hub id or name of areal_alloc's catalogue (one home for model shapes), or, when
    ``None``, the tiny in-process Qwen3."""
    if model is None:
        return TINY_NAME, dict(TINY)
    path = Path(model).expanduser()
    if path.is_dir():
        path = path / "config.json"
    if path.is_file():
        config: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
        return str(model), config
    from areal_alloc.catalogue import MODELS

    key = model.strip().lower()
    for entry in MODELS.values():
        if key in (entry.hub_id.lower(), entry.name.lower()):
            return entry.hub_id, dict(entry.config)
    known = ", ".join(sorted(m.hub_id for m in MODELS.values()))
    raise SystemExit(f"--model {model!r}: not a config.json and not in the catalogue ({known})")


# --- the machine ---------------------------------------------------------------------------


def _nvidia_smi() -> dict[str, Any]:
    """Driver and total memory as nvidia-smi prints them (empty where there is none)."""
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return {}
    name, driver, total = (part.strip() for part in out.splitlines()[0].split(","))
    return {"nvidia_smi_name": name, "driver": driver, "nvidia_smi_total": total}


def gpu_name(torch_name: str) -> tuple[str, str]:
    """The catalogue's name of the device (``NVIDIA H200`` → ``H200``), and a note when the
    catalogue has none (the row then keeps torch's name and is not compared)."""
    from areal_alloc.catalogue import find_gpu
    from areal_alloc.errors import AllocationError

    short = torch_name.removeprefix("NVIDIA ").strip()
    try:
        return find_gpu(short).name, ""
    except AllocationError:
        return torch_name, f"{torch_name!r} is not in areal_alloc's GPU catalogue"


def machine(torch: Any, device: str) -> dict[str, Any]:
    found: dict[str, Any] = {"host": socket.gethostname(), "python": platform.python_version()}
    if device == "cuda":
        props = torch.cuda.get_device_properties(0)
        found.update(
            gpu=props.name,
            torch_total_memory_gib=round(props.total_memory / GIB, 3),
            cuda=torch.version.cuda,
            **_nvidia_smi(),
        )
    else:
        found.update(gpu="cpu", cpu=platform.processor() or platform.machine())
    return found


# --- the engine, as the reference builds it --------------------------------------------------


class Engine:
    """The actor of ``fsdp:d1`` with the reference's defaults, on one device."""

    def __init__(self, torch: Any, case: Case, device: str, attn: str, compiled: Any) -> None:
        import torch.distributed as dist
        from torch import nn
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
        from transformers import AutoConfig, AutoModelForCausalLM

        self.torch, self.dist, self.device, self.case = torch, dist, device, case
        self.gather_logprobs, self.gather_logprobs_entropy = compiled
        # ParallelHelper._build_mesh_without_ep (fsdp_utils/parallel.py:125-141): (dp, sp, tp)
        mesh = init_device_mesh(device, (1, 1, 1), mesh_dim_names=("dp", "sp", "tp"))
        mesh["dp", "sp"]._flatten(mesh_dim_name="dp_sp")
        mesh["sp", "tp"]._flatten(mesh_dim_name="sp_tp")
        name, values = model_config(case.model)
        values = {k: v for k, v in values.items() if k != "model_type"}
        self.config = AutoConfig.for_model(model_config(case.model)[1]["model_type"], **values)
        self.model_name = name
        # Weights are created on the device (memory_efficient_load false: fsdp_engine.py:1059)
        # in optimizer_dtype (fsdp_engine.py:1044-1046), by from_config with the dtype and
        # the attention implementation (fsdp_engine.py:1018-1027, 1098-1099).
        with torch.device(device):
            model = AutoModelForCausalLM.from_config(
                self.config, dtype=getattr(torch, OPTIMIZER_DTYPE), attn_implementation=attn
            )
        if case.recompute:  # fsdp_engine.py:1105-1108
            model.gradient_checkpointing_enable(
                gradient_checkpointing_kwargs={"use_reentrant": False}
            )
        # parallelize_model (fsdp_utils/parallel.py:384-395) then apply_fsdp2
        # (fsdp_utils/__init__.py:62-106): each class of _no_split_modules (the decoder
        # layer), and the embedding when untied, then the root.
        policy = MixedPrecisionPolicy(
            param_dtype=getattr(torch, COMPUTE_DTYPE),
            reduce_dtype=getattr(torch, REDUCE_DTYPE),
            cast_forward_inputs=True,
        )
        kwargs = {"mesh": mesh["dp_sp"], "mp_policy": policy, "reshard_after_forward": True}
        wrap = set(getattr(model, "_no_split_modules", None) or [])
        tied = bool(getattr(model.config, "tie_word_embeddings", False))
        for module in [
            m
            for m in model.modules()
            if type(m).__name__ in wrap or (isinstance(m, nn.Embedding) and not tied)
        ]:
            fully_shard(module, **kwargs)
        fully_shard(model, **kwargs)
        self.model = model
        # _create_optimizer (fsdp_engine.py:1195-1203): fused AdamW of the reference's defaults
        self.optimizer = torch.optim.AdamW(
            model.parameters(),
            lr=LR,
            weight_decay=WEIGHT_DECAY,
            betas=BETAS,
            eps=ADAM_EPS,
            fused=True,
        )
        vocab = int(self.config.vocab_size)
        generator = torch.Generator(device="cpu").manual_seed(0)
        ids = torch.randint(0, vocab, (1, case.padded), generator=generator)
        self.input_ids = ids.to(device)
        self.position_ids = torch.arange(case.padded).unsqueeze(0).to(device)
        self.pad = case.padded - case.tokens
        # one sequence of N tokens, and the padding as one more (data.py:822-930)
        bounds = [0, case.tokens] + ([case.padded] if self.pad else [])
        self.cu_seqlens = torch.tensor(bounds, dtype=torch.int32, device=device)
        self.max_length = max(case.tokens, self.pad)
        n = case.tokens
        self.old_logp = (-torch.rand(n, generator=generator) * 4).to(device)
        self.advantages = torch.randn(n, generator=generator).to(device)
        self.loss_mask = torch.ones(n, dtype=torch.bool, device=device)

    def _logits(self) -> Any:
        # forward_backward_batch (fsdp_engine.py:760-761): one packed micro-batch, with the
        # keys _prepare_mb_list adds (fsdp_engine.py:1966-1991): the packed lengths, no KV
        # cache, and no mask (a dict of None; None for Qwen3-MoE, and here for a model
        # without layer_types, whose transformers 5 code refuses the dict, e.g. Llama)
        plain = self.config.model_type == "qwen3_moe" or not hasattr(self.config, "layer_types")
        outputs = self.model(
            input_ids=self.input_ids,
            position_ids=self.position_ids,
            cu_seq_lens_q=self.cu_seqlens,
            cu_seq_lens_k=self.cu_seqlens,
            max_length_q=self.max_length,
            max_length_k=self.max_length,
            use_cache=False,
            attention_mask=None if plain else {"full_attention": None, "sliding_attention": None},
        )
        return outputs.logits.squeeze(0)

    def _labels(self) -> Any:  # _compute_logprobs_entropy (fsdp_engine.py:2083-2088)
        return self.torch.roll(self.input_ids, shifts=-1, dims=-1).squeeze(0)

    def train_step(self) -> float:
        """train_batch (fsdp_engine.py:774-812); returns the gradient norm."""
        torch = self.torch
        self.model.train()  # PPOActor.ppo_update: engine.train() (trainer/ppo/actor.py:453)
        self.optimizer.zero_grad()  # at the start of train_batch (fsdp_engine.py:781)
        logits = self._logits()
        logprobs, entropy = chunked(self.gather_logprobs_entropy, logits, self._labels())
        # vocab min/max logits (fsdp_engine.py:2066-2067), then the padding cut (2198-2202)
        vocab_min = logits.detach().min(-1).values.float()
        vocab_max = logits.detach().max(-1).values.float()
        if self.pad:
            logprobs, entropy = logprobs[: -self.pad], entropy[: -self.pad]
            vocab_min, vocab_max = vocab_min[: -self.pad], vocab_max[: -self.pad]
        entropy = entropy.detach()  # grpo_loss_fn (trainer/ppo/actor.py:556)
        loss = ppo_loss(torch, logprobs, self.old_logp, self.advantages, self.loss_mask)
        # loss_scale = local weight / total weight × dp size (fsdp_engine.py:2216-2217): 1
        loss.backward()  # fsdp_engine.py:772
        norm = clip_grad_norm(torch, self.dist, list(self.model.parameters()), GRAD_CLIP)
        if math.isfinite(norm):  # optimizer_step (fsdp_engine.py:697-725)
            self.optimizer.step()
        else:
            self.optimizer.zero_grad()
        return norm

    def forward_pass(self) -> Any:
        """forward_batch's log-probs under no_grad (fsdp_engine.py:855-856, 2106-2131)."""
        self.model.eval()  # PPOActor.compute_logp: engine.eval() (trainer/ppo/actor.py:168)
        with self.torch.no_grad():
            logprobs = chunked(self.gather_logprobs, self._logits(), self._labels())
            return logprobs[: -self.pad] if self.pad else logprobs


def _gather_logprobs(logits: Any, labels: Any, temperature: float = 1.0) -> Any:
    """areal/utils/functional/vocab_parallel.py:16-21."""
    import torch

    log_probs = torch.nn.functional.log_softmax(logits.float() / temperature, dim=-1)
    return log_probs.gather(dim=-1, index=labels.unsqueeze(-1)).squeeze(-1)


def _gather_logprobs_entropy(logits: Any, labels: Any, temperature: float = 1.0) -> Any:
    """areal/utils/functional/vocab_parallel.py:24-30."""
    import torch

    log_probs = torch.nn.functional.log_softmax(logits.float() / temperature, dim=-1)
    entropy = -torch.sum(log_probs.exp() * log_probs, dim=-1)
    log_probs_labels = log_probs.gather(dim=-1, index=labels.unsqueeze(-1)).squeeze(-1)
    return log_probs_labels, entropy


def chunked(fn: Callable[..., Any], logits: Any, labels: Any) -> Any:
    """_chunked_apply (vocab_parallel.py:42-62): ``logprobs_chunk_size`` rows at a time."""
    import torch

    results = [
        fn(logits[i : i + LOGPROBS_CHUNK], labels[i : i + LOGPROBS_CHUNK], TEMPERATURE)
        for i in range(0, logits.shape[0], LOGPROBS_CHUNK)
    ]
    if isinstance(results[0], tuple):
        return tuple(torch.cat([r[k] for r in results]) for k in range(len(results[0])))
    return torch.cat(results)


def ppo_loss(torch: Any, logprobs: Any, old_logp: Any, advantages: Any, mask: Any) -> Any:
    """ppo_actor_loss_fn at token level, without rejection sampling or dual clipping
    (utils/functional/functional.py:506-584); the proximal log-probs are the old ones."""
    count = mask.count_nonzero() or 1
    ratio = torch.where(mask, torch.exp(logprobs - old_logp), 0)
    clipped = torch.clamp(ratio, 1.0 - EPS_CLIP, 1.0 + EPS_CLIP)
    pg_loss1, pg_loss2 = -advantages * ratio, -advantages * clipped
    clip_mask = pg_loss1.detach() < pg_loss2.detach()
    pg_loss = torch.where(mask, torch.max(pg_loss1, pg_loss2), 0).sum() / count
    clip_mask.logical_and_(mask)
    mask.count_nonzero().item()  # one host sync per micro-batch (functional.py:575)
    return pg_loss


def clip_grad_norm(torch: Any, dist: Any, params: Sequence[Any], max_norm: float) -> float:
    """fsdp2_clip_grad_norm (fsdp_utils/grad.py:238-279) on the path of a machine without
    Transformer Engine or apex (grad.py:27-51): multi_tensor_apply.py's local l2 norm and
    scale (multi_tensor_apply.py:10-30)."""
    grads = [p.grad.to_local().detach() for p in params if p.grad is not None]
    device = grads[0].device
    l2 = torch.norm(torch.tensor([[torch.norm(g) for g in grads]]))  # multi_tensor_apply.py:15-23
    total = torch.tensor([float(l2)], dtype=torch.float, device=device) ** 2.0
    dist.all_reduce(total, op=dist.ReduceOp.SUM)  # the dp_sp group (grad.py:162-167)
    norm: float = float(total.item()) ** 0.5
    coeff = max_norm / (norm + 1.0e-6)  # clip_grad_by_total_norm_fp32 (grad.py:180-236)
    if coeff < 1.0:
        for g in grads:
            g.copy_(g * coeff)  # local_multi_tensor_scale (multi_tensor_apply.py:28-30)
    return norm


# --- measuring --------------------------------------------------------------------------------


class Meter:
    """Memory and time of a phase: torch's allocator peaks and the device in use (CUDA), or
    the process's peak resident memory (CPU, where torch keeps no allocator statistics)."""

    def __init__(self, torch: Any, device: str) -> None:
        self.torch, self.cuda = torch, device == "cuda"

    def sync(self) -> None:
        if self.cuda:
            self.torch.cuda.synchronize()

    def start(self) -> None:
        self.sync()
        if self.cuda:
            self.torch.cuda.reset_peak_memory_stats()

    def read(self) -> dict[str, float | int | None]:
        self.sync()
        if not self.cuda:
            rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux
            return {
                "max_alloc_gib": None,
                "max_reserved_gib": None,
                "device_used_gib": None,
                "process_peak_rss_gib": round(rss / GIB, 4),
                "alloc_retries": None,
            }
        cuda = self.torch.cuda
        free, total = cuda.mem_get_info()
        return {
            "max_alloc_gib": round(cuda.max_memory_allocated() / GIB, 3),
            "max_reserved_gib": round(cuda.max_memory_reserved() / GIB, 3),
            # total − free: the allocator's blocks (never returned between phases: no
            # empty_cache), the CUDA context, NCCL's buffers
            "device_used_gib": round((total - free) / GIB, 3),
            "alloc_after_gib": round(cuda.memory_allocated() / GIB, 3),
            "alloc_retries": int(cuda.memory_stats().get("num_alloc_retries", 0)),
        }

    def timed(self, fn: Callable[[], object], runs: int) -> list[float]:
        seconds = []
        for _ in range(runs):
            self.sync()
            start = time.perf_counter()
            fn()
            self.sync()
            seconds.append(time.perf_counter() - start)
        return seconds


def measure(torch: Any, case: Case, device: str, args: argparse.Namespace) -> dict[str, Any]:
    """The phases of one case: load, the first step, the timed steps, the forward passes."""
    compiled = compile_functions(torch, args.compile_backend)
    meter = Meter(torch, device)
    phases: dict[str, dict[str, Any]] = {}
    meter.start()
    started = time.perf_counter()
    engine = Engine(torch, case, device, args.attn_impl, compiled)
    phases["load"] = {**meter.read(), "seconds": round(time.perf_counter() - started, 3)}
    meter.start()
    first = meter.timed(engine.train_step, 1)
    phases["first_step"] = {**meter.read(), "seconds": round(first[0], 4)}
    meter.start()
    steps = meter.timed(engine.train_step, args.steps)
    phases["steps"] = {**meter.read(), "seconds": [round(s, 4) for s in steps]}
    meter.start()
    forwards = meter.timed(engine.forward_pass, 1 + args.steps)[1:]  # a warm-up, then timed
    phases["forward"] = {**meter.read(), "seconds": [round(s, 4) for s in forwards]}
    found = {
        "case": case.name,
        "model": engine.model_name,
        "tokens": case.tokens,
        "padded_tokens": case.padded,
        "recompute": case.recompute,
        "parameters": sum(p.numel() for p in engine.model.parameters()),
        "step_s": round(statistics.median(steps), 4),
        "forward_s": round(statistics.median(forwards), 4),
        "phases": phases,
    }
    del engine
    gc.collect()
    if device == "cuda":
        torch.cuda.empty_cache()
    return found


_COMPILED: dict[str, tuple[Any, Any]] = {}


def compile_functions(torch: Any, backend: str) -> tuple[Any, Any]:
    """Both log-prob functions, torch.compile'd as the reference does on every non-NPU device
    (vocab_parallel.py:33-39); ``none`` runs them eagerly."""
    if backend not in _COMPILED:
        fns = (_gather_logprobs, _gather_logprobs_entropy)
        if backend != "none":
            fns = (torch.compile(fns[0], backend=backend), torch.compile(fns[1], backend=backend))
        _COMPILED[backend] = fns
    return _COMPILED[backend]


# --- rows --------------------------------------------------------------------------------------


def source(
    torch: Any, device: str, found_machine: dict[str, Any], args: argparse.Namespace
) -> tuple[str, dict[str, Any]]:
    import transformers

    day = datetime.date.today().isoformat()
    gpu = gpu_name(found_machine["gpu"])[0] if device == "cuda" else "cpu"
    versions = {"torch": torch.__version__, "transformers": transformers.__version__}
    machine_text = ", ".join(f"{k} {v}" for k, v in found_machine.items())
    return f"areal-alloc-probe-{gpu.lower()}-{day}", {
        "repo": "areal-alloc (this project), reproducing areal-project/AReaL's FSDP engine",
        "path": "benchmarks/probe_fsdp.py (areal/engine/fsdp_engine.py reproduced)",
        "commit": AREAL,
        "url_or_table": f"benchmarks/probe_fsdp.py, run on {day}",
        "note": (
            f"measured by this project with benchmarks/probe_fsdp.py on {day} "
            f"(AReaL {AREAL[:8]} FSDP engine reproduced; benchmarks/README.md lists what is "
            f"and is not). Machine: {machine_text}; torch {versions['torch']}, transformers "
            f"{versions['transformers']}; attention {args.attn_impl}; log-probs "
            f"torch.compile backend {args.compile_backend}; random weights; one warm-up, then "
            f"the median of {args.steps}."
        ),
        "machine": found_machine,
        "versions": versions,
    }


#: what a ``reference_fsdp_allocated`` row measures
ALLOCATED_METRIC = (
    "the allocator's peak over the timed steps: torch.cuda.max_memory_allocated "
    "(phases.steps.max_alloc_gib); the CUDA context and the allocator's cached blocks excluded"
)


def rows(found: dict[str, Any], source_id: str, gpu: str, gpu_note: str) -> list[dict[str, Any]]:
    """The rows of one case: memory (device in use at the step's peak), on a GPU the
    allocator's peak, step, forward."""
    steps = found["phases"]["steps"]
    cpu = gpu == "cpu"
    memory = steps["process_peak_rss_gib"] if cpu else steps["device_used_gib"]
    metric = (
        "process peak resident memory (a CPU run: torch keeps no allocator statistics)"
        if cpu
        else "device in use at the step's peak: total − free (cudaMemGetInfo) after the "
        "timed steps, the allocator holding its peak blocks (phases.steps.device_used_gib)"
    )
    inputs: dict[str, Any] = {
        "model": found["model"],
        "gpu": gpu,
        "gpus": 1,
        "backend": "fsdp",
        "layout": {"d": 1},
        "seq_len": found["tokens"],
        "micro_batch": 1,
        "global_batch": 1,
        "activation_checkpointing": "full" if found["recompute"] else "none",
        "precision": f"{COMPUTE_DTYPE} params, {OPTIMIZER_DTYPE} master and Adam, "
        f"{REDUCE_DTYPE} reduce (MixedPrecisionPolicy)",
    }
    if gpu_note:
        inputs["gpu_note"] = gpu_note
    quote = (
        f"probe_fsdp.py case {found['case']}: phases.steps.device_used_gib "
        f"{steps['device_used_gib']}, step_s {found['step_s']}, forward_s {found['forward_s']}"
    )
    slug = f"probe-{gpu.lower()}-{found['case']}"
    figures = (
        ("memory", "reference_fsdp_memory", memory, "GiB"),
        # a CPU run keeps no allocator statistics
        *(
            ()
            if cpu
            else (("allocated", "reference_fsdp_allocated", steps["max_alloc_gib"], "GiB"),)
        ),
        ("step", "reference_fsdp_step", found["step_s"], "s"),
        ("forward", "reference_fsdp_forward", found["forward_s"], "s"),
    )
    return [
        {
            "id": f"{slug}-{suffix}",
            "kind": kind,
            "source": source_id,
            "quote": quote,
            "measured": {"value": value, "unit": unit},
            "inputs": (
                dict(inputs, memory_metric=metric)
                if suffix == "memory"
                else dict(inputs, memory_metric=ALLOCATED_METRIC)
                if suffix == "allocated"
                else inputs
            ),
            "probe": {k: v for k, v in found.items() if k not in ("model",)},
        }
        for suffix, kind, value, unit in figures
    ]


def write(
    data_path: Path, source_id: str, entry: dict[str, Any], new: list[dict[str, Any]]
) -> None:
    """Add the source and the rows to the data file (a row of the same id is replaced)."""
    data = json.loads(data_path.read_text(encoding="utf-8"))
    data["sources"][source_id] = entry
    ids = {r["id"] for r in new}
    data["rows"] = [r for r in data["rows"] if r["id"] not in ids] + new
    data_path.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")


# --- the command -----------------------------------------------------------------------------


def init_process_group(torch: Any, device: str) -> None:
    """One process, world size 1: nccl on a GPU, gloo on a CPU (fsdp_engine.py:324-329)."""
    import torch.distributed as dist

    if dist.is_initialized():
        return
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    os.environ.update(
        MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK="0", WORLD_SIZE="1", LOCAL_RANK="0"
    )
    if device == "cuda":
        torch.cuda.set_device(0)
    dist.init_process_group("nccl" if device == "cuda" else "gloo", rank=0, world_size=1)


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", help="a hub id or name of the catalogue, or a config.json")
    parser.add_argument("--tokens", type=int, default=8192, help="tokens in the micro-batch")
    parser.add_argument(
        "--recompute",
        choices=("full", "none"),
        default="none",
        help="gradient checkpointing (the reference's default: off, cli_args.py:1302-1304)",
    )
    parser.add_argument("--cases", help=f"named cases, comma-separated: {', '.join(CASES)}")
    parser.add_argument("--steps", type=int, default=3, help="timed steps after the warm-up")
    parser.add_argument("--device", choices=("cpu", "cuda"), help="default: cuda if present")
    parser.add_argument(
        "--attn-impl", help="default: flash_attention_2 where flash_attn imports, else sdpa"
    )
    parser.add_argument(
        "--compile-backend",
        default="inductor",
        help="torch.compile backend of the log-prob functions (eager: no code generation; none)",
    )
    parser.add_argument("--out", type=Path, help="write the JSON here (default: print it)")
    parser.add_argument("--write", action="store_true", help="add the rows to --data")
    parser.add_argument("--data", type=Path, help=f"the data file (default {DATA.name})")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(argv)
    import torch

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda: torch sees no GPU")
    if args.write and device == "cpu" and args.data is None:
        raise SystemExit("--write from a CPU run needs --data (a CPU row measures no GPU)")
    if args.attn_impl is None:
        try:
            import flash_attn  # noqa: F401

            args.attn_impl = ATTN_IMPL if device == "cuda" else "sdpa"
        except ImportError:
            args.attn_impl = "sdpa"
    if args.cases:
        unknown = [n for n in args.cases.split(",") if n not in CASES]
        if unknown:
            raise SystemExit(f"--cases: unknown {unknown}; known: {', '.join(CASES)}")
        cases = [CASES[n] for n in args.cases.split(",")]
    else:
        name = model_config(args.model)[0].rstrip("/").rsplit("/", 1)[-1]
        if name.endswith(".json"):  # a config file: its folder's name, or its own
            path = Path(args.model)
            name = path.parent.name if path.stem == "config" else path.stem
        recompute = args.recompute == "full"
        cases = [Case(f"{name}-{args.tokens}-{args.recompute}", args.model, args.tokens, recompute)]
    init_process_group(torch, device)
    found_machine = machine(torch, device)
    gpu, gpu_note = gpu_name(found_machine["gpu"]) if device == "cuda" else ("cpu", "")
    source_id, entry = source(torch, device, found_machine, args)
    out: dict[str, Any] = {"source": {source_id: entry}, "rows": [], "failed": {}}
    for case in cases:
        try:
            found = measure(torch, case, device, args)
        except torch.OutOfMemoryError as error:  # recorded, and the next case runs
            out["failed"][case.name] = f"OutOfMemoryError: {str(error)[:300]}"
            gc.collect()
            torch.cuda.empty_cache()
        else:
            out["rows"] += rows(found, source_id, gpu, gpu_note)
            print(out["rows"][-1]["quote"], file=sys.stderr, flush=True)
        if args.out:  # after every case: a run cut short keeps what it measured
            args.out.write_text(json.dumps(out, indent=1) + "\n", encoding="utf-8")
    if not args.out:
        print(json.dumps(out, indent=1))
    if args.write and out["rows"]:
        write(args.data or DATA, source_id, entry, out["rows"])
    torch.distributed.destroy_process_group()
    return 0 if out["rows"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
