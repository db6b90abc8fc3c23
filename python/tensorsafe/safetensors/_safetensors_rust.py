"""What safetensors' compiled module `safetensors._safetensors_rust` exports,
for code that imports from it directly."""

from ._core import (  # noqa: F401
    SafetensorError,
    TensorSpec,
    deserialize,
    safe_open,
    serialize,
    serialize_file,
)
from ._handle import _safe_open_handle  # noqa: F401
from . import __version__  # noqa: F401
