"""The course's own images, drawn from a seed (nothing is downloaded): coloured shapes of varying
size, position and rotation on noisy backgrounds, in memory (``shapes_dataset``) or as JPEG files
(``write_image_folder``)."""

import json
import math
import os
import shutil
import tempfile
from pathlib import Path

import numpy as np

CLASSES = ("circle", "square", "triangle", "cross")
_VERSION = 2  # bump when the drawing changes, so caches are rebuilt


def _draw(rng: np.random.Generator, label: int, size: int) -> np.ndarray:
    from PIL import Image, ImageDraw

    background = rng.integers(0, 256, 3)
    pixels = background + rng.normal(0, 24, (size, size, 3))
    image = Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8))
    colour = tuple(int(c) for c in (background + 128 + rng.integers(-48, 48, 3)) % 256)
    r = size * rng.uniform(0.22, 0.34)
    cx, cy = rng.uniform(r + 1, size - r - 1, 2)
    angle = rng.uniform(0, 2 * math.pi)
    draw = ImageDraw.Draw(image)
    shape = CLASSES[label]
    if shape == "circle":
        draw.ellipse([cx - r, cy - r, cx + r, cy + r], fill=colour)
    elif shape == "cross":  # two bars
        for a in (angle, angle + math.pi / 2):
            dx, dy = r * 1.2 * math.cos(a), r * 1.2 * math.sin(a)
            draw.line([cx - dx, cy - dy, cx + dx, cy + dy], fill=colour, width=max(2, int(r / 2.5)))
    else:  # a square tilted by at most 20 degrees (never a diamond), or a triangle at any angle
        sides, start = (4, math.pi / 4 + (angle % 0.7) - 0.35) if shape == "square" else (3, angle)
        turns = [start + 2 * math.pi * k / sides for k in range(sides)]
        draw.polygon(
            [(cx + r * 1.3 * math.cos(a), cy + r * 1.3 * math.sin(a)) for a in turns], fill=colour
        )
    return np.asarray(image)


def make_shapes(n: int, *, image_size: int = 32, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """``n`` images (uint8, N x H x W x 3) and labels (int64), balanced over ``CLASSES``."""
    if n < 1 or image_size < 8:
        raise ValueError(f"need n >= 1 and image_size >= 8, got n={n}, image_size={image_size}")
    rng = np.random.default_rng(seed)
    labels = rng.permutation(np.arange(n) % len(CLASSES)).astype(np.int64)
    images = np.stack([_draw(rng, int(label), image_size) for label in labels])
    return images, labels


def shapes_dataset(n: int, *, image_size: int = 32, seed: int = 0):
    """The shapes as a ``TensorDataset`` of float images in [0, 1] (N x 3 x H x W, contiguous: the
    layout a ``DataLoader`` batch has, so a model runs the same kernels on either) and labels."""
    import torch

    images, labels = make_shapes(n, image_size=image_size, seed=seed)
    # permute alone is channels-last
    x = torch.from_numpy(images).permute(0, 3, 1, 2).contiguous().float().div_(255)
    return torch.utils.data.TensorDataset(x, torch.from_numpy(labels))


def write_image_folder(
    root: str | os.PathLike | None = None,
    *,
    n_per_class: int = 64,
    image_size: int = 64,
    seed: int = 0,
    quality: int = 90,
) -> Path:
    """Write the shapes as JPEG files ``root/<class>/<n>.jpg`` (default: under ``$GPUCOURSE_DATA``
    or ``~/.cache/gpucourse``), once: the tree is written next to ``root`` and moved into place in
    one step, so two processes may race."""
    from PIL import Image

    params = {
        "version": _VERSION,
        "n_per_class": n_per_class,
        "image_size": image_size,
        "seed": seed,
        "quality": quality,
    }
    cache = Path(os.environ.get("GPUCOURSE_DATA") or Path.home() / ".cache" / "gpucourse")
    root = Path(root or cache / f"shapes-{image_size}px-{n_per_class}x{len(CLASSES)}-seed{seed}")
    manifest = root / "manifest.json"
    if manifest.exists() and json.loads(manifest.read_text()) == params:
        return root
    images, labels = make_shapes(n_per_class * len(CLASSES), image_size=image_size, seed=seed)
    root.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{root.name}-", dir=root.parent))
    for label, name in enumerate(CLASSES):
        (staging / name).mkdir()
        for i, image in enumerate(images[labels == label]):
            Image.fromarray(image).save(staging / name / f"{i:05d}.jpg", quality=quality)
    (staging / "manifest.json").write_text(json.dumps(params))
    shutil.rmtree(root, ignore_errors=True)  # an older tree, if any
    try:
        staging.rename(root)
    except OSError:  # another process won the race and wrote the same tree
        shutil.rmtree(staging, ignore_errors=True)
    return root
