"""The Makefile's choices before it installs a set. Standard library only, for Python 3.7+: it runs
before the course knows that its Python is new enough.

  choose VENV GPU GPU_ORIGIN NVIDIA_SMI   prints "SET switch|keep REASON"
  probe CPU_INDEX                         prints CPU_INDEX if it answers (on Linux), else nothing
  check SET VENV FOUND CPU_INDEX DISK_GB [COLAB_VENV]
                                          stops, saying why, before an install that cannot finish
"""

import os
import platform
import shutil
import subprocess
import sys
import urllib.parse
import urllib.request

# GB installed: .venv with PyPI's PyTorch (a CUDA build) 9.2 and .venv-colab 8.1, measured; the GPU
# set, and the CPU set with PyTorch's CPU wheels (PyPI's less 4 GB of CUDA libraries), estimated.
NEEDS = {"gpu": 10, "cpu": 9, "cpu wheels": 5, "colab": 8}


def nvidia_gpu(smi):
    for command in (smi, "/usr/lib/wsl/lib/nvidia-smi"):  # WSL2's, off PATH at times
        try:
            listing = subprocess.run([command, "-L"], capture_output=True, text=True, timeout=20)
        except (OSError, subprocess.SubprocessError):
            continue
        for line in listing.stdout.splitlines():
            if line.startswith("GPU "):
                return line.split(" (UUID:")[0]


def choose(venv, gpu, origin, smi):
    if origin.startswith("environment") and gpu not in ("0", "1"):
        gpu = ""  # an unrelated GPU variable in the shell's environment (GPU=nvidia) is not ours
    if gpu not in ("", "0", "1"):
        sys.exit(f"GPU={gpu}: use GPU=1 (the GPU set) or GPU=0 (the CPU set), or leave it out")
    held, set_file = None, os.path.join(venv, ".gpucourse-set")
    if os.path.exists(os.path.join(venv, "pyvenv.cfg")):  # made before there were two sets: CPU
        held = open(set_file).read().strip() if os.path.exists(set_file) else "cpu"
    found = None if gpu else nvidia_gpu(smi)
    listed = f"nvidia-smi lists {found}" if found else "nvidia-smi lists no NVIDIA GPU here"
    chosen = {"1": "gpu", "0": "cpu"}.get(gpu) or held or ("gpu" if found else "cpu")
    if gpu:
        why = f"GPU={gpu} was given"
    elif held:  # sticky: nvidia-smi decides only the first time
        although = "" if (held == "gpu") == bool(found) else ", although " + listed
        why = f"{venv} holds it{although}; GPU={'0' if held == 'gpu' else '1'} switches"
    else:
        why = f"{listed}; GPU=0 or GPU=1 overrides"
    print(chosen, "switch" if held and held != chosen else "keep", why)


def probe(url):
    """PyTorch's CPU index (or a local folder standing in for it) answers within seconds."""
    if platform.system() != "Linux":
        return  # PyPI's PyTorch is a CPU build on macOS and Windows
    if url.startswith("file:"):
        answers = os.path.isdir(urllib.request.url2pathname(urllib.parse.urlparse(url).path))
    else:
        try:
            urllib.request.urlopen(url, timeout=4).close()
            answers = True
        except (OSError, ValueError):  # no answer, an HTTP error, or not a URL
            answers = False
    print(url if answers else "")


def check(chosen, venv, found, cpu_index, disk_gb, colab=""):
    new = not os.path.exists(os.path.join(venv, "pyvenv.cfg"))
    if sys.version_info < (3, 11):
        python = "{} is Python {}.{}.{}".format(sys.executable, *sys.version_info[:3])
        again = "run make again" if new else f"remove {venv} (made with it), then run make"
        sys.exit(
            f"The course's set-up needs Python 3.11 or newer, and {python}. Install 3.11 or newer"
            f" and {again} naming it, e.g. make lab PYTHON=python3.12"
        )
    if chosen == "cpu" and found:
        print(f"PyTorch: its CPU build, from {found}")
    elif chosen == "cpu" and platform.system() == "Linux":
        print(f"PyTorch: PyPI's build, a CUDA build (4 GB more), as {cpu_index} did not answer")
    need = NEEDS["cpu wheels" if chosen == "cpu" and found else chosen] if new else 0
    need += NEEDS["colab"] if colab and not os.path.exists(colab) else 0
    need = float(disk_gb) if disk_gb else need
    folder = os.path.dirname(os.path.abspath(venv))
    while not os.path.isdir(folder):
        folder = os.path.dirname(folder)
    free = shutil.disk_usage(folder).free / 2**30
    if free < need:
        sys.exit(
            f"Not enough disk space: the set-up takes about {need:g} GB, and {folder} has"
            f" {free:.1f} GB free. Free some, or put {venv} {'and ' + colab if colab else ''}on a"
            " larger disk (VENV=, COLAB_VENV=); DISK_GB=0 skips this check."
        )


if __name__ == "__main__":
    {"choose": choose, "probe": probe, "check": check}[sys.argv[1]](*sys.argv[2:])
