"""areal-alloc's Hydra plugins. Kept thin: Hydra imports this on every app start."""
