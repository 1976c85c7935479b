"""The package version; include/lingen.h's LINGEN_VERSION is the one source
(pyproject.toml reads it there; test_package checks the two agree)."""
__version__ = "0.1.0"
