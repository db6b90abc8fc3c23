"""transformers models saved to and loaded from .tsafe checkpoints.

For safetensors checkpoints nothing is needed: with the safetensors alias
(``TENSORSAFE_AS_SAFETENSORS=1``) transformers' own ``save_pretrained`` and
``from_pretrained`` run on tensorsafe unchanged (docs/TRANSFORMERS.md).

transformers only looks for ``model.safetensors`` /
``model.safetensors.index.json`` (and pickles) in a checkpoint directory, so
.tsafe weights go through the documented way of loading weights from
anywhere: ``from_pretrained(None, config=config, state_dict=state_dict)``,
which then ties weights, fills what is missing and checks what is left as
for a file it found itself. This module wraps that, and writes .tsafe
checkpoints in the same layout (``model.tsafe``, or ``model.tsafe.index.json``
beside ``model-00001-of-0000N.tsafe``).

Example:
    >>> from transformers import AutoModelForCausalLM
    >>> import tensorsafe.transformers as tt
    >>> tt.save_pretrained(model, "ckpt", max_shard_size="2GB")    # config + .tsafe shards
    >>> model = tt.from_pretrained(AutoModelForCausalLM, "ckpt")
"""

from __future__ import annotations

import os
import shutil
import tempfile
from typing import Any, Dict, Union

from . import _native
from .errors import NotFoundError

PathLike = Union[str, "os.PathLike[str]"]

# Looked for in this order in a checkpoint directory.
WEIGHT_FILES = ("model.tsafe.index.json", "model.tsafe", "model.safetensors.index.json", "model.safetensors")


def find_weights(path: PathLike) -> str:
    """The weights of a checkpoint: `path` itself when it is a file, else the
    first of WEIGHT_FILES in the directory.

    Raises:
        NotFoundError: a directory with none of them.
    """
    path = os.fspath(path)
    if not os.path.isdir(path):
        return path
    for name in WEIGHT_FILES:
        candidate = os.path.join(path, name)
        if os.path.isfile(candidate):
            return candidate
    raise NotFoundError(f"{path}: no weights ({', '.join(WEIGHT_FILES)})")


def load_state_dict(path: PathLike, device: str = "cpu") -> Dict[str, Any]:
    """Every tensor of a checkpoint (a directory, an index, or one file of any
    format tensorsafe reads) as torch tensors viewing a copy-on-write mapping
    of the files: nothing is read until used, and no copy is made."""
    from .torch import load_file

    return load_file(find_weights(path), device=device)


def from_pretrained(model_class: Any, path: PathLike, *, config: Any = None, **kwargs: Any) -> Any:
    """``model_class.from_pretrained`` for a checkpoint directory whose
    weights are .tsafe (or anything tensorsafe reads).

    Args:
        model_class: a transformers class (``GPT2LMHeadModel``, ...) or an
            Auto class (``AutoModelForCausalLM``: the class for the config).
        path: the checkpoint directory (config.json and the weights).
        config: the model config; by default AutoConfig.from_pretrained(path).
        **kwargs: passed to from_pretrained (``dtype``, ``device_map``...).

    Returns:
        The model, with generation_config.json loaded when it is there.
    """
    from transformers import AutoConfig, GenerationConfig

    path = os.fspath(path)
    if config is None:
        config = AutoConfig.from_pretrained(path)
    if hasattr(model_class, "_model_mapping"):
        # An Auto class: from_pretrained(None, ...) needs the concrete class,
        # which the Auto class picks from the config as from_pretrained does.
        model_class = model_class._model_mapping[type(config)]
    state_dict = load_state_dict(path)
    model = model_class.from_pretrained(None, config=config, state_dict=state_dict, **kwargs)
    generation = os.path.join(path, "generation_config.json")
    if os.path.isfile(generation) and getattr(model, "generation_config", None) is not None:
        model.generation_config = GenerationConfig.from_pretrained(path)
    return model


def save_pretrained(model: Any, save_directory: PathLike, *, max_shard_size: Union[int, str] = "5GB",
                    format: str = "tsafe", **kwargs: Any) -> None:
    """``model.save_pretrained`` with .tsafe weights: transformers writes the
    checkpoint (its config, its choice of tied and ignored weights, its
    split into shards and its index metadata) as safetensors in a temporary
    directory beside `save_directory`; each shard is then converted to
    .tsafe, keeping the split, and moved in with the rest.

    Args:
        format: "tsafe", or "safetensors" for transformers' own save.
        max_shard_size, **kwargs: as for save_pretrained.
    """
    if format == "safetensors":
        model.save_pretrained(save_directory, max_shard_size=max_shard_size, safe_serialization=True, **kwargs)
        return
    if format != "tsafe":
        raise ValueError(f"format must be 'tsafe' or 'safetensors', not {format!r}")
    save_directory = os.fspath(save_directory)
    os.makedirs(save_directory, exist_ok=True)
    staging = tempfile.mkdtemp(prefix=".tensorsafe-save-", dir=save_directory)
    try:
        model.save_pretrained(staging, max_shard_size=max_shard_size, safe_serialization=True, **kwargs)
        index = os.path.join(staging, "model.safetensors.index.json")
        for name in WEIGHT_FILES:  # weights of an earlier save
            old = os.path.join(save_directory, name)
            if os.path.exists(old):
                os.remove(old)
        if os.path.exists(index):
            _native.convert(staging, os.path.join(save_directory, "model.tsafe.index.json"), "tsafe")
        else:
            _native.convert(os.path.join(staging, "model.safetensors"), os.path.join(save_directory, "model.tsafe"),
                            "tsafe")
        for name in os.listdir(staging):
            if not name.endswith(".safetensors") and not name.endswith(".safetensors.index.json"):
                os.replace(os.path.join(staging, name), os.path.join(save_directory, name))
    finally:
        shutil.rmtree(staging, ignore_errors=True)
