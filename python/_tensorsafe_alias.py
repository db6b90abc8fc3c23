"""Makes ``import safetensors`` resolve to ``tensorsafe.safetensors``.

Installed beside the ``tensorsafe`` package. The file
``tensorsafe-safetensors-alias.pth`` (installed with it) calls install() at
interpreter start when the environment variable TENSORSAFE_AS_SAFETENSORS is
set to anything but "" or "0", so code that cannot be edited runs on
tensorsafe unchanged::

    TENSORSAFE_AS_SAFETENSORS=1 python train.py

It works beside a real safetensors installation (the alias is looked up
first) and without one (then it also answers importlib.metadata for the
distribution "safetensors", version 0.8.0, so version checks such as
transformers' find it). Importing this module costs nothing else: tensorsafe
itself loads at the first ``import safetensors``.
"""

import importlib.abc
import importlib.machinery
import importlib.metadata
import importlib.util
import pathlib
import sys

NAME = "safetensors"
TARGET = "tensorsafe.safetensors"
VERSION = "0.8.0"  # the safetensors API level tensorsafe.safetensors implements


class _Loader(importlib.abc.Loader):
    """Hands out tensorsafe's module itself (one module object under two
    names, so patching either patches both)."""

    def __init__(self, target):
        self.target = target
        self.spec = None

    def create_module(self, spec):
        module = importlib.import_module(self.target)
        self.spec = module.__spec__
        return module

    def exec_module(self, module):
        # importlib set the alias's spec on the module; it stays tensorsafe's.
        module.__spec__ = self.spec


class _Distribution(importlib.metadata.Distribution):
    """The metadata of "safetensors" when no real distribution is installed."""

    def read_text(self, filename):
        if filename == "METADATA":
            return (f"Metadata-Version: 2.1\nName: {NAME}\nVersion: {VERSION}\n"
                    "Summary: safetensors' API, provided by tensorsafe (TENSORSAFE_AS_SAFETENSORS)\n")
        if filename == "top_level.txt":
            return NAME + "\n"
        return None

    def locate_file(self, path):
        spec = importlib.util.find_spec(TARGET)
        return pathlib.Path(spec.origin).parent / path


class Finder(importlib.abc.MetaPathFinder):
    """Maps safetensors and safetensors.X to tensorsafe.safetensors(.X)."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname != NAME and not fullname.startswith(NAME + "."):
            return None
        real = TARGET + fullname[len(NAME):]
        try:
            found = importlib.util.find_spec(real)
        except ModuleNotFoundError:
            found = None
        if found is None:
            return None  # safetensors.X that tensorsafe does not have: not found
        return importlib.machinery.ModuleSpec(fullname, _Loader(real),
                                              is_package=found.submodule_search_locations is not None)

    def find_distributions(self, context=importlib.metadata.DistributionFinder.Context()):
        name = context.name
        if name is not None and name.lower().replace("-", "_") != NAME:
            return iter(())
        real = importlib.metadata.DistributionFinder.Context(name=NAME, path=context.path)
        if any(True for _ in importlib.machinery.PathFinder.find_distributions(real)):
            return iter(())  # the installed safetensors answers for itself
        return iter((_Distribution(),))


def installed():
    """Whether the alias is active in this interpreter."""
    return any(isinstance(f, Finder) for f in sys.meta_path)


def install():
    """Activates the alias (idempotent).

    Raises:
        RuntimeError: the real safetensors was imported already.
    """
    module = sys.modules.get(NAME)
    if module is not None and getattr(module, "__name__", None) != TARGET:
        raise RuntimeError(
            "tensorsafe: the real safetensors was imported before the alias was installed; set "
            "TENSORSAFE_AS_SAFETENSORS=1 in the environment, or call install() before anything imports it")
    if not installed():
        sys.meta_path.insert(0, Finder())
