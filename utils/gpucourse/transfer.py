"""Measure host-to-device copies: pageable vs pinned host memory, blocking vs ``non_blocking``.

A copy from ordinary (*pageable*) host memory to a GPU goes through a
staging buffer the CUDA driver pins for it; a copy from *pinned*
(page-locked) memory goes straight to the GPU by DMA, and only such a copy
can overlap with other work (``non_blocking=True``). Calling
``tensor.pin_memory()`` right before the copy adds a host copy of its own,
so it is not faster than a plain copy: pinning pays off when the data is
born pinned (a ``DataLoader`` with ``pin_memory=True``, a reused buffer).

``time_copy`` times one copy size and mode with ``gpucourse.benchmark``
(warm-up, synchronization, median); ``bandwidth_curve`` sweeps a list of
sizes and returns plain numbers (GB/s, 10**9 bytes per second) ready to
plot or print. ``main`` is the command line (``python -m gpucourse.transfer``).

On a machine without CUDA the "device" is the CPU, so the copies measured
are CPU-to-CPU memory copies, and the pinned modes are skipped with a
sentence saying why: pinned memory needs CUDA.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import asdict, dataclass

MODES = ("pageable", "pinned", "pin_then_copy")
"""pageable: an ordinary host tensor; pinned: a tensor allocated pinned once, reused;
pin_then_copy: ``src.pin_memory()`` before every copy (the pattern that does not help)."""

_UNITS = {"": 1, "B": 1, "K": 2**10, "KB": 2**10, "KIB": 2**10, "M": 2**20, "MB": 2**20, "MIB": 2**20,
          "G": 2**30, "GB": 2**30, "GIB": 2**30}


class PinnedMemoryError(RuntimeError):
    """Pinned host memory was asked for on a machine that cannot give it."""


def why_no_pinning() -> str | None:
    """``None`` when pinned host memory works here, otherwise a sentence saying why not."""
    import torch

    from .device import why_no_cuda

    if not torch.cuda.is_available():
        return f"pinned (page-locked) host memory needs CUDA, and {why_no_cuda()}"
    try:
        torch.empty(1).pin_memory()
    except RuntimeError as error:  # e.g. a container that limits locked memory
        return f"pinning host memory failed here ({error})"
    return None


def pinning_available() -> bool:
    """True when ``tensor.pin_memory()`` works on this machine."""
    return why_no_pinning() is None


def format_bytes(nbytes: float) -> str:
    """``1536`` -> ``'1.5 KiB'``: binary units, as sizes are chosen."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(nbytes) < 1024 or unit == "GiB":
            return f"{nbytes:.0f} {unit}" if unit == "B" else f"{nbytes:.3g} {unit}"
        nbytes /= 1024
    raise AssertionError("unreachable")


def parse_size(text: str | int) -> int:
    """``'64MiB'``, ``'64M'``, ``'4 KB'`` or ``4096`` -> bytes (K, M, G are powers of 1024)."""
    if isinstance(text, int):
        size = text
    else:
        match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([A-Za-z]*)\s*", text)
        unit = match.group(2).upper() if match else None
        if match is None or unit not in _UNITS:
            raise ValueError(f"{text!r} is not a size: write a number of bytes or e.g. '4KiB', '64MiB', '1GiB'")
        size = int(float(match.group(1)) * _UNITS[unit])
    if size < 1:
        raise ValueError(f"a copy needs at least one byte, got {text!r}")
    return size


def powers_of_two(smallest: int | str, largest: int | str, step: int = 2) -> list[int]:
    """Sizes from ``smallest`` to ``largest`` bytes, each ``2**step`` times the last (4 by default)."""
    lo, hi = parse_size(smallest), parse_size(largest)
    if lo > hi:
        raise ValueError(f"smallest ({format_bytes(lo)}) is larger than largest ({format_bytes(hi)})")
    sizes = [lo]
    while sizes[-1] * 2**step <= hi:
        sizes.append(sizes[-1] * 2**step)
    return sizes


@dataclass(frozen=True)
class CopyTiming:
    """One measured copy: ``nbytes`` from host memory of kind ``mode`` to ``device``."""

    nbytes: int
    mode: str
    non_blocking: bool
    seconds: float  # median seconds per copy
    device: str

    @property
    def gbps(self) -> float:
        """Bandwidth in GB/s (10**9 bytes per second)."""
        return self.nbytes / self.seconds / 1e9

    def as_dict(self) -> dict:
        return {**asdict(self), "gbps": self.gbps}

    def __str__(self) -> str:
        blocking = "non_blocking" if self.non_blocking else "blocking"
        return (f"{format_bytes(self.nbytes)} {self.mode} -> {self.device} ({blocking}): "
                f"{self.seconds * 1e6:.1f} us, {self.gbps:.2f} GB/s")


def _resolve(device):
    import torch

    from .device import choose_device

    if device is None:
        return choose_device(verbose=False)
    if isinstance(device, torch.device) and device.type != "cuda":
        return device
    return choose_device(str(device), verbose=False)  # checks "cuda:7" and friends, with a clear message


def host_tensor(nbytes: int, *, pinned: bool = False):
    """A host tensor of ``nbytes`` bytes, touched so that its pages really exist."""
    import torch

    if pinned:
        reason = why_no_pinning()
        if reason is not None:
            raise PinnedMemoryError(f"{reason}. Use pageable memory (pinned=False) on this machine.")
    tensor = torch.empty(parse_size(nbytes), dtype=torch.uint8, pin_memory=pinned)
    return tensor.fill_(1)  # fresh pages are mapped on first touch: do it now, not in the timing


def time_copy(nbytes: int | str, device=None, *, mode: str = "pageable", non_blocking: bool = False,
              min_run_time: float = 0.1) -> CopyTiming:
    """Time copying ``nbytes`` from host memory of kind ``mode`` into a tensor on ``device``.

    The destination is allocated once, so only the copy is timed (``dst.copy_(src)``).
    A copy to the CPU runs on one thread, as a copy to a GPU runs on one copy engine.
    ``mode`` is one of ``MODES``; the pinned ones raise ``PinnedMemoryError`` without CUDA.
    """
    import torch

    from .timing import benchmark

    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    nbytes = parse_size(nbytes)
    device = _resolve(device)
    if mode != "pageable":
        reason = why_no_pinning()
        if reason is not None:
            raise PinnedMemoryError(f"mode={mode!r}: {reason}. Only mode='pageable' runs here.")
    source = host_tensor(nbytes, pinned=mode == "pinned")
    target = torch.empty(nbytes, dtype=torch.uint8, device=device)
    if mode == "pin_then_copy":
        def copy():
            target.copy_(source.pin_memory(), non_blocking=non_blocking)
    else:
        def copy():
            target.copy_(source, non_blocking=non_blocking)
    threads = torch.get_num_threads()
    if device.type == "cpu":  # one copy engine, like a GPU's; and no stalls when other work holds the cores
        torch.set_num_threads(1)
    try:
        timing = benchmark(copy, device=device, min_run_time=min_run_time, min_runs=3)
    finally:
        torch.set_num_threads(threads)
    return CopyTiming(nbytes=nbytes, mode=mode, non_blocking=non_blocking, seconds=timing.median, device=str(device))


def bandwidth_curve(sizes, device=None, *, modes=("pageable", "pinned"), non_blocking: bool = False,
                    min_run_time: float = 0.05, progress: bool = True, verbose: bool = True) -> dict[str, list[float]]:
    """GB/s for every size in ``sizes`` (bytes) and every mode that runs here: ``{mode: [GB/s, ...]}``.

    Modes that cannot run on this machine (the pinned ones without CUDA) are
    left out of the result, with one printed sentence saying why.
    """
    from tqdm.auto import tqdm

    sizes = [parse_size(size) for size in sizes]
    device = _resolve(device)
    unknown = [mode for mode in modes if mode not in MODES]
    if unknown:
        raise ValueError(f"unknown mode(s) {unknown}: choose from {MODES}")
    reason = why_no_pinning()
    runnable = [mode for mode in modes if mode == "pageable" or reason is None]
    if verbose and len(runnable) < len(modes):
        skipped = ", ".join(mode for mode in modes if mode not in runnable)
        print(f"Skipping {skipped}: {reason}.")
    curve: dict[str, list[float]] = {mode: [] for mode in runnable}
    steps = [(mode, size) for mode in runnable for size in sizes]
    for mode, size in tqdm(steps, desc=f"copies to {device}", disable=not progress, leave=False):
        result = time_copy(size, device, mode=mode, non_blocking=non_blocking, min_run_time=min_run_time)
        curve[mode].append(result.gbps)
    return curve


def main(argv: list[str] | None = None) -> int:
    """``python -m gpucourse.transfer``: print (or ``--json``) the host-to-device bandwidth curve."""
    parser = argparse.ArgumentParser(prog="python -m gpucourse.transfer", description=main.__doc__.split(": ")[1])
    parser.add_argument("--device", default=None, help="e.g. cuda, cuda:1, cpu (default: the GPU if there is one)")
    parser.add_argument("--smallest", default="4KiB")
    parser.add_argument("--largest", default="256MiB")
    parser.add_argument("--modes", default="pageable,pinned,pin_then_copy", help=f"comma-separated, from {MODES}")
    parser.add_argument("--non-blocking", action="store_true")
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    args = parser.parse_args(argv)
    try:
        sizes = powers_of_two(args.smallest, args.largest)
        modes = [m.strip() for m in args.modes.split(",") if m.strip()]
        device = _resolve(args.device)
        curve = bandwidth_curve(sizes, device, modes=modes, non_blocking=args.non_blocking,
                                progress=not args.json and sys.stderr.isatty(), verbose=not args.json)
    except (ValueError, RuntimeError) as error:  # DeviceError is a ValueError
        print(f"error: {error}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps({"device": str(device), "non_blocking": args.non_blocking, "sizes": sizes, "gbps": curve}))
        return 0
    if device.type != "cuda":
        print(f"No CUDA device: these are copies from host memory to {device}, i.e. CPU-to-CPU memory copies.")
    print(f"{'size':>10}  " + "  ".join(f"{mode:>14}" for mode in curve) + "   (GB/s)")
    for i, size in enumerate(sizes):
        print(f"{format_bytes(size):>10}  " + "  ".join(f"{curve[mode][i]:>14.2f}" for mode in curve))
    return 0


if __name__ == "__main__":
    sys.exit(main())
