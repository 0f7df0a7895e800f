"""PyTorch Distributed Checkpoint storage in ckstore: a sharded state dict as
one multi-rank ckstore version.

    from ckstore.dcp import StorageWriter, StorageReader
    # torch 1.13
    import torch.distributed._shard.checkpoint as dcp
    dcp.save_state_dict(state, StorageWriter(client, "job", step))
    dcp.load_state_dict(state, StorageReader(client, "job"))      # newest version

Every rank writes the items of its plan (its shards; the coordinator the
replicated tensors and plain values) as objects ``r<rank>/<n>`` of the
version, read and written in place; the coordinator writes the checkpoint's
metadata (with where each item is) as the object ``__dcp_metadata__`` and
finishes last. The version is restorable once every rank has finished. A
checkpoint saved by N ranks loads into M ranks: each reader asks for the
byte ranges its own shards need (resharding is torch's planner's).

The classes implement torch 1.13's interface (``init``, as
``torch.distributed._shard.checkpoint`` calls it) and the names torch >= 2's
``torch.distributed.checkpoint`` calls (``set_up_storage_writer``,
``set_up_storage_reader``, ``reset``, ``validate_checkpoint_id``,
``storage_meta``). Only torch 1.13 is tested here (Debian 12 ships it).
Import this module before ``torch.distributed._shard``: under Python 3.11,
torch 1.13's package needs the import fix in ``ckstore._compat``.
"""
from __future__ import annotations

import io
import pickle
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Tuple

import torch

from . import _device
from .client import LATEST, Client, Kind, Restore, Tags

from ._compat import import_shard_checkpoint

if int(torch.__version__.split(".")[0]) >= 2:
    from torch.distributed.checkpoint import StorageReader as _Reader
    from torch.distributed.checkpoint import StorageWriter as _Writer
    from torch.distributed.checkpoint.planner import LoadItemType, WriteItemType
    from torch.distributed.checkpoint.storage import WriteResult
else:  # torch 1.13 (under Python 3.11 it needs _compat to import at all)
    import_shard_checkpoint()
    from torch.distributed._shard.checkpoint import StorageReader as _Reader
    from torch.distributed._shard.checkpoint import StorageWriter as _Writer
    from torch.distributed._shard.checkpoint.planner import LoadItemType, WriteItemType
    from torch.distributed._shard.checkpoint.storage import WriteResult

__all__ = ["StorageWriter", "StorageReader", "METADATA_KEY"]

METADATA_KEY = "__dcp_metadata__"


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


def _done(value: Any):
    fut = torch.futures.Future()
    fut.set_result(value)
    return fut


def _raw(t: torch.Tensor):
    return t.reshape(-1).view(torch.uint8) if t.numel() else b""


class StorageWriter(_Writer):
    """Write a distributed checkpoint as version ``step`` of ``job``.

    Create one on every rank with the same job and step. ``nranks``
    (default: the process group's size) ranks write; ``retain`` and
    ``timeout_s`` as :meth:`ckstore.Client.begin`."""

    def __init__(self, client: Client, job: str, step: int, *, nranks: Optional[int] = None,
                 retain: Optional[int] = None, timeout_s: Optional[int] = None,
                 window: int = 16):
        super().__init__()
        self.client, self.job, self.step = client, job, step
        self.rank, world = _rank_world()
        self.nranks = nranks or world
        self.retain, self.timeout_s, self.window = retain, timeout_s, window
        self.is_coordinator = False
        self._finish_req = None

    # torch 1.13
    def init(self, is_coordinator: bool) -> None:
        self.is_coordinator = is_coordinator

    # torch >= 2
    def set_up_storage_writer(self, is_coordinator: bool, *args, **kw) -> None:
        self.init(is_coordinator)

    def reset(self, checkpoint_id: Any = None) -> None:
        if checkpoint_id is not None:
            self.step = int(checkpoint_id)
        self._finish_req = None

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id: Any) -> bool:
        return isinstance(checkpoint_id, int) and checkpoint_id >= 0

    def storage_meta(self):
        return None

    def prepare_local_plan(self, plan):
        return plan

    def prepare_global_plan(self, plans: List[Any]) -> List[Any]:
        """On the coordinator, before any rank writes: begin the version."""
        self.client.begin(self.job, self.step, nranks=self.nranks, retain=self.retain,
                          timeout_s=self.timeout_s)
        return plans

    def write_data(self, plan, planner):
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

    def finish(self, metadata, results: List[List[Any]]) -> None:
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
    """Read a distributed checkpoint from version ``step`` (default the
    newest restorable) of ``job``, into any number of ranks."""

    def __init__(self, client: Client, job: str, step: int = LATEST, *, check: bool = False,
                 verify: bool = False, window: int = 16):
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
        if self._restore is not None:
            self._restore.close()
            self._restore = None

    def reset(self, checkpoint_id: Any = None) -> None:
        self.close()
        if checkpoint_id is not None:
            self.step = int(checkpoint_id)

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id: Any) -> bool:
        return isinstance(checkpoint_id, int) and checkpoint_id >= 0

    def read_metadata(self):
        md = pickle.loads(bytes(self._open().get(METADATA_KEY)))
        return md

    # torch 1.13
    def init(self, metadata, is_coordinator: bool) -> None:
        self.storage_data = metadata.storage_data

    # torch >= 2
    def set_up_storage_reader(self, metadata, is_coordinator: bool, *args, **kw) -> None:
        self.init(metadata, is_coordinator)

    def prepare_local_plan(self, plan):
        return plan

    def prepare_global_plan(self, plans):
        return plans

    def read_data(self, plan, planner):
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
    def _land(p, planner) -> None:
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
