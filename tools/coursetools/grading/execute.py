"""``GradingExecute``: nbgrader's Execute, bounded, sandboxed, surviving a dead kernel, skipping
demo cells."""

from __future__ import annotations

import os
import sys
import tempfile
import time

from nbclient.exceptions import DeadKernelError
from nbformat.notebooknode import NotebookNode
from nbgrader.preprocessors import Execute
from traitlets import Bool, Integer, default

from coursetools.course import grade_id
from coursetools.course import skipped_by_grader as skipped  # the demo and gpu-check cells
from coursetools.grading.cells import DIED, NOT_RUN, TIMEOUT, stderr_kept_visible
from coursetools.grading.sandbox import (
    WHY,
    SandboxedKernelManager,
    gpu_passthrough,
    python_dirs,
    sandbox_problem,
)


def error(ename: str, evalue: str) -> NotebookNode:
    return NotebookNode(
        output_type="error", ename=ename, evalue=evalue, traceback=[f"{ename}: {evalue}"]
    )


def cell_name(cell, index: int) -> str:
    return grade_id(cell) or f"cell {index}"


class GradingExecute(Execute):
    """nbgrader's Execute, with the kernel in a sandbox, a bound per submission, and a dead kernel
    survived.

    A cell that kills the kernel (os._exit, a segfault, the CPU-time limit) gets a KernelDied error
    naming it; a new kernel re-runs the cells before it and grading goes on after it. Once the
    submission's time is spent, the cells left get a NotRun error (so their tests score zero). Cells
    tagged ``demo`` or ``gpu-check`` (``skipped``) are not run and lose their outputs.
    """

    sandbox = Bool(
        True, help="Run each kernel under bubblewrap; False grades unsandboxed, for trusted code."
    ).tag(config=True)
    submission_timeout = Integer(
        900, help="Seconds for a whole submission, kernel restarts included."
    ).tag(config=True)
    memory_limit = Integer(
        16 * 2**30, help="Address-space limit of a kernel, bytes (0: none; none with GPUs)."
    ).tag(config=True)
    cpu_limit = Integer(
        1800, help="CPU seconds the kernel may use (all its threads together)."
    ).tag(config=True)
    kernel_deaths = Integer(
        2, help="Kernel deaths survived per submission; then the cells left are not run."
    ).tag(config=True)

    @default("shutdown_kernel")
    def _shutdown_at_once(self):
        # Every output is in once the last cell has run: a graceful shutdown only waits for a kernel
        # that imported PyTorch to tear itself down (1-3 s a submission). The kernel is killed with
        # its process group, and bubblewrap's --die-with-parent takes the sandbox with it.
        return "immediate"

    def _sandbox_options(self, course: str) -> dict:
        problem = sandbox_problem()
        if problem:
            raise RuntimeError(f"autograde refuses to run: {problem}. {WHY}")
        devices, libraries = gpu_passthrough()
        return {
            "memory": 0 if devices else self.memory_limit,
            "cpu_seconds": self.cpu_limit,
            "devices": devices,
            "libraries": libraries,
            "python_dirs": python_dirs(sys.executable),
            "course": course,
        }

    def create_kernel_manager(self):
        km = super().create_kernel_manager()
        if isinstance(km, SandboxedKernelManager):
            km.sandbox = self._sandbox
            km.transport = "ipc"  # no TCP port reaches into the sandbox's network namespace
            km.connection_file = os.path.join(self._runtime, "kernel.json")
            km.ip = os.path.join(self._runtime, "kernel")
        return km

    def preprocess(self, nb, resources=None, km=None):
        if self.sandbox:
            self._sandbox = self._sandbox_options(os.getcwd())
            self.kernel_manager_class = SandboxedKernelManager
        self._deadline = time.monotonic() + self.submission_timeout
        why = f"no reply within {self.timeout} s: the cell was interrupted and grading went on"
        self.error_on_timeout = {
            "ename": TIMEOUT,
            "evalue": why,
            "traceback": [f"{TIMEOUT}: {why}"],
        }
        killers: list[int] = []
        self._slowest, started = (0.0, ""), time.monotonic()
        tmp = "/tmp" if os.path.isdir("/tmp") else None
        with tempfile.TemporaryDirectory(prefix="grade-", dir=tmp) as runtime:
            self._runtime = runtime
            while True:
                # runs the cells through preprocess_cell below
                super().preprocess(nb, resources, km)
                if self._died_at is None:
                    break
                killers.append(self._died_at)
                if len(killers) > self.kernel_deaths:
                    self._not_run(f"the kernel died {len(killers)} times")
                    break
        for cell in self.nb.cells:
            stderr_kept_visible(cell)
        seconds, name = self._slowest
        log = self.log.warning if self.timeout and seconds > self.timeout / 2 else self.log.info
        took = time.monotonic() - started
        log(
            "ran in %.0f s; the slowest cell, %s, took %.1f s (timeout %s s)",
            took,
            name,
            seconds,
            self.timeout,
        )
        return self.nb, self.resources

    def _not_run(self, why: str, start: int | None = None) -> None:
        first = self._died_at + 1 if start is None else start
        for cell in self.nb.cells[first:]:
            if cell.cell_type == "code" and cell.source.strip() and not skipped(cell):
                cell.outputs = [error(NOT_RUN, f"not run: {why}")]

    def reset_execution_trackers(self):
        super().reset_execution_trackers()
        self._died_at = None

    def _get_timeout(self, cell):
        timeout = super()._get_timeout(cell)
        left = max(1, int(self._deadline - time.monotonic()))
        return min(timeout, left) if timeout else left

    async def _async_handle_timeout(self, timeout, cell=None):
        reply = await super()._async_handle_timeout(timeout, cell)
        name = grade_id(cell) if cell is not None else None
        if reply and name:  # name the cell, as the feedback and the formgrader show its error
            why = f"{name} gave no reply within {timeout} s: it was interrupted"
            why += " and grading went on"
            reply["content"].update(evalue=why, traceback=[f"{TIMEOUT}: {why}"])
        return reply

    def preprocess_cell(self, cell, resources, index):
        if self._died_at is not None or (
            cell.get("outputs") and cell.outputs[0].get("ename") == DIED
        ):
            # after a death: skipped now; the cell that killed the kernel: never rerun
            return cell, self.resources
        if skipped(cell):
            cell.outputs, cell.execution_count = [], None
            return cell, self.resources
        if time.monotonic() > self._deadline and cell.cell_type == "code" and cell.source.strip():
            spent = f"not run: the submission's {self.submission_timeout} s were spent"
            cell.outputs = [error(NOT_RUN, spent)]
            return cell, self.resources
        started = time.monotonic()
        try:
            return super().preprocess_cell(cell, resources, index)
        except DeadKernelError:
            self._died_at = index
            process = getattr(getattr(self.km, "provisioner", None), "process", None)
            code = process.poll() if process else None
            how = f" (exit status {code})" if code is not None else ""
            cell.outputs = [
                error(
                    DIED,
                    f"the kernel died while running {cell_name(cell, index)}{how}; a new kernel "
                    "re-ran the cells before it and grading went on after it",
                )
            ]
            self.log.warning("%s killed the kernel%s", cell_name(cell, index), how)
            return cell, self.resources
        finally:
            self._slowest = max(self._slowest, (time.monotonic() - started, cell_name(cell, index)))


class ValidateExecute(Execute):
    """nbgrader's Execute for the learner's Validate button: the cells autograde skips are skipped.

    Validate judges as autograde does; a demo it ran would only cost the learner time (and could
    reach nbgrader's validate timeout).
    """

    def preprocess_cell(self, cell, resources, index):
        if skipped(cell):
            cell.outputs, cell.execution_count = [], None
            return cell, resources
        return super().preprocess_cell(cell, resources, index)
