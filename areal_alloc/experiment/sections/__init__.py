"""The experiment's readers, one per section of the reference's config."""
