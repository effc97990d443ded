"""The distribution's version, read from its installed metadata (one definition; every
package of the distribution re-exports it as ``__version__``).

>>> import core, placers
>>> core.__version__ == placers.__version__ == __version__
True
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

__all__ = ["__version__", "DISTRIBUTION"]

DISTRIBUTION = "placement-lab"

try:
    __version__ = version(DISTRIBUTION)
except PackageNotFoundError:  # run from a source tree that was never installed
    __version__ = "0+unknown"
