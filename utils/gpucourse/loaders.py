"""Input pipelines: the course's JPEG files as a dataset, and where a training loop's time goes.

``jpeg_dataset`` reads the ImageFolder tree that ``gpucourse.write_image_folder``
writes (PIL decodes, torchvision transforms) as a ``torchvision`` ImageFolder.
It lives here, in an importable module, on purpose: ``DataLoader`` workers
started with ``spawn`` or ``forkserver`` (the default on macOS, on Windows and
from Python 3.14 on Linux) receive the dataset by pickling, and a class
defined in a notebook cannot be pickled into them. ``image_files`` lists the
same files with the same labels for ``tf.data``.

``measure`` is the loop lesson 03 writes in its cells (time ``next()`` apart
from the step, synchronize once at the end), kept here for lesson 05.
``num_workers`` picks a safe worker count and explains a request for more
workers than the machine has cores.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Iterator
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
    """Where the time of a training loop went (``measure``'s result)."""

    label: str
    batches: int
    samples: int
    wait_s: float  # blocked in next(): the loader's share
    total_s: float  # the whole loop, until the GPU finished its last step
    startup_s: float  # the warm-up batches: starting workers, first decode, first kernels

    @property
    def compute_s(self) -> float:
        """Everything but waiting: the steps, including the GPU work still queued at the end."""
        return self.total_s - self.wait_s

    @property
    def samples_per_s(self) -> float:
        return self.samples / self.total_s if self.total_s > 0 else float("nan")

    @property
    def wait_fraction(self) -> float:
        """Share of the loop spent waiting for input: near 0 is good, near 1 is input-bound."""
        return self.wait_s / self.total_s if self.total_s > 0 else float("nan")

    def __str__(self) -> str:
        name = f"{self.label}: " if self.label else ""
        return (
            f"{name}{self.samples_per_s:,.0f} samples/s, {100 * self.wait_fraction:.0f}% of the time waiting for "
            f"input ({self.batches} batches in {self.total_s:.3f} s, first batch after {self.startup_s:.3f} s)"
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


def measure(batches: Iterable, step: Callable[[Any], Any], *, device=None, warmup: int = 1, label: str = "") -> LoaderStats:
    """Run ``step(batch)`` over ``batches`` as a training loop does, and split its time.

    Waiting is the time ``next()`` blocks; the rest of the wall time is the
    step's. There is no synchronization between steps, so on a GPU the host
    fetches the next batch while the last step's kernels still run, as in real
    training; the GPU is synchronized after the warm-up and once at the end, so
    all its work is counted. A TensorFlow step should read a value it computed
    (``float(loss)``) so its work is done when it returns. The first ``warmup``
    batches are not counted; their time is ``startup_s``.
    """
    sync = _synchronizer(device)
    iterator = iter(batches)
    start = time.perf_counter()
    for _ in range(warmup):
        try:
            step(next(iterator))
        except StopIteration:
            raise ValueError("the loader ran out during the warm-up: give it more batches or lower warmup") from None
    sync()
    begin = time.perf_counter()
    wait, count, samples = 0.0, 0, 0
    while True:
        t0 = time.perf_counter()
        try:
            batch = next(iterator)
        except StopIteration:
            break
        wait += time.perf_counter() - t0
        step(batch)
        count += 1
        samples += _batch_size(batch)
    sync()
    if count == 0:
        raise ValueError("no batch was measured: the loader yielded only the warm-up batches")
    return LoaderStats(label, count, samples, wait, time.perf_counter() - begin, begin - start)


def epochs(loader: Iterable, n: int) -> Iterator:
    """The batches of ``n`` passes over ``loader``, one after the other.

    Measuring over epochs counts what happens between them: a loader without
    ``persistent_workers`` starts its workers again at every epoch.
    """
    for _ in range(n):
        yield from loader
