"""Readers and writers of the on-disk formats feature sets come in."""
