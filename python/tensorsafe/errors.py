"""The exceptions tensorsafe raises, and the one place that maps the C++
status codes (include/tensorsafe/status.h, docs/ERRORS.md) to them.

Every class derives from :class:`Error` and from the builtin that matches its
meaning, so code that knows nothing of tensorsafe still catches the right
thing::

    try:
        ts.open("model.tsafe")["missing"]
    except KeyError:            # NotFoundError is a KeyError
        ...

I/O errors are :class:`IOError` (an :class:`OSError` carrying ``errno``); for
the common errno values the instance is also of the matching builtin
subclass (``FileNotFoundError`` for ``ENOENT``, ``PermissionError``...).
"""

from __future__ import annotations

import errno as _errno

__all__ = [
    "Error",
    "InvalidArgumentError",
    "NotFoundError",
    "CorruptionError",
    "UnsupportedError",
    "IOError",
    "OutOfRangeError",
    "LimitExceededError",
    "FailedPreconditionError",
    "InternalError",
]


class Error(Exception):
    """Base class of every tensorsafe error.

    Attributes:
        code: the stable lower-case name of the C++ status code
            (``"corruption"``, ``"not found"``...), see docs/ERRORS.md.
    """

    code = "unknown"

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if len(self.args) == 1 else super().__str__()


class InvalidArgumentError(Error, ValueError):
    """The caller passed something unusable (a bad dtype, name, option...)."""

    code = "invalid argument"


class NotFoundError(Error, KeyError):
    """No tensor (or key) of that name. A missing *file* is a FileNotFoundError."""

    code = "not found"


class CorruptionError(Error, ValueError):
    """The bytes contradict the format: the file is damaged or not what it claims."""

    code = "corruption"


class UnsupportedError(Error, ValueError):
    """Valid input that tensorsafe does not handle (a newer version, a dtype the
    target cannot hold, a packed dtype without ``packed=True``...)."""

    code = "unsupported"


class IOError(Error, OSError):  # noqa: A001 - tensorsafe.IOError, on purpose
    """The operating system refused; ``errno`` and ``strerror`` say why."""

    code = "I/O error"

    def __init__(self, *args):
        OSError.__init__(self, *args)

    def __str__(self) -> str:
        return OSError.__str__(self)


class OutOfRangeError(Error, IndexError):
    """An index or slice outside the tensor."""

    code = "out of range"


class LimitExceededError(Error, ValueError):
    """A resource limit was hit (header size, rank, tensor count...)."""

    code = "limit exceeded"


class FailedPreconditionError(Error, RuntimeError):
    """The object is in the wrong state (a finished writer, a locked file...)."""

    code = "failed precondition"


class InternalError(Error, RuntimeError):
    """A bug in tensorsafe: please report it."""

    code = "internal"


# StatusCode values of include/tensorsafe/status.h (never renumbered).
_BY_CODE = {
    1: InvalidArgumentError,
    2: NotFoundError,
    3: CorruptionError,
    4: UnsupportedError,
    5: IOError,
    6: OutOfRangeError,
    7: LimitExceededError,
    8: FailedPreconditionError,
    9: InternalError,
}


def _io_subclass(builtin: type) -> type:
    return type(builtin.__name__, (IOError, builtin), {"__module__": __name__, "__doc__": IOError.__doc__})


# An IOError with one of these errno values is also the builtin OSError
# subclass Python itself would raise for it.
_IO_BY_ERRNO = {
    _errno.ENOENT: _io_subclass(FileNotFoundError),
    _errno.EEXIST: _io_subclass(FileExistsError),
    _errno.EACCES: _io_subclass(PermissionError),
    _errno.EPERM: _io_subclass(PermissionError),
    _errno.EISDIR: _io_subclass(IsADirectoryError),
    _errno.ENOTDIR: _io_subclass(NotADirectoryError),
}


def _from_status(code: int, message: str, err: int = 0) -> Error:
    """The exception for a C++ Status (called by the native module)."""
    cls = _BY_CODE.get(code, InternalError)
    if cls is IOError:
        return _IO_BY_ERRNO.get(err, IOError)(err, message)
    return cls(message)
