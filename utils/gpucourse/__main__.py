"""``python -m gpucourse doctor|bench``: the course's command line."""

from __future__ import annotations

import sys

USAGE = """usage: python -m gpucourse <command> [options]

commands:
  doctor [--json]   the environment report to paste into a bug, with a diagnosis
  bench [--json]    a report card of this machine: matmul TFLOP/s and copy GB/s beside the card's peaks
"""


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in {"-h", "--help"}:
        print(USAGE)
        return 0 if argv else 2
    if argv[0] not in {"doctor", "bench"}:
        print(f"unknown command {argv[0]!r}\n\n{USAGE}", file=sys.stderr)
        return 2
    from importlib import import_module

    return import_module(f"gpucourse.{argv[0]}").main(argv[1:])


if __name__ == "__main__":
    sys.exit(main())
