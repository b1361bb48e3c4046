"""The plots several lessons share, each stamped with the device that made it."""

from __future__ import annotations

import matplotlib.pyplot as plt


def stamp(ax, device) -> None:
    """Write "measured on <device>" in the corner of ``ax``: every plot of a measurement says
    where it ran."""
    if device is not None:
        ax.text(
            1.0,
            1.01,
            f"measured on {device}",
            transform=ax.transAxes,
            ha="right",
            va="bottom",
            fontsize=8,
            alpha=0.7,
        )


def _finish(fig, ax, title: str, device):
    ax.set_title(title)
    stamp(ax, device)
    fig.tight_layout()
    return ax


def bars(
    values: dict,
    *,
    ylabel: str,
    title: str = "",
    device=None,
    fmt: str = "{:.3g}",
    log: bool = False,
):
    """A bar chart of ``{label: value}`` with each value written on its bar."""
    fig, ax = plt.subplots(figsize=(6, 3.2))
    drawn = ax.bar(list(values), list(values.values()), color="tab:blue")
    ax.bar_label(drawn, labels=[fmt.format(v) for v in values.values()], fontsize=9)
    ax.set(ylabel=ylabel, yscale="log" if log else "linear")
    # long labels would overlap: slant them
    if sum(len(str(label)) for label in values) > 8 * len(values):
        plt.setp(ax.get_xticklabels(), rotation=20, ha="right", rotation_mode="anchor")
    return _finish(fig, ax, title, device)


def curves(
    x,
    ys: dict,
    *,
    xlabel: str,
    ylabel: str,
    title: str = "",
    device=None,
    logx: bool = False,
    logy: bool = False,
):
    """One line per ``{label: values}`` over ``x`` (``logx``: base 2)."""
    fig, ax = plt.subplots(figsize=(6, 3.5))
    for label, y in ys.items():
        ax.plot(x, y, marker="o", label=label)
    ax.set(xlabel=xlabel, ylabel=ylabel, yscale="log" if logy else "linear")
    if logx:
        ax.set_xscale("log", base=2)
    if len(ys) > 1:
        ax.legend()
    ax.grid(alpha=0.3)
    return _finish(fig, ax, title, device)
