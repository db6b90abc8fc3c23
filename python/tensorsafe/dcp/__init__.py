"""tensorsafe as the storage of torch.distributed.checkpoint (DCP).

:class:`StorageWriter` saves each rank's items into its own .tsafe file
(aligned, every tensor checksummed) and commits a versioned JSON metadata
document last, atomically; :class:`StorageReader` loads on any number of
ranks through DCP's planners, reading and verifying only the row blocks each
rank needs. Layout, schema and commit protocol: docs/DCP.md.

Example:
    >>> import torch.distributed.checkpoint as dcp
    >>> from tensorsafe.dcp import StorageReader, StorageWriter
    >>> dcp.save({"model": model.state_dict()}, storage_writer=StorageWriter("ckpt/100"))
    >>> sd = {"model": model.state_dict()}
    >>> dcp.load(sd, storage_reader=StorageReader("ckpt/100"))
"""

from ._reader import StorageReader, load_metadata
from ._schema import FORMAT, METADATA_NAME, SCHEMA_VERSION
from ._writer import StorageWriter

__all__ = ["StorageWriter", "StorageReader", "load_metadata", "FORMAT", "METADATA_NAME", "SCHEMA_VERSION"]
