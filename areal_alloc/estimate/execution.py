"""The execution: the shape of one RL step as the experiment's one reading gives it.

Read from the frozen :class:`areal_alloc.experiment.read.Experiment` (its ``run``, the
keys the reference writes, areal/api/cli_args.py, with its defaults) and the resolved
settings (``areal_alloc.settings``: the mean generation length); every default comes
from ``areal_alloc.defaults`` or is cited here:

- sequences per step = ``train_dataset.batch_size`` × ``gconfig.n_samples``;
- each generates up to ``gconfig.max_new_tokens`` after a prompt of
  ``train_dataset.max_length`` (unset: ``defaults.PROMPT_TOKENS``, said);
- the mean generation length for throughput (``--mean-gen-len``, the hook's
  ``mean_gen_len``; else the maximum, said);
- ``actor.recompute_logprob``, ``rollout.max_head_offpolicyness``,
  ``rollout.max_concurrent_rollouts`` and whether the rollout shares the actor's GPUs.
"""

from __future__ import annotations

from dataclasses import dataclass

from areal_alloc import defaults
from areal_alloc.experiment.read import Experiment
from areal_alloc.settings import Resolved

__all__ = [
    "DEFAULT_OFFPOLICYNESS",
    "DEFAULT_RECOMPUTE_LOGPROB",
    "StepShape",
    "step_shape",
]

#: InferenceEngineConfig.max_head_offpolicyness default 0 (synchronous) and
#: PPOActorConfig.recompute_logprob default False (areal-project/AReaL
#: areal/api/cli_args.py lines 2502 and 1804, commit cbff54d645d2cd8ee1f1c358a82f3f473588433d)
DEFAULT_OFFPOLICYNESS = 0
DEFAULT_RECOMPUTE_LOGPROB = False


@dataclass(frozen=True, slots=True)
class StepShape:
    """What one RL step does, with what was assumed in reading it."""

    sequences: int  # train_dataset.batch_size × gconfig.n_samples
    prompt: int  # tokens per prompt
    new_tokens: int  # gconfig.max_new_tokens, the longest generation
    mean: int  # the mean generation length for throughput
    recompute_logprob: bool
    offpolicyness: int | None  # rollout.max_head_offpolicyness as written
    colocated: bool  # the rollout shares the actor's GPUs
    max_concurrent: int | None  # rollout.max_concurrent_rollouts as written
    assumptions: tuple[str, ...] = ()

    @property
    def length(self) -> int:
        """A trained sequence: its prompt and its mean generation."""
        return self.prompt + self.mean

    @property
    def tokens(self) -> int:
        """Tokens a training-side engine processes per step."""
        return self.sequences * self.length


def step_shape(experiment: Experiment, machine: Resolved) -> StepShape:
    """The step's shape from ``experiment``'s run and ``machine``'s mean generation length."""
    run = experiment.run
    new_tokens, assumptions = run.new_tokens, []
    prompt = run.max_length
    if prompt is None:
        prompt = defaults.PROMPT_TOKENS
        assumptions.append(
            f"train_dataset.max_length unset: prompts of {defaults.PROMPT_TOKENS:,} tokens assumed"
        )
    mean, source = _mean_gen_len(machine, new_tokens)
    if source:
        assumptions.append(f"mean generation length {mean:,} tokens ({source})")
    else:
        assumptions.append(
            f"mean generation length = gconfig.max_new_tokens={new_tokens:,} (the maximum; "
            f"give --mean-gen-len or the hook's mean_gen_len)"
        )
    recompute = run.recompute_logprob
    return StepShape(
        sequences=run.batch * run.samples,
        prompt=prompt,
        new_tokens=new_tokens,
        mean=mean,
        recompute_logprob=DEFAULT_RECOMPUTE_LOGPROB if recompute is None else recompute,
        offpolicyness=run.max_head_offpolicyness,
        colocated=_colocated(experiment),
        max_concurrent=run.max_concurrent_rollouts,
        assumptions=tuple(assumptions),
    )


def _mean_gen_len(machine: Resolved, new_tokens: int) -> tuple[int, str]:
    """The mean generation length and where it came from ("": the maximum)."""
    found = machine.mean_gen_len
    if found is None:
        return new_tokens, ""
    return min(found.value, new_tokens), f"from {found.source}"


def _colocated(experiment: Experiment) -> bool:
    """The rollout and the actor share GPUs (either colocated onto the other)."""
    for key, other in (("rollout", "actor"), ("actor", "rollout")):
        engine = experiment.get(key)
        scheduling = engine.scheduling if engine is not None else None
        if scheduling is not None and scheduling.is_colocated and scheduling.target == other:
            return True
    return False
