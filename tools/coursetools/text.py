"""Text the tools read back from programs: terminal colour codes taken out; a cell's Python."""

from __future__ import annotations

import re

ANSI = re.compile(r"(?:\x1b|&#x1[bB];?|#x1[bB])\[[0-9;?]*[A-Za-z]")  # raw, or escaped in JUnit XML


def strip_ansi(text: str) -> str:
    """``text`` without terminal colour and cursor codes (IPython colours its tracebacks)."""
    return ANSI.sub("", text)


NOT_PYTHON = ("%%writefile", "%%file", "%%bash", "%%sh", "%%script", "%%html", "%%javascript")


def cell_python(code: str) -> str:
    """A code cell's Python without IPython's magics and shell lines (each an empty line, so
    line numbers hold); nothing for a cell whose magic makes it no Python in the kernel
    (`%%writefile` writes a script another process runs)."""
    if code.lstrip().startswith(NOT_PYTHON):
        return ""
    lines = code.splitlines()
    return "\n".join("" if s.lstrip().startswith(("%", "!")) else s for s in lines)
