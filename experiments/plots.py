"""The reports' pictures, drawn on :class:`matplotlib.figure.Figure` objects (no pyplot:
a script never changes its caller's backend or current figure).

>>> import pandas as pd
>>> frame = pd.DataFrame({"workload": ["mlp", "mlp"], "placer": ["simple", "cost_model"],
...                       "step_ms": [2.0, 1.5]})
>>> fig = bars(frame, group="workload", bar="placer", value="step_ms", ylabel="step (ms)")
>>> [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
['simple', 'cost_model']
"""

from __future__ import annotations

import pandas as pd

__all__ = ["bars", "figure", "predicted_vs_measured"]


def _figure(**kwargs):
    try:
        from matplotlib.figure import Figure
    except ImportError as e:
        raise ImportError("the plots need matplotlib: pip install 'placement-lab[plot]'") from e
    return Figure(**kwargs)


def bars(frame: pd.DataFrame, *, group: str, bar: str, value: str, ylabel: str,
         title: str = "", log: bool = False, ax=None, marked: str | None = None,
         marked_label: str = ""):
    """Grouped bars: one group per value of ``group``, one bar per value of ``bar`` (in
    order of first appearance, with a legend), heights from ``value`` (a missing one:
    no bar); the rows whose ``marked`` column is true hatched (``marked_label`` in the
    legend).  Drawn on ``ax`` when given; returns the figure."""
    groups = list(dict.fromkeys(frame[group]))
    kinds = list(dict.fromkeys(frame[bar]))
    if ax is None:
        fig = _figure(figsize=(max(5.0, 1.2 * len(groups) * max(1, len(kinds)) / 2), 4))
        ax = fig.add_subplot()
    fig = ax.figure
    width = 0.8 / max(1, len(kinds))
    to_mark = []
    for i, kind in enumerate(kinds):
        part = frame[frame[bar] == kind].set_index(group)
        heights = [part[value].get(g, float("nan")) for g in groups]
        drawn = ax.bar([x + (i - (len(kinds) - 1) / 2) * width for x in range(len(groups))],
                       heights, width=width, label=str(kind))
        if marked is not None:  # a bool, numpy's, or one read from a CSV
            to_mark += [p for g, p in zip(groups, drawn) if str(part[marked].get(g)) == "True"]
    ax.set_xticks(range(len(groups)))
    ax.set_xticklabels([str(g) for g in groups])
    ax.set_ylabel(ylabel)
    if log:
        ax.set_yscale("log")
    ax.set_title(title)
    handles, labels = ax.get_legend_handles_labels()
    if marked is not None and frame[marked].astype(str).eq("True").any():
        from matplotlib.patches import Patch
        handles.append(Patch(facecolor="white", edgecolor="black", hatch="///"))
        labels.append(marked_label or marked)
    ax.legend(handles, labels, fontsize=8)
    for patch in to_mark:  # after the legend, whose keys copy each series' first bar
        patch.set_hatch("///")
        patch.set_edgecolor("black")
    fig.tight_layout()
    return fig


def figure(**kwargs):
    """A new :class:`matplotlib.figure.Figure` (ImportError naming the extra without
    matplotlib)."""
    return _figure(**kwargs)


def predicted_vs_measured(frame: pd.DataFrame, *, predicted: str, measured: str,
                          label: str, title: str = "simulator vs runtime"):
    """Predicted against measured step times (log-log, ms), one marker series per value
    of ``label``, with the line where they agree."""
    fig = _figure(figsize=(6, 5))
    ax = fig.add_subplot()
    for name, rows in frame.groupby(label, sort=False):
        ax.scatter(rows[measured], rows[predicted], label=str(name), s=25)
    lo = min(frame[measured].min(), frame[predicted].min()) / 1.2
    hi = max(frame[measured].max(), frame[predicted].max()) * 1.2
    ax.plot([lo, hi], [lo, hi], "k--", lw=1, label="predicted = measured")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("measured step (ms)")
    ax.set_ylabel("predicted step (ms)")
    ax.legend(fontsize=8)
    ax.set_title(title)
    fig.tight_layout()
    return fig
