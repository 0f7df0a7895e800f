"""ckstore: a distributed, in-memory, erasure-coded, versioned checkpoint
store. Python bindings of libckstore (cffi, ABI mode), with PyTorch helpers in
:mod:`ckstore.torch` and partial-expert checkpoints in :mod:`ckstore.pec`.

    import ckstore, ckstore.torch
    client = ckstore.Client(cluster="cluster.map", secret="cluster.key")
    ckstore.torch.save({"model": model.state_dict(), "optim": opt.state_dict()},
                       client, "job", step)
    state = ckstore.torch.load(client, "job")          # the newest version

See docs/PYTHON.md.
"""
from .client import (LATEST, NO_PARENT, CkstoreError, Client, ClusterStats, Kind, MemType,
                     ObjectInfo, Request, Restore, StagingBuffer, Status, Tags, VersionInfo,
                     VState, status_name, status_string)
from ._ffi import lib_path

__all__ = ["LATEST", "NO_PARENT", "CkstoreError", "Client", "ClusterStats", "Kind", "MemType",
           "ObjectInfo", "Request", "Restore", "StagingBuffer", "Status", "Tags",
           "VersionInfo", "VState", "status_name", "status_string", "lib_path"]
__version__ = "0.1.0"
