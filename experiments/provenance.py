"""What a run's record says about the software and the machine that produced it.

:func:`software` and :func:`machine` give JSON-ready dicts that
:class:`experiments.report.Run` writes into each run's ``run.json``: the package version
and git commit, Python, numpy and the BLAS libraries (threadpoolctl, :func:`blas`), the
CPU model and cores, the memory, the GPUs, and the machine's load averages.

>>> sorted(software())[:4]
['blas', 'commit', 'numpy', 'package']
>>> machine()["logical_cores"] >= 1
True
"""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
import sys
from pathlib import Path

__all__ = ["software", "machine", "git_commit", "cpu_model", "gpus", "blas"]

_ROOT = Path(__file__).resolve().parents[1]


def git_commit(path: Path = _ROOT) -> dict | None:
    """``{"sha": ..., "dirty": bool}`` of the git checkout holding ``path``; None when
    it is not in one (an installed wheel) or git is missing."""
    if shutil.which("git") is None or not (path / ".git").exists():
        return None
    try:
        sha = subprocess.run(["git", "-C", str(path), "rev-parse", "HEAD"], capture_output=True,
                             text=True, timeout=10, check=True).stdout.strip()
        status = subprocess.run(["git", "-C", str(path), "status", "--porcelain",
                                 "--untracked-files=no"], capture_output=True, text=True,
                                timeout=10, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return {"sha": sha, "dirty": bool(status.strip())}


def blas() -> list[dict]:
    """The BLAS and OpenMP libraries loaded in this process, as threadpoolctl sees them:
    ``user_api``, ``internal_api`` (``openblas``, ``mkl``...), ``version``,
    ``architecture`` (the kernel family the library picked for this CPU, such as
    OpenBLAS's ``SkylakeX`` or ``Haswell``: what ``OPENBLAS_CORETYPE`` overrides),
    ``num_threads`` (in this process now), ``filepath``, and ``used_by``: ``"runtime"``
    for the library the runtime's float MatMul kernel calls (numba's ``np.dot`` reaches
    scipy's cython_blas, :func:`runtime.kernels.blas.blas_library`; loaded here if it was
    not), ``"numpy"`` for one shipped inside numpy's own wheel (its ``numpy.libs``
    folder), else None.  Empty without threadpoolctl.

    >>> all("filepath" in lib and "used_by" in lib for lib in blas())
    True
    """
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        return []
    from runtime.kernels.blas import blas_library

    ours = blas_library()  # (loads scipy's BLAS, so that it is listed below)
    ours = os.path.realpath(ours) if ours else None
    numpy_dirs = _numpy_dirs()
    keys = ("user_api", "internal_api", "version", "architecture", "num_threads", "filepath")
    found = []
    for info in threadpool_info():
        lib = {k: info.get(k) for k in keys}
        path = os.path.realpath(lib["filepath"]) if lib["filepath"] else None
        lib["used_by"] = ("runtime" if path is not None and path == ours else
                          "numpy" if path is not None and path.startswith(numpy_dirs) else None)
        found.append(lib)
    return found


def _numpy_dirs() -> tuple[str, ...]:
    """The folders of numpy's package and of the libraries its wheel ships beside it."""
    import numpy as np

    package = Path(os.path.realpath(np.__file__)).parent
    return tuple(str(d) + os.sep for d in (package, package.parent / "numpy.libs"))


def software() -> dict:
    """The package's version and commit, Python, numpy and the BLAS in use."""
    import numpy as np

    from experiments import __version__
    return {
        "package": {"name": "placement-lab", "version": __version__},
        "commit": git_commit(),
        "python": {"version": platform.python_version(), "implementation":
                   platform.python_implementation(), "executable": sys.executable},
        "numpy": np.__version__,
        "blas": blas(),
    }


def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo`` on Linux, ``sysctl`` on macOS), else
    :func:`platform.processor`."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    if sys.platform == "darwin" and shutil.which("sysctl"):
        try:
            return subprocess.run(["sysctl", "-n", "machdep.cpu.brand_string"],
                                  capture_output=True, text=True, timeout=5).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            pass
    return platform.processor() or platform.machine()


def gpus() -> list[str]:
    """The names of the NVIDIA GPUs ``nvidia-smi`` lists (none without it)."""
    if shutil.which("nvidia-smi") is None:
        return []
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total",
                              "--format=csv,noheader"], capture_output=True, text=True,
                             timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [line.strip() for line in out.splitlines() if line.strip()]


def machine() -> dict:
    """The host: name, OS, CPU model, cores (physical, logical, usable by this
    process), memory, GPUs and the load averages now."""
    import psutil

    try:
        usable = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        usable = psutil.cpu_count() or 1
    try:
        load = list(psutil.getloadavg())
    except (AttributeError, OSError):
        load = None
    return {
        "host": platform.node(),
        "os": platform.platform(),
        "cpu_model": cpu_model(),
        "physical_cores": psutil.cpu_count(logical=False),
        "logical_cores": psutil.cpu_count() or 1,
        "usable_cores": usable,
        "memory_bytes": psutil.virtual_memory().total,
        "gpus": gpus(),
        "load_average_1_5_15_min": load,
    }
