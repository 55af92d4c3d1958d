"""The experiment's readers, one per section of the reference's config (areal/api/cli_args.py)."""
