"""Everything that computes. Nothing here imports widgets."""
