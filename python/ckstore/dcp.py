"""PyTorch Distributed Checkpoint storage in ckstore: a sharded state dict as
one multi-rank ckstore version.

    from ckstore.dcp import StorageWriter, StorageReader
    # torch 1.13
    import torch.distributed._shard.checkpoint as dcp
    dcp.save_state_dict(state, StorageWriter(client, "job", step))
    dcp.load_state_dict(state, StorageReader(client, "job"))      # newest version
    # torch >= 2 (not tested here)
    import torch.distributed.checkpoint as dcp
    dcp.save(state, storage_writer=StorageWriter(client, "job", step))
    dcp.load(state, storage_reader=StorageReader(client, "job"))

Every rank writes the items of its plan (its shards; the coordinator the
replicated tensors and plain values) as objects ``r<rank>/<n>`` of the
version, read and written in place; the coordinator writes the checkpoint's
metadata (with where each item is) as the object ``__dcp_metadata__`` and
finishes last. The version is restorable once every rank has finished. A
checkpoint saved by N ranks loads into M ranks: each reader reads the
stored items its shards overlap and copies the overlap into them
(resharding is torch's planner's).

The classes implement torch 1.13's interface (``init``, as
``torch.distributed._shard.checkpoint`` calls it) and the names and
signatures of torch >= 2's ``torch.distributed.checkpoint``
(``set_up_storage_writer``, ``set_up_storage_reader`` and ``read_metadata``
taking the extra arguments later versions pass, ``reset(checkpoint_id)``
and ``validate_checkpoint_id`` with the version number as the checkpoint
id, ``storage_meta``). Tested with torch 1.13 only (Debian 12 ships it):
save and load across ranks through torch 1.13's functions, and the torch
>= 2 method names in the order torch >= 2 calls them, with torch 1.13's
planners (tests/python/test_dcp.py); the import branch for torch >= 2 has
not run. Import this module before ``torch.distributed._shard``: under Python 3.11,
torch 1.13's package needs the import fix in ``ckstore._compat``.
"""
from __future__ import annotations

import io
import os
import pickle
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Tuple, Union

import torch

from . import _device
from .client import LATEST, Client, Kind, Restore, Tags

from ._compat import import_shard_checkpoint

TORCH_2 = int(torch.__version__.split(".")[0]) >= 2
"""Whether this is torch >= 2 (``torch.distributed.checkpoint``), else 1.13
(``torch.distributed._shard.checkpoint``). Only 1.13 is tested."""

if TORCH_2:
    from torch.distributed.checkpoint import StorageReader as _Reader
    from torch.distributed.checkpoint import StorageWriter as _Writer
    from torch.distributed.checkpoint.metadata import Metadata
    from torch.distributed.checkpoint.planner import (LoadItemType, LoadPlan, LoadPlanner,
                                                      SavePlan, SavePlanner, WriteItemType)
    from torch.distributed.checkpoint.storage import WriteResult
else:  # torch 1.13 (under Python 3.11 it needs _compat to import at all)
    import_shard_checkpoint()
    from torch.distributed._shard.checkpoint import StorageReader as _Reader
    from torch.distributed._shard.checkpoint import StorageWriter as _Writer
    from torch.distributed._shard.checkpoint.metadata import Metadata
    from torch.distributed._shard.checkpoint.planner import (LoadItemType, LoadPlan,
                                                             LoadPlanner, SavePlan,
                                                             SavePlanner, WriteItemType)
    from torch.distributed._shard.checkpoint.storage import WriteResult

__all__ = ["StorageWriter", "StorageReader", "METADATA_KEY", "TORCH_2"]

METADATA_KEY = "__dcp_metadata__"
"""The object of the version that holds the checkpoint's metadata (pickled
``Metadata``, with where each item is in ``storage_data``)."""

CheckpointId = Union[int, str, os.PathLike]
"""A checkpoint id as torch >= 2 passes it (``checkpoint_id=``): here the
version number, an int or a str of digits."""


@dataclass(frozen=True)
class _Item:
    """Where one write item is: its object, and for a tensor its dtype and
    shape (the bytes are the tensor's, C order)."""
    key: str
    nbytes: int
    dtype: Optional[str] = None
    shape: Optional[Tuple[int, ...]] = None


def _rank_world() -> Tuple[int, int]:
    import torch.distributed as dist
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def _done(value: Any) -> "torch.futures.Future[Any]":
    fut: "torch.futures.Future[Any]" = torch.futures.Future()
    fut.set_result(value)
    return fut


def _raw(t: torch.Tensor) -> Union[torch.Tensor, bytes]:
    return t.reshape(-1).view(torch.uint8) if t.numel() else b""


def _version_of(checkpoint_id: Any) -> Optional[int]:
    """The version a checkpoint id names (an int >= 0, or a str of digits),
    else None."""
    if isinstance(checkpoint_id, bool):
        return None
    if isinstance(checkpoint_id, int):
        return checkpoint_id if checkpoint_id >= 0 else None
    if isinstance(checkpoint_id, str) and checkpoint_id.isdigit():
        return int(checkpoint_id)
    return None


def _set_version(obj: Any, checkpoint_id: Optional[CheckpointId]) -> None:
    if checkpoint_id is None:
        return
    v = _version_of(checkpoint_id)
    if v is None:
        raise ValueError(f"ckstore: checkpoint_id {checkpoint_id!r} is not a version number "
                         f"(an int >= 0 or a str of digits)")
    obj.step = v


class StorageWriter(_Writer):
    """Write a distributed checkpoint as version ``step`` of ``job``.

    Create one on every rank with the same client settings, job and step
    (torch >= 2: or give the step as ``checkpoint_id=``, which calls
    :meth:`reset`). ``nranks`` (default: the process group's size) ranks
    write; ``retain`` and ``timeout_s`` as :meth:`ckstore.Client.begin`;
    ``window``: puts in flight per rank.

    Calls, as torch makes them: :meth:`init` (1.13) or
    :meth:`set_up_storage_writer` (>= 2) on every rank,
    :meth:`prepare_local_plan` on every rank, :meth:`prepare_global_plan` on
    the coordinator (which begins the version), :meth:`write_data` on every
    rank, :meth:`finish` on the coordinator. A non-coordinator rank's
    ``save_state_dict`` returns before the version is restorable;
    :meth:`wait` waits for it."""

    def __init__(self, client: Client, job: str, step: int, *, nranks: Optional[int] = None,
                 retain: Optional[int] = None, timeout_s: Optional[int] = None,
                 window: int = 16) -> None:
        super().__init__()
        self.client, self.job, self.step = client, job, step
        self.rank, world = _rank_world()
        self.nranks = nranks or world
        self.retain, self.timeout_s, self.window = retain, timeout_s, window
        self.is_coordinator = False
        self._finish_req = None

    def init(self, is_coordinator: bool) -> None:
        """torch 1.13's set-up call: whether this rank is the coordinator."""
        self.is_coordinator = is_coordinator

    def set_up_storage_writer(self, is_coordinator: bool, *args: Any, **kwargs: Any) -> None:
        """torch >= 2's name for :meth:`init` (later versions pass more
        arguments, such as the rank; they are not needed)."""
        self.init(is_coordinator)

    def reset(self, checkpoint_id: Optional[CheckpointId] = None) -> None:
        """A new save is about to start (torch >= 2); ``checkpoint_id``, when
        given, is the version to write (an int, or a str of digits)."""
        _set_version(self, checkpoint_id)
        self._finish_req = None

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id: Any) -> bool:
        """Whether ``checkpoint_id`` names a version (torch >= 2)."""
        return _version_of(checkpoint_id) is not None

    def storage_meta(self) -> Optional[Any]:
        """torch >= 2.4's storage metadata for the planner: None (ckstore
        keeps none of its own)."""
        return None

    def prepare_local_plan(self, plan: SavePlan) -> SavePlan:
        """This rank's plan, unchanged (object keys are given at write time)."""
        return plan

    def prepare_global_plan(self, plans: List[SavePlan]) -> List[SavePlan]:
        """On the coordinator, before any rank writes: begin the version."""
        self.client.begin(self.job, self.step, nranks=self.nranks, retain=self.retain,
                          timeout_s=self.timeout_s)
        return plans

    def write_data(self, plan: SavePlan,
                   planner: SavePlanner) -> "torch.futures.Future[List[WriteResult]]":
        """Put this rank's items as objects ``r<rank>/<n>`` (tensors from
        their own memory; CUDA ones through libckstore's device path where
        it has one), ``window`` in flight; a rank other than the coordinator
        then finishes its part without waiting. The future is already done:
        every put has completed (STORED) when this returns."""
        reqs = []
        results = []
        for n, item in enumerate(plan.items):
            data = planner.resolve_data(item)
            key = f"r{self.rank}/{n}"
            if item.type == WriteItemType.BYTE_IO:
                raw = data.getvalue() if isinstance(data, io.BytesIO) else bytes(data)
                info = _Item(key, len(raw))
                tags = Tags(Kind.OTHER, rank=self.rank)
            else:
                t = data.detach().contiguous()
                raw = None
                info = _Item(key, t.numel() * t.element_size(),
                             str(t.dtype).replace("torch.", ""), tuple(t.shape))
                tags = Tags(Kind.DENSE, rank=self.rank)
            if len(reqs) >= self.window:
                reqs.pop(0).result()
            if raw is None:
                # CUDA: from device memory through the library's device path,
                # or a host copy where the library has none
                _device.sync([t])
                reqs.append(_device.put_tensor(self.client, self.job, self.step, key, t,
                                               tags))
            else:
                reqs.append(self.client.put_async(self.job, self.step, key, raw, tags=tags))
            results.append(WriteResult(index=item.index, size_in_bytes=info.nbytes,
                                       storage_data=info))
        for r in reqs:
            r.result()
        if not self.is_coordinator:
            # The coordinator finishes last, after the metadata (finish());
            # this rank's finish completes only then, so it must not block here.
            self._finish_req = self.client.finish_async(self.job, self.step, self.rank)
        return _done(results)

    def finish(self, metadata: Metadata, results: List[List[WriteResult]]) -> None:
        """On the coordinator: write the metadata, finish; returns once the
        version is restorable (every rank finished)."""
        storage = {}
        for wr_list in results:
            for wr in wr_list:
                storage[wr.index] = wr.storage_data
        metadata.storage_data = storage
        blob = pickle.dumps(metadata, protocol=4)
        self.client.put(self.job, self.step, METADATA_KEY, blob, tags=Tags(Kind.OTHER))
        self.client.finish(self.job, self.step, self.rank)

    def wait(self, timeout: Optional[float] = None) -> None:
        """On a non-coordinator rank: wait for this rank's finish (the
        version's outcome; save_state_dict has already returned then)."""
        if self._finish_req is not None:
            self._finish_req.result(timeout)


class StorageReader(_Reader):
    """Read a distributed checkpoint from version ``step`` (default
    :data:`ckstore.LATEST`, the newest restorable) of ``job``, into any
    number of ranks (torch >= 2: or give the step as ``checkpoint_id=``).
    ``check`` verifies first that every object can be restored (see
    :meth:`ckstore.Client.open`), ``verify`` checks each object's CRC on
    arrival; ``window``: gets in flight.

    Calls, as torch makes them: :meth:`read_metadata`, :meth:`init` (1.13)
    or :meth:`set_up_storage_reader` (>= 2), :meth:`prepare_local_plan`,
    :meth:`prepare_global_plan` (coordinator), :meth:`read_data`. The version
    stays open for reading until :meth:`close` (or :meth:`reset`)."""

    def __init__(self, client: Client, job: str, step: int = LATEST, *, check: bool = False,
                 verify: bool = False, window: int = 16) -> None:
        super().__init__()
        self.client, self.job, self.step = client, job, step
        self.check, self.verify, self.window = check, verify, window
        self._restore: Optional[Restore] = None
        self.storage_data: Dict[Any, _Item] = {}

    def _open(self) -> Restore:
        if self._restore is None:
            self._restore = self.client.open(self.job, self.step, check=self.check)
            self.step = self._restore.version
        return self._restore

    def close(self) -> None:
        """Close the version opened for reading (idempotent)."""
        if self._restore is not None:
            self._restore.close()
            self._restore = None

    def reset(self, checkpoint_id: Optional[CheckpointId] = None) -> None:
        """A new load is about to start (torch >= 2): close the version
        opened before; ``checkpoint_id``, when given, is the version to read
        (an int, or a str of digits)."""
        self.close()
        _set_version(self, checkpoint_id)

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id: Any) -> bool:
        """Whether ``checkpoint_id`` names a version (torch >= 2)."""
        return _version_of(checkpoint_id) is not None

    def read_metadata(self, *args: Any, **kwargs: Any) -> Metadata:
        """Open the version (``step`` becomes the version opened, for
        LATEST) and read its metadata (unpickled: read only checkpoints your
        own job wrote, as with ``torch.load``)."""
        md = pickle.loads(bytes(self._open().get(METADATA_KEY)))
        return md

    def init(self, metadata: Metadata, is_coordinator: bool) -> None:
        """torch 1.13's set-up call: take where each item is from the metadata."""
        self.storage_data = metadata.storage_data

    def set_up_storage_reader(self, metadata: Metadata, is_coordinator: bool, *args: Any,
                              **kwargs: Any) -> None:
        """torch >= 2's name for :meth:`init`."""
        self.init(metadata, is_coordinator)

    def prepare_local_plan(self, plan: LoadPlan) -> LoadPlan:
        """This rank's plan, unchanged."""
        return plan

    def prepare_global_plan(self, plans: List[LoadPlan]) -> List[LoadPlan]:
        """The plans, unchanged."""
        return plans

    def read_data(self, plan: LoadPlan, planner: LoadPlanner) -> "torch.futures.Future[None]":
        """Read this rank's items: a stored tensor that matches its
        destination whole (shape, dtype, contiguous) straight into it (a CUDA
        one through libckstore's device path where it has one), any other
        into a CPU tensor of the stored shape that is narrowed and copied
        into the destination (resharding); ``window`` in flight. The future
        is already done when this returns."""
        r = self._open()
        pending = []  # (request, read item, whole stored tensor or None, target)
        try:
            for req in plan.items:
                info = self.storage_data[req.storage_index]
                if req.type == LoadItemType.BYTE_IO:
                    buf = r.get(info.key, verify=self.verify)
                    planner.load_bytes(req, io.BytesIO(bytes(buf)))
                    continue
                target = planner.resolve_tensor(req).detach()
                whole = tuple(req.lengths) == tuple(info.shape) and \
                    all(o == 0 for o in req.storage_offsets)
                if len(pending) >= self.window:
                    self._land(pending.pop(0), planner)
                q = None
                if whole and target.is_contiguous() and \
                        target.device.type in ("cpu", "cuda") and \
                        str(target.dtype).replace("torch.", "") == info.dtype:
                    if not info.nbytes:
                        pending.append((None, req, None, target))
                        continue
                    # straight into the destination (CUDA: the library's device
                    # path; None where the library has none)
                    _device.sync([target])
                    q = _device.get_tensor(r, info.key, target, verify=self.verify)
                    if q is not None:
                        pending.append((q, req, None, target))
                        continue
                stored = torch.empty(info.shape, dtype=getattr(torch, info.dtype))
                q = r.get_async(info.key, _raw(stored), verify=self.verify) if info.nbytes \
                    else None
                pending.append((q, req, stored, target))
            while pending:
                self._land(pending.pop(0), planner)
        finally:
            for q, *_ in pending:
                if q is not None:
                    try:
                        q.result()
                    except Exception:
                        pass
        return _done(None)

    @staticmethod
    def _land(p: Tuple[Any, Any, Optional[torch.Tensor], torch.Tensor],
              planner: LoadPlanner) -> None:
        q, req, stored, target = p
        if q is not None:
            q.result()
        if stored is not None:
            part = stored
            for dim, (off, n) in enumerate(zip(req.storage_offsets, req.lengths)):
                part = part.narrow(dim, off, n)
            if part.shape != target.shape:
                raise ValueError(f"ckstore: item {req.storage_index} has shape "
                                 f"{tuple(part.shape)}, the destination {tuple(target.shape)}")
            target.copy_(part)
        planner.commit_tensor(req, target)
