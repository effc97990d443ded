"""The CUDA kernels' tests on numba's simulator: the simulator is switched on when
``numba.cuda`` is first imported, so each GPU test file runs its GPU cases in a child
interpreter with ``NUMBA_ENABLE_CUDASIM=1`` (``PLACEMENT_LAB_GPU_TESTS=1``: on a real GPU
in this process instead)."""

import os
import subprocess
import sys
from pathlib import Path

#: Whether this interpreter runs the GPU cases itself (on the simulator or a real GPU).
ON_DEVICE = (os.environ.get("NUMBA_ENABLE_CUDASIM") == "1"
             or os.environ.get("PLACEMENT_LAB_GPU_TESTS") == "1")
REPO = Path(__file__).resolve().parents[1]


def run_on_simulator(test_file: str, *pytest_args: str) -> None:
    """Run ``test_file``'s tests (with ``pytest_args``) in a child interpreter on the
    CUDA simulator; assert that they ran, and passed with none skipped."""
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1")
    env.pop("PLACEMENT_LAB_GPU_TESTS", None)
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-o", "addopts=", "-q", "-p", "no:cacheprovider",
         "--import-mode=importlib", *pytest_args, str(Path(test_file).resolve())],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-3000:]
    assert " passed" in result.stdout and "skipped" not in result.stdout, result.stdout[-2000:]
