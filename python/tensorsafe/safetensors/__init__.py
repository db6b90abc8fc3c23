"""safetensors 0.8's Python API, on tensorsafe: a drop-in.

``tensorsafe.safetensors`` has the names of the ``safetensors`` package
(``safe_open``, ``_safe_open_handle``, ``serialize``, ``serialize_file``,
``deserialize``, ``TensorSpec``, ``SafetensorError``, ``__version__``) and its
submodules (``.torch``, ``.numpy``, ``.flax``, ``.tensorflow``, ``.mlx``,
``.paddle``), with the same signatures, exceptions and messages; it reads
.tsafe files and sharded checkpoints besides. Code that imports
``safetensors`` gets this package instead when ``TENSORSAFE_AS_SAFETENSORS=1``
is set (or after ``tensorsafe.safetensors.install_alias()``); see
docs/python.md, "The safetensors drop-in", for how and for every deliberate
difference.

Example:
    >>> from tensorsafe.safetensors import safe_open
    >>> with safe_open("model.safetensors", framework="pt") as f:
    ...     w = f.get_tensor("lm_head.weight")
"""

# The safetensors API level this package implements (what code that checks
# safetensors.__version__ compares against).
__version__ = "0.8.0"

from ._core import (  # noqa: E402
    SafetensorError,
    TensorSpec,
    deserialize,
    safe_open,
    serialize,
    serialize_file,
)
from ._handle import _safe_open_handle  # noqa: E402

__all__ = ["SafetensorError", "TensorSpec", "deserialize", "safe_open", "serialize", "serialize_file",
           "_safe_open_handle", "__version__", "install_alias"]


def install_alias() -> None:
    """Makes ``import safetensors`` (and ``safetensors.torch``, ...) resolve to
    this package from now on in this interpreter; what the environment
    variable TENSORSAFE_AS_SAFETENSORS=1 does at start-up.

    Raises:
        RuntimeError: the real safetensors was imported already (modules
            that hold it would keep it).
    """
    import _tensorsafe_alias

    _tensorsafe_alias.install()
