"""The plots several lessons share, each stamped with the device that made it."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np


def stamp(ax, device) -> None:
    """Write "measured on <device>" in the corner of ``ax``: every plot of a measurement says where it ran."""
    if device is not None:
        ax.text(1.0, 1.01, f"measured on {device}", transform=ax.transAxes, ha="right", va="bottom", fontsize=8, alpha=0.7)


def _finish(fig, ax, title: str, device, **title_style):
    ax.set_title(title, **title_style)
    stamp(ax, device)
    fig.tight_layout()
    return ax


def bars(values: dict, *, ylabel: str, title: str = "", device=None, fmt: str = "{:.3g}", log: bool = False):
    """A bar chart of ``{label: value}`` with each value written on its bar."""
    fig, ax = plt.subplots(figsize=(6, 3.2))
    drawn = ax.bar(list(values), list(values.values()), color="tab:blue")
    ax.bar_label(drawn, labels=[fmt.format(v) for v in values.values()], fontsize=9)
    ax.set(ylabel=ylabel, yscale="log" if log else "linear")
    return _finish(fig, ax, title, device)


def curves(x, ys: dict, *, xlabel: str, ylabel: str, title: str = "", device=None, logx: bool = False, logy: bool = False):
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


def images(rows: dict, *, device=None, n: int = 8):
    """A grid, one row of ``n`` images per ``{label: images}`` (CHW or HWC; uint8, or float in [0, 1])."""
    n = min(n, *(len(batch) for batch in rows.values()))
    fig, axes = plt.subplots(len(rows), n, figsize=(1.3 * n, 1.45 * len(rows) + 0.3), squeeze=False)
    for row, (label, batch) in zip(axes, rows.items(), strict=True):
        for ax, image in zip(row, batch[:n], strict=True):
            image = np.asarray(image)
            if image.shape[0] in (1, 3) and image.shape[-1] not in (1, 3):
                image = image.transpose(1, 2, 0)  # CHW -> HWC
            ax.imshow(image if image.dtype == np.uint8 else image.clip(0.0, 1.0))
            ax.set(xticks=[], yticks=[])
        row[0].set_ylabel(label, rotation=0, ha="right", va="center", fontsize=8)
    stamp(axes[0][-1], device)
    fig.tight_layout()
    return axes


def stacked_bars(labels, parts: dict, *, xlabel: str, title: str = "", device=None, notes=None):
    """Horizontal bars, one per label, each split into ``{part name: values}`` left to right, ``notes`` at their ends."""
    fig, ax = plt.subplots(figsize=(6.5, 0.55 * len(labels) + 1.8))
    left = [0.0] * len(labels)
    for (name, values), color in zip(parts.items(), ("tab:blue", "tab:orange", "tab:green", "tab:red"), strict=False):
        ax.barh(labels, values, left=left, color=color, label=name)
        left = [a + b for a, b in zip(left, values, strict=True)]
    for y, note in enumerate(notes or []):
        ax.text(left[y], y, f" {note}", va="center", fontsize=8)
    ax.invert_yaxis()
    ax.set(xlabel=xlabel, xlim=(0, 1.35 * max(left)))
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=len(parts), fontsize=8, frameon=False)
    return _finish(fig, ax, title, device, loc="left", fontsize=11)
