"""Input pipelines: the course's JPEG files as a dataset, worker counts, and where a training loop's time goes.

``jpeg_dataset`` lives in a module on purpose: ``DataLoader`` workers started with ``spawn`` or ``forkserver``
(macOS, Windows, Linux from Python 3.14) receive the dataset by pickling, and a class defined in a notebook
cannot be pickled into them. ``measure`` is the loop lesson 03 writes in its cells, kept here for lesson 05.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any


def _classes(root: Path) -> list[str]:
    if not root.is_dir():
        raise FileNotFoundError(f"{str(root)!r} is not a folder: make the images first with gpucourse.write_image_folder().")
    classes = sorted(entry.name for entry in os.scandir(root) if entry.is_dir() and not entry.name.startswith("."))
    if not classes:
        raise FileNotFoundError(f"{str(root)!r} has no class folders (expected root/<class>/<image>.jpg).")
    return classes


def image_files(root: str | os.PathLike) -> tuple[list[str], list[int], list[str]]:
    """``(paths, labels, classes)`` of an ImageFolder tree, numbered as ``torchvision``'s ImageFolder does (for ``tf.data``)."""
    root = Path(root)
    classes = _classes(root)
    paths, labels = [], []
    for label, name in enumerate(classes):
        for file in sorted((root / name).iterdir()):
            if file.suffix.lower() in (".jpg", ".jpeg", ".png"):
                paths.append(str(file))
                labels.append(label)
    return paths, labels, classes


def jpeg_dataset(root: str | os.PathLike, *, image_size: int | None = None, augment: bool = False):
    """The JPEG tree as an ImageFolder of ``(float32 3 x H x W image in [0, 1], label)``, decoded by PIL in the worker.

    ``augment`` adds lesson 05's augmentation: a random rotation in [-15, 15] degrees, then a left-right flip (p=0.5).
    """
    import torch
    from torchvision.datasets import ImageFolder
    from torchvision.transforms import v2

    _classes(Path(root))  # a clear message for a wrong root
    steps = [v2.ToImage()]
    if image_size is not None:
        steps.append(v2.Resize((image_size, image_size), antialias=True))
    steps.append(v2.ToDtype(torch.float32, scale=True))
    if augment:
        steps += [v2.RandomRotation(15.0, fill=0), v2.RandomHorizontalFlip(0.5)]
    return ImageFolder(str(root), transform=v2.Compose(steps))


def available_cores() -> int:
    """CPU cores this process may use (the affinity mask in a container, else the machine's count)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def num_workers(requested: int | None = None, *, verbose: bool = True) -> int:
    """A safe ``DataLoader(num_workers=...)``: by default a core for the loop and one worker per other core (at most 8);
    a request for more workers than cores is capped, with a message."""
    cores = available_cores()
    if requested is None:
        return min(8, max(0, cores - 1))
    if isinstance(requested, bool) or not isinstance(requested, int) or requested < 0:
        raise ValueError(f"num_workers must be a whole number >= 0 (0 loads in the main process), got {requested!r}.")
    if requested > cores and verbose:
        print(f"Asked for {requested} DataLoader workers, but this process can use {cores} CPU core(s): "
              f"using {cores}. More workers than cores only makes them queue for the same cores.")
    return min(requested, cores)


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
    def compute_s(self) -> float:  # the steps, including the GPU work still queued at the end
        return self.total_s - self.wait_s

    @property
    def samples_per_s(self) -> float:
        return self.samples / self.total_s

    def __str__(self) -> str:
        name = f"{self.label}: " if self.label else ""
        return (f"{name}{self.samples_per_s:,.0f} samples/s, {100 * self.wait_s / self.total_s:.0f}% of the time waiting for "
                f"input ({self.batches} batches in {self.total_s:.3f} s, first batch after {self.startup_s:.3f} s)")


def _batch_size(batch: Any) -> int:  # the first tensor's first axis, in tuples, lists and dicts (DALI: [{name: tensor}])
    while isinstance(batch, (list, tuple, dict)) and batch:
        batch = next(iter(batch.values())) if isinstance(batch, dict) else batch[0]
    if len(getattr(batch, "shape", ())) == 0:
        raise TypeError(f"cannot tell the batch size of a {type(batch).__name__}: expected tensors with a batch axis")
    return int(batch.shape[0])


def _synchronizer(device) -> Callable[[], None]:
    import torch

    if device is not None and torch.device(device).type == "cuda":
        return lambda: torch.cuda.synchronize(device)
    return lambda: None


def measure(batches: Iterable, step: Callable[[Any], Any], *, device=None, warmup: int = 1, label: str = "") -> LoaderStats:
    """Run ``step(batch)`` over ``batches`` as a training loop does, timing ``next()`` apart from the rest.

    No synchronization between steps (the host fetches the next batch while the GPU still works, as in real
    training), only after the ``warmup`` batches and at the end. A TensorFlow step should return after ``float(loss)``.
    """
    sync = _synchronizer(device)
    iterator = iter(batches)
    start = time.perf_counter()
    for _ in range(warmup):
        batch = next(iterator, None)
        if batch is None:
            raise ValueError("the loader ran out during the warm-up: give it more batches or lower warmup")
        step(batch)
    sync()
    begin = t0 = time.perf_counter()
    wait, count, samples = 0.0, 0, 0
    for batch in iterator:  # the time from t0 to here is the loader's: next() blocked
        wait += time.perf_counter() - t0
        step(batch)
        count += 1
        samples += _batch_size(batch)
        t0 = time.perf_counter()
    sync()
    if count == 0:
        raise ValueError("no batch was measured: the loader yielded only the warm-up batches")
    return LoaderStats(label, count, samples, wait, time.perf_counter() - begin, begin - start)


def epochs(loader: Iterable, n: int) -> Iterator:
    """The batches of ``n`` passes over ``loader`` (a loader without ``persistent_workers`` restarts its workers each time)."""
    for _ in range(n):
        yield from loader
