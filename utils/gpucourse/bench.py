"""``python -m gpucourse bench``: this machine's matmul TFLOP/s and copy GB/s, beside the card's
published peaks."""

from __future__ import annotations

import argparse
import contextlib
import json
import re
import sys

from .device import choose_device, device_facts, why_no_pinning
from .timing import benchmark

# Dense peaks (half the datasheets' tensor-core figures, which assume 2:4 sparsity) from NVIDIA's
# datasheets: T4, L4, A100 (SXM4 columns), H100 (SXM and PCIe), H200 (SXM); "pcie" is one direction
# of the x16 link (datasheets count both). A10G (AWS G5 only, no NVIDIA datasheet): AWS's
# figures, as Baseten's "NVIDIA A10 vs A10G for ML model inference" quotes them: 80 SMs at 1.71 GHz,
# tensor cores at GA102's consumer rate (half the A10's), so tf32 no faster than fp32 and 16 bits
# at 2x (lesson 04's table says so). None: no bf16 or TF32 before Ampere. Columns: fp32, tf32,
# bf16, fp16 (TFLOP/s), memory bandwidth, pcie (GB/s).
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
ROWS = {  # key: (what, unit, which column of CARDS)
    **{
        key: (f"matmul {key}", "TFLOP/s", column)
        for column, key in enumerate(["fp32", "tf32", "bf16", "fp16"])
    },
    "d2d": ("copy device to device", "GB/s", 4),
    "h2d_pageable": ("copy host to device, pageable", "GB/s", 5),
    "h2d_pinned": ("copy host to device, pinned", "GB/s", 5),
}
NOTES = {
    True: {
        "d2d": "bytes read + bytes written",
        "h2d_pageable": "one direction; the peak is the PCIe x16 link's",
    },
    False: {
        "tf32": "a mode of a GPU's tensor cores",
        "fp16": "not measured on CPUs",
        "d2d": "RAM to RAM: no GPU",
        **dict.fromkeys(["h2d_pageable", "h2d_pinned"], "no GPU, so no host-to-device copy"),
    },
}
LINE = "{:<32}{:>10}  {:<8}{:>8}  {:>7}   {}"


def make_card(name: str, device: str, measured: dict, notes: dict | None = None, **extra) -> dict:
    """The report card (plain data, ready for JSON): each row with the published peak of a card
    the course knows."""
    gpu = device.startswith("cuda")
    label, peaks = next(
        ((known, p) for regex, known, p in CARDS if gpu and re.search(regex, name, re.I)),
        (None, [None] * 6),
    )
    rows = [
        {
            "key": key,
            "what": what,
            "value": measured.get(key),
            "unit": unit,
            "peak": peaks[column],
            "ratio": measured[key] / peaks[column]
            if measured.get(key) is not None and peaks[column]
            else None,
            "note": (notes or {}).get(key, ""),
        }
        for key, (what, unit, column) in ROWS.items()
    ]
    return {"name": name, "device": device, "gpu": gpu, "known_as": label, "rows": rows, **extra}


@contextlib.contextmanager
def _tf32(enabled: bool):
    """TF32 for fp32 matmuls on or off, then back: ``fp32_precision`` on PyTorch 2.9+, else the
    legacy ``allow_tf32``."""
    import torch

    # the two switches must not be mixed: PyTorch 2.9+ warns on the legacy one
    matmul = torch.backends.cuda.matmul
    name = "fp32_precision" if hasattr(matmul, "fp32_precision") else "allow_tf32"
    before = getattr(matmul, name)
    setattr(matmul, name, ("tf32" if enabled else "ieee") if name == "fp32_precision" else enabled)
    try:
        yield
    finally:
        setattr(matmul, name, before)


def _copy_gbps(device, nbytes: int, min_run_time: float, source: str = "device") -> float:
    """GB/s of ``target.copy_(origin)`` into ``device``, from ``source`` memory: "device",
    "pageable" or "pinned"."""
    import torch

    origin = torch.randint(
        0, 256, (nbytes,), dtype=torch.uint8, device=device if source == "device" else "cpu"
    )
    origin, target = (
        origin.pin_memory() if source == "pinned" else origin,
        torch.empty(nbytes, dtype=torch.uint8, device=device),
    )
    timing = benchmark(
        target.copy_, origin, device=device, min_run_time=min_run_time, min_runs=1, warmup=3
    )
    # on the device a copy reads and writes each byte
    return timing.rate(2 * nbytes if source == "device" else nbytes) / 1e9


def measure(device=None, *, size: int | None = None, min_run_time: float = 0.2) -> dict:
    """Measure this machine and return its card (see ``make_card``)."""
    import torch

    device = choose_device(None if device is None else str(device), verbose=False)
    facts = device_facts(device)
    gpu = device.type == "cuda"
    pinning = why_no_pinning() if gpu else None
    n = size or (8192 if gpu else 256)
    notes = {**NOTES[gpu], **({"h2d_pinned": pinning} if pinning else {})}
    if not facts.bf16:
        notes.update(
            dict.fromkeys(
                ["tf32", "bf16"], "no TF32/bf16 tensor cores before compute capability 8.0"
            )
            if gpu
            else {"bf16": "this CPU has no native bf16 instructions: converted in software"}
        )
    keys = (
        ["fp32", "bf16"]
        if not gpu
        else ["fp32", "tf32", "bf16", "fp16"]
        if facts.bf16
        else ["fp32", "fp16"]
    )
    # random data: a GPU runs faster on zeros
    generator = torch.Generator(device=device).manual_seed(0)
    measured = {}
    for key in keys:
        dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(key, torch.float32)
        a, b = (
            torch.randn(n, n, device=device, dtype=dtype, generator=generator) for _ in range(2)
        )
        with _tf32(key == "tf32") if gpu else contextlib.nullcontext():
            # thrown away: clocks rise
            benchmark(torch.matmul, a, b, device=device, min_run_time=min_run_time, min_runs=1)
            timing = benchmark(
                torch.matmul, a, b, device=device, min_run_time=min_run_time, min_runs=1, warmup=5
            )
        measured[key] = timing.rate(2 * n**3) / 1e12
    measured["d2d"] = _copy_gbps(device, 2**29 if gpu else 2**25, min_run_time)
    for source in (["pageable"] + ["pinned"] * (pinning is None)) if gpu else []:
        measured[f"h2d_{source}"] = _copy_gbps(device, 2**28, min_run_time, source=source)
    return make_card(
        facts.name, str(device), measured, notes, matmul_size=n, torch=torch.__version__
    )


def render(card: dict) -> str:
    """The card as a table a learner reads."""
    known = (
        f"known as {card['known_as']}: peaks are NVIDIA's dense figures"
        if card["known_as"]
        else "no published peaks"
    )
    lines = [
        f"gpucourse bench: {card['name']} ({card['device']}), {known}"
        if card["gpu"]
        else "gpucourse bench: NOT A GPU. No CUDA GPU here, so this measures the CPU "
        f"({card['name']}) with small sizes. "
        "Ratios to a GPU's peak need a GPU: run it on one (on Colab: Runtime > Change runtime "
        "type).",
        LINE.format(
            "measurement",
            "value",
            "unit",
            "peak",
            "of peak",
            f"(n x n matmuls, n = {card.get('matmul_size')})",
        ),
    ]
    for row in card["rows"]:
        cells = [
            "-" if row[k] is None else format(row[k], f)
            for k, f in (("value", ".4g"), ("peak", "g"), ("ratio", ".0%"))
        ]
        lines.append(
            LINE.format(row["what"], cells[0], row["unit"], *cells[1:], row["note"]).rstrip()
        )
    values = {row["key"]: row["value"] for row in card["rows"]}
    if values["h2d_pinned"] and values["h2d_pageable"]:
        lines.append(
            f"Pinned host memory copies {values['h2d_pinned'] / values['h2d_pageable']:.1f}x as "
            "fast as pageable."
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gpucourse bench", description=__doc__)
    parser.add_argument("--json", action="store_true", help="print the card as JSON")
    parser.add_argument(
        "--device", help="e.g. cuda, cuda:1, cpu (default: the GPU if there is one)"
    )
    parser.add_argument(
        "--size", type=int, help="n of the n x n matmuls (default: 8192 GPU, 256 CPU)"
    )
    parser.add_argument(
        "--min-run-time", type=float, default=0.2, help="seconds of repeats per measurement"
    )
    args = parser.parse_args(argv)
    try:
        card = measure(args.device, size=args.size, min_run_time=args.min_run_time)
    # DeviceError, strict mode without a GPU, out of memory
    except (ValueError, RuntimeError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(json.dumps(card, indent=2) if args.json else render(card))
    return 0
