"""The GPU kit: one folder to carry to a GPU machine without internet, the project, the wheels it
lacks (`pip download`, binary only, for its Python and platform) and gpu-kit.sh, the one command to
run there; or the wheels alone (`make wheelhouse`)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

from ..course import ROOT
from ..gpurun.wheels import NO_DEPS, SUITE, pinned
from ..pins import package_name

KIT_LIMIT_MIB = 48
SCRIPT = "gpu-kit.sh"
KIT_SCRIPT = """#!/bin/sh
# The GPU kit's one command, on the GPU machine, offline: sh gpu-kit.sh [ARTIFACTS [options]]
# A venv layered on the machine's Python (PYTHON, else python3; a venv is used as it is) gets
# wheels/; the report lands in ARTIFACTS (default: gpu-run). docs/gpu-runner.md has the recipes.
set -eu
cd "$(dirname "$0")"
PY=${PYTHON:-python3}
OUT=${1:-gpu-run}
[ $# -gt 0 ] && shift
if $PY -c 'import sys; sys.exit(sys.prefix == sys.base_prefix)'; then
  ENV_PY=$PY
else
  if [ ! -x .gpu-env/bin/python ]; then
    $PY -m venv --without-pip --system-site-packages .gpu-env
    .gpu-env/bin/python -m pip --version >/dev/null 2>&1 \\
      || { rm -rf .gpu-env; $PY -m venv --system-site-packages .gpu-env; }
  fi
  ENV_PY=.gpu-env/bin/python
fi
export PYTHONPATH=tools
$ENV_PY -m coursetools.gpurun --preflight "$@"
$ENV_PY -m coursetools.gpurun --setup --wheelhouse wheels
$ENV_PY -m coursetools.gpurun --artifacts "$OUT" "$@"
"""


def have_names(path: Path) -> set[str]:
    """The names in a `pip freeze` or a list of names (one a line, `#` comments)."""
    lines = Path(path).read_text(encoding="utf-8").splitlines()
    found = {line.split("#")[0].strip() for line in lines}
    return {package_name(line) for line in found if line and not line.startswith("-")}


def platforms(platform: str) -> list[str]:
    """``platform`` and the older ones a machine of that platform runs: pip takes
    `manylinux_2_28_x86_64` literally (it widens only `manylinux2014_*` and `manylinux2010_*`),
    while most wheels are manylinux2014."""
    found = re.fullmatch(r"manylinux_2_(\d+)_(\w+)", platform)
    if not found:
        return [platform]
    glibc, arch = int(found.group(1)), found.group(2)
    legacy = {17: "manylinux2014", 12: "manylinux2010", 5: "manylinux1"}
    return [f"manylinux_2_{minor}_{arch}" for minor in range(glibc, 4, -1)] + [
        f"{name}_{arch}" for minor, name in legacy.items() if minor <= glibc
    ]


def download_commands(
    dest: Path, python_version: str | None, platform: str | None, have: set[str] = frozenset()
) -> list[list[str]]:
    """`pip download` of the suite's wheels (and theirs), then nbgrader's without theirs, binary
    only; what ``have`` names is not asked for (its dependencies still come: prune() takes out those
    the machine has)."""
    target = ["--python-version", python_version] if python_version else []
    for name in platforms(platform) if platform else []:
        target += ["--platform", name]
    pip = [sys.executable, "-m", "pip", "download", "--disable-pip-version-check"]
    pip += ["--only-binary=:all:", "--dest", str(dest), *target]
    suite = [r for r in pinned(SUITE) if package_name(r) not in have]
    bare = [r for r in pinned(NO_DEPS) if package_name(r) not in have]
    found = (([*pip, *suite], suite), ([*pip, "--no-deps", *bare], bare))
    return [command for command, wanted in found if wanted]


def prune(wheelhouse: Path, have: set[str]) -> list[str]:
    """Take out the wheels of what the target machine already has; the names taken out."""
    removed = []
    for wheel in sorted(Path(wheelhouse).glob("*.whl")):
        if package_name(wheel.name.split("-")[0]) in have:
            wheel.unlink()
            removed.append(wheel.name)
    return removed


def download(
    dest: Path, python_version: str | None, platform: str | None, have: set[str]
) -> list[str]:
    """The wheels the GPU machine lacks, in ``dest``; the names of those left out (it has them)."""
    for command in download_commands(dest, python_version, platform, have):
        print("$ " + " ".join(command), flush=True)
        if subprocess.run(command).returncode != 0:
            raise RuntimeError("pip download failed: the index must be reachable to make the kit")
    return prune(dest, have)


def size_mib(folder: Path) -> float:
    return sum(p.stat().st_size for p in Path(folder).rglob("*") if p.is_file()) / 2**20


def project_files(root: Path = ROOT) -> list[str]:
    """The checkout's files as they are (tracked and new, not ignored), as `git ls-files` lists
    them."""
    command = ["git", "-C", str(root), "ls-files", "-co", "--exclude-standard", "-z"]
    done = subprocess.run(command, capture_output=True, text=True, check=True)
    return [f for f in done.stdout.split("\0") if f and (root / f).is_file()]


def make_kit(dest: Path, have: Path, python_version: str | None, platform: str | None) -> dict:
    """The folder to carry: the project, its wheels/ (only what ``have`` lacks), gpu-kit.sh,
    KIT.json."""
    if dest.exists():
        shutil.rmtree(dest)
    for name in project_files():
        (dest / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, dest / name)
    removed = download(dest / "wheels", python_version, platform, have_names(have))
    (dest / SCRIPT).write_text(KIT_SCRIPT)
    head = ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"]
    kit = {
        "commit": subprocess.run(head, capture_output=True, text=True).stdout.strip(),
        "made": time.strftime("%Y-%m-%d %H:%M %Z"),
        "python": python_version,
        "platform": platform,
        "have": str(have),
        "left_out": removed,
        "wheels": sorted(p.name for p in (dest / "wheels").glob("*.whl")),
    }
    kit["size_mib"] = round(size_mib(dest), 1)
    (dest / "KIT.json").write_text(json.dumps(kit, indent=2) + "\n")
    return kit


FIRST = "09_make_it_fast 01_verify_gpu 02_tensors_on_device"  # the first run's lessons


def kit_message(dest: Path, kit: dict) -> str:
    size, wheels, left = kit["size_mib"], len(kit["wheels"]), len(kit["left_out"])
    over = f"\nIT IS OVER {KIT_LIMIT_MIB} MiB: leave out what the machine has"
    over += " (HAVE=its pip freeze)."
    return (
        f"The GPU kit: {dest} ({size} MiB: the project and {wheels} wheels; {left} left out, the "
        f"machine has them){over if size > KIT_LIMIT_MIB else ''}\nCopy it to the GPU machine, "
        f"then run there, two jobs of under 10 minutes (docs/gpu-runner.md):\n"
        f"    sh {dest.name}/{SCRIPT} gpu-run --budget 540 --no-grading {FIRST}\n"
        f"    sh {dest.name}/{SCRIPT} gpu-run-grading --budget 540 --no-lessons {FIRST}\n"
        f"The reports (gpu-report.md, .json) land in {dest.name}/gpu-run/ and "
        f"{dest.name}/gpu-run-grading/: bring those folders back."
    )
