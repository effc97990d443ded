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
