"""Test-wide settings: one hypothesis profile, derandomized on CI."""

import os

from hypothesis import HealthCheck, settings

settings.register_profile(
    "lab",
    max_examples=50,
    deadline=None,
    derandomize=bool(os.environ.get("CI")),
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.load_profile("lab")


def pytest_sessionstart(session):
    """Compile (or load from numba's cache) every CPU kernel once, before the first test.

    On a fresh checkout compiling them takes minutes of one core; inside a test it would
    run into the deadlines of the steps and servers under test (a server process
    compiles what its first step runs), and with the cache filled here every process
    loads the kernels instead.  The CUDA simulator's child runs skip it (they compile
    no CPU kernel of note)."""
    if os.environ.get("NUMBA_ENABLE_CUDASIM") == "1":
        return
    from runtime import kernels
    kernels.warmup()
