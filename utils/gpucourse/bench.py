"""``python -m gpucourse bench``: this machine's matmul TFLOP/s and copy GB/s, beside the card's published peaks.

Timing is ``gpucourse.benchmark`` on random data, never zeros (a GPU draws less power on zeros and can run faster
on them). On a CPU it still runs, with small sizes, and says that it is not a GPU.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import re
import sys
import time

from .device import choose_device, device_facts, why_no_pinning
from .timing import benchmark

# Dense peaks (half the datasheets' tensor-core figures, which assume 2:4 sparsity) from NVIDIA's datasheets: T4, L4,
# A100 (SXM4 columns), H100 (SXM and PCIe), H200 (SXM). "memory": memory bandwidth; "pcie": one direction of the x16
# link (datasheets count both). A10G (AWS G5 only, no datasheet): 80 SMs at 1.71 GHz with GA102's consumer tensor
# rate, the figures AWS quotes. None: no fast path for that precision (no bf16 or TF32 before Ampere).
# columns:  fp32, tf32, bf16, fp16 (TFLOP/s), memory, pcie (GB/s)
CARDS = [
    (r"\bT4\b", "T4", (8.1, None, None, 65.0, 320.0, 16.0)),
    (r"\bL4\b", "L4", (30.3, 60.0, 121.0, 121.0, 300.0, 32.0)),
    (r"\bA10G\b", "A10G (derived: no datasheet)", (35.0, 35.0, 70.0, 70.0, 600.0, 32.0)),
    (r"\bA100\b.*SXM.*\b40\s?GB", "A100 SXM 40GB", (19.5, 156.0, 312.0, 312.0, 1555.0, 32.0)),
    (r"\bA100\b.*SXM.*\b80\s?GB", "A100 SXM 80GB", (19.5, 156.0, 312.0, 312.0, 2039.0, 32.0)),
    (r"\bH100\b.*\b(SXM\d?|HBM3)\b", "H100 SXM", (67.0, 494.5, 989.5, 989.5, 3350.0, 64.0)),
    (r"\bH100\b.*\bPCIe\b", "H100 PCIe", (51.0, 378.0, 756.5, 756.5, 2000.0, 64.0)),
    (r"\bH200\b(?!.*\bNVL\b)", "H200 SXM", (67.0, 494.5, 989.5, 989.5, 4800.0, 64.0)),
]
ROWS = {  # key: (label, unit, which peak)
    **{key: (f"matmul {key}", "TFLOP/s", column) for column, key in enumerate(["fp32", "tf32", "bf16", "fp16"])},
    "d2d": ("copy device to device", "GB/s", 4),
    "h2d_pageable": ("copy host to device, pageable", "GB/s", 5),
    "h2d_pinned": ("copy host to device, pinned", "GB/s", 5),
}
GPU_SIZES = {"matmul": 8192, "d2d": 2**29, "h2d": 2**28}  # n for n x n matmuls; bytes
CPU_SIZES = {"matmul": 256, "d2d": 2**25, "h2d": 0}


def known_card(name: str) -> tuple[str | None, dict[str, float | None]]:
    """``("H100 SXM", {"fp32": 67.0, ...})`` for a device name the course knows, else ``(None, {})``."""
    for pattern, label, peaks in CARDS:
        if re.search(pattern, name, flags=re.IGNORECASE):
            return label, {key: peaks[column] for key, (_, _, column) in ROWS.items()}
    return None, {}


def make_card(name: str, device: str, measured: dict, notes: dict | None = None, **extra) -> dict:
    """The report card (plain data, ready for JSON) from measured values: each row with its peak and ratio."""
    gpu = device.startswith("cuda")
    label, peaks = known_card(name) if gpu else (None, {})
    rows = [{"key": key, "what": what, "value": measured.get(key), "unit": unit, "peak": peaks.get(key),
             "ratio": measured[key] / peaks[key] if measured.get(key) is not None and peaks.get(key) else None,
             "note": (notes or {}).get(key, "")} for key, (what, unit, _) in ROWS.items()]
    return {"name": name, "device": device, "gpu": gpu, "known_as": label, "rows": rows, **extra}


@contextlib.contextmanager
def _tf32(enabled: bool):
    """TF32 for fp32 matmuls on or off, then back: ``fp32_precision`` on PyTorch 2.9+ (the legacy switches warn there
    and must not be mixed with it), ``allow_tf32`` on an older PyTorch such as an older Colab runtime's."""
    import torch

    matmul = torch.backends.cuda.matmul
    name, value = ("fp32_precision", "tf32" if enabled else "ieee") if hasattr(matmul, "fp32_precision") \
        else ("allow_tf32", enabled)
    before = getattr(matmul, name)
    setattr(matmul, name, value)
    try:
        yield
    finally:
        setattr(matmul, name, before)


def _matmul_tflops(device, dtype, n: int, tf32: bool, min_run_time: float) -> float:
    import torch

    generator = torch.Generator(device=device).manual_seed(0)
    a, b = (torch.randn(n, n, device=device, dtype=dtype, generator=generator) for _ in range(2))
    with _tf32(tf32) if a.is_cuda else contextlib.nullcontext():
        until = time.perf_counter() + (0.2 if a.is_cuda else 0)  # let an idle GPU's clocks rise before timing
        while time.perf_counter() < until:
            torch.matmul(a, b)
            torch.cuda.synchronize(a.device)
        timing = benchmark(torch.matmul, a, b, device=device, min_run_time=min_run_time, min_runs=1, warmup=5)
    return timing.rate(2 * n**3) / 1e12


def _copy_gbps(device, nbytes: int, min_run_time: float, source: str = "device") -> float:
    """GB/s of ``target.copy_(origin)`` into ``device``, from ``source`` memory: "device", "pageable" or "pinned"."""
    import torch

    origin = torch.randint(0, 256, (nbytes,), dtype=torch.uint8, device=device if source == "device" else "cpu")
    origin = origin.pin_memory() if source == "pinned" else origin
    target = torch.empty(nbytes, dtype=torch.uint8, device=device)
    timing = benchmark(target.copy_, origin, device=device, min_run_time=min_run_time, min_runs=1, warmup=3)
    moved = 2 * nbytes if source == "device" else nbytes  # on the device a copy reads and writes every byte
    return timing.rate(moved) / 1e9


def measure(device=None, *, size: int | None = None, min_run_time: float = 0.2) -> dict:
    """Measure this machine and return its card (see ``make_card``)."""
    import torch

    device = choose_device(None if device is None else str(device), verbose=False)
    facts = device_facts(device)
    gpu = device.type == "cuda"
    sizes = dict(GPU_SIZES if gpu else CPU_SIZES, **({"matmul": size} if size else {}))
    precisions = {"fp32": (torch.float32, False), "tf32": (torch.float32, True),
                  "bf16": (torch.bfloat16, False), "fp16": (torch.float16, False)}
    notes = {"d2d": "bytes read + bytes written" if gpu else "RAM to RAM: no GPU here"}
    if not gpu:
        notes.update(tf32="TF32 is a mode of a GPU's tensor cores (Ampere and newer)",
                     fp16="CPUs have no fast fp16 matmul; their mixed precision is bf16",
                     h2d_pageable="no GPU: there is no host-to-device copy to measure")
        notes["h2d_pinned"] = notes["h2d_pageable"]
        if not facts.bf16:
            notes["bf16"] = "this CPU has no native bf16 instructions: converted in software"
    elif not facts.bf16:
        cc = ".".join(map(str, facts.compute_capability))
        notes["tf32"] = notes["bf16"] = f"no TF32/bf16 tensor cores before compute capability 8.0 (this GPU: {cc})"
    skip = {"tf32", "fp16"} if not gpu else set() if facts.bf16 else {"tf32", "bf16"}
    measured = {key: _matmul_tflops(device, dtype, sizes["matmul"], tf32, min_run_time)
                for key, (dtype, tf32) in precisions.items() if key not in skip}
    measured["d2d"] = _copy_gbps(device, sizes["d2d"], min_run_time)
    if gpu:
        reason = why_no_pinning()
        notes.update(h2d_pageable="one direction; the peak is the card's PCIe x16 link, the host may be slower",
                     h2d_pinned=reason or "")
        for source in ["pageable"] + (["pinned"] if reason is None else []):
            measured[f"h2d_{source}"] = _copy_gbps(device, sizes["h2d"], min_run_time, source=source)
    return make_card(facts.name, str(device), measured, notes, matmul_size=sizes["matmul"],
                     torch=torch.__version__, compute_capability=facts.compute_capability)


def render(card: dict) -> str:
    """The card as a table a learner reads."""
    if card["gpu"]:
        known = (f"known as {card['known_as']}: peaks are NVIDIA's published dense figures" if card["known_as"]
                 else "a card the course has no published peaks for: numbers without ratios")
        lines = [f"gpucourse bench: {card['name']} ({card['device']}), {known}"]
    else:
        lines = [f"gpucourse bench: NOT A GPU. No CUDA GPU here, so this measures the CPU ({card['name']}) with small "
                 "sizes. Ratios to a GPU's peak need a GPU: run it on one (on Colab: Runtime > Change runtime type)."]
    n = card.get("matmul_size")
    lines.append(f"{'measurement':<32}{'value':>10}  {'unit':<8}{'peak':>8}  {'of peak':>7}   (matmuls {n}x{n})")
    for row in card["rows"]:
        value = "-" if row["value"] is None else f"{row['value']:.4g}"
        peak = "-" if row["peak"] is None else f"{row['peak']:g}"
        ratio = "-" if row["ratio"] is None else f"{row['ratio']:.0%}"
        note = f"   {row['note']}" if row["note"] else ""
        lines.append(f"{row['what']:<32}{value:>10}  {row['unit']:<8}{peak:>8}  {ratio:>7}{note}")
    rows = {row["key"]: row["value"] for row in card["rows"]}
    if rows.get("h2d_pinned") and rows.get("h2d_pageable"):
        lines.append(f"Pinned host memory copies {rows['h2d_pinned'] / rows['h2d_pageable']:.1f}x as fast as pageable.")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gpucourse bench", description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print the card as JSON")
    parser.add_argument("--device", default=None, help="e.g. cuda, cuda:1, cpu (default: the GPU if there is one)")
    parser.add_argument("--size", type=int, default=None, help="n of the n x n matmuls (default: 8192 GPU, 256 CPU)")
    parser.add_argument("--min-run-time", type=float, default=0.2, help="seconds of repeats per measurement")
    args = parser.parse_args(argv)
    try:
        card = measure(args.device, size=args.size, min_run_time=args.min_run_time)
    except (ValueError, RuntimeError) as error:  # DeviceError, GPURequiredError, out of memory
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(json.dumps(card, indent=2) if args.json else render(card))
    return 0
