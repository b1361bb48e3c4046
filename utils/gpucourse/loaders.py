"""Input pipelines: the course's JPEG files through a loader, and where the time goes.

``jpeg_dataset`` reads the ImageFolder tree that ``gpucourse.write_image_folder``
writes (PIL decodes, torchvision transforms) as a ``torchvision`` ImageFolder.
It lives here, in an importable module, on purpose: ``DataLoader`` workers
started with ``spawn`` or ``forkserver`` (the default on macOS, on Windows and
from Python 3.14 on Linux) receive the dataset by pickling, and a class
defined in a notebook cannot be pickled into them.

``image_files`` lists the same files with the same labels for ``tf.data``, and
``tf_decode_jpeg`` decodes them with TensorFlow (imported only when called).

``measure`` runs a training step over any iterable of batches (a
``DataLoader``, a ``tf.data.Dataset``) and splits the wall time into time
spent *waiting for the next batch* and time spent *computing*, so an
input-bound loop shows itself. ``num_workers`` picks a safe worker count and
explains when more were asked for than the machine has cores.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

EXTENSIONS = (".jpg", ".jpeg", ".png")


def _classes(root: Path) -> list[str]:
    if not root.is_dir():
        raise FileNotFoundError(
            f"{str(root)!r} is not a folder: make the images first with gpucourse.write_image_folder()."
        )
    classes = sorted(entry.name for entry in os.scandir(root) if entry.is_dir() and not entry.name.startswith("."))
    if not classes:
        raise FileNotFoundError(f"{str(root)!r} has no class folders (expected root/<class>/<image>.jpg).")
    return classes


def image_files(root: str | os.PathLike) -> tuple[list[str], list[int], list[str]]:
    """``(paths, labels, classes)`` of an ImageFolder tree, in ImageFolder's order.

    Classes are the sorted folder names and label ``i`` is ``classes[i]``,
    exactly as ``torchvision.datasets.ImageFolder`` numbers them, so a
    ``tf.data`` pipeline built from these lists sees the same labels.
    """
    root = Path(root)
    classes = _classes(root)
    paths, labels = [], []
    for label, name in enumerate(classes):
        for file in sorted((root / name).iterdir()):
            if file.suffix.lower() in EXTENSIONS:
                paths.append(str(file))
                labels.append(label)
    return paths, labels, classes


def image_transform(image_size: int | None = None):
    """PIL image -> float32 tensor (3 x H x W) in [0, 1], resized to ``image_size`` if given."""
    import torch
    from torchvision.transforms import v2

    steps = [v2.ToImage()]
    if image_size is not None:
        steps.append(v2.Resize((image_size, image_size), antialias=True))
    steps.append(v2.ToDtype(torch.float32, scale=True))
    return v2.Compose(steps)


def jpeg_dataset(root: str | os.PathLike, *, image_size: int | None = None, augment: bool = False):
    """The JPEG tree at ``root`` as a ``torchvision.datasets.ImageFolder``.

    Each item is ``(image, label)``: a float32 tensor 3 x H x W in [0, 1]
    (decoded by PIL when the item is read, in the worker that reads it) and
    an int label. Everything in it pickles, so any ``num_workers`` and any
    start method work. ``augment`` adds lesson 05's training augmentation:
    a random rotation in [-15, 15] degrees (black corners), then a left-right
    flip with probability 0.5.
    """
    from torchvision.datasets import ImageFolder
    from torchvision.transforms import v2

    _classes(Path(root))  # a clear message for a wrong root
    transform = image_transform(image_size)
    if augment:
        transform = v2.Compose([transform, v2.RandomRotation(15.0, fill=0), v2.RandomHorizontalFlip(0.5)])
    return ImageFolder(str(root), transform=transform)



def available_cores() -> int:
    """CPU cores this process may use (the affinity mask in a container, else the machine's count)."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return max(1, os.cpu_count() or 1)


def num_workers(requested: int | None = None, *, verbose: bool = True) -> int:
    """A safe ``DataLoader(num_workers=...)`` for this machine.

    ``None`` picks a default: one worker per core, keeping one core for the
    training loop itself, at most 8. A request for more workers than there are
    cores is capped at the core count, with a message: extra workers only
    compete with each other and with the training loop for the same cores.
    """
    cores = available_cores()
    if requested is None:
        return min(8, max(0, cores - 1))
    if isinstance(requested, bool) or not isinstance(requested, int) or requested < 0:
        raise ValueError(f"num_workers must be a whole number >= 0 (0 loads in the main process), got {requested!r}.")
    if requested > cores:
        if verbose:
            print(
                f"Asked for {requested} DataLoader workers, but this process can use {cores} CPU core(s): "
                f"using {cores}. More workers than cores only makes them queue for the same cores."
            )
        return cores
    return requested


@dataclass(frozen=True)
class LoaderStats:
    """What ``measure`` found: where the time of a training loop went."""

    label: str
    batches: int
    samples: int
    wait_s: float  # waiting for the next batch (the loader's fault)
    compute_s: float  # the step: copy to the device, forward, backward, update
    startup_s: float  # until the first batch arrived (starting workers, first decode)

    @property
    def total_s(self) -> float:
        return self.wait_s + self.compute_s

    @property
    def samples_per_s(self) -> float:
        return self.samples / self.total_s if self.total_s > 0 else float("nan")

    @property
    def wait_fraction(self) -> float:
        """Share of the loop spent waiting for input: near 0 is good, near 1 is input-bound."""
        return self.wait_s / self.total_s if self.total_s > 0 else float("nan")

    def as_dict(self) -> dict:
        return {
            "samples/s": round(self.samples_per_s, 1),
            "waiting %": round(100 * self.wait_fraction, 1),
            "wait s": round(self.wait_s, 3),
            "compute s": round(self.compute_s, 3),
            "start-up s": round(self.startup_s, 3),
        }

    def __str__(self) -> str:
        name = f"{self.label}: " if self.label else ""
        return (
            f"{name}{self.samples_per_s:,.0f} samples/s, {100 * self.wait_fraction:.0f}% of the time waiting for "
            f"input ({self.batches} batches; wait {self.wait_s:.3f} s, compute {self.compute_s:.3f} s, "
            f"first batch after {self.startup_s:.3f} s)"
        )


def _batch_size(batch: Any) -> int:
    while isinstance(batch, (list, tuple)) and batch:
        batch = batch[0]
    if isinstance(batch, dict) and batch:
        return _batch_size(next(iter(batch.values())))
    shape = getattr(batch, "shape", None)
    if shape is None or len(shape) == 0:
        raise TypeError(f"cannot tell the batch size of a {type(batch).__name__}: expected tensors with a batch axis")
    return int(shape[0])


def _synchronizer(device) -> Callable[[], None]:
    kind = getattr(device, "type", None) or (str(device).split(":")[0] if device is not None else None)
    if kind == "cuda":
        import torch

        return lambda: torch.cuda.synchronize(device)
    return lambda: None


def measure(
    batches: Iterable,
    step: Callable[[Any], Any],
    *,
    device=None,
    max_batches: int | None = None,
    warmup: int = 1,
    label: str = "",
) -> LoaderStats:
    """Run ``step(batch)`` over ``batches`` and split the time into waiting vs computing.

    Waiting is the time ``next()`` takes to hand over a batch; computing is
    the time ``step`` takes, synchronized with the GPU when ``device`` is a
    CUDA device (so asynchronous kernels are counted where they run). A
    TensorFlow step should read a value it computed (e.g. ``float(loss)``) so
    that its work is finished when it returns. The first ``warmup`` batches
    run but are not counted; their time is reported as ``startup_s``.
    Stops after ``max_batches`` counted batches or at the end of ``batches``.
    """
    if max_batches is not None and max_batches < 1:
        raise ValueError(f"max_batches must be at least 1, got {max_batches}")
    sync = _synchronizer(device)
    iterator = iter(batches)
    start = time.perf_counter()
    for _ in range(warmup):
        try:
            batch = next(iterator)
        except StopIteration:
            raise ValueError("the loader ran out during the warm-up: give it more batches or lower warmup") from None
        step(batch)
        sync()
    startup = time.perf_counter() - start
    wait = compute = 0.0
    count = samples = 0
    while max_batches is None or count < max_batches:
        t0 = time.perf_counter()
        try:
            batch = next(iterator)
        except StopIteration:
            break
        t1 = time.perf_counter()
        step(batch)
        sync()
        t2 = time.perf_counter()
        wait += t1 - t0
        compute += t2 - t1
        count += 1
        samples += _batch_size(batch)
    if count == 0:
        raise ValueError("no batch was measured: the loader yielded only the warm-up batches")
    return LoaderStats(label, count, samples, wait, compute, startup)


def epochs(loader: Iterable, n: int) -> Iterator:
    """The batches of ``n`` passes over ``loader``, one after the other.

    Measuring over epochs counts what happens between them: a loader without
    ``persistent_workers`` starts its workers again at every epoch.
    """
    for _ in range(n):
        yield from loader


def plot(stats: Sequence[LoaderStats], *, device=None, title: str = "Where the loop's time goes"):
    """Stacked bars, one per ``LoaderStats``: milliseconds per batch waiting vs computing."""
    import matplotlib.pyplot as plt

    from .plots import stamp

    labels = [s.label for s in stats]
    wait = [1e3 * s.wait_s / s.batches for s in stats]
    compute = [1e3 * s.compute_s / s.batches for s in stats]
    fig, ax = plt.subplots(figsize=(6.5, 0.55 * len(stats) + 1.8))
    ax.barh(labels, compute, color="tab:blue", label="computing (the step)")
    ax.barh(labels, wait, left=compute, color="tab:orange", label="waiting for the next batch")
    for y, s in enumerate(stats):
        ax.text(compute[y] + wait[y], y, f" {s.samples_per_s:,.0f} samples/s", va="center", fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("milliseconds per batch")
    ax.set_xlim(0, 1.35 * max(c + w for c, w in zip(compute, wait, strict=True)))
    ax.set_title(title, loc="left", fontsize=11)
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=2, fontsize=8, frameon=False)
    stamp(ax, device)
    fig.tight_layout()
    return ax


def tf_decode_jpeg(image_size: int):
    """A ``tf.data`` map function ``(path, label) -> (image, label)``.

    It reads and decodes one JPEG with TensorFlow into a float32
    ``image_size`` x ``image_size`` x 3 tensor in [0, 1] (TensorFlow's
    channels-last layout; the resize also gives the pipeline a known shape).
    TensorFlow is imported when this is called, not before.
    """
    from .frameworks import load_triton_before_tensorflow

    load_triton_before_tensorflow()
    import tensorflow as tf

    def decode(path, label):
        image = tf.io.decode_jpeg(tf.io.read_file(path), channels=3)
        image = tf.image.convert_image_dtype(image, tf.float32)  # uint8 -> [0, 1]
        image = tf.image.resize(image, (image_size, image_size), antialias=True)
        return image, label

    return decode
