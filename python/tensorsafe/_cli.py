"""The ``tensorsafe`` console script: runs the CLI binary shipped in the
package, or, when an argument is a URL that only fsspec serves (gs://,
hf://, az://, ...), the same CLI compiled into the extension, in this
process, where the fsspec handler is registered (docs/REMOTE.md, "fsspec
URLs")."""

import os
import re
import sys
from typing import List

_URL = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")
_NATIVE_SCHEMES = {"s3", "http", "https", "file"}  # the binary reads these itself


def _needs_fsspec(args: List[str]) -> bool:
    for a in args:
        if a.startswith("--") and "=" in a:  # --option=URL
            a = a.split("=", 1)[1]
        m = _URL.match(a)
        if m and m.group(1).lower() not in _NATIVE_SCHEMES:
            return True
    return False


def _run_in_process(args: List[str]) -> int:
    import signal

    from . import _native  # the package's import registered the fsspec handler

    # As the binary: Ctrl-C stops the command, a closed pipe (| head) ends it.
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    sys.stdout.flush()
    return _native.run_cli(["tensorsafe"] + args)


def main() -> None:
    args = sys.argv[1:]
    if args[:1] == ["dcp"]:  # Python-only subcommands (tensorsafe.dcp needs torch)
        from .dcp._tool import main as dcp_main

        sys.exit(dcp_main(args[1:]))
    if _needs_fsspec(args):
        sys.exit(_run_in_process(args))
    exe = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bin", "tensorsafe")
    if not os.path.exists(exe):
        sys.stderr.write("tensorsafe: the CLI binary is not in this installation\n")
        sys.exit(8)
    os.execv(exe, [exe] + args)


if __name__ == "__main__":
    main()
