"""What the split search takes: one typed :class:`SearchInputs`, built from what a user
gave (:class:`Given`: ``suggest``'s flags, read once) alone (:func:`from_flags`) or over
an experiment's own run, engines and pace (:func:`from_experiment`, ``suggest --config``).
No argparse here: a test builds either from plain values."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from areal_alloc.defaults import (
    MAX_TOKENS,
    MICRO_BATCH_TOKENS,
    NEW_TOKENS,
    PPO_MINIBATCHES,
    PROMPT_TOKENS,
    SAMPLES,
    STEP_PROMPTS,
    WEIGHT_UPDATE_MODE,
)
from areal_alloc.defaults import RECOMPUTE as RECOMPUTE_DEFAULT
from areal_alloc.errors import AllocationValidationError
from areal_alloc.estimate import rl_step
from areal_alloc.estimate.execution import (
    SERVER_DEFAULTS,
    InferenceSettings,
    ServerLimit,
    StepShape,
    TrainingSettings,
    inference_settings,
    sequences_in_flight,
    server_limit,
    training_settings,
)
from areal_alloc.estimate.pace import Pace
from areal_alloc.estimate.system import GPUSpec
from areal_alloc.experiment.records import Experiment, RunConfig
from areal_alloc.limits import MAX_COUNT
from areal_alloc.model_shape import local_config
from areal_alloc.numbers import read_int

__all__ = ["Given", "RunShape", "SearchInputs", "from_experiment", "from_flags"]


@dataclass(frozen=True, slots=True)
class RunShape:
    """One RL step as the split search weighs it: the step itself, as the plan's pace reads
    it (``step``: :class:`~areal_alloc.estimate.execution.StepShape`, the one step type), and
    what the search adds to it: which engines train beside the actor, the step's mode, the
    weight update and whether ``dynamic_bs`` lifts the micro-batch rule. :meth:`of` builds
    one from suggest's values."""

    step: StepShape
    ref: bool = True
    critic: bool = False
    #: the step's mode (areal_alloc.estimate.rl_step.MODES)
    mode: str = rl_step.ASYNCHRONOUS
    update_mode: str = WEIGHT_UPDATE_MODE
    #: the config's ``dynamic_bs``: the count per minibatch varies, and the start-up rule
    #: on it is not checked
    dynamic_bs: bool = False

    @classmethod
    def of(
        cls,
        batch: int = STEP_PROMPTS * SAMPLES,
        prompt_len: int = PROMPT_TOKENS,
        gen_len: int = NEW_TOKENS,
        *,
        ref: bool = True,
        critic: bool = False,
        asynchronous: bool = True,
        mean_gen_len: int | None = None,
        in_flight: int | None = None,
        recompute_logprob: bool = False,
        update_mode: str = WEIGHT_UPDATE_MODE,
        mode: str | None = None,
        server: ServerLimit = SERVER_DEFAULTS,
        minibatches: int = PPO_MINIBATCHES,
        critic_minibatches: int = PPO_MINIBATCHES,
        dynamic_bs: bool = False,
    ) -> RunShape:
        """``batch`` sequences (prompts × samples) of ``prompt_len`` + ``gen_len`` (the
        longest generation, gconfig.max_new_tokens; ``mean_gen_len`` the mean, None: the
        longest) tokens; ``in_flight`` the sequences the rollout keeps in flight (None: the
        step's), ``server`` its own bound on the requests it runs at once; ``minibatches``
        the actor's ``ppo_n_minibatches`` (``critic_minibatches`` the critic's); ``mode``
        None: from ``asynchronous``. Each count is read by the one reader of numbers."""
        counts = {
            "batch": batch,
            "prompt_len": prompt_len,
            "gen_len": gen_len,
            "minibatches": minibatches,
            "critic_minibatches": critic_minibatches,
        }
        read = {k: read_int(v, k, minimum=1, maximum=MAX_COUNT) for k, v in counts.items()}
        longest = read["gen_len"]
        step = StepShape(
            sequences=read["batch"],
            prompt=read["prompt_len"],
            new_tokens=longest,
            mean=longest if mean_gen_len is None else min(mean_gen_len, longest),
            recompute_logprob=recompute_logprob,
            offpolicyness=None,
            colocated=False,
            max_concurrent=None,
            in_flight=in_flight,
            server=server,
            minibatches=read["minibatches"],
            critic_minibatches=read["critic_minibatches"],
        )
        if mode is None:
            mode = rl_step.ASYNCHRONOUS if asynchronous else rl_step.SYNCHRONOUS
        return cls(step, ref, critic, mode, update_mode, dynamic_bs)

    @property
    def batch(self) -> int:
        """The step's sequences: prompts × samples per prompt."""
        return self.step.sequences

    @property
    def prompt_len(self) -> int:
        return self.step.prompt

    @property
    def gen_len(self) -> int:
        """The longest generation, gconfig.max_new_tokens."""
        return self.step.new_tokens

    @property
    def mean(self) -> int:
        """The mean generation length for throughput."""
        return self.step.mean

    @property
    def train_tokens(self) -> int:
        return self.step.tokens

    @property
    def generated_tokens(self) -> int:
        return self.step.sequences * self.step.mean


@dataclass(frozen=True, slots=True)
class Given:
    """What the user gave (None: not given): ``suggest``'s flags, and the machine's
    settings they resolve to (the GPU, the reserve, the mean generation length: the
    flags, the environment, nvidia-smi, then a config's ``cluster`` keys)."""

    model: str | None = None
    gpus: int | None = None
    gpus_per_node: int | None = None
    gpu: GPUSpec | None = None
    batch_size: int | None = None
    n_samples: int | None = None
    prompt_len: int | None = None
    gen_len: int | None = None
    no_ref: bool = False
    critic: bool = False
    sync: bool = False
    train_backend: str | None = None
    rollout_backend: str | None = None
    tokens: int | None = None
    recompute: str | None = None
    context_length: int | None = None
    mean_gen_len: int | None = None
    memory_reserve: int | None = None


@dataclass(frozen=True, slots=True)
class SearchInputs:
    """Everything the split search takes (:class:`areal_alloc.search.split.SplitSearch`),
    and what ``suggest`` prints beside its proposals."""

    model: str
    gpus: int
    gpu: GPUSpec
    gpus_per_node: int | None
    shape: RunShape
    train_backend: str
    rollout_backend: str
    training: TrainingSettings  # the actor's
    ref_training: TrainingSettings | None
    critic_training: TrainingSettings | None
    inference: InferenceSettings
    memory_reserve: int | None
    #: the config's own split as the plan's pace gives it (``suggest --config``)
    current: Pace | None = None
    from_config: bool = False
    #: the generation's cap, where it cuts --gen-len (``gconfig.max_tokens``)
    cap_note: str | None = None
    #: which of the actor's settings are the config's (said where nothing fits)
    execution_note: str = ""

    @property
    def recompute(self) -> str:
        """The actor's recomputation: what a does-not-fit message names."""
        return self.training.recompute


def from_flags(given: Given) -> SearchInputs:
    """The search's inputs from the flags alone, the reference's defaults for the rest
    (its gconfig.max_tokens caps the generation after the prompt)."""
    cap = f"the reference's default gconfig.max_tokens {MAX_TOKENS:,}"
    fix = "pass --config with a larger gconfig.max_tokens"
    gen_len, cap_note = _capped(given, RunConfig(), cap, fix)
    model, gpus, gpu = _needed_given(given)
    shape = RunShape.of(
        *_counts(given, gen_len),
        ref=not given.no_ref,
        critic=given.critic,
        asynchronous=not given.sync,
        mean_gen_len=given.mean_gen_len,
    )
    training, ref_training, critic_training, execution_note = _settings(given, shape, {})
    return SearchInputs(
        model,
        gpus,
        gpu,
        given.gpus_per_node,
        shape,
        given.train_backend or "megatron",
        given.rollout_backend or "sglang",
        training,
        ref_training,
        critic_training,
        _inference(given, None),
        given.memory_reserve,
        cap_note=cap_note,
        execution_note=execution_note,
    )


def from_experiment(
    experiment: Experiment,
    given: Given,
    *,
    capacity: int,
    gpus_per_node: int,
    pace: Pace | None,
) -> SearchInputs:
    """The search's inputs from an experiment, the flags over it: the model (``actor.path``),
    the GPUs and their nodes (the plan's ``capacity`` and ``gpus_per_node``), the batch,
    lengths, engines and their own execution settings, and the step as the plan's ``pace``
    reads it (its mode, concurrency, log-prob recomputation and weight update)."""
    run = experiment.run
    engines = {e.key: e for e in experiment.engines if e.active}
    rollout = engines.get("rollout")
    given = replace(
        given,
        model=_model_of(experiment) if given.model is None else given.model,
        gpus=(capacity or None) if given.gpus is None else given.gpus,
        gpus_per_node=given.gpus_per_node or gpus_per_node or None,
        batch_size=(run.batch_size or None) if given.batch_size is None else given.batch_size,
        n_samples=(run.n_samples or None) if given.n_samples is None else given.n_samples,
        prompt_len=run.max_length if given.prompt_len is None else given.prompt_len,
    )
    cap = f"gconfig.max_tokens {run.tokens_cap:,}"
    gen_len, cap_note = _capped(given, run, cap, "raise gconfig.max_tokens")
    model, gpus, gpu = _needed_given(given)
    # suggest proposes separate splits: a colocated config's run in the mode of its η
    mode = rl_step.mode_of(run.max_head_offpolicyness, False)
    if pace is not None and pace.mode != rl_step.COLOCATED:
        mode = pace.mode
    shape = RunShape.of(
        *_counts(given, gen_len),
        ref="ref" in engines and not given.no_ref,
        critic="critic" in engines or given.critic,
        asynchronous=not given.sync,
        mean_gen_len=given.mean_gen_len,
        mode=rl_step.SYNCHRONOUS if given.sync else mode,
        # the step as the plan's pace reads it: its concurrency, the server's bound, the
        # log-prob recomputation, the weight update and the minibatches
        in_flight=sequences_in_flight(run),
        server=server_limit(rollout),
        recompute_logprob=bool(run.recompute_logprob),
        update_mode=experiment.transport,
        minibatches=experiment.startup.ppo_n_minibatches,
        critic_minibatches=experiment.startup.critic_ppo_n_minibatches,
        dynamic_bs=experiment.startup.dynamic_bs,
    )
    notes: list[str] = []  # what the plan says of them; suggest's own figures follow
    # the engines' own execution settings as the plan reads them: the proposals are
    # estimated with them (flags given still win), as ``current`` is
    found = {
        key: training_settings(
            engine, run, given.memory_reserve, notes, experiment.startup.minibatches_of(key)
        )
        for key, engine in engines.items()
        if key in ("actor", "ref", "critic") and not engine.allocation.is_inference
    }
    served = None
    if rollout is not None and rollout.allocation.is_inference:
        # a server sizes its claim from the memory the device reports
        served = inference_settings(rollout, given.memory_reserve, gpu.capacity, run)
    training, ref_training, critic_training, execution_note = _settings(given, shape, found)
    train_backend = engines["actor"].allocation.backend if "actor" in engines else None
    rollout_backend = rollout.allocation.backend if rollout is not None else None
    return SearchInputs(
        model,
        gpus,
        gpu,
        given.gpus_per_node,
        shape,
        given.train_backend or train_backend or "megatron",
        given.rollout_backend or rollout_backend or "sglang",
        training,
        ref_training,
        critic_training,
        _inference(given, served),
        given.memory_reserve,
        current=pace,
        from_config=True,
        cap_note=cap_note,
        execution_note=execution_note,
    )


def _model_of(experiment: Experiment) -> str | None:
    """``actor.path``; a path that exists only on the cluster is matched by its last part."""
    actor = experiment.get("actor")
    sources = actor.model.sources if actor is not None else ()
    path = next((s.value for s in sources if s.key == "actor.path"), None)
    if not isinstance(path, str) or not path:
        return None
    return path if local_config(path) is not None else Path(path.rstrip("/")).name or path


def _capped(given: Given, run: RunConfig, cap: str, fix: str) -> tuple[int, str | None]:
    """``--gen-len`` (``gconfig.max_new_tokens``: the flag, else ``run``'s) as the rollout
    caps it after the prompt: min(max_tokens − prompt, max_new_tokens)
    (``RunConfig.generation_after``, as the plan's pace), and the note that says so where
    it cuts. A known prompt (``--prompt-len`` or ``train_dataset.max_length``) that leaves no
    room is one error line: the rollout raises "max_new_tokens … non-positive". ``cap``
    names the bound, ``fix`` its remedy."""
    prompt = given.prompt_len or run.prompt
    if given.prompt_len is not None and prompt >= run.tokens_cap:
        raise AllocationValidationError(
            f"--prompt-len {prompt:,} is not below {cap} (prompt and completion together): "
            f"such a prompt leaves no token to generate (areal/infra/remote_inf_engine.py "
            f"raises); give a shorter --prompt-len or {fix}"
        )
    named = "--gen-len" if given.gen_len else "gconfig.max_new_tokens"
    written = given.gen_len or run.new_tokens
    gen_len = replace(run, max_new_tokens=written).generation_after(prompt)
    if gen_len >= written:
        return gen_len, None
    return gen_len, (
        f"{cap} caps the generation after a {prompt:,}-token prompt at "
        f"{run.tokens_cap:,} − {prompt:,} = {gen_len:,} tokens, not {named} "
        f"{written:,} (areal/infra/remote_inf_engine.py l.942-944 at cbff54d6)"
    )


def _sequences(given: Given) -> int:
    """The sequences of one RL step: --batch-size × --n-samples (the config's
    train_dataset.batch_size × gconfig.n_samples, else STEP_PROMPTS × SAMPLES)."""
    batch = given.batch_size or STEP_PROMPTS
    samples = given.n_samples or SAMPLES
    sequences = batch * samples
    if sequences > MAX_COUNT:
        raise AllocationValidationError(
            f"train_dataset.batch_size={batch:,} × gconfig.n_samples={samples:,} = "
            f"{sequences:,} sequences per step: the limit is {MAX_COUNT:,} (--batch-size, "
            f"--n-samples)"
        )
    return sequences


def _needed_given(given: Given) -> tuple[str, int, GPUSpec]:
    """The model, the GPUs and the GPU: each given, or read from the experiment."""
    if given.model is None:
        raise _needed("model")
    if given.gpus is None:
        raise _needed("gpus")
    if given.gpu is None:
        raise _needed("gpu")
    return given.model, given.gpus, given.gpu


def _counts(given: Given, gen_len: int) -> tuple[int, int, int]:
    """The step's sequences, its prompt and its longest generation (suggest's defaults)."""
    return _sequences(given), given.prompt_len or PROMPT_TOKENS, gen_len or NEW_TOKENS


def _inference(given: Given, served: InferenceSettings | None) -> InferenceSettings:
    """The rollout's settings (a config's server, else the reference's), --context-length
    over them."""
    inference = served or InferenceSettings()
    if given.context_length is not None:
        inference = replace(inference, context_length=given.context_length)
    return inference


def _needed(flag: str) -> AllocationValidationError:
    return AllocationValidationError(f"--{flag} is needed (or an experiment --config that sets it)")


def _settings(
    given: Given, shape: RunShape, found: dict[str, TrainingSettings]
) -> tuple[TrainingSettings, TrainingSettings | None, TrainingSettings | None, str]:
    """The actor's, the ref's and the critic's settings for the proposals: a config's
    engines (``found``; else every command's defaults: areal_alloc.defaults'
    MICRO_BATCH_TOKENS and RECOMPUTE), with --tokens and --recompute over them; and the
    note that says which are the config's."""
    given_fields: dict[str, object] = {}
    if given.tokens is not None:  # every training engine's micro-batch
        given_fields.update(
            tokens_per_micro_batch=given.tokens,
            micro_batches=None,
            forward_tokens_per_micro_batch=None,
        )
        if found:  # a config's run: the shares the budget is balanced over, per d (at_dp)
            given_fields["sequence_tokens"] = shape.prompt_len + shape.gen_len
    if given.recompute is not None:
        given_fields["recompute"] = given.recompute

    def flagged(settings: TrainingSettings) -> TrainingSettings:
        return replace(settings, **given_fields)  # type: ignore[arg-type]

    actor = flagged(
        found.get("actor")
        or TrainingSettings(tokens_per_micro_batch=MICRO_BATCH_TOKENS, recompute=RECOMPUTE_DEFAULT)
    )
    ref, critic = (found.get(key) for key in ("ref", "critic"))
    note = ""
    if found.get("actor") is not None and not (given.tokens and given.recompute):
        micro_batch = (
            f"{actor.tokens_per_micro_batch:,} tokens per micro-batch"
            if actor.micro_batches is None  # else each rank's whole share (mb_spec unset)
            else "micro-batch of each rank's whole share of the step (max_tokens_per_mb unset)"
        )
        note = (
            f"; the actor's {micro_batch} and recomputation {actor.recompute} are the "
            f"config's (actor.mb_spec, gradient_checkpointing): --tokens and --recompute "
            f"override them"
        )
    return (
        actor,
        None if ref is None else flagged(ref),
        None if critic is None else flagged(critic),
        note,
    )
