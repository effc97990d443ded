"""experiments: workloads, the two backends side by side, and the scripts that write
the reports (``python -m experiments.<name>`` or ``placement-lab <command>``)."""

__all__ = ["__version__"]


def __getattr__(name):
    # Lazily: importing this package must not import numpy (through core), since some
    # scripts set the BLAS threads before numpy loads.
    if name == "__version__":
        from core.version import __version__
        return __version__
    raise AttributeError(f"module 'experiments' has no attribute {name!r}")
