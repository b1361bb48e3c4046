"""``python -m gpucourse doctor|bench``: the course's command line."""

import sys
from importlib import import_module

USAGE = """usage: python -m gpucourse <command> [options]
  doctor [--json]   the environment report to paste into a bug, with a diagnosis
  bench [--json]    this machine's report card: matmul TFLOP/s and copy GB/s beside the card's
                    published peaks"""


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] in {"doctor", "bench"}:
        return import_module(f"gpucourse.{argv[0]}").main(argv[1:])
    usage = not argv or argv[0] in {"-h", "--help"}  # else an unknown command
    print(
        USAGE if usage else f"unknown command {argv[0]!r}\n{USAGE}",
        file=sys.stdout if usage else sys.stderr,
    )
    return 0 if argv and usage else 2


if __name__ == "__main__":
    sys.exit(main())
