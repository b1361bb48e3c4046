"""The sandbox a student's kernel runs in while autograde grades it.

Each kernel runs under bubblewrap (``bwrap``, Debian package ``bubblewrap``): a new root holding
only the system (read-only), the Python environment (read-only), the submission's own autograded
folder and a private /tmp and $HOME; no network (its own loopback only); the GPUs' device files
where there are any; an address-space and a CPU-time limit (prlimit). solutions/, the gradebook,
submitted/, the other students' folders and the exchange are simply not there.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import subprocess

from jupyter_client.manager import AsyncKernelManager

TOOL = "bwrap"
UNSANDBOXED = "--GradingExecute.sandbox=False"
WHY = (
    "autograde runs each student's code, and outside a sandbox that code can read solutions/, "
    "the gradebook and the other students' work, or change them. Install the sandbox "
    "(Debian/Ubuntu: apt-get install bubblewrap), or, for submissions you trust, pass "
    f"{UNSANDBOXED} (make grade UNSANDBOXED=1)."
)
PASSED_ON = (
    "NBGRADER_EXECUTION",
    "PYTHONWARNINGS",
    "LANG",
    "LC_ALL",
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "CUDA_VISIBLE_DEVICES",
    "NVIDIA_VISIBLE_DEVICES",
    "NVIDIA_DRIVER_CAPABILITIES",
    "LD_LIBRARY_PATH",
)
# what the sandbox shows anyway
SHOWN = (
    "/usr",
    "/opt",
    "/etc",
    "/bin",
    "/sbin",
    "/lib",
    "/lib32",
    "/lib64",
)


def sandbox_problem(tool: str = TOOL) -> str | None:
    """None when ``tool`` can build a sandbox here; else why not."""
    path = shutil.which(tool)
    if path is None:
        return f"the sandbox tool `{tool}` is not installed"
    probe = [path, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--unshare-all"]
    result = subprocess.run([*probe, "--tmpfs", "/tmp", "true"], capture_output=True, text=True)
    if result.returncode != 0:
        return f"`{tool}` cannot make a sandbox on this machine: {result.stderr.strip()}"
    return None


def python_dirs(python: str) -> list[str]:
    """The folders ``python`` imports from (its install, the environment, editable packages),
    outermost first."""
    code = "import json, sys; print(json.dumps([sys.prefix, sys.base_prefix, *sys.path]))"
    out = subprocess.run(
        [python, "-I", "-c", code], capture_output=True, text=True, check=True
    ).stdout
    dirs = sorted({os.path.realpath(p) for p in json.loads(out) if p and os.path.isdir(p)})
    return [
        d for d in dirs if not any(d.startswith(other + os.sep) for other in dirs if other != d)
    ]


def _driver_libraries(ldconfig: str) -> list[str]:
    """The NVIDIA driver's libraries that ``ldconfig -p`` lists."""
    found = []
    for line in ldconfig.splitlines():
        name, _, path = line.partition("=>")
        if name.strip().startswith(("libcuda.so", "libnvidia-ml.so")) and path.strip():
            found.append(path.strip())
    return found


def gpu_passthrough(
    dev: str = "/dev", ldconfig: str | None = None, environ=os.environ
) -> tuple[list[str], list[str]]:
    """What a sandboxed kernel needs to use the GPUs: their device files (``/dev/nvidia*``, WSL2's
    ``/dev/dxg``), and the folders of the NVIDIA driver's libraries (``ldconfig -p``) and of
    LD_LIBRARY_PATH that the sandbox does not show already (it shows /usr, /opt, /etc, /bin and
    /lib*): a cluster's or NixOS's driver, a site CUDA.
    """
    devices = sorted(glob.glob(os.path.join(dev, "nvidia*")) + glob.glob(os.path.join(dev, "dxg")))
    if not devices:
        return [], []
    if ldconfig is None:
        try:
            command = [shutil.which("ldconfig") or "/sbin/ldconfig", "-p"]
            ldconfig = subprocess.run(command, capture_output=True, text=True).stdout
        except OSError:
            ldconfig = ""
    found = _driver_libraries(ldconfig)
    folders = {os.path.dirname(p) for p in found} | {
        os.path.dirname(os.path.realpath(p)) for p in found
    }
    folders |= {d for d in environ.get("LD_LIBRARY_PATH", "").split(os.pathsep) if d}
    hidden = [d for d in folders if not any((d + "/").startswith(s + "/") for s in SHOWN)]
    return devices, sorted(d for d in hidden if os.path.isdir(d))


def sandbox_command(
    cmd: list[str],
    *,
    workdir: str,
    runtime: str,
    memory: int,
    cpu_seconds: int,
    python_dirs: list[str],
    devices: list[str],
    environ: dict,
    course: str | None = None,
    tool: str = TOOL,
    libraries: list[str] = (),
) -> list[str]:
    """``cmd`` (a kernel's command line) run by ``tool`` (bubblewrap) in a sandbox, under prlimit's
    limits.

    Visible: the system read-only, ``python_dirs`` and ``libraries`` read-only, ``workdir`` and
    ``runtime`` (the kernel's connection file and sockets) writable, ``devices`` (the GPUs'), a
    private /tmp holding $HOME. A Python or library folder that holds the course itself is refused:
    it would show the solutions.
    """
    for d in [*python_dirs, *libraries]:
        if course and (course + os.sep).startswith(d.rstrip(os.sep) + os.sep):
            raise RuntimeError(
                f"the Python environment imports from {d}, which holds the course {course}: "
                "the sandbox would show the solutions; install the course's Python elsewhere"
            )
    args = [tool, "--unshare-all", "--die-with-parent", "--new-session", "--cap-drop", "ALL"]
    args += [
        "--ro-bind",
        "/usr",
        "/usr",
        "--ro-bind-try",
        "/opt",
        "/opt",
        "--ro-bind",
        "/etc",
        "/etc",
    ]
    args += [
        "--ro-bind-try",
        "/dev/null",
        "/etc/shadow",
        "--ro-bind-try",
        "/dev/null",
        "/etc/gshadow",
    ]
    args += ["--ro-bind", "/sys", "/sys", "--proc", "/proc", "--dev", "/dev"]
    args += ["--tmpfs", "/tmp", "--dir", "/tmp/home"]
    for top in ("/bin", "/sbin", "/lib", "/lib32", "/lib64"):
        if os.path.islink(top):
            args += ["--symlink", os.readlink(top), top]
        elif os.path.isdir(top):
            args += ["--ro-bind", top, top]
    for d in [*python_dirs, *libraries]:
        args += ["--ro-bind", d, d]
    for device in devices:
        args += ["--dev-bind", device, device]
    args += [
        "--bind",
        runtime,
        runtime,
        "--bind",
        workdir,
        workdir,
        "--chdir",
        workdir,
        "--clearenv",
    ]
    bin_dir = os.path.dirname(cmd[0]) if os.path.isabs(cmd[0]) else None
    path = ":".join(filter(None, [bin_dir, "/usr/local/bin:/usr/bin:/bin"]))
    env = {"HOME": "/tmp/home", "TMPDIR": "/tmp", "PATH": path}
    for key, value in environ.items():
        if key in PASSED_ON or (key.startswith("GPUCOURSE_") and key != "GPUCOURSE_DATA"):
            env[key] = value
    for key, value in sorted(env.items()):
        args += ["--setenv", key, value]
    limits = ["prlimit", f"--cpu={cpu_seconds}", "--core=0"] + (
        [f"--as={memory}"] if memory else []
    )
    return [*limits, *args, "--", *cmd]


class SandboxedKernelManager(AsyncKernelManager):
    """A kernel manager whose kernel starts inside the sandbox (``sandbox`` holds sandbox_command's
    options)."""

    sandbox: dict = {}

    def format_kernel_cmd(self, extra_arguments=None):
        cmd = super().format_kernel_cmd(extra_arguments)
        self.kernel_spec.interrupt_mode = (
            "message"  # a signal to bwrap would not reach the kernel inside
        )
        workdir = os.path.realpath(self._launch_args.get("cwd") or os.getcwd())
        runtime = os.path.dirname(os.path.realpath(self.connection_file))
        return sandbox_command(
            cmd, workdir=workdir, runtime=runtime, environ=dict(os.environ), **self.sandbox
        )
