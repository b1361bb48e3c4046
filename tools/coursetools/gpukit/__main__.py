"""`make gpu-kit`, `make wheelhouse`: the GPU kit's command line, run online.

    python -m coursetools.gpukit kit DIR --have FREEZE [--python-version 3.12] [--platform P]
    python -m coursetools.gpukit wheels DIR [--have FREEZE] [--python-version 3.12] [--platform P]

`kit` makes the folder to carry to the GPU machine and prints the one command to run there;
`wheels` gathers the wheels alone, for `make test-gpu ENV=system WHEELHOUSE=DIR`. FREEZE is the GPU
machine's `pip freeze` (or names, one a line): what it has is left out. Exit status 1 when pip
fails or the kit is over 48 MiB."""

import argparse
import sys
from pathlib import Path

from . import kit


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("what", choices=["kit", "wheels"], help="the whole kit, or its wheels alone")
    p.add_argument("dest", type=Path, help="the folder it makes")
    p.add_argument("--have", type=Path, help="what the GPU machine has (its pip freeze)")
    p.add_argument("--python-version", help="the GPU machine's Python, e.g. 3.12")
    p.add_argument("--platform", help="the GPU machine's platform, e.g. manylinux_2_28_x86_64")
    args = p.parse_args(argv)
    if args.what == "kit" and not args.have:
        p.error("kit needs --have FILE: the GPU machine's `pip freeze`")
    dest, target = args.dest.resolve(), (args.python_version, args.platform)
    try:
        if args.what == "kit":
            made = kit.make_kit(dest, args.have, *target)
            print(kit.kit_message(dest, made))
            return 1 if made["size_mib"] > kit.KIT_LIMIT_MIB else 0
        have = kit.have_names(args.have) if args.have else set()
        removed = kit.download(dest, *target, have)
    except RuntimeError as error:
        print(error, file=sys.stderr)
        return 1
    if have:
        print(f"left out {len(removed)} wheel(s) {args.have} has")
    print(f"{dest}: {kit.size_mib(dest):.1f} MiB")
    return 0


sys.exit(main())
