"""The estimates, organised by what each module describes (as Calculon separates the
model, the system and the execution), then the quantities computed from them.

- ``system``: the hardware (GPU, node, network, efficiencies) and the one
  ``build_hardware`` that builds it from the settings and a stored ``calibration``;
- ``execution``: the engines' settings and the run's shape, read from the ``Experiment``;
- memory: ``memory`` (the estimate's types), ``activations``, ``memory_sharding`` (a
  training engine's weights, gradients and optimizer states by backend), ``memory_training``,
  ``memory_inference``, and ``engines`` (each engine of an experiment, colocation, what
  does not fit);
- speed: ``speed`` (the step estimate's types, FLOPs, the calibration fits),
  ``speed_training``, ``speed_inference``;
- ``step_mode``: the step's three modes and one step's seconds in each; ``advice``:
  which way GPUs should move between the two sides (``Split``, ``balance_advice``);
- ``rl_step``: the one model of an RL step (generation, the training side, the weight
  update, the mode) and the plan's pace.

Importing this package loads nothing: import the module you need, e.g.
``from areal_alloc.estimate.memory_training import training_memory``.
"""
