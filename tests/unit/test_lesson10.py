"""Lesson 10's GPU path on a CPU: what runs when cudf/cuml import, what is reported as a fallback.

RAPIDS needs a CUDA GPU even to import, so the lesson's own cells (compiled from the solution
notebook by their nbgrader grade_id, or a GPU check by its title) run here against stand-ins: a
fake `cudf.pandas` / `cuml.accel` whose `install()` is recorded (or, for cudf.pandas, does what
cuDF's installer does to the pandas Colab loads at start-up: moves it aside and serves `import
pandas` a module that prints as cuDF's proxy does), profilers shaped as cuDF's
`Profiler.per_function_stats` (name -> {"gpu": [seconds], "cpu": [seconds]}) and cuML's
`ProfileResults.method_calls` (name -> MethodStats with gpu_calls, cpu_calls, fallback_reasons),
and a device that claims to be CUDA so that the GPU checks judge instead of explaining. Exercise
4's referee, which counts the steps of the notebook's own Python on 300 and 3,000 rows, runs on
right and wrong answers.
"""

from __future__ import annotations

import contextlib
import importlib.abc
import importlib.machinery
import json
import os
import statistics
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
    return ck.gpu_check(LESSON, f"GPU check: {title}")


def code(start: str) -> str:
    """A code cell of the lesson by the start of its source."""
    (found,) = [c.source for c in cells() if c.cell_type == "code" and c.source.startswith(start)]
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
        if self.__name__ == "cuml.accel":  # cuML >= 25.10: its start-up file then starts it in
            os.environ.setdefault("CUML_ACCEL_ENABLED", "1")  # every new Python process


@pytest.fixture(autouse=True)
def _no_accelerator_switch_left_behind(monkeypatch):
    """cuml.accel's stand-in sets CUML_ACCEL_ENABLED as cuML does: undone after each test."""
    monkeypatch.delenv("CUML_ACCEL_ENABLED", raising=False)


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


class FakeModuleAccelerator(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """cuDF's ModuleAccelerator as far as starting it goes (cudf/pandas/module_accelerator.py): a
    finder first on sys.meta_path that serves `import pandas` a module of its own, with no origin,
    so that the module prints with the loader's repr, as cuDF's documentation shows."""

    def __init__(self, fast="cudf"):
        self.fast = fast

    def __repr__(self):
        return f"ModuleAccelerator(fast={self.fast}, slow=pandas)"

    def find_spec(self, fullname, path, target=None):
        if fullname == "pandas":
            return importlib.machinery.ModuleSpec(fullname, self, origin=None)
        return None

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        module.DataFrame = sys.modules["_slow_lib_pandas"].DataFrame


def fake_cudf_pandas(monkeypatch, fast="cudf") -> types.ModuleType:
    """A `cudf.pandas` whose install() does what cuDF's does to a pandas already loaded: moves it
    and its submodules aside (to `_slow_lib_pandas...`) and puts its finder first; every change is
    undone after the test. fast="pandas" is cuDF's fallback mode: a proxy of pandas itself."""
    module = types.ModuleType("cudf.pandas")

    def install():
        import pandas  # noqa: F401 (ModuleAccelerator imports the slow library first)

        for name in [n for n in sys.modules if n == "pandas" or n.startswith("pandas.")]:
            monkeypatch.setitem(sys.modules, f"_slow_lib_{name}", sys.modules[name])
            monkeypatch.delitem(sys.modules, name)
        monkeypatch.setattr(sys, "meta_path", [FakeModuleAccelerator(fast), *sys.meta_path])

    module.install = install
    return module


def start_as_on_colab(monkeypatch, module, capsys, **names) -> dict:
    """Colab's start-up (pandas loaded, not in the notebook's globals), then the lesson's cells:
    the start, the imports, which pandas `pd` is, and its GPU check."""
    with rehearsal.Rehearsal("t4", gaps=("colab-pandas",)):
        assert "pandas" in sys.modules
        ns = notebook("accelerators", "which_pandas", **names)
        held = [
            k for k, v in ns.items() if isinstance(v, types.ModuleType) and v.__name__ == "pandas"
        ]
        assert held == list(names), "only a name the test binds holds pandas"
        ns["importlib"] = importer({"cudf.pandas": module, "cuml.accel": Installable("cuml.accel")})
        ns["device"] = gpucourse.choose_device(verbose=False)
        exec(code("accelerators = {name: start_accelerator"), ns)
        exec(code("import numpy as np\nimport pandas as pd"), ns)
        exec(code("pandas_is = which_pandas(pd)"), ns)
        exec(check("`import pandas` gives cudf.pandas' proxy"), ns)
    ns["out"] = capsys.readouterr().out
    return ns


def test_on_colab_the_start_installs_and_pd_is_then_the_proxy(monkeypatch, capsys):
    """Pandas loaded by Colab's start-up is no reason to refuse: cuDF's installer moves it aside,
    so `import pandas as pd` after the start gives the proxy; the lesson checks and says so."""
    ns = start_as_on_colab(monkeypatch, fake_cudf_pandas(monkeypatch), capsys)
    assert repr(ns["pd"]) == "<module 'pandas' (ModuleAccelerator(fast=cudf, slow=pandas))>"
    assert ns["accelerators"]["cudf.pandas"] == ns["ON"]
    assert f"`pd` is {ns['PROXY']}" in ns["out"] and "GPU claim PASS" in ns["out"]


def test_a_start_that_leaves_pd_plain_is_said_and_turns_cudf_pandas_off(monkeypatch, capsys):
    """An install() that did not rewire pandas, or cuDF's fallback mode (a proxy whose fast library
    is pandas itself): `pd` is plain, the lesson says so, runs plain pandas, and the check fails."""
    for module in (Installable("cudf.pandas"), fake_cudf_pandas(monkeypatch, fast="pandas")):
        ns = start_as_on_colab(monkeypatch, module, capsys)
        assert "`pd` is plain pandas" in ns["out"] and "GPU claim FAIL" in ns["out"]
        assert ns["accelerators"]["cudf.pandas"].startswith("off: cudf.pandas started, but `pd`")


def test_a_pd_the_notebook_bound_before_the_start_keeps_cudf_pandas_off(monkeypatch, capsys):
    """What stays plain is a name bound earlier in the notebook: the start refuses, installs
    nothing, and the GPU check does not judge an accelerator that never started."""
    import pandas

    module = Installable("cudf.pandas")
    ns = start_as_on_colab(monkeypatch, module, capsys, pd=pandas)
    assert ns["accelerators"]["cudf.pandas"].startswith("off: `pd` is plain pandas")
    assert module.installs == 0 and "GPU claim" not in ns["out"]


@pytest.mark.parametrize(
    ("torch_cuda", "driver_cuda", "wheel"),
    [
        ("12.8", None, "cu12"),
        ("13.0", "12.4", "cu13"),
        (None, "13.0", "cu13"),
        (None, None, None),
        ("11.8", None, "cu11"),
        (None, "11.4", "cu11"),
    ],
)
def test_the_pip_line_takes_pytorchs_cuda_major_else_the_drivers(
    monkeypatch, torch_cuda, driver_cuda, wheel
):
    monkeypatch.setattr(torch.version, "cuda", torch_cuda)
    asked = []
    driver = {"cuda": driver_cuda}
    monkeypatch.setattr(gpucourse.device, "probe_driver", lambda: asked.append(1) or driver)
    line = notebook()["RAPIDS_PIP"]
    if wheel == "cu11":  # RAPIDS' last cu11 wheels are 25.06: no cudf-cu11 26.2 to install
        assert "cudf-cu11" not in line and "needs CUDA 12 or 13" in line
    elif wheel:
        assert line == f"pip install cudf-{wheel}==26.2.* cuml-{wheel}==26.2.*"
    else:
        assert "cudf-cuNN" in line and "nvidia-smi" in line
    assert asked == ([] if torch_cuda else [1]), "the driver is asked only for a CPU-only PyTorch"


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


def ml_runs(kmeans: tuple, forest: tuple) -> dict:
    """Interleaved script results, three rounds: (plain seconds, cuml.accel seconds) per fit."""
    return {
        mode: [{"kmeans_s": kmeans[i], "forest_s": forest[i]} for _ in range(3)]
        for i, mode in enumerate(("plain", "cuml.accel"))
    }


def run_fit_checks(runs: dict, capsys) -> str:
    ns = notebook(device=torch.device("cuda"), n_ml=500_000, ml_runs=runs, statistics=statistics)
    exec(code("ml_seconds = {"), ns)
    exec(check("cuml.accel fits k-means"), ns)
    exec(check("cuml.accel fits the random forest"), ns)
    return capsys.readouterr().out


def test_k_means_and_the_forest_are_judged_apart_not_summed(capsys):
    """A k-means that fell back (1x) fails its own claim even when the forest's speed-up would
    carry the sum; each claim names its estimator and size."""
    out = run_fit_checks(ml_runs(kmeans=(0.5, 0.05), forest=(20.0, 0.5)), capsys)
    assert out.count("GPU claim PASS") == 2, out
    assert "KMeans.fit on 500000 points" in out and "RandomForestClassifier.fit on 187500" in out
    out = run_fit_checks(ml_runs(kmeans=(0.5, 0.52), forest=(20.0, 0.5)), capsys)
    assert "FAIL on cuda: KMeans.fit" in out and "PASS on cuda: RandomForestClassifier" in out
    out = run_fit_checks(ml_runs(kmeans=(0.5, 0.05), forest=(20.0, 19.0)), capsys)
    assert "PASS on cuda: KMeans.fit" in out and "FAIL on cuda: RandomForestClassifier" in out


def test_without_cuml_accel_the_fit_checks_explain_instead_of_judging(capsys):
    runs = {"plain": [{"kmeans_s": 0.5, "forest_s": 2.0}] * 2}
    out = run_fit_checks(runs, capsys)
    assert "GPU claim" not in out and out.count("On a CUDA GPU with RAPIDS this checks") == 2


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


def test_plain_runs_start_with_cuml_accels_switch_off_after_it_started(tmp_path):
    """cuml.accel.install() sets CUML_ACCEL_ENABLED=1 and cuML's .pth then accelerates every child
    Python: the timing runs get it as 0, so the plain side is scikit-learn on the CPU."""
    ns = notebook("timing_command", "timing_run")
    Installable("cuml.accel").install()
    assert os.environ["CUML_ACCEL_ENABLED"] == "1"
    child = tmp_path / "child.py"
    child.write_text(
        'import json, os\nprint(json.dumps({"env": os.environ["CUML_ACCEL_ENABLED"]}))\n'
    )
    assert ns["run_script"](ns["script_command"](child, "plain")) == {"env": "0"}


@pytest.mark.parametrize(("mode", "rejected"), [("plain", True), ("cuml.accel", False)])
def test_a_plain_run_that_ran_accelerated_is_rejected(mode, rejected):
    seen = {}

    def run(command, **kwargs):
        seen.update(kwargs)
        return types.SimpleNamespace(returncode=0, stdout='{"accelerated": true}\n', stderr="")

    ns = notebook("timing_command", "timing_run")
    ns["subprocess"] = types.SimpleNamespace(run=run)
    command = ns["script_command"]("ml_work.py", mode, 5, "labels.npy")
    if rejected:
        with pytest.raises(RuntimeError, match="precondition not met: plain ml_work.py ran accel"):
            ns["run_script"](command)
    else:
        assert ns["run_script"](command) == {"accelerated": True}
    assert seen["env"]["CUML_ACCEL_ENABLED"] == "0"


@pytest.mark.parametrize(
    ("script", "mode"), [("frames_work.py", "cudf.pandas"), ("ml_work.py", "cuml.accel")]
)
def test_the_scripts_report_whether_the_accelerator_ran_not_whether_it_was_imported(script, mode):
    """cuML's .pth imports cuml.accel into plain processes too: the scripts ask it (enabled()) or
    look at pandas' repr, not at sys.modules."""
    source = code(f"%%writefile {{workdir}}/{script}")
    if mode == "cuml.accel":
        assert 'accelerated": accelerated()' in source and "accel.enabled()" in source
    else:
        assert '"ModuleAccelerator(fast=cudf," in repr(pd)' in source
    assert "in sys.modules}" not in source


def run_speedup_check(frame_seconds: dict, capsys, sizes=(1_000, 1_000_000, 5_000_000)) -> str:
    ns = notebook(device=torch.device("cuda"), sizes=list(sizes), frame_seconds=frame_seconds)
    exec(check("cudf.pandas runs summarize() faster"), ns)
    return capsys.readouterr().out


def test_the_speed_up_checks_judge_1m_and_5m_rows_each_with_its_own_bound(capsys):
    """1.5x at 1M rows, 4x at 5M: a GPU that wins at the largest size only, or only by a little,
    fails where it falls short; a win at 1,000 rows proves nothing."""
    out = run_speedup_check(
        {"plain": [0.001, 0.08, 0.5], "cudf.pandas": [0.01, 0.01, 0.02]}, capsys
    )
    assert out.count("GPU claim PASS") == 2 and "FAIL" not in out
    assert "1000000 rows at least 1.5x" in out and "5000000 rows at least 4x" in out
    slow_at_1m = {"plain": [0.001, 0.08, 0.5], "cudf.pandas": [0.0001, 0.06, 0.02]}
    out = run_speedup_check(slow_at_1m, capsys)
    assert (
        "FAIL on cuda: summarize() on 1000000" in out
        and "PASS on cuda: summarize() on 5000000" in out
    )
    fell_back = {"plain": [0.001, 0.08, 0.5], "cudf.pandas": [0.01, 0.01, 0.2]}  # 2.5x at 5M
    assert "FAIL on cuda: summarize() on 5000000" in run_speedup_check(fell_back, capsys)
    assert "here it is off" in run_speedup_check({"plain": [0.001, 0.08, 0.5]}, capsys)


def test_the_workloads_are_sized_by_whether_cudf_pandas_is_on_not_by_the_device(monkeypatch):
    """A GPU without RAPIDS times plain pandas at the CPU's sizes, not at 5M rows."""
    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    for on, rows, largest in ((False, 20_000, 100_000), (True, 2_000_000, 5_000_000)):
        frame = types.SimpleNamespace(head=lambda n: None)
        ns = notebook(device=torch.device("cuda"), make_sales=lambda n, frame=frame: frame)
        ns["accelerators"] = {"cudf.pandas": ns["ON"] if on else "off: RAPIDS is not installed"}
        exec(code("from frames_work import").split("\n", 1)[1], ns)
        exec(code("frame_modes = "), ns)
        assert ns["rows"] == rows and max(ns["sizes"]) == largest
        assert ns["frame_modes"] == ["plain", "cudf.pandas"][: 1 + on]


# -------------------------------------------------------------------------------------- DLPack
def test_without_cudf_the_matrix_is_numpy_and_torch_shares_its_memory():
    ns = notebook("bridge", pd=__import__("pandas"))
    columns = {"price": np.array([1.5, 2.0, 3.0]), "quantity": np.array([1, 2, 3])}
    matrix = ns["feature_matrix"](columns, {"cudf.pandas": "off: no CUDA GPU here (cpu)"})
    assert isinstance(matrix, np.ndarray) and matrix.dtype == np.float32 and matrix.shape == (3, 2)
    tensor = torch.from_dlpack(matrix)
    assert tensor.data_ptr() == matrix.ctypes.data and tensor[2, 1].item() == 3.0
    assert tensor.stride() == (1, 3), "column-major, as the lesson says pandas builds it too"


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


# ------------------------------------------------------------------ Exercise 4: no row-by-row work
def exercise_4(**names) -> dict:
    """The namespace Exercise 4's test runs in: pandas as `pd`, the row function, the referee."""
    import pandas

    ns = notebook("which_pandas", pd=pandas, **names)
    for grade_id in ("order_tag", "row_by_row"):
        exec(cell(grade_id), ns)
    frames = types.ModuleType("frames_work")
    exec(code("%%writefile {workdir}/frames_work.py").split("\n", 1)[1], frames.__dict__)
    ns["make_sales"] = frames.make_sales
    return ns


def answers(name: str) -> str:
    (fixture,) = [f for f in ck.fixtures(LESSON) if f.name == name]
    return fixture.answers["order_tags"]


def visible_and_hidden(source: str) -> tuple[str, str]:
    visible, hidden = source.split("### BEGIN HIDDEN TESTS")
    return visible, hidden.split("### END HIDDEN TESTS")[0]


@pytest.mark.parametrize(
    ("fixture", "message"),
    [
        ("first_glance", r"once a row or once a value \(\d+ steps on 300 rows"),
        ("partly_right", r"once a row or once a value \(\d+ steps on 300 rows"),
        ("ties_and_order", "the index of the frame given, in its order"),
    ],
)
def test_the_visible_test_of_exercise_4_catches_a_loop_and_another_order(fixture, message):
    """A list comprehension over zipped columns, or `map(str)`, gives the right tags, row by row
    (what cudf.pandas runs on the CPU); tags built per condition and concatenated come in another
    order. The visible test says which, and the hidden test too."""
    visible, hidden = visible_and_hidden(cell("test_order_tags"))
    for part in (visible, visible + hidden):
        ns = exercise_4()
        exec(answers(fixture), ns)
        with pytest.raises(AssertionError, match=message):
            exec(part, ns)


RIGHT_BODIES = {  # whole-column answers a referee by function names failed, on some pandas
    "astype_dict": "parts = sales.astype({'item': str})\n"
    "    size = pd.Series('bulk', index=sales.index).where(sales['quantity'] >= 5, 'single')\n"
    "    return parts['store'] + '/' + parts['item'] + '/' + size",
    "frame_astype": "parts = sales[['store', 'item']].astype(str)\n"
    "    size = pd.Series('bulk', index=sales.index).where(sales['quantity'] >= 5, 'single')\n"
    "    return parts['store'] + '/' + parts['item'] + '/' + size",
    "str_cat_frame": "size = pd.Series('bulk', index=sales.index).where(sales['quantity'] >= 5, "
    "'single')\n"
    "    parts = pd.DataFrame({'item': sales['item'].astype(str), 'size': size})\n"
    "    return sales['store'].str.cat(parts, sep='/')",
    "loop_over_labels": "tags = sales['store']\n"
    "    for name in ['item', 'quantity']:\n"
    "        part = sales[name].astype(str) if name == 'item' else pd.Series("
    "np.where(sales[name] >= 5, 'bulk', 'single'), index=sales.index)\n"
    "        tags = tags + '/' + part\n"
    "    return tags",
    "np_where_array": "return sales['store'] + '/' + sales['item'].astype(str) + '/' + "
    "np.where(sales['quantity'] >= 5, 'bulk', 'single')",
    "map_a_series": "lookup = pd.Series(['single', 'bulk'], index=[False, True])\n"
    "    return sales['store'] + '/' + sales['item'].astype(str) + '/' + "
    "sales['quantity'].ge(5).map(lookup)",
    "agg_by_name": "units = sales['quantity'].agg('sum')  # a name, no function: pandas' own sum\n"
    "    size = pd.Series('bulk', index=sales.index).where(sales['quantity'] >= 5, 'single')\n"
    "    return sales['store'] + '/' + sales['item'].astype(str) + '/' + size",
}
SIZE = "size = pd.Series('bulk', index=sales.index).where(sales['quantity'] >= 5, 'single')\n    "
WRONG_BODIES = {  # Python once a row, each with the right tags
    "apply": "return sales.apply(order_tag, axis=1)",
    "iterrows": "return pd.Series([order_tag(r) for _, r in sales.iterrows()], index=sales.index)",
    "itertuples": "rows = sales.itertuples()\n    tags = [f'{r.store}/{r.item}/"
    '{"bulk" if r.quantity >= 5 else "single"}\' for r in rows]\n'
    "    return pd.Series(tags, index=sales.index)",
    "map_lambda": "size = sales['quantity'].map(lambda q: 'bulk' if q >= 5 else 'single')\n"
    "    return sales['store'] + '/' + sales['item'].astype(str) + '/' + size",
    "to_dict": "return pd.Series([order_tag(r) for r in sales.to_dict('records')], "
    "index=sales.index)",
    "zip_to_numpy": "cols = [sales[c].to_numpy() for c in ('store', 'item', 'quantity')]\n"
    '    tags = [f\'{s}/{i}/{"bulk" if q >= 5 else "single"}\' for s, i, q in zip(*cols)]\n'
    "    return pd.Series(tags, index=sales.index)",
    "np_vectorize": "size = np.vectorize(lambda q: 'bulk' if q >= 5 else 'single')"
    "(sales['quantity'].to_numpy())\n"
    "    return sales['store'] + '/' + sales['item'].astype(str) + '/' + size",
    "combine": "size = sales['quantity'].combine(5, lambda q, b: 'bulk' if q >= b else 'single')\n"
    "    return sales['store'] + '/' + sales['item'].astype(str) + '/' + size",
    "builtin_map": "size = list(map(lambda q: 'bulk' if q >= 5 else 'single', "
    "sales['quantity'].to_numpy()))\n"
    "    return sales['store'] + '/' + sales['item'].astype(str) + '/' + pd.Series(size, "
    "index=sales.index)",
    # a built-in called by pandas' or NumPy's loop once a row: no line of the notebook runs
    "map_str": SIZE + "return sales['store'] + '/' + sales['item'].map(str) + '/' + size",
    "apply_str": SIZE + "return sales['store'] + '/' + sales['item'].apply(str) + '/' + size",
    "transform_str": SIZE
    + "return sales['store'] + '/' + sales['item'].transform(str) + '/' + size",
    "map_format": SIZE
    + "return sales['store'] + '/' + sales['item'].map('{}'.format) + '/' + size",
    "agg_join": SIZE + "parts = sales[['store', 'item']].astype(str)\n"
    "    return parts.agg('/'.join, axis=1) + '/' + size",
    "apply_join": SIZE + "parts = sales[['store', 'item']].astype(str)\n"
    "    return parts.apply('/'.join, axis=1) + '/' + size",
    "frame_map_str": SIZE + "parts = sales[['store', 'item']].map(str)\n"
    "    return parts['store'] + '/' + parts['item'] + '/' + size",
    "vectorize_str": SIZE + "item = np.vectorize(str)(sales['item'].to_numpy())\n"
    "    return sales['store'] + '/' + pd.Series(item, index=sales.index) + '/' + size",
    "combine_add": SIZE + "import operator\n"
    "    tagged = sales['store'].combine('/' + sales['item'].astype(str), operator.add)\n"
    "    return tagged + '/' + size",
    "index_map_str": SIZE + "item = pd.Index(sales['item']).map(str)\n"
    "    return sales['store'] + '/' + pd.Series(item, index=sales.index) + '/' + size",
    # a dict built by a loop over the distinct values: Python that grows with the data
    "dict_of_values": SIZE + "names = {i: str(i) for i in sales['item'].unique()}\n"
    "    return sales['store'] + '/' + sales['item'].map(names) + '/' + size",
}


@pytest.mark.parametrize("source", ["solution", "right_other_idioms", *RIGHT_BODIES])
def test_exercise_4_passes_whole_column_answers_and_the_referee_leaves_no_hook(source):
    ns = exercise_4()
    if source in RIGHT_BODIES:
        exec(f"def order_tags(sales):\n    {RIGHT_BODIES[source]}", ns)
    elif source == "solution":
        exec(ck.solution_answers(LESSON)["order_tags"], ns)
    else:
        exec(answers(source), ns)
    before = sys.gettrace()
    exec(cell("test_order_tags"), ns)
    assert sys.gettrace() is before
    few, many = ns["steps_by_rows"](ns["order_tags"])
    assert few == many, "whole-column code takes as many Python steps on 3,000 rows as on 300"


@pytest.mark.parametrize("name", WRONG_BODIES)
def test_the_referee_fails_every_way_of_running_python_once_a_row(name):
    ns = exercise_4()
    exec(f"def order_tags(sales):\n    {WRONG_BODIES[name]}", ns)
    orders = ns["make_sales"](50, seed=3)
    assert ns["order_tags"](orders).tolist() == orders.apply(ns["order_tag"], axis=1).tolist()
    visible, _ = visible_and_hidden(cell("test_order_tags"))
    with pytest.raises(AssertionError, match="order_tags runs Python once a row or once a value"):
        exec(visible, ns)


def test_the_referee_knows_the_loops_of_the_pandas_and_numpy_running_now():
    """The methods that call a function once a value are found in the live libraries (pandas 2.2
    names Series.map's argument `arg`, 3.x `func`, Index.map `mapper`); a built-in handed to them
    counts once a value, a dict, a name or a ufunc not at all, and neither does a function that
    library code (pandas calling itself) hands them."""
    import pandas

    ns = exercise_4()
    methods = (pandas.Series.map, pandas.DataFrame.apply, pandas.Index.map, np.vectorize.__call__)
    assert {method.__code__ for method in methods} <= ns["loop_codes"]()

    def growth(make):  # the steps on 30 values less those on 3
        few, many = (ns["python_steps"](make, pandas.Series(range(n))) for n in (3, 30))
        return many - few

    assert growth(lambda s: s.map(str)) == growth(lambda s: s.index.map(str)) == 27
    assert growth(lambda s: np.vectorize(str)(s.to_numpy())) == 27
    assert growth(lambda s: s.astype(str).to_frame().agg("/".join, axis=1)) == 27
    for handed in (lambda s: s.map({1: "a"}), lambda s: s.agg("sum"), lambda s: s.map(np.sqrt)):
        assert growth(handed) == 0, "a dict, a name, a ufunc: no Python once a value"
    library = {}
    exec(compile("def inside(s):\n    return s.map(str)", "<library>", "exec"), library)
    ns["LIBRARIES"] += ("<library>",)
    assert growth(library["inside"]) == 0, "pandas handing a function to itself is pandas' own"


@pytest.mark.xfail(strict=True, reason="no trace or profile event for a built-in called from C")
@pytest.mark.parametrize(
    "body",
    [
        SIZE + "item = pd.Series(list(map(str, sales['item'])), index=sales.index)\n"
        "    return sales['store'] + '/' + item + '/' + size",
        SIZE + "item = np.frompyfunc(str, 1, 1)(sales['item'].to_numpy())\n"
        "    return sales['store'] + '/' + pd.Series(item, index=sales.index) + '/' + size",
    ],
    ids=["builtin_map_of_str", "frompyfunc_of_str"],
)
def test_a_built_in_mapped_by_python_or_a_numpy_ufunc_is_a_known_gap(body):
    """The built-in `map` (a type, so no c_call event) and a ufunc made by np.frompyfunc call `str`
    from C with no Python frame, and no method of pandas' is entered: the step count stays flat.
    The task's text forbids both; this test says the referee does not catch them."""
    ns = exercise_4()
    exec(f"def order_tags(sales):\n    {body}", ns)
    few, many = ns["steps_by_rows"](ns["order_tags"])
    assert many - few >= 300


def test_the_referee_restores_a_tracer_in_place_and_fails_an_answer_that_removes_it():
    ns = exercise_4()
    outer = lambda frame, event, arg: None  # noqa: E731 (a debugger's tracer already there)
    sys.settrace(outer)
    try:
        assert ns["python_steps"](lambda: [i for i in range(10)]) > 10
        assert sys.gettrace() is outer
        with pytest.raises(AssertionError, match="switched the step count off"):
            ns["python_steps"](lambda: sys.settrace(None))
        assert sys.gettrace() is outer
    finally:
        sys.settrace(None)


def test_under_cudf_pandas_the_referee_runs_the_answer_in_plain_pandas(monkeypatch):
    """cuDF compiles a numeric lambda for the GPU: the referee switches the accelerator off
    (disable_module_accelerator) for the frames and the answer, so every grader sees pandas."""
    entered = []

    @contextlib.contextmanager
    def disable_module_accelerator():
        entered.append("in")
        yield
        entered.append("out")

    accelerator = types.ModuleType("cudf.pandas.module_accelerator")
    accelerator.disable_module_accelerator = disable_module_accelerator
    for name in ("cudf", "cudf.pandas"):
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    monkeypatch.setitem(sys.modules, "cudf.pandas.module_accelerator", accelerator)
    ns = exercise_4()
    ns["which_pandas"] = lambda module: ns["PROXY"]
    seen = []
    ns["steps_by_rows"](lambda sales: seen.append((len(sales), list(entered))))
    assert seen == [(300, ["in"]), (3000, ["in"])] and entered == ["in", "out"]
    ns["which_pandas"] = lambda module: "plain pandas"
    ns["steps_by_rows"](lambda sales: None)
    assert entered == ["in", "out"], "nothing to switch where cudf.pandas is off"


def run_tags_check(capsys, profile=None, on=True) -> str:
    ns = notebook("profiler", "fallbacks", device=torch.device("cuda"), sales=list(range(7)))
    ns["accelerators"] = {"cudf.pandas": ns["ON"] if on else "off: RAPIDS is not installed"}
    ns["order_tags"] = lambda sales: None
    ns["pandas_profiler"] = lambda accelerators: contextlib.nullcontext(profile)
    exec(check("order_tags() runs whole on the GPU"), ns)
    return capsys.readouterr().out


def test_the_gpu_check_of_exercise_4_wants_no_fallback_and_did_not_run_where_it_is_off(capsys):
    on_gpu = cudf_profiler_stats({"Series.where": ([0.01], []), "Series.astype": ([0.01], [])})
    out = run_tags_check(capsys, types.SimpleNamespace(per_function_stats=on_gpu))
    assert "fell back to the CPU: []" in out and "GPU claim PASS" in out
    looped = cudf_profiler_stats({"DataFrame.apply": ([], [2.5]), "Series.where": ([0.01], [])})
    out = run_tags_check(capsys, types.SimpleNamespace(per_function_stats=looped))
    assert "['DataFrame.apply']" in out and "GPU claim FAIL" in out
    assert "Did not run here: order_tags() on 7 rows" in run_tags_check(capsys, on=False)


def test_the_visible_test_of_exercise_1_catches_a_column_added_to_the_callers_frame():
    (fixture,) = [f for f in ck.fixtures(LESSON) if f.name == "first_glance"]
    import pandas

    ns = notebook(pd=pandas)
    exec(fixture.answers["store_features"], ns)
    visible, _ = visible_and_hidden(cell("test_store_features"))
    with pytest.raises(AssertionError, match="must not add columns to the frame it is given"):
        exec(visible, ns)
