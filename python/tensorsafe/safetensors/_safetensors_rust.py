"""What safetensors' compiled module `safetensors._safetensors_rust` exports,
for code that imports from it directly."""

from ._core import (  # noqa: F401
    SafetensorError,
    TensorSpec,
    _safe_open_handle,
    deserialize,
    safe_open,
    serialize,
    serialize_file,
)
from . import __version__  # noqa: F401
