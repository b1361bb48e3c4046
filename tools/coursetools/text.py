"""Text the tools read back from programs: terminal colour codes taken out."""

from __future__ import annotations

import re

ANSI = re.compile(r"(?:\x1b|&#x1[bB];?|#x1[bB])\[[0-9;?]*[A-Za-z]")  # raw, or escaped in JUnit XML


def strip_ansi(text: str) -> str:
    """``text`` without terminal colour and cursor codes (IPython colours its tracebacks)."""
    return ANSI.sub("", text)
