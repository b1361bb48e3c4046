"""Input pipelines: the course's JPEG files as a dataset, worker counts, and where a training loop's
time goes.

``jpeg_dataset`` lives in a module because ``spawn``ed ``DataLoader`` workers (macOS, Windows, Linux
from Python 3.14) unpickle it, which they cannot do for a class defined in a notebook; ``measure``
is lesson 03's loop, kept for 05.
"""

from __future__ import annotations

import itertools
import os
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, NamedTuple


def jpeg_dataset(root: str | os.PathLike, *, image_size: int | None = None, augment: bool = False):
    """The JPEG tree as an ImageFolder of ``(float32 3 x H x W image in [0, 1], label)``, decoded by
    PIL in the worker; ``augment``: lesson 05's random rotation in [-15, 15] degrees, then a
    left-right flip (p=0.5)."""
    import torch
    from torchvision.datasets import ImageFolder
    from torchvision.transforms import v2

    if not os.path.isdir(root):
        raise FileNotFoundError(
            f"{str(root)!r} is not a folder: make the images first with "
            "gpucourse.write_image_folder()."
        )
    resize = [v2.Resize((image_size, image_size), antialias=True)] if image_size else []
    augmentation = (
        [v2.RandomRotation(15.0, fill=0), v2.RandomHorizontalFlip(0.5)] if augment else []
    )
    steps = [v2.ToImage(), *resize, v2.ToDtype(torch.float32, scale=True), *augmentation]
    return ImageFolder(str(root), transform=v2.Compose(steps))


def image_files(root: str | os.PathLike) -> tuple[list[str], list[int], list[str]]:
    """``(paths, labels, classes)`` of the JPEG tree, in ``ImageFolder``'s order and numbering
    (for ``tf.data`` and DALI)."""
    dataset = jpeg_dataset(root)
    return [path for path, _ in dataset.samples], list(dataset.targets), dataset.classes


def available_cores(cpu_max: str = "/sys/fs/cgroup/cpu.max") -> int:
    """CPU cores this process may use: the affinity mask (else the machine's count), capped by a
    container's CPU quota (cgroup v2's ``cpu.max``: "quota period" in microseconds, or "max
    ...")."""
    cores = (
        len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    )
    quota, _, period = (Path(cpu_max).read_text() if os.path.isfile(cpu_max) else "max").partition(
        " "
    )
    # a share rounds up
    return cores if quota.strip() == "max" else max(1, min(cores, -(-int(quota) // int(period))))


def num_workers(requested: int | None = None) -> int:
    """A safe ``DataLoader(num_workers=...)``: by default a core for the loop and one worker per
    other core (at most 8); a request for more workers than cores is capped, with a message."""
    cores = available_cores()
    if requested is None:
        return min(8, cores - 1)
    if isinstance(requested, bool) or not isinstance(requested, int) or requested < 0:
        raise ValueError(
            "num_workers must be a whole number >= 0 (0 loads in the main process), got "
            f"{requested!r}."
        )
    if requested > cores:
        print(
            f"Asked for {requested} DataLoader workers, but this process can use {cores} CPU "
            "core(s): "
            f"using {cores}. More workers than cores only makes them queue for the same cores."
        )
    return min(requested, cores)


class LoaderStats(NamedTuple):
    """Where the time of a training loop went (``measure``'s result)."""

    label: str
    batches: int
    samples: int
    wait_s: float  # blocked in next(): the loader's share
    total_s: float  # the whole loop, until the GPU finished its last step

    @property
    def samples_per_s(self) -> float:
        return self.samples / self.total_s


# the first tensor's first axis, in tuples, lists and dicts (DALI: [{name: tensor}])
def _batch_size(batch: Any) -> int:
    while isinstance(batch, (list, tuple, dict)) and batch:
        batch = next(iter(batch.values())) if isinstance(batch, dict) else batch[0]
    if len(getattr(batch, "shape", ())) == 0:
        raise TypeError(
            f"cannot tell the batch size of a {type(batch).__name__}: expected tensors with a "
            "batch axis"
        )
    return int(batch.shape[0])


def _synchronizer(device) -> Callable[[], None]:
    import torch

    if device is not None and torch.device(device).type == "cuda":
        return lambda: torch.cuda.synchronize(device)
    return lambda: None


def measure(
    batches: Iterable, step: Callable[[Any], Any], *, device=None, warmup: int = 1, label: str = ""
) -> LoaderStats:
    """Run ``step(batch)`` over ``batches`` as a training loop does, timing ``next()`` apart from
    the rest; the GPU is synchronized after the ``warmup`` batches (not counted) and at the end,
    never between steps, as in real training."""
    sync = _synchronizer(device)
    iterator = iter(batches)
    # starting workers, the first decode, the first kernels
    for batch in itertools.islice(iterator, warmup):
        step(batch)
    sync()
    begin = t0 = time.perf_counter()
    wait = 0.0
    count = samples = 0
    for batch in iterator:  # the time from t0 to here is the loader's: next() blocked
        wait += time.perf_counter() - t0
        step(batch)
        count += 1
        samples += _batch_size(batch)
        t0 = time.perf_counter()
    sync()
    if count == 0:
        raise ValueError(
            f"no batch left to measure after {warmup} warm-up batch(es): give the loader more "
            "batches"
        )
    return LoaderStats(label, count, samples, wait, time.perf_counter() - begin)


def epochs(loader: Iterable, n: int) -> Iterator:
    """The batches of ``n`` passes over ``loader`` (a loader without ``persistent_workers``
    restarts its workers each time)."""
    for _ in range(n):
        yield from loader
