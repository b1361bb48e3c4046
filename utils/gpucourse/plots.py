"""The plots several lessons share, each stamped with the device that made it."""

from __future__ import annotations


def stamp(ax, device) -> None:
    """Write "measured on <device>" in the corner of ``ax``: every plot of a measurement says where it ran."""
    if device is not None:
        ax.text(1.0, 1.01, f"measured on {device}", transform=ax.transAxes, ha="right", va="bottom", fontsize=8, alpha=0.7)


def bars(values: dict, *, ylabel: str, title: str = "", device=None, fmt: str = "{:.3g}", log: bool = False):
    """A bar chart of ``{label: value}`` with each value written on its bar."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.2))
    labels, heights = list(values), list(values.values())
    drawn = ax.bar(labels, heights, color="tab:blue")
    ax.bar_label(drawn, labels=[fmt.format(v) for v in heights], fontsize=9)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    if log:
        ax.set_yscale("log")
    stamp(ax, device)
    fig.tight_layout()
    return ax


def curves(x, ys: dict, *, xlabel: str, ylabel: str, title: str = "", device=None, logx: bool = False, logy: bool = False):
    """One line per ``{label: values}`` over ``x``."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.5))
    for label, y in ys.items():
        ax.plot(x, y, marker="o", label=label)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    if logx:
        ax.set_xscale("log", base=2)
    if logy:
        ax.set_yscale("log")
    if len(ys) > 1:
        ax.legend()
    ax.grid(alpha=0.3)
    stamp(ax, device)
    fig.tight_layout()
    return ax
