"""Text the tools read back from programs: terminal colour codes taken out."""

from __future__ import annotations

import re

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def strip_ansi(text: str) -> str:
    """``text`` without terminal colour and cursor codes (IPython colours its tracebacks)."""
    return ANSI.sub("", text)
