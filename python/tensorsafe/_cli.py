"""The ``tensorsafe`` console script: runs the CLI binary shipped in the package."""

import os
import sys


def main() -> None:
    if sys.argv[1:2] == ["dcp"]:  # Python-only subcommands (tensorsafe.dcp needs torch)
        from .dcp._tool import main as dcp_main

        sys.exit(dcp_main(sys.argv[2:]))
    exe = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bin", "tensorsafe")
    if not os.path.exists(exe):
        sys.stderr.write("tensorsafe: the CLI binary is not in this installation\n")
        sys.exit(8)
    os.execv(exe, [exe] + sys.argv[1:])


if __name__ == "__main__":
    main()
