"""Lesson 05's fancy-upsampling check on GPUs with a hardware JPEG decoder, pinned on a CPU.

DALI hands ``jpeg_fancy_upsampling`` to nvJPEG's CUDA decoder and to its hardware decoder alike
(DALI's ``imgcodec/image_decoder.h`` sets both modules' ``fancy_upsampling`` option;
nvImageCodec's ``hw_decoder.cpp`` passes the flag to ``nvjpegCreateEx(NVJPEG_BACKEND_HARDWARE,
...)``), but nvJPEG's documentation of ``NVJPEG_FLAGS_UPSAMPLING_WITH_INTERPOLATION`` names no
backend. With ``hw_decoder_load=0`` nvImageCodec gives the hardware decoder a batch of 0 and
every image falls back to the CUDA decoder (``image_generic_codec.h``: ``selectBatchSize``; read
in nvImageCodec 0.8, the 0.9 wheel installed here makes the same nvJPEG calls). So
the lesson's check decodes that way, and shows the hardware decoder's share apart, unclaimed.
"""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace

import coursekit as ck
import numpy as np
import pytest

LESSON = "05_dali_pipelines"
CHECK = "# @title GPU check: with jpeg_fancy_upsampling, nvJPEG decodes"


class FakeDali:
    """`fn`, `types` and `pipeline_def` enough to run the lesson's decode cells: each decode is
    recorded; a GPU decode is 4 grey levels off the CPU's without the flag, 1 with it."""

    def __init__(self):
        self.decodes = []
        decoders = SimpleNamespace(image=self._decode)
        readers = SimpleNamespace(file=lambda **kwargs: ("jpegs", "labels"))
        self.fn = SimpleNamespace(decoders=decoders, readers=readers)
        self.types = SimpleNamespace(RGB="RGB")

    def _decode(self, jpegs, *, device, **kwargs):
        self.decodes.append({"device": device, **kwargs})
        return self.decodes[-1]

    def pipeline_def(self, graph):
        def build(*args, batch_size, num_threads, device_id, **kwargs):
            decode = graph(*args, **kwargs)
            off = 0 if decode["device"] == "cpu" else (1 if decode["jpeg_fancy_upsampling"] else 4)
            batch = np.full((batch_size, 6, 6, 3), 100 + off, dtype=np.uint8)
            tensor_list = SimpleNamespace(as_cpu=lambda: SimpleNamespace(as_array=lambda: batch))
            return SimpleNamespace(run=lambda: [tensor_list])

        return build


def _cells() -> dict[str, str]:
    nb = ck.read(ck.solution_path(LESSON))
    source = {c.get("id"): c.source for c in nb.cells}
    tags = {c.get("id"): c.metadata.get("tags", []) for c in nb.cells}
    (observe,) = [i for i, s in source.items() if "hw_decoder_load=0.65, per image" in s]
    return {
        "decode_only": ck.code_cell(LESSON, "def decode_only("),
        "decoded_at_source": ck.code_cell(LESSON, "def decoded_at_source("),
        "gaps": ck.code_cell(LESSON, "decode_gaps = {"),
        "print": ck.code_cell(LESSON, 'jpeg_fancy_upsampling={fancy}:", '),
        "observe": source[observe],
        "observe_tags": tags[observe],
    }


def _run(decoder: str, dali=True):
    fake, cells = FakeDali(), _cells()
    namespace = {
        "fn": fake.fn,
        "types": fake.types,
        "pipeline_def": fake.pipeline_def,
        "np": np,
        "root": Path("/shapes"),
        "dali": dali,
        "dali_device": 0 if decoder == "mixed" else None,
        "decoder": decoder,
        "facts": SimpleNamespace(name="a faked H100"),
    }
    for name in ("decode_only", "decoded_at_source", "gaps", "print"):
        exec(cells[name], namespace)
    checked = len(fake.decodes)
    exec(cells["observe"], namespace)
    return fake.decodes[:checked], fake.decodes[checked:], namespace


def test_the_checks_gpu_decodes_give_no_image_to_a_hardware_decoder(capsys):
    checked, observed, namespace = _run("mixed")
    gpu = [d for d in checked if d["device"] == "mixed"]
    assert sorted(d["jpeg_fancy_upsampling"] for d in gpu) == [False, True]
    assert all(d["hw_decoder_load"] == 0 for d in checked)  # the CUDA decoder takes every image
    ratio = namespace["decode_gaps"][True] / namespace["decode_gaps"][False]
    assert np.allclose(ratio, 0.25)  # what the check then reads: 1 grey level against 4
    out = capsys.readouterr().out
    assert "jpeg_fancy_upsampling=True: 0.0039 0.0039" in out  # per image, as the check sees them

    # the hardware decoder's share, shown apart: DALI's default share, both settings of the flag
    assert [(d["device"], d["hw_decoder_load"]) for d in observed] == [("mixed", 0.65)] * 2
    assert sorted(d["jpeg_fancy_upsampling"] for d in observed) == [False, True]
    assert "gap with the flag over without: 0.25 0.25" in out


def test_the_hardware_observation_is_a_demo_that_claims_nothing():
    cells = _cells()
    assert "demo" in cells["observe_tags"] and "gpu-check" not in cells["observe_tags"]
    assert "claims." not in cells["observe"]
    check = [
        c.source for c in ck.read(ck.solution_path(LESSON)).cells if c.source.startswith(CHECK)
    ]
    assert len(check) == 1 and "decode_gaps" in check[0]  # the check reads only the CUDA path


@pytest.mark.parametrize("decoder, dali", [("cpu", True), ("mixed", None)])
def test_no_gpu_or_no_dali_decodes_nothing_for_the_hardware_path(decoder, dali):
    if dali is None:  # the lesson's own cells skip everything without DALI
        cells = _cells()
        namespace = {"dali": None, "decoder": decoder, "np": np}
        exec(cells["observe"], namespace)
        assert "ratios" not in namespace
        return
    checked, observed, _ = _run(decoder, dali)
    assert observed == [] and {d["device"] for d in checked} == {"cpu"}


def test_the_observation_uses_dalis_documented_default_share():
    dali_fn = pytest.importorskip("nvidia.dali.fn")
    documented = re.search(
        r"hw_decoder_load : float, optional, default = `([0-9.]+)`", dali_fn.decoders.image.__doc__
    )
    assert documented, "DALI documents hw_decoder_load's default"
    used = re.search(r"decoded_at_source\(decoder, fancy, ([0-9.]+)\)", _cells()["observe"])
    assert float(used[1]) == float(documented[1])


def test_both_of_dalis_decoders_take_the_share_argument(tmp_path):
    """The CPU decoder (this run) ignores it and decodes; the mixed one (on a GPU) has it in its
    schema: the pipeline with it serializes, as DALI checks arguments at that point."""
    pytest.importorskip("nvidia.dali")
    from nvidia.dali import fn, pipeline_def, types

    import gpucourse

    root = gpucourse.write_image_folder(n_per_class=2, image_size=48)
    namespace = {"fn": fn, "types": types, "pipeline_def": pipeline_def}
    exec(_cells()["decode_only"], namespace)
    decode_only = namespace["decode_only"]
    settings = dict(batch_size=8, num_threads=1, device_id=None)
    images = decode_only(str(root), "cpu", True, 0.0, **settings).run()[0].as_array()
    assert images.shape == (8, 48, 48, 3)
    mixed = decode_only(str(root), "mixed", True, 0.0, **settings).serialize()
    assert b"hw_decoder_load" in mixed and b"jpeg_fancy_upsampling" in mixed
