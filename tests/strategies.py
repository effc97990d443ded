"""The shared hypothesis strategies for the tests: the public :mod:`core.strategies`
(``from strategies import ...`` keeps working; pytest puts tests/ on the path, see
pyproject.toml)."""

from core.strategies import *  # noqa: F401,F403
