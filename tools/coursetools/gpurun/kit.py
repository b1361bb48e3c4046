"""The GPU kit (`make gpu-kit`): one folder to carry to a GPU machine without internet, the project,
the wheels it lacks and gpu-kit.sh, the one command to run there."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from pathlib import Path

from .steps import ROOT
from .wheels import download_commands, have_names, prune, size_mib

KIT_LIMIT_MIB = 48
SCRIPT = "gpu-kit.sh"
KIT_SCRIPT = """#!/bin/sh
# The GPU kit's one command, on the GPU machine, offline: sh gpu-kit.sh [ARTIFACTS [options]]
# A venv layered on the machine's Python (PYTHON, else python3; a venv is used as it is) gets
# wheels/; the report lands in ARTIFACTS (default: gpu-run). docs/gpu-runner.md has the recipes.
set -eu
cd "$(dirname "$0")"
PY=${{PYTHON:-python3}}
OUT=${{1:-gpu-run}}
[ $# -gt 0 ] && shift
if $PY -c 'import sys; sys.exit(sys.prefix == sys.base_prefix)'; then
  ENV_PY=$PY
else
  if [ ! -x .gpu-env/bin/python ]; then
    $PY -m venv --without-pip --system-site-packages .gpu-env
    .gpu-env/bin/python -m pip --version >/dev/null 2>&1 \\
      || {{ rm -rf .gpu-env; $PY -m venv --system-site-packages .gpu-env; }}
  fi
  ENV_PY=.gpu-env/bin/python
fi
export PYTHONPATH=tools
$ENV_PY -m coursetools.gpurun --preflight {options}"$@"
$ENV_PY -m coursetools.gpurun --setup --wheelhouse wheels
$ENV_PY -m coursetools.gpurun --artifacts "$OUT" {options}"$@"
"""


def project_files(root: Path = ROOT) -> list[str]:
    """The checkout's files as they are (tracked and new, not ignored), as `git ls-files` lists
    them."""
    done = subprocess.run(
        ["git", "-C", str(root), "ls-files", "-co", "--exclude-standard", "-z"],
        capture_output=True,
        text=True,
        check=True,
    )
    return [f for f in done.stdout.split("\0") if f and (root / f).is_file()]


def make_kit(
    dest: Path,
    have: Path,
    python_version: str | None,
    platform: str | None,
    options: str = "",
    download=None,
) -> dict:
    """The folder to carry: the project, its wheels/ (only what ``have`` lacks), gpu-kit.sh,
    KIT.json."""
    dest = Path(dest)
    if dest.exists():
        shutil.rmtree(dest)
    for name in project_files():
        (dest / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, dest / name)
    wheels = dest / "wheels"
    for command in download_commands(str(wheels), python_version, platform, have=have_names(have)):
        print("$ " + " ".join(command), flush=True)
        if (download or subprocess.run)(command).returncode != 0:
            raise RuntimeError("pip download failed: the index must be reachable to make the kit")
    removed = prune(wheels, have_names(have))
    (dest / SCRIPT).write_text(KIT_SCRIPT.format(options=options + " " if options else ""))
    commit = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    kit = {
        "commit": commit,
        "made": time.strftime("%Y-%m-%d %H:%M %Z"),
        "python": python_version,
        "platform": platform,
        "have": str(have),
        "left_out": removed,
        "wheels": sorted(p.name for p in wheels.glob("*.whl")),
    }
    kit["size_mib"] = round(size_mib(dest), 1)
    (dest / "KIT.json").write_text(json.dumps(kit, indent=2) + "\n")
    return kit


def kit_message(dest: Path, kit: dict) -> str:
    size, wheels, left = kit["size_mib"], len(kit["wheels"]), len(kit["left_out"])
    over = (
        f"\nIT IS OVER {KIT_LIMIT_MIB} MiB: leave out what the machine has (HAVE=its pip freeze)."
    )
    return (
        f"The GPU kit: {dest} ({size} MiB: the project and {wheels} wheels; {left} left out, the "
        f"machine has them){over if size > KIT_LIMIT_MIB else ''}\nCopy it to the GPU machine, "
        f"then run there, in one command (docs/gpu-runner.md):\n    sh {dest.name}/{SCRIPT} "
        f"gpu-run --budget 540 09_make_it_fast 01_verify_gpu 02_tensors_on_device\nThe report "
        f"(gpu-report.md, .json) lands in {dest.name}/gpu-run/: bring that folder back."
    )
