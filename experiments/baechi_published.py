"""Baechi's published figures, as data, each with its source, for the placement
benchmark to show beside ours where the setting matches.

What could be found (searched: the paper's pages, its arXiv extension's abstract, the
authors' repositories ``beomyeol/baechi`` and ``chiragcshetty/BaechiPyTorch``):

- the abstracts' bounds (:data:`BOUNDS`): Jeon et al., "Baechi: Fast Device Placement
  of Machine Learning Graphs", ACM SoCC 2020, doi:10.1145/3419111.3421302, and its
  extension, arXiv:2301.08695 (2023).  The paper's per-model tables (step times of
  m-TOPO, m-ETF and m-SCT against single-GPU and expert placements, memory fractions,
  placement times) were not in any source reachable here, so none is quoted;
- the measured step times the Baechi-PyTorch repository keeps
  (:data:`FIGURES`): Inception-v3, batch 64, four GPUs of 6.44 GB each ("memory factor
  = 1", the model's one-GPU peak being 6.2 GB: not memory-constrained), PyTorch, on
  GPUs the file does not name.  Each figure is the file's ``AVG STEP TIME(ms)``, as
  written; the file holds two rounds of the four runs.

>>> [f["step_ms"] for f in FIGURES if f["round"] == 1]
[457.4322877106843, 466.0003538484927, 462.4695424680356, 533.273802863227]
>>> round(speedups(1)["m_sct"], 3)  # derived here: the single GPU's step over m-SCT's
0.989
"""

from __future__ import annotations

__all__ = ["SOURCES", "BOUNDS", "FIGURES", "SETTING", "speedups", "matches"]

#: Where each figure was read.
SOURCES = {
    "socc20-abstract": "Jeon et al., Baechi, ACM SoCC 2020 (doi:10.1145/3419111.3421302), "
                       "abstract: \"the placed model's step time is only up to 6.2% higher than "
                       "expert-based placements\"; plans made \"654X - 206K X faster than "
                       "today's learning-based approaches\"",
    "arxiv23-abstract": "Jeon et al., Baechi, arXiv:2301.08695 (2023), abstract: \"Baechi-placed "
                        "model's step (training) time is comparable to expert placements in "
                        "PyTorch, and only up to 6.2% worse than expert placements in "
                        "TensorFlow\"",
    "baechi-pytorch": "github.com/chiragcshetty/BaechiPyTorch, "
                      "main_training/results/result_details.txt at commit "
                      "721b763ec1e20b2c63ffd8789ce044144222cbef (AVG STEP TIME(ms) lines; "
                      "the one-GPU peak of 6.2GB from main_training/results/"
                      "singlegpu_inception_v3.txt at 78c51302a5f82d1d5eda8d49c5ed648628a10170)",
}

#: The abstracts' bounds: Baechi's step over the expert placement's, at most.
BOUNDS = [
    {"source": "socc20-abstract", "framework": "TensorFlow", "vs_expert_at_most": 1.062,
     "models": ("inception_v3", "gnmt", "transformer"), "placers": ("m_topo", "m_etf", "m_sct")},
]

#: The setting of :data:`FIGURES` (from the same file).
SETTING = {"model": "inception_v3", "batch": 64, "gpus": 4, "gpu_memory": "6.44GB",
           "one_gpu_peak": "6.2GB", "memory_constrained": False, "framework": "PyTorch",
           "comm_factor": 1.2, "assigner": "gpu_topo_based", "gpu_type": None}

_RUNS = [  # (round, placer as ours names it, the file's placer line, time stamp, step ms)
    (1, "single_gpu", "Single GPU run", "2022-08-06 02:24:42.025648", 457.4322877106843),
    (1, "m_etf", "Baechi: etf", "2022-08-06 02:26:21.663140", 466.0003538484927),
    (1, "m_sct", "Baechi: sct", "2022-08-06 02:28:01.996485", 462.4695424680356),
    (1, "m_topo", "Baechi: topo", "2022-08-06 02:28:42.321907", 533.273802863227),
    (2, "single_gpu", "Single GPU run", "2022-08-06 02:30:11.708180", 460.1177727734601),
    (2, "m_etf", "Baechi: etf", "2022-08-06 02:31:53.821729", 465.35464569374363),
    (2, "m_sct", "Baechi: sct", "2022-08-06 02:33:33.925902", 466.54611163669165),
    (2, "m_topo", "Baechi: topo", "2022-08-06 02:35:17.762525", 537.0222021032263),
]

#: The measured figures, one per run, with the setting and the source.
FIGURES = [dict(SETTING, source="baechi-pytorch", round=r, placer=p, as_written=w, time=t,
                step_ms=ms) for r, p, w, t, ms in _RUNS]


def speedups(round_: int) -> dict[str, float]:
    """Per placer of round ``round_``, the single GPU's step over its step (derived
    here from the figures of that round, not published as such)."""
    steps = {f["placer"]: f["step_ms"] for f in FIGURES if f["round"] == round_}
    return {p: steps["single_gpu"] / s for p, s in steps.items()}


def matches(model: str, batch: int | None, gpus: int, memory_constrained: bool) -> bool:
    """Whether a benchmark setting is :data:`FIGURES`'s: the same model, batch and GPU
    count, and neither constrains memory (the framework, the GPUs and real against
    simulated steps still differ)."""
    return (model == SETTING["model"] and batch == SETTING["batch"] and gpus == SETTING["gpus"]
            and memory_constrained == SETTING["memory_constrained"])
