"""Lesson 10's GPU path on a CPU: what runs when cudf/cuml import, what is reported as a fallback.

RAPIDS needs a CUDA GPU even to import, so the lesson's own cells (compiled from the solution
notebook by their nbgrader grade_id, or a GPU check by its title) run here against stand-ins: a
fake `cudf.pandas` / `cuml.accel` whose `install()` is recorded, profilers shaped as cuDF's
`Profiler.per_function_stats` (name -> {"gpu": [seconds], "cpu": [seconds]}) and cuML's
`ProfileResults.method_calls` (name -> MethodStats with gpu_calls, cpu_calls, fallback_reasons),
and a device that claims to be CUDA so that the GPU checks judge instead of explaining.
"""

from __future__ import annotations

import json
import sys
import types
from collections import defaultdict

import coursekit as ck
import numpy as np
import pytest
import torch
from coursetools import rehearsal

import gpucourse

LESSON = "10_gpu_dataframes"


def cells() -> list:
    return ck.read(ck.solution_path(LESSON)).cells


def cell(grade_id: str) -> str:
    (found,) = [
        c.source for c in cells() if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id
    ]
    return found


def check(title: str) -> str:
    """A GPU check cell by the start of its title."""
    (found,) = [
        c.source
        for c in cells()
        if c.source.startswith(f"# @title GPU check: {title}")
        and "gpu-check" in c.metadata.get("tags", [])
    ]
    return found


def notebook(*grade_ids: str, **names) -> dict:
    """A __main__ namespace with the lesson's imports and the named cells run in it."""
    namespace = {"__name__": "__main__", "sys": sys, "np": np, "torch": torch, "json": json}
    namespace |= {"gpucourse": gpucourse, "subprocess": __import__("subprocess")}
    namespace["tqdm"] = lambda iterable, **_: iterable
    exec(cell("accelerator_names"), namespace)
    for grade_id in grade_ids:
        exec(cell(grade_id), namespace)
    namespace.update(names)
    return namespace


class Installable(types.ModuleType):
    """A stand-in for cudf.pandas or cuml.accel: counts install() calls, or fails as told."""

    def __init__(self, name: str, error: Exception | None = None):
        super().__init__(name)
        self.installs, self.error = 0, error

    def install(self):
        if self.error is not None:
            raise self.error
        self.installs += 1


def importer(found: dict):
    """importlib's stand-in: import_module(name) gives found[name], or raises what it holds."""

    def import_module(name):
        value = found[name]
        if isinstance(value, BaseException):
            raise value
        return value

    return types.SimpleNamespace(import_module=import_module)


# ----------------------------------------------------------------------- starting the accelerators
def test_without_a_cuda_device_nothing_is_imported_and_the_lesson_says_plain_pandas_runs():
    ns = notebook("accelerators")
    ns["importlib"] = importer({})  # any import attempt would raise KeyError
    for name, library in ns["IMPORTED_FIRST"].items():
        state = ns["start_accelerator"](name, torch.device("cpu"), namespace={})
        assert state.startswith("off: no CUDA GPU here (cpu)") and f"plain {library}" in state


@pytest.mark.parametrize("name", ["cudf.pandas", "cuml.accel"])
def test_on_cuda_with_rapids_the_accelerator_is_installed_once(name):
    module = Installable(name)
    ns = notebook("accelerators")
    ns["importlib"] = importer({name: module})
    assert ns["start_accelerator"](name, "cuda:0", namespace={}) == ns["ON"]
    assert module.installs == 1


@pytest.mark.parametrize(("name", "first"), [("cudf.pandas", "pandas"), ("cuml.accel", "sklearn")])
def test_a_library_imported_first_keeps_the_accelerator_off_and_says_restart(name, first):
    module = Installable(name)
    ns = notebook("accelerators")
    ns["importlib"] = importer({name: module})
    state = ns["start_accelerator"](name, "cuda", namespace={"lib": types.ModuleType(first)})
    assert state.startswith("off: `lib` is plain") and first in state and "restart" in state
    assert module.installs == 0, "installing after the import would accelerate nothing"


def test_a_rerun_does_not_take_the_accelerators_own_modules_for_plain_ones():
    """Run again after they started: cudf.pandas's proxy module (loaded by its ModuleAccelerator)
    and cuml.accel's AccelModule wrapper are not the plain libraries."""
    ns = notebook("accelerators")
    wrapper = type("AccelModule", (types.ModuleType,), {})("sklearn.cluster")
    proxy = types.ModuleType("pandas")
    proxy.__loader__ = type("ModuleAccelerator", (), {})()
    for name, module in (("cuml.accel", wrapper), ("cudf.pandas", proxy)):
        ns["importlib"] = importer({name: Installable(name)})
        assert ns["start_accelerator"](name, "cuda", namespace={"lib": module}) == ns["ON"]


def test_on_colab_pandas_loaded_at_start_up_is_no_reason_to_stay_off():
    """Colab's kernel imports pandas as it starts (the rehearsal's colab-pandas gap); cuDF's
    installer moves that module aside (ModuleAccelerator.__new__), so only a name the notebook
    bound to plain pandas keeps the accelerator off. The cell runs with the notebook's globals."""
    module = Installable("cudf.pandas")
    with rehearsal.Rehearsal("t4", gaps=("colab-pandas",)):
        ns = notebook("accelerators")
        ns["importlib"] = importer({"cudf.pandas": module})
        assert "pandas" in sys.modules and "pd" not in ns
        exec("state = start_accelerator('cudf.pandas', gpucourse.choose_device())", ns)
    assert ns["state"] == ns["ON"] and module.installs == 1


def test_rapids_missing_is_one_sentence_with_the_install_command():
    ns = notebook("accelerators")
    missing = ModuleNotFoundError("No module named 'cudf'", name="cudf")
    ns["importlib"] = importer({"cudf.pandas": missing})
    state = ns["start_accelerator"]("cudf.pandas", "cuda", namespace={})
    assert state.startswith("off: RAPIDS is not installed") and ns["RAPIDS_PIP"] in state
    assert "\n" not in state


def test_a_broken_rapids_install_or_driver_is_reported_not_raised():
    ns = notebook("accelerators")
    dependency = ModuleNotFoundError("No module named 'rmm'", name="rmm")
    no_driver = RuntimeError("CUDA driver version is insufficient for CUDA runtime version")
    ns["importlib"] = importer(
        {"cudf.pandas": dependency, "cuml.accel": Installable("cuml.accel", no_driver)}
    )
    state = ns["start_accelerator"]("cudf.pandas", "cuda", namespace={})
    assert state.startswith("off: cudf.pandas could not start") and "rmm" in state
    state = ns["start_accelerator"]("cuml.accel", "cuda", namespace={})
    assert state == f"off: cuml.accel could not start (RuntimeError: {no_driver})"


def test_the_set_up_check_records_rapids_as_not_validated_on_a_gpu_without_it(
    tmp_path, monkeypatch, capsys
):
    record = tmp_path / "claims.jsonl"
    monkeypatch.setenv("GPUCOURSE_CLAIMS", str(record))
    state = "off: RAPIDS is not installed (...)"
    ns = notebook(
        device=torch.device("cuda"), accelerators={"cudf.pandas": "on", "cuml.accel": state}
    )
    exec(check("RAPIDS starts on this GPU"), ns)
    entries = [json.loads(line) for line in record.read_text().splitlines()]
    assert [(e["what"], e["met"]) for e in entries] == [
        ("cudf.pandas installed and started", True),
        ("cuml.accel installed and started", False),
    ]
    assert entries[1]["why"] == state and "Not validated on this GPU" in capsys.readouterr().out


def test_the_accelerators_start_before_pandas_and_sklearn_are_imported():
    """The cell that starts them comes before any cell importing pandas or scikit-learn."""
    sources = [c.source for c in cells() if c.cell_type == "code"]
    start = next(i for i, s in enumerate(sources) if "start_accelerator(name, device)" in s)
    imports = [
        i
        for i, s in enumerate(sources)
        if "import pandas" in s or "from sklearn" in s or "from ml_work" in s
    ]
    assert imports and start < min(imports)


# ------------------------------------------------------------------------------ what fell back
def cudf_profiler_stats(calls: dict) -> defaultdict:
    """cuDF Profiler.per_function_stats: a defaultdict of defaultdict(list), name -> gpu/cpu."""
    stats = defaultdict(lambda: defaultdict(list))
    for name, (gpu, cpu) in calls.items():
        stats[name]["gpu"].extend(gpu)
        stats[name]["cpu"].extend(cpu)
    return stats


def test_pandas_fallbacks_names_the_functions_with_cpu_calls():
    ns = notebook("profiler", "fallbacks")
    profiler = types.SimpleNamespace(
        per_function_stats=cudf_profiler_stats(
            {
                "DataFrame.groupby": ([0.01], []),
                "DataFrame.apply": ([], [0.4]),
                "Series.sum": ([0.001], [0.002]),
                "DataFrame.assign": ([0.01, 0.02], []),
            }
        )
    )
    assert ns["pandas_fallbacks"](profiler) == ["DataFrame.apply", "Series.sum"]
    assert ns["pandas_fallbacks"](None) is None


def test_the_pandas_profiler_is_cudfs_where_it_is_on_and_a_silent_stand_in_elsewhere(monkeypatch):
    ns = notebook("profiler", "fallbacks")
    with ns["pandas_profiler"]({"cudf.pandas": "off: no CUDA GPU here (cpu)"}) as profiler:
        pass
    assert profiler is None
    fake = types.ModuleType("cudf.pandas")
    fake.Profiler = type("Profiler", (), {})
    monkeypatch.setitem(sys.modules, "cudf", types.ModuleType("cudf"))
    monkeypatch.setitem(sys.modules, "cudf.pandas", fake)
    assert isinstance(ns["pandas_profiler"]({"cudf.pandas": ns["ON"]}), fake.Profiler)


def run_fallback_check(per_function_stats: dict, capsys) -> str:
    ns = notebook("profiler", "fallbacks", device=torch.device("cuda"))
    ns["accelerators"] = {"cudf.pandas": ns["ON"], "cuml.accel": ns["ON"]}
    ns["profiler"] = types.SimpleNamespace(per_function_stats=per_function_stats)
    exec(check("the profiler names DataFrame.apply"), ns)
    return capsys.readouterr().out


def test_the_fallback_check_passes_when_the_profiler_names_apply_and_fails_when_not(capsys):
    out = run_fallback_check(cudf_profiler_stats({"DataFrame.apply": ([], [0.3])}), capsys)
    assert "GPU claim PASS" in out
    on_gpu = cudf_profiler_stats({"DataFrame.apply": ([0.3], []), "DataFrame.groupby": ([1], [])})
    assert "GPU claim FAIL" in run_fallback_check(on_gpu, capsys)


class MethodStats:
    """cuML's MethodStats, as its profiler fills it."""

    def __init__(self, gpu_calls=0, cpu_calls=0, reasons=()):
        self.gpu_calls, self.cpu_calls = gpu_calls, cpu_calls
        self.gpu_time = self.cpu_time = 0.0
        self.fallback_reasons = set(reasons)


def test_sklearn_calls_splits_gpu_methods_from_fallbacks_with_their_reasons():
    ns = notebook("profiler", "sklearn_profiler", "sklearn_fallbacks")
    results = types.SimpleNamespace(
        method_calls={
            "KMeans.fit": MethodStats(gpu_calls=1),
            "RandomForestClassifier.fit": MethodStats(gpu_calls=1),
            "RandomForestClassifier.score": MethodStats(cpu_calls=2, reasons={"b", "a"}),
            "KMeans.predict": MethodStats(gpu_calls=1, cpu_calls=1),
        }
    )
    assert ns["sklearn_calls"](results) == {
        "gpu": ["KMeans.fit", "KMeans.predict", "RandomForestClassifier.fit"],
        "cpu": {"KMeans.predict": [], "RandomForestClassifier.score": ["a", "b"]},
    }
    assert ns["sklearn_calls"](None) is None


def test_the_sklearn_profiler_is_quiet_cuml_where_it_is_on(monkeypatch):
    ns = notebook("profiler", "sklearn_profiler", "sklearn_fallbacks")
    asked = []
    accel = types.ModuleType("cuml.accel")
    accel.profile = lambda quiet=False: asked.append(quiet) or "profile"
    cuml = types.ModuleType("cuml")
    cuml.accel = accel
    monkeypatch.setitem(sys.modules, "cuml", cuml)
    monkeypatch.setitem(sys.modules, "cuml.accel", accel)
    assert ns["sklearn_profiler"]({"cuml.accel": ns["ON"]}) == "profile" and asked == [True]
    with ns["sklearn_profiler"]({"cuml.accel": "off: ..."}) as results:
        assert results is None


def test_the_gpu_fit_check_needs_both_fits_on_the_gpu(capsys):
    ns = notebook("profiler", "sklearn_profiler", "sklearn_fallbacks", device=torch.device("cuda"))
    ns["accelerators"] = {"cudf.pandas": ns["ON"], "cuml.accel": ns["ON"]}
    fits = {"KMeans.fit": MethodStats(gpu_calls=1)}
    ns["results"] = types.SimpleNamespace(method_calls=fits)
    exec(check("cuml.accel ran KMeans.fit"), ns)
    assert "GPU claim FAIL" in capsys.readouterr().out, "the forest fell back"
    fits["RandomForestClassifier.fit"] = MethodStats(gpu_calls=1)
    exec(check("cuml.accel ran KMeans.fit"), ns)
    assert "GPU claim PASS" in capsys.readouterr().out


# ------------------------------------------------------------------------------------ the timing
def test_the_script_runs_plainly_or_under_python_m_accelerator():
    ns = notebook("timing_command")
    command = ns["script_command"]
    assert command("/w/frames_work.py", "plain", 10, 100) == [
        sys.executable,
        "/w/frames_work.py",
        "10",
        "100",
    ]
    assert command("/w/frames_work.py", "cudf.pandas", 10)[1:] == [
        "-m",
        "cudf.pandas",
        "/w/frames_work.py",
        "10",
    ]
    assert command("ml_work.py", "cuml.accel", 5, "labels.npy")[1:3] == ["-m", "cuml.accel"]


def test_the_modes_run_in_turns():
    ns = notebook("timing_command", "timing_run", "timing")
    seen = []
    runs = ns["interleaved_runs"](
        "s.py",
        ["plain", "cudf.pandas"],
        [10],
        rounds=3,
        run=lambda cmd: seen.append(cmd) or len(seen),
    )
    assert [cmd[2] if cmd[1] == "-m" else "plain" for cmd in seen] == ["plain", "cudf.pandas"] * 3
    assert runs == {"plain": [1, 3, 5], "cudf.pandas": [2, 4, 6]}


def test_run_script_reads_the_last_json_line_and_reports_a_failure_with_its_error(tmp_path):
    ns = notebook("timing_command", "timing_run")
    good = tmp_path / "good.py"
    good.write_text(
        'import json, sys\nprint("warming up")\nprint(json.dumps({"n": sys.argv[1:]}))\n'
    )
    assert ns["run_script"](ns["script_command"](good, "plain", 7)) == {"n": ["7"]}
    bad = tmp_path / "bad.py"
    bad.write_text('raise RuntimeError("no CUDA-capable device is detected")\n')
    with pytest.raises(RuntimeError, match="(?s)bad.py failed.*no CUDA-capable device"):
        ns["run_script"](ns["script_command"](bad, "plain"))


def test_the_speed_up_check_compares_the_largest_size(capsys):
    ns = notebook(device=torch.device("cuda"), sizes=[1_000, 1_000_000])
    ns["frame_seconds"] = {"plain": [0.001, 0.9], "cudf.pandas": [0.01, 0.05]}
    exec(check("cudf.pandas runs summarize() faster"), ns)
    assert "GPU claim PASS" in capsys.readouterr().out
    ns["frame_seconds"] = {"plain": [0.001, 0.9], "cudf.pandas": [0.0001, 0.6]}
    exec(check("cudf.pandas runs summarize() faster"), ns)
    assert "GPU claim FAIL" in capsys.readouterr().out, "a win at a small size proves nothing"
    ns["frame_seconds"] = {"plain": [0.001, 0.9]}
    exec(check("cudf.pandas runs summarize() faster"), ns)
    assert "here it is off" in capsys.readouterr().out


# -------------------------------------------------------------------------------------- DLPack
def test_without_cudf_the_matrix_is_numpy_and_torch_shares_its_memory():
    ns = notebook("bridge", pd=__import__("pandas"))
    columns = {"price": np.array([1.5, 2.0, 3.0]), "quantity": np.array([1, 2, 3])}
    matrix = ns["feature_matrix"](columns, {"cudf.pandas": "off: no CUDA GPU here (cpu)"})
    assert isinstance(matrix, np.ndarray) and matrix.dtype == np.float32 and matrix.shape == (3, 2)
    tensor = torch.from_dlpack(matrix)
    assert tensor.data_ptr() == matrix.ctypes.data and tensor[2, 1].item() == 3.0


def test_with_cudf_the_matrix_comes_from_cudf_to_cupy_in_float32(monkeypatch):
    made = []

    class DataFrame:
        def __init__(self, columns):
            made.append(columns)

        def to_cupy(self, dtype=None):
            return ("cupy matrix", dtype)

    cudf = types.ModuleType("cudf")
    cudf.DataFrame = DataFrame
    monkeypatch.setitem(sys.modules, "cudf", cudf)
    ns = notebook("bridge", pd=None)  # pandas must not be used on this path
    columns = {"price": np.ones(2)}
    assert ns["feature_matrix"](columns, {"cudf.pandas": ns["ON"]}) == ("cupy matrix", "float32")
    assert made == [columns]


def test_the_dlpack_check_wants_the_same_pointer_on_the_gpu(capsys):
    ns = notebook(device=torch.device("cuda"), accelerators={"cudf.pandas": "on"})
    ns["matrix"] = types.SimpleNamespace(data=types.SimpleNamespace(ptr=1234))
    ns["tensor"] = types.SimpleNamespace(is_cuda=True, data_ptr=lambda: 1234)
    exec(check("torch.from_dlpack wraps"), ns)
    assert "GPU claim PASS" in capsys.readouterr().out
    ns["tensor"] = types.SimpleNamespace(is_cuda=True, data_ptr=lambda: 5678)  # a copy
    exec(check("torch.from_dlpack wraps"), ns)
    assert "GPU claim FAIL" in capsys.readouterr().out


@pytest.mark.parametrize(
    "wrong, message",
    [
        (
            "for size, plain, fast in sorted(zip(sizes, plain_s, accelerated_s)):\n"
            "        if fast < plain:\n            return size\n    return None",
            "a win at a small size followed by a loss",
        ),
        (
            "wins = None\n    rows = list(zip(sizes, plain_s, accelerated_s))\n"
            "    for size, plain, fast in reversed(rows):\n"
            "        if fast >= plain:\n            break\n        wins = size\n    return wins",
            "sort them",
        ),
    ],
)
def test_the_visible_test_of_exercise_2_catches_the_naive_answers(wrong, message):
    """The first size where the GPU wins, or the sizes in the order given: the visible test says
    which, before any hidden test runs."""
    namespace = {}
    exec(f"def gpu_wins_from(sizes, plain_s, accelerated_s):\n    {wrong}", namespace)
    with pytest.raises(AssertionError, match=message):
        exec(
            ck.code_cell("10_gpu_dataframes", "gpu_wins_from([10, 100, 1000]").split(
                "### BEGIN HIDDEN TESTS"
            )[0],
            namespace,
        )
