"""`make test-gpu`, `make wheelhouse`, `make gpu-kit`: the GPU runner's command line.

    python -m coursetools.gpurun                     # check the machine, run all: test-artifacts/
    python -m coursetools.gpurun 04_mixed_precision  # these lessons (and grading); others: NOT RUN
    python -m coursetools.gpurun --preflight         # only the quick check (standard library only)
    python -m coursetools.gpurun --rehearse 01_verify_gpu   # on a CPU: "not validated: no GPU"
    python -m coursetools.gpurun --setup [--wheelhouse DIR] # add what the suite lacks, offline
    python -m coursetools.gpurun --download DIR [--have FREEZE] [--python-version 3.12 --platform P]
    python -m coursetools.gpurun --kit DIR --have FREEZE [--python-version 3.12 --platform P]

Exit status: 0 when everything that ran passed (1 with --require-all if a part was not validated or
not run), 1 when something failed or could not be judged (the machine's problem, a busy GPU), 2 when
nothing could run."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

from . import gpustate, kit, preflight, runs, wheels

GRADING = "autograde"  # the gpu tests whose name holds this are the grading run (CUDA_TESTS)
CUDA_TESTS = "tests/gpu/test_on_cuda.py"


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "lessons", nargs="*", help="lesson folders to run (default: every one in solutions/)"
    )
    p.add_argument(
        "--preflight", action="store_true", help="only the quick check (standard library only)"
    )
    p.add_argument(
        "--rehearse", action="store_true", help="a CPU rehearsal: no strict mode, no GPU needed"
    )
    p.add_argument(
        "--artifacts", type=Path, default=runs.ROOT / "test-artifacts", help="where the report goes"
    )
    p.add_argument(
        "--timeout", type=float, default=1800, help="seconds per notebook (and the gpu tests)"
    )
    p.add_argument(
        "--grading-timeout", type=float, default=3600, help="seconds for grading every lesson"
    )
    p.add_argument("--no-grading", action="store_true", help="skip autograde on the GPU")
    p.add_argument(
        "--reruns", type=int, default=1, help="run a lesson again when a claim failed (flaky?)"
    )
    p.add_argument(
        "--require-all", action="store_true", help="fail when a part is not validated or not run"
    )
    p.add_argument(
        "--setup", action="store_true", help="add what the suite needs beside this PyTorch"
    )
    p.add_argument("--wheelhouse", help="with --setup: install offline, from this folder of wheels")
    p.add_argument(
        "--requirements", type=Path, help="with --setup or --download: these, not the suite's"
    )
    p.add_argument(
        "--download", metavar="DIR", help="gather the suite's wheels in DIR (make wheelhouse)"
    )
    p.add_argument(
        "--kit",
        metavar="DIR",
        help="make the GPU kit in DIR: the project and wheels (make gpu-kit)",
    )
    p.add_argument(
        "--have", type=Path, help="with --download or --kit: what the GPU machine has (pip freeze)"
    )
    p.add_argument("--python-version", help="with --download or --kit: for this Python, e.g. 3.12")
    p.add_argument(
        "--platform", help="with --download or --kit: for this platform, e.g. manylinux_2_28_x86_64"
    )
    return p


def download(args, requirements) -> int:
    have = wheels.have_names(args.have) if args.have else set()
    for command in wheels.download_commands(
        args.download, args.python_version, args.platform, requirements, have
    ):
        print("$ " + " ".join(command), flush=True)
        if subprocess.run(command).returncode != 0:
            return 1
    if have:
        removed = wheels.prune(Path(args.download), have)
        print(f"left out {len(removed)} wheel(s) of what {args.have} has")
    print(f"{args.download}: {wheels.size_mib(Path(args.download)):.1f} MiB")
    return 0


def make_kit(args) -> int:
    if not args.have:
        print(
            "--kit needs --have FILE: the GPU machine's `pip freeze` (or names, one a line)",
            file=sys.stderr,
        )
        return 2
    dest = Path(args.kit).resolve()
    made = kit.make_kit(dest, args.have, args.python_version, args.platform)
    print(kit.kit_message(dest, made))
    return 1 if made["size_mib"] > kit.KIT_LIMIT_MIB else 0


def lesson_notebooks(names: list[str]) -> tuple[list[Path], list[str]]:
    notebooks = sorted((runs.ROOT / "solutions").glob("*/*.ipynb"))
    every = [nb.parent.name for nb in notebooks]
    if names:
        unknown = sorted(set(names) - set(every))
        if unknown:
            raise SystemExit(f"unknown lesson(s): {', '.join(unknown)}")
        notebooks = [nb for nb in notebooks if nb.parent.name in names]
    return notebooks, every


def run_lessons(notebooks: list[Path], artifacts: Path, args) -> list[dict]:
    results = []
    for i, path in enumerate(notebooks, 1):
        print(f"[{i}/{len(notebooks)}] {path.relative_to(runs.ROOT)} ...", end=" ", flush=True)
        result = runs.run_lesson(path, artifacts, args.timeout, rehearsal=args.rehearse)
        checked = [e for e in result["claims"] if e["kind"] == "claim" and e.get("checked", True)]
        print(
            f"exit {result['returncode']}, {result['seconds']} s, "
            f"{sum(bool(e.get('passed')) for e in checked)}/{len(checked)} claims passed"
        )
        if args.reruns > 0 and any(not e.get("passed") for e in checked):
            print(
                "    a claim failed: the lesson runs again, to tell a flaky claim from a false one",
                flush=True,
            )
            (artifacts / "rerun" / "logs").mkdir(parents=True, exist_ok=True)
            result["rerun"] = runs.run_lesson(
                path, artifacts / "rerun", args.timeout, rehearsal=args.rehearse
            )
        results.append(result)
    return results


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    requirements = None
    if args.requirements:
        lines = args.requirements.read_text().splitlines()
        requirements = [s.strip() for s in lines if s.strip() and not s.startswith("#")]
    if args.download:
        return download(args, requirements)
    if args.kit:
        return make_kit(args)
    if args.setup:
        return wheels.setup(args.wheelhouse, requirements)

    problem, doctor = (None if args.rehearse else preflight.quick_problem()), {}
    if problem is None and not args.preflight:
        doctor = runs.doctor_report()
        problem = None if args.rehearse else preflight.cuda_problem(doctor)
    if problem is not None:
        print(preflight.stop_message(problem), file=sys.stderr)
        return 2
    if args.preflight:
        return 0
    machine = preflight.machine_problems()
    for found in machine:
        print(
            f"the machine's problem: {found['problem']}.\n  what to do: {found['fix']}.",
            file=sys.stderr,
        )
    notebooks, every = lesson_notebooks(args.lessons)
    artifacts = args.artifacts.resolve()
    (artifacts / "logs").mkdir(parents=True, exist_ok=True)
    context = {
        "all_lessons": every,
        "machine": machine,
        "rehearsal": args.rehearse,
        "gpu_before": gpustate.gpu_state(),
    }
    strict = "a CPU rehearsal, no strict mode" if args.rehearse else f"{runs.REQUIRE_GPU_VAR}=1"
    print(
        f"{strict}; {len(notebooks)} notebook(s), then the gpu tests, grading, the bench. Logs: "
        f"{artifacts}"
    )
    results = run_lessons(notebooks, artifacts, args)
    gpu_tests = grading = bench = None
    if args.rehearse:
        context["gpu_tests_skipped"] = "no GPU: a CPU rehearsal"
    else:
        print("gpu-marked tests ...", end=" ", flush=True)
        gpu_tests = runs.run_pytest(
            [CUDA_TESTS, "-m", "gpu", "-k", f"not {GRADING}"],
            artifacts / "gpu-tests.xml",
            artifacts / "logs" / "gpu-tests.log",
            args.timeout,
        )
        print(f"exit {gpu_tests['returncode']}, {gpu_tests['seconds']} s")
    if args.no_grading:
        context["grading_skipped"] = "--no-grading"
    else:
        print("grading on the GPU ...", end=" ", flush=True)
        only = f" and (small or sandbox or {' or '.join(args.lessons)})" if args.lessons else ""
        grading = runs.run_pytest(
            [CUDA_TESTS, "-m", "gpu", "-k", f"{GRADING}{only}"],
            artifacts / "grading.xml",
            artifacts / "logs" / "grading.log",
            args.grading_timeout,
            rehearsal=args.rehearse,
        )
        print(f"exit {grading['returncode']}, {grading['seconds']} s")
    if not args.rehearse:
        print("bench ...", flush=True)
        bench = runs.run_bench(artifacts)
    context["gpu_after"] = gpustate.gpu_state()
    from .catalogue import lesson_claims
    from .render import render_markdown
    from .report import build_report

    context["catalogue"] = {nb.parent.name: lesson_claims(nb) for nb in notebooks}
    facts = {**(doctor.get("facts") or {}), **runs.local_facts()}
    report = build_report(facts, results, gpu_tests, bench, runs.versions(), grading, context)
    (artifacts / "gpu-report.json").write_text(
        json.dumps(report, indent=2) + "\n", encoding="utf-8"
    )
    markdown = render_markdown(report)
    (artifacts / "gpu-report.md").write_text(markdown, encoding="utf-8")
    print(markdown)
    if report["status"] in {"failed", "inconclusive"}:
        return 1
    return 1 if report["status"] == "partial" and args.require_all else 0
