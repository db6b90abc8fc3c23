"""The ``tensorsafe`` console script: runs the CLI binary shipped in the package."""

import os
import sys


def main() -> None:
    exe = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bin", "tensorsafe")
    if not os.path.exists(exe):
        sys.stderr.write("tensorsafe: the CLI binary is not in this installation\n")
        sys.exit(8)
    os.execv(exe, [exe] + sys.argv[1:])


if __name__ == "__main__":
    main()
