"""Reproducible performance comparisons of dni_lab against the baselines of DeepBase §6.3."""
