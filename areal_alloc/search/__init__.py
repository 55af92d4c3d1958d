"""Searching layouts and splits: the layouts a backend takes on a GPU count
(:mod:`.layouts`), which fit and which is fastest (:mod:`.ranking`), and the rollout/training
split of a cluster (:mod:`.split`)."""
