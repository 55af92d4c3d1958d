"""One reader per section of the reference's experiment config."""
