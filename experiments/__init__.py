"""experiments: workloads, the two backends side by side, and the scripts that write
the reports (``python -m experiments.<name>`` or ``placement-lab <command>``)."""

from core.version import __version__

__all__ = ["__version__"]
