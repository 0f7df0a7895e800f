"""PyTorch state dicts in ckstore, as ``torch.save``/``torch.load`` keep them.

    ckstore.torch.save({"model": model.state_dict(), "optim": opt.state_dict()},
                       client, "job", step)
    state = ckstore.torch.load(client, "job")        # the newest version
    fut = ckstore.torch.async_save(state, client, "job", step)  # returns after the copy
    fut.result()                                     # the version is PROTECTED

A state dict (nested dicts, lists and tuples of tensors and plain values) is
stored as one version: every tensor of at least ``pack_below`` bytes (default
256 KiB) is its own object, read and written in place; smaller ones are
packed, by their tags, into objects ``pack/<kind>/<layer>/<expert>/<n>`` of
up to 4 MiB (on a cluster every object takes at least one stripe of
k + m chunks in the servers' memory, so a few hundred biases and norms must
not take one each). The rest of the structure (with each tensor's dtype,
shape, object and offset) is one more object, ``__meta__``, pickled. Object
keys are the tensors' paths ("model/layers.0.attn.qkv.weight",
"optim/state/3/exp_avg"), tagged by kind (optimizer, rng, expert with layer
and expert number, dense).

With torch.distributed initialised (or ``rank``/``world_size`` given),
every rank saves its own state dict into one multi-rank version under the
prefix ``r<rank>/``: rank 0 begins the version, the others wait for it (one
broadcast), and the version is restorable once every rank has finished.
``load`` reads the caller's rank's part.

Loading, like ``torch.load``, unpickles ``__meta__``: load only checkpoints
that you (or your job) wrote.
"""
from __future__ import annotations

import io
import pickle
import re
import threading
import weakref
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Tuple, Union

import torch as _torch

from . import _device
from ._device import device_path
from .client import (LATEST, CkstoreError, Client, Kind, Request, Restore, StagingBuffer, Tags)

__all__ = ["save", "load", "async_save", "CheckpointInfo", "TensorRef", "default_tags",
           "device_path"]

META_KEY = "__meta__"
_FORMAT = 1
_KEY_MAX = 256
PACK_BELOW = 256 << 10
PACK_MAX = 4 << 20

_EXPERT_RE = re.compile(r"(?:^|[./])layers?[._](\d+)[./].*?experts?[._](\d+)(?:[./]|$)")


@dataclass(frozen=True)
class TensorRef:
    """A tensor's place in ``__meta__``: the object that holds its bytes."""
    key: str
    dtype: str
    shape: Tuple[int, ...]
    nbytes: int
    requires_grad: bool = False
    offset: int = 0        # in the object (packed tensors)
    packed: bool = False


class _Pack:
    """Small tensors of one tag group, packed into one object (64-byte aligned)."""

    def __init__(self):
        self.parts: List[Tuple[_torch.Tensor, int]] = []
        self.size = 0

    def add(self, t: _torch.Tensor, nbytes: int) -> int:
        off = (self.size + 63) & ~63
        self.parts.append((t, off))
        self.size = off + nbytes
        return off

    def fill(self, out: _torch.Tensor) -> None:
        """Copy the parts into ``out`` (uint8, at least ``size`` bytes)."""
        for t, off in self.parts:
            n = t.numel() * t.element_size()
            if n:
                out[off:off + n].copy_(_bytes_of(t))


@dataclass
class CheckpointInfo:
    """What :func:`load` read: the version, and for every object its source
    version (the step it was written at: older than ``version`` for the
    experts a partial-expert version inherits) and tags."""
    job: str
    version: int
    rank: int
    sources: Dict[str, int] = field(default_factory=dict)
    tags: Dict[str, Tags] = field(default_factory=dict)


def default_tags(path: str) -> Tags:
    """Tags from a tensor's path: ``optim``... is OPTIMIZER, ``rng``... RNG, a
    path with ``layers.<l>`` ... ``experts.<e>`` an EXPERT of layer l, else
    DENSE."""
    head = path.split("/", 1)[0].lower()
    m = _EXPERT_RE.search(path)
    if head.startswith("optim"):
        if m:
            return Tags(Kind.OPTIMIZER, int(m.group(1)), int(m.group(2)))
        return Tags(Kind.OPTIMIZER)
    if head.startswith("rng"):
        return Tags(Kind.RNG)
    if m:
        return Tags(Kind.EXPERT, int(m.group(1)), int(m.group(2)))
    return Tags(Kind.DENSE)


def _dist():
    try:
        import torch.distributed as dist
        if dist.is_available() and dist.is_initialized():
            return dist
    except ImportError:
        pass
    return None


def _ranks(rank: Optional[int], world_size: Optional[int]) -> Tuple[int, int]:
    dist = _dist()
    if rank is None:
        rank = dist.get_rank() if dist else 0
    if world_size is None:
        world_size = dist.get_world_size() if dist else 1
    if not 0 <= rank < world_size:
        raise ValueError(f"ckstore: rank {rank} not in [0, {world_size})")
    return rank, world_size


def _prefix(rank: int, world_size: int) -> str:
    return f"r{rank}/" if world_size > 1 else ""


class _Flat:
    """A state dict taken apart: the skeleton (tensors replaced by TensorRef)
    and the tensors with their keys and tags."""

    def __init__(self, obj: Any, prefix: str, tagger: Callable[[str], Tags],
                 pack_below: int = PACK_BELOW):
        self.prefix = prefix
        self.tagger = tagger
        self.pack_below = pack_below
        # (key, tensor or _Pack, tags), one per object
        self.tensors: List[Tuple[str, Any, Tags]] = []
        self._seen: Dict[int, TensorRef] = {}
        self._keys: set = set()
        self._open_packs: Dict[Tuple, Tuple[str, _Pack]] = {}
        self._npacks: Dict[Tuple, int] = {}
        self.skeleton = self._walk(obj, "")
        self.packs = {key: data.size for key, data, _ in self.tensors
                      if isinstance(data, _Pack)}

    def _pack_for(self, tags: Tags, nbytes: int) -> Tuple[str, _Pack]:
        group = (int(tags.kind), tags.layer, tags.expert, tags.rank)
        cur = self._open_packs.get(group)
        if cur is None or ((cur[1].size + 63) & ~63) + nbytes > PACK_MAX:
            n = self._npacks.get(group, 0)
            self._npacks[group] = n + 1
            kind = Kind(tags.kind).name.lower() if tags.kind in Kind.__members__.values() \
                else str(int(tags.kind))
            key = f"{self.prefix}pack/{kind}/{tags.layer}/{tags.expert}/{n}"
            cur = (key, _Pack())
            self._open_packs[group] = cur
            self._keys.add(key)
            self.tensors.append((key, cur[1], tags))
        return cur

    def _key(self, path: str) -> str:
        key = self.prefix + path
        if len(key.encode()) > _KEY_MAX or key in self._keys or key == META_KEY or \
                key.endswith("/" + META_KEY):
            key = f"{self.prefix}#{len(self.tensors)}"
        self._keys.add(key)
        return key

    def _walk(self, obj: Any, path: str) -> Any:
        if isinstance(obj, _torch.Tensor):
            ref = self._seen.get(id(obj))
            if ref is None:
                t = obj.detach()
                if t.is_sparse:
                    raise TypeError(f"ckstore: sparse tensor at {path!r} is not supported")
                tags = self.tagger(path)
                dtype = str(t.dtype).replace("torch.", "")
                nbytes = t.numel() * t.element_size()
                if nbytes < self.pack_below:
                    key, pack = self._pack_for(tags, nbytes)
                    off = pack.add(t.contiguous(), nbytes)
                    ref = TensorRef(key, dtype, tuple(t.shape), nbytes,
                                    bool(obj.requires_grad), off, True)
                else:
                    ref = TensorRef(self._key(path), dtype, tuple(t.shape), nbytes,
                                    bool(obj.requires_grad))
                    self.tensors.append((ref.key, t.contiguous(), tags))
                self._seen[id(obj)] = ref
            return ref
        sep = "/" if path else ""
        if isinstance(obj, dict):
            out = type(obj)() if type(obj) is not dict else {}
            try:
                for k, v in obj.items():
                    out[k] = self._walk(v, f"{path}{sep}{k}")
            except TypeError:  # a dict subclass that cannot be built empty
                out = {k: self._walk(v, f"{path}{sep}{k}") for k, v in obj.items()}
            return out
        if isinstance(obj, list):
            return [self._walk(v, f"{path}{sep}{i}") for i, v in enumerate(obj)]
        if isinstance(obj, tuple) and not hasattr(obj, "_fields"):
            return tuple(self._walk(v, f"{path}{sep}{i}") for i, v in enumerate(obj))
        return obj

    def meta(self, extra: Optional[dict] = None) -> bytes:
        buf = io.BytesIO()
        pickle.dump({"format": _FORMAT, "skeleton": self.skeleton, "packs": self.packs,
                     "extra": extra or {}}, buf, protocol=4)
        return buf.getvalue()


def _begin(client: Client, job: str, step: int, rank: int, world_size: int,
           parent: Optional[int], retain: Optional[int], timeout_s: Optional[int]) -> None:
    """Rank 0 begins the version; with several ranks the others learn the
    outcome from one broadcast (so that a failed begin fails every rank)."""
    err: Optional[str] = None
    if rank == 0:
        try:
            client.begin(job, step, parent=parent, nranks=world_size, retain=retain,
                         timeout_s=timeout_s)
        except CkstoreError as e:
            err = str(e)
            if world_size == 1:
                raise
    if world_size > 1:
        dist = _dist()
        if dist is None:
            raise RuntimeError("ckstore: world_size > 1 needs torch.distributed initialised "
                               "(rank 0 begins the version for every rank)")
        box = [err]
        dist.broadcast_object_list(box, src=0)
        if box[0] is not None:
            raise RuntimeError(f"ckstore: rank 0 could not begin {job}@{step}: {box[0]}")


def _bytes_of(t: _torch.Tensor):
    return t.reshape(-1).view(_torch.uint8) if t.numel() else b""


def _cuda_device(map_location: Any) -> Optional[_torch.device]:
    """The CUDA device a ``map_location`` (str or torch.device) names, else None."""
    if isinstance(map_location, (str, _torch.device)):
        try:
            d = _torch.device(map_location)
        except (RuntimeError, TypeError, ValueError):
            return None
        if d.type == "cuda":
            return d
    return None


def save(state_dict: Any, client: Client, job: str, step: int, *,
         rank: Optional[int] = None, world_size: Optional[int] = None,
         parent: Optional[int] = None, retain: Optional[int] = None,
         timeout_s: Optional[int] = None, tagger: Callable[[str], Tags] = default_tags,
         window: int = 16, extra: Optional[dict] = None,
         keep: Optional[Callable[[str, Tags], bool]] = None,
         pack_below: int = PACK_BELOW) -> None:
    """Save ``state_dict`` as version ``step`` of ``job`` and return once it
    is restorable (on a cluster: every stripe protected by its parity).
    Tensors are written in place (CPU; CUDA tensors from device memory
    through libckstore's device path, or copied to the host first where the
    library answers that it has none: see :func:`device_path`),
    ``window`` requests in flight. ``keep(key, tags)``, when given, says
    which tensors to write: the others must be in ``parent`` under the same
    key (a partial version; see :func:`ckstore.pec.save_partial`). Tensors
    under ``pack_below`` bytes are packed by tags (0: none)."""
    rank, world_size = _ranks(rank, world_size)
    flat = _Flat(state_dict, _prefix(rank, world_size), tagger, pack_below)
    if keep is not None:
        flat.tensors = [x for x in flat.tensors if keep(x[0], x[2])]
    _begin(client, job, step, rank, world_size, parent, retain, timeout_s)
    try:
        _put_all(client, job, step, flat, window, flat.meta(extra), None)
        if world_size > 1:
            client.finish(job, step, rank)
        else:
            client.seal(job, step)
    except BaseException:
        # a rank that fails aborts the version: the other ranks' finish then
        # returns the abort at once instead of waiting for the version's timeout
        _abort_quietly(client, job, step)
        raise


def _abort_quietly(client: Client, job: str, step: int) -> None:
    try:
        client.abort(job, step)
    except (CkstoreError, ValueError):
        pass


def _wait_all(reqs: List[Any]) -> None:
    """Wait for every request, then raise the first one's error, if any."""
    first = None
    for r in reqs:
        try:
            r.result()
        except CkstoreError as e:
            first = first or e
    if first is not None:
        raise first


def _put_all(client: Client, job: str, step: int, flat: _Flat, window: int, meta: bytes,
             source: Optional[Callable[[str], Any]]) -> None:
    """Put every tensor (from ``source(key)`` when given, else the tensor
    itself) and then ``__meta__``, ``window`` requests in flight."""
    reqs: List[Request] = []
    if source is None:
        # CUDA tensors go from their own memory on the library's streams
        _device.sync(t for _, t, _ in flat.tensors if isinstance(t, _torch.Tensor))
    try:
        for key, t, tags in flat.tensors:
            data = source(key) if source is not None else t
            if isinstance(data, _Pack):
                buf = _torch.empty(data.size, dtype=_torch.uint8)
                data.fill(buf)  # small tensors: one copy each (from the device for CUDA)
                data = buf
            if len(reqs) >= window:
                reqs.pop(0).result()
            if isinstance(data, _torch.Tensor):
                # CUDA: the library's device path, or a host copy where it has none
                reqs.append(_device.put_tensor(client, job, step, key, data, tags))
            else:
                reqs.append(client.put_async(job, step, key, data, tags=tags))
        reqs.append(client.put_async(job, step, flat.prefix + META_KEY, meta,
                                     tags=Tags(Kind.OTHER)))
    finally:
        _wait_all(reqs)


# One staging buffer per client for async_save, reused from save to save
# (allocating costs more than malloc); an async save waits for the previous
# one of the same client to be done with it.
_stage_lock = threading.Lock()
_stages: "weakref.WeakKeyDictionary[Client, list]" = weakref.WeakKeyDictionary()


def async_save(state_dict: Any, client: Client, job: str, step: int, *,
               rank: Optional[int] = None, world_size: Optional[int] = None,
               parent: Optional[int] = None, retain: Optional[int] = None,
               timeout_s: Optional[int] = None, tagger: Callable[[str], Tags] = default_tags,
               extra: Optional[dict] = None, pack_below: int = PACK_BELOW) -> Future:
    """As :func:`save`, but return as soon as every tensor is copied into
    staging memory (``cks_mem_alloc()``; for CUDA tensors a device-to-host
    copy by PyTorch, not the library's device path): training may then
    change them.
    The returned future completes (result None) once the version is
    restorable (PROTECTED on a cluster), or raises the first error. A second
    ``async_save`` on the same client first waits for the previous one."""
    rank, world_size = _ranks(rank, world_size)
    flat = _Flat(state_dict, _prefix(rank, world_size), tagger, pack_below)
    offsets: Dict[str, Tuple[int, int]] = {}
    total = 0
    for key, t, _ in flat.tensors:
        n = t.size if isinstance(t, _Pack) else t.numel() * t.element_size()
        offsets[key] = (total, n)
        total += (n + 63) & ~63
    with _stage_lock:
        slot = _stages.get(client)
        if slot is None:
            slot = [None, None]  # [StagingBuffer, Future of the save using it]
            _stages[client] = slot
    if slot[1] is not None:
        try:
            slot[1].result()
        except Exception:
            pass
    stage: Optional[StagingBuffer] = slot[0]
    if stage is None or stage.size < total or stage._ptr is None:
        if stage is not None and stage._ptr is not None:
            stage.free()
        stage = client.alloc(max(total, 4096))
        slot[0] = stage
    _begin(client, job, step, rank, world_size, parent, retain, timeout_s)
    st = stage.tensor()
    for key, t, _ in flat.tensors:
        off, n = offsets[key]
        if isinstance(t, _Pack):
            t.fill(st[off:off + n])
        elif n:
            st[off:off + n].copy_(_bytes_of(t))  # a device-to-host copy for CUDA
    meta = flat.meta(extra)
    fut: Future = Future()
    slot[1] = fut

    def finish() -> None:
        try:
            _put_all(client, job, step, flat, 16, meta,
                     lambda key: stage.view(offsets[key][0], offsets[key][1]))
            if world_size > 1:
                client.finish(job, step, rank)
            else:
                client.seal(job, step)
            fut.set_result(None)
        except BaseException as e:  # noqa: B902 - handed to the caller
            _abort_quietly(client, job, step)
            fut.set_exception(e)

    threading.Thread(target=finish, name=f"ckstore-async-save-{step}", daemon=True).start()
    return fut


def _rebuild(obj: Any, tensors: Dict[int, _torch.Tensor]) -> Any:
    # tensors by id() of their TensorRef: a tensor the state dict holds twice
    # (tied weights) is one TensorRef, also after unpickling
    if isinstance(obj, TensorRef):
        return tensors[id(obj)]
    if isinstance(obj, dict):
        out = type(obj)() if type(obj) is not dict else {}
        for k, v in obj.items():
            out[k] = _rebuild(v, tensors)
        return out
    if isinstance(obj, list):
        return [_rebuild(v, tensors) for v in obj]
    if isinstance(obj, tuple) and not hasattr(obj, "_fields"):
        return tuple(_rebuild(v, tensors) for v in obj)
    return obj


def _refs(obj: Any, out: List[TensorRef]) -> List[TensorRef]:
    if isinstance(obj, TensorRef):
        out.append(obj)
    elif isinstance(obj, dict):
        for v in obj.values():
            _refs(v, out)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            _refs(v, out)
    return out


def read_meta(r: Restore, prefix: str) -> dict:
    """The unpickled ``__meta__`` of one rank's part of an open version."""
    raw = r.get(prefix + META_KEY)
    meta = pickle.loads(bytes(raw))
    if not isinstance(meta, dict) or meta.get("format") != _FORMAT:
        raise ValueError(f"ckstore: {prefix + META_KEY} of {r.job}@{r.version} is not a "
                         f"checkpoint of this format")
    return meta


def load(client: Client, job: str, step: int = LATEST, *, rank: Optional[int] = None,
         world_size: Optional[int] = None, map_location: Any = None, check: bool = False,
         fallback: bool = False, verify: bool = False, window: int = 16,
         with_info: bool = False) -> Union[Any, Tuple[Any, CheckpointInfo]]:
    """Load version ``step`` (default: the newest restorable) of ``job``:
    the state dict as it was saved (this rank's part of a multi-rank
    version). Tensors are read straight into fresh tensors: on the CUDA
    device ``map_location`` names (a str or ``torch.device``) through
    libckstore's device path where it has one, else on the CPU, then moved
    to ``map_location`` when given (small packed tensors are always read
    through the CPU). ``check``/``fallback``: see
    :meth:`Client.open`; ``verify``: check each tensor's CRC on arrival.
    With ``with_info``, returns ``(state_dict, CheckpointInfo)``."""
    rank, world_size = _ranks(rank, world_size)
    prefix = _prefix(rank, world_size)
    cuda = _cuda_device(map_location)
    with client.open(job, step, check=check, fallback=fallback) as r:
        meta = read_meta(r, prefix)
        refs = _refs(meta["skeleton"], [])
        tensors: Dict[int, _torch.Tensor] = {}
        packs: Dict[str, _torch.Tensor] = {}
        reqs: List[Request] = []
        uniq: List[TensorRef] = []
        for ref in refs:
            if id(ref) in tensors:
                continue
            uniq.append(ref)
            on = cuda if cuda is not None and not ref.packed and ref.nbytes else None
            tensors[id(ref)] = _torch.empty(ref.shape, dtype=getattr(_torch, ref.dtype),
                                            device=on)
        # the library's streams write device tensors: none of PyTorch's work
        # may still use their memory
        _device.sync(tensors.values())
        for ref in uniq:
            if ref.packed:
                if ref.key in packs:
                    continue
                dest = packs[ref.key] = _torch.empty(meta["packs"][ref.key],
                                                     dtype=_torch.uint8)
                if len(reqs) >= window:
                    reqs.pop(0).result()
                reqs.append(r.get_async(ref.key, dest, verify=verify))
                continue
            if ref.nbytes == 0:
                continue
            if len(reqs) >= window:
                reqs.pop(0).result()
            # straight into the tensor (CUDA: the library's device path)
            q = _device.get_tensor(r, ref.key, tensors[id(ref)], verify=verify)
            if q is None:  # the library takes no device memory here: the CPU
                t = tensors[id(ref)] = _torch.empty(ref.shape, dtype=getattr(_torch, ref.dtype))
                q = r.get_async(ref.key, _bytes_of(t), verify=verify)
            reqs.append(q)
        _wait_all(reqs)
        for ref in refs:
            if ref.packed and ref.nbytes:
                _bytes_of(tensors[id(ref)]).copy_(
                    packs[ref.key][ref.offset:ref.offset + ref.nbytes])
        info = CheckpointInfo(job, r.version, rank)
        if with_info:
            for o in r.objects():
                if o.key.startswith(prefix):
                    info.sources[o.key] = o.source_version
                    info.tags[o.key] = o.tags
    for ref in refs:
        t = tensors[id(ref)]
        if ref.requires_grad and t.is_floating_point():
            t.requires_grad_(True)
    if map_location is not None:
        tensors = {k: v.to(map_location) for k, v in tensors.items()}
    state = _rebuild(meta["skeleton"], tensors)
    return (state, info) if with_info else state
