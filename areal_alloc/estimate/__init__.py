"""The estimates: memory per GPU, step times, the RL step and calibration.

Organised by what each module describes (the model, the system, the execution, and the
quantities computed from them). Importing this package loads nothing: import the module
you need, e.g. ``from areal_alloc.estimate.memory import training_memory``.
"""
