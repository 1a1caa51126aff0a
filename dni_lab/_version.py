"""The package version, in a leaf module: the backend reads it without importing ``dni_lab``."""

__version__ = "0.1.0"
