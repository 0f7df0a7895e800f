"""The ckstore client: versions, zero-copy puts and gets, staging memory.

Every call maps onto one libckstore call (include/ckstore.h). Blocking calls
release the GIL while they wait. The ``*_async`` calls return a
:class:`Request` (a :class:`concurrent.futures.Future`) that completes when
libckstore's callback runs on the client's progress thread; that callback
takes the GIL for a few microseconds to complete the future.

Buffers: any object with the buffer protocol (bytes, bytearray, memoryview,
NumPy arrays, :class:`StagingBuffer`) and CPU ``torch.Tensor`` objects are
read (puts) or written (gets) in place, without a copy; they must be
C-contiguous. A buffer given to an async call must not be changed (put) or
read (get) until its request is done; the request keeps the object alive.
"""
from __future__ import annotations

import atexit
import enum
import threading
import weakref
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, Dict, Iterator, List, Optional, Tuple, Union

from ._ffi import ffi, lib

__all__ = [
    "CkstoreError", "Status", "VState", "Kind", "MemType", "Tags", "VersionInfo", "ObjectInfo",
    "ClusterStats", "Request", "StagingBuffer", "Client", "Restore", "LATEST",
    "NO_PARENT", "status_name", "status_string",
]

LATEST = 2**64 - 1
"""Version number meaning the newest restorable version."""
NO_PARENT = 2**64 - 1
TAG_NONE = -1

_CKS_OK = 0
_CKS_INPROGRESS = 1


def status_name(status: int) -> str:
    """The symbolic name of a status code ("CKS_ERR_TIMEOUT")."""
    return ffi.string(lib.cks_status_name(status)).decode()


def status_string(status: int) -> str:
    """The text of a status code, for people."""
    return ffi.string(lib.cks_status_string(status)).decode()


def _status_enum() -> type:
    members = {}
    unknown = status_string(-9999)
    for code in range(-400, 2):
        if code != 0 and status_string(code) == unknown:
            continue
        name = status_name(code)
        if name.startswith("CKS_"):
            members[name[4:]] = code
    return enum.IntEnum("Status", members)


Status = _status_enum()
Status.__doc__ = "Status codes of libckstore (cks_status_t), from the library itself."


def _enum_or_int(cls: type, value: int) -> Any:
    """``value`` as a member of the enum ``cls``, or the raw code when the
    enum has none (a newer library's)."""
    try:
        return cls(value)
    except ValueError:
        return value


class VState(enum.IntEnum):
    """State of a version (cks_vstate_t)."""
    OPEN = 0
    SEALED = 1
    PROTECTED = 2
    DEGRADED = 3
    ABORTED = 4


class Kind(enum.IntEnum):
    """Kind tag of an object (cks_kind_t)."""
    DENSE = 0
    EXPERT = 1
    OPTIMIZER = 2
    RNG = 3
    OTHER = 4


class MemType(enum.IntEnum):
    """Where a buffer's memory is (cks_mem_type_t): the ``mem_type=`` of
    puts and gets. By default a CUDA tensor's is CUDA and anything else's
    HOST. CUDA or AUTO (the library asks the CUDA runtime) on a machine
    without a CUDA device, or with a library built without CUDA, fail with
    ``Status.ERR_UNSUPPORTED`` ("no CUDA device")."""
    HOST = 0
    CUDA = 1
    AUTO = 2


class CkstoreError(Exception):
    """A libckstore call failed.

    Attributes: ``status`` (a :class:`Status`, or the raw code), ``name``
    ("CKS_ERR_..."), ``text`` (the server's or the library's text about the
    failure, possibly empty) and ``call`` (what was asked).
    """

    def __init__(self, status: int, text: str = "", call: str = "") -> None:
        self.status: Union[Status, int] = _enum_or_int(Status, status)
        self.name = status_name(status)
        self.text = text
        self.call = call
        msg = f"{call}: " if call else ""
        msg += f"{self.name} ({status_string(status)})"
        if text:
            msg += f": {text}"
        super().__init__(msg)


@dataclass(frozen=True)
class Tags:
    """Tags of an object: its kind, and layer, expert and rank (-1: none)."""
    kind: Kind = Kind.OTHER
    layer: int = TAG_NONE
    expert: int = TAG_NONE
    rank: int = TAG_NONE


@dataclass(frozen=True)
class VersionInfo:
    """What is known of a version (cks_version_info_t)."""
    version: int
    parent: Optional[int]
    state: VState
    nranks: int
    created_ns: int
    sealed_ns: int
    nobjects: int
    bytes: int
    ec_k: int
    ec_m: int
    chunk_size: int

    @classmethod
    def _from_c(cls, v) -> "VersionInfo":
        state = _enum_or_int(VState, v.state)
        return cls(v.version, None if v.parent == NO_PARENT else v.parent, state, v.nranks,
                   v.created_ns, v.sealed_ns, v.nobjects, v.bytes, v.ec_k, v.ec_m,
                   v.chunk_size)


@dataclass(frozen=True)
class ObjectInfo:
    """What is known of an object (cks_object_info_t). ``source_version`` is
    the version its bytes were written in (an ancestor for objects a
    partial-expert version inherits)."""
    key: str
    tags: Tags
    size: int
    crc64: int
    source_version: int

    @classmethod
    def _from_c(cls, o) -> "ObjectInfo":
        kind = _enum_or_int(Kind, o.tags.kind)
        return cls(ffi.string(o.key).decode(), Tags(kind, o.tags.layer, o.tags.expert,
                                                   o.tags.rank),
                   o.size, o.crc64, o.source_version)


@dataclass(frozen=True)
class ClusterStats:
    """Figures of the servers that answered, summed (cks_cluster_stats_t)."""
    servers: int
    answered: int
    arena_used: int
    arena_capacity: int
    encoded_bytes: int
    encode_cpu_ns: int
    encoder_cpu_ns: int


class Request(Future):
    """The future of one asynchronous request. ``result()`` returns the
    request's value (None, or the bytes read for a get) or raises
    :class:`CkstoreError`. A request cannot be cancelled: it always runs to
    its end (destroying the client ends it with CANCELED)."""

    def cancel(self) -> bool:
        return False


def _encode(name: str, what: str) -> bytes:
    if not isinstance(name, str):
        raise TypeError(f"{what} must be a str, not {type(name).__name__}")
    return name.encode()


def _torch_module(obj):
    t = type(obj)
    if t.__module__.startswith("torch") and t.__name__ in ("Tensor", "Parameter"):
        import torch
        return torch
    return None


def _as_cbuffer(obj: Any, writable: bool,
                mem_type: Optional[MemType] = None) -> Tuple[Any, int, int, Any]:
    """(cdata pointer, size in bytes, cks_mem_type_t, object to keep alive).
    ``mem_type`` None: CUDA for a CUDA tensor, else HOST; given, it is passed
    on as it is (the library checks it), except HOST for device memory."""
    torch = _torch_module(obj)
    if torch is not None:
        t = obj.detach()
        if not t.is_contiguous():
            raise ValueError("ckstore: a tensor must be contiguous (call .contiguous())")
        if t.device.type == "cuda":
            # device memory goes to libckstore as such (CKS_MEM_CUDA); without
            # a CUDA device (or CUDA in the build) it answers CKS_ERR_UNSUPPORTED
            if mem_type == MemType.HOST:
                raise ValueError("ckstore: mem_type HOST for a CUDA tensor")
            mem = MemType.CUDA if mem_type is None else mem_type
            return (ffi.cast("void *", t.data_ptr()), t.numel() * t.element_size(), int(mem),
                    t)
        if t.device.type != "cpu":
            raise ValueError(f"ckstore: tensors on {t.device} are not supported")
        arr = t.reshape(-1).view(torch.uint8).numpy() if t.numel() else bytearray(0)
        obj = arr
    if isinstance(obj, StagingBuffer):
        obj = obj.buffer
    try:
        c = ffi.from_buffer(obj, require_writable=writable)
    except (TypeError, BufferError) as e:
        raise TypeError(f"ckstore: {type(obj).__name__} is not a C-contiguous "
                        f"{'writable ' if writable else ''}buffer: {e}") from None
    return c, ffi.sizeof(c), int(mem_type or 0), (obj, c)


@ffi.callback("void(void *, cks_status_t)")
def _done_cb(arg, status):
    # On libckstore's progress thread: must not block, so it only completes
    # the future (and reads the client's last error text for a failure).
    req = ffi.from_handle(arg)
    req._complete(status)


class _Pending:
    """One request in flight: what must live until its callback runs."""

    __slots__ = ("client", "future", "keep", "handle", "value", "call")

    def __init__(self, client: "Client", call: str, keep: Any = None):
        self.client = client
        self.future = Request()
        self.keep = keep
        self.call = call
        self.value = None
        self.handle = ffi.new_handle(self)

    def _complete(self, status: int) -> None:
        c = self.client
        with c._lock:
            c._inflight.pop(id(self), None)
        if status == _CKS_OK:
            value = self.value() if callable(self.value) else self.value
            self.future.set_result(value)
        else:
            self.future.set_exception(CkstoreError(status, c._last_error(), self.call))
        self.keep = None


_clients: "weakref.WeakSet[Client]" = weakref.WeakSet()


@atexit.register
def _close_all() -> None:
    for c in list(_clients):
        c.close()


class StagingBuffer:
    """Host memory from ``cks_mem_alloc()``: puts from it and gets into it
    run at about memcpy speed with a server on this host.

    It is a buffer: pass it (or ``memoryview(buf.buffer)``, ``buf.numpy()``,
    ``buf.tensor()``) to puts and gets and slice it with :meth:`view`. The
    memory belongs to the client that allocated it; :meth:`free` it (or use
    ``with``) when no request uses it any more; :meth:`Client.close` frees
    what is left. Views must not be used after that.
    """

    def __init__(self, client: "Client", ptr: Any, size: int) -> None:
        self._client = client
        self._ptr = ptr
        self.size = size
        self.buffer = ffi.buffer(ptr, size)

    def __len__(self) -> int:
        return self.size

    def view(self, offset: int = 0, length: Optional[int] = None) -> memoryview:
        """A memoryview of [offset, offset + length) of the buffer."""
        self._check()
        end = self.size if length is None else offset + length
        if offset < 0 or end > self.size or end < offset:
            raise ValueError(f"ckstore: range [{offset}, {end}) outside {self.size} bytes")
        return memoryview(self.buffer)[offset:end]

    def numpy(self, dtype: Any = "uint8", offset: int = 0, count: int = -1) -> Any:
        """A NumPy array (``numpy.ndarray``) of ``dtype`` over the buffer, no
        copy: ``count`` items from byte ``offset`` (-1: to the end)."""
        import numpy as np
        self._check()
        return np.frombuffer(self.buffer, dtype=dtype, count=count, offset=offset)

    def tensor(self, dtype: Any = None, offset: int = 0, count: int = -1) -> Any:
        """A CPU ``torch.Tensor`` of ``dtype`` (default uint8) over the
        buffer, no copy: ``count`` items from byte ``offset`` (-1: to the end)."""
        import torch
        self._check()
        return torch.frombuffer(self.buffer, dtype=dtype or torch.uint8, count=count,
                                offset=offset)

    @property
    def address(self) -> int:
        """The buffer's address in this process."""
        return int(ffi.cast("uintptr_t", self._ptr))

    def _check(self) -> None:
        if self._ptr is None:
            raise ValueError("ckstore: staging buffer already freed")

    def free(self) -> None:
        """Give the memory back (no request may still use it)."""
        if self._ptr is None:
            return
        c = self._client
        ptr, self._ptr = self._ptr, None
        self.buffer = None
        c._staging.discard(self)
        if c._c is not None:
            c._check(lib.cks_mem_free(c._c, ptr), "cks_mem_free")

    def __enter__(self) -> "StagingBuffer":
        return self

    def __exit__(self, *exc) -> None:
        self.free()


class Client:
    """A connection to a standalone ckstore server or to a cluster.

    ``Client(server="127.0.0.1:13337")`` or ``Client(cluster="cluster.map")``;
    ``secret`` is the path of the secret file (mode 0600) the servers require
    (with ``secret_job``, that job's own secret). ``ec=(k, m)`` and
    ``chunk_size`` set the erasure coding of the versions this client
    begins; ``member_timeout_ms`` how long its writes wait on a server that
    does not answer before its chunks count as missing (the version then
    commits DEGRADED; default 10000). Use it as a context manager, or call
    :meth:`close`. Safe to use from several threads at once.
    """

    def __init__(self, server: Optional[str] = None, *, cluster: Optional[str] = None,
                 secret: Optional[str] = None, secret_job: Optional[str] = None,
                 timeout_ms: Optional[int] = None, name: Optional[str] = None,
                 ec: Optional[Tuple[int, int]] = None, chunk_size: Optional[int] = None,
                 scratch_size: Optional[int] = None,
                 member_timeout_ms: Optional[int] = None) -> None:
        if (server is None) == (cluster is None):
            raise ValueError("ckstore: give exactly one of server= and cluster=")
        self._c = None
        self._lock = threading.Lock()
        self._inflight: Dict[int, _Pending] = {}
        self._staging: "weakref.WeakSet[StagingBuffer]" = weakref.WeakSet()
        p = ffi.new("cks_client_params_t *")
        keep = []

        def s(text: str):
            b = ffi.new("char[]", text.encode())
            keep.append(b)
            return b

        if server is not None:
            p.field_mask |= 1 << 0
            p.server = s(server)
        if cluster is not None:
            p.field_mask |= 1 << 3
            p.cluster = s(str(cluster))
        if timeout_ms is not None:
            p.field_mask |= 1 << 1
            p.timeout_ms = timeout_ms
        if name is not None:
            p.field_mask |= 1 << 2
            p.name = s(name)
        if ec is not None or chunk_size is not None:
            k, m = ec if ec is not None else (4, 2)
            p.field_mask |= 1 << 4
            p.ec_k, p.ec_m = k, m
            p.chunk_size = chunk_size or (1 << 20)
        if secret is not None:
            p.field_mask |= 1 << 5
            p.secret = s(str(secret))
            if secret_job is not None:
                p.secret_job = s(secret_job)
        if scratch_size is not None:
            p.field_mask |= 1 << 6
            p.scratch_size = scratch_size
        if member_timeout_ms is not None:
            p.field_mask |= 1 << 8
            p.member_timeout_ms = member_timeout_ms
        cp = ffi.new("cks_client_h *")
        st = lib.cks_client_create(p, cp)
        if st != _CKS_OK:
            raise CkstoreError(st, "", f"connect to {server or cluster}")
        self._c = cp[0]
        _clients.add(self)

    # ---- plumbing -------------------------------------------------------
    def _handle(self):
        if self._c is None:
            raise ValueError("ckstore: client is closed")
        return self._c

    def _last_error(self) -> str:
        if self._c is None:
            return ""
        buf = ffi.new("char[1024]")
        lib.cks_client_last_error(self._c, buf, 1024)
        return ffi.string(buf).decode(errors="replace")

    def _check(self, st: int, call: str) -> None:
        if st != _CKS_OK:
            raise CkstoreError(st, self._last_error(), call)

    def _submit(self, pend: _Pending, st: int) -> Request:
        if st == _CKS_INPROGRESS:
            return pend.future
        with self._lock:
            self._inflight.pop(id(pend), None)
        if st == _CKS_OK:
            pend._complete(st)
            return pend.future
        raise CkstoreError(st, self._last_error(), pend.call)

    def _pending(self, call: str, keep: Any = None) -> _Pending:
        pend = _Pending(self, call, keep)
        with self._lock:
            self._inflight[id(pend)] = pend
        return pend

    def close(self) -> None:
        """Free the staging buffers left, end the requests in flight (their
        futures fail with CANCELED), disconnect. Idempotent."""
        if self._c is None:
            return
        for b in list(self._staging):
            try:
                b.free()
            except CkstoreError:
                pass
        c, self._c = self._c, None
        # destroy runs the callbacks of requests in flight, which read
        # _last_error(): let them see the client as closed
        lib.cks_client_destroy(c)

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    # ---- versions -------------------------------------------------------
    def _vparams(self, job, version, parent, nranks, retain, timeout_s):
        jb = _encode(job, "job")
        p = ffi.new("cks_version_params_t *")
        keep = ffi.new("char[]", jb)
        p.job = keep
        p.version = version
        if parent is not None:
            p.field_mask |= 1 << 0
            p.parent = parent
        if nranks != 1:
            p.field_mask |= 1 << 1
            p.nranks = nranks
        if retain is not None:
            p.field_mask |= 1 << 2
            p.retain = retain
        if timeout_s is not None:
            p.field_mask |= 1 << 3
            p.timeout_s = timeout_s
        return p, keep

    def begin(self, job: str, version: int, *, parent: Optional[int] = None,
              nranks: int = 1, retain: Optional[int] = None,
              timeout_s: Optional[int] = None) -> None:
        """Begin a version (normally the training step); it is OPEN until
        sealed (:meth:`seal`, or :meth:`finish` by each of ``nranks`` ranks)
        or aborted. ``parent``: a partial version over its parent (cluster)."""
        p, keep = self._vparams(job, version, parent, nranks, retain, timeout_s)
        self._check(lib.cks_version_begin(self._handle(), p), f"begin {job}@{version}")

    def begin_async(self, job: str, version: int, **kw) -> Request:
        """As :meth:`begin`, returning a :class:`Request`."""
        p, keep = self._vparams(job, version, kw.get("parent"), kw.get("nranks", 1),
                                kw.get("retain"), kw.get("timeout_s"))
        pend = self._pending(f"begin {job}@{version}", (p, keep))
        return self._submit(pend, lib.cks_version_begin_nb(self._handle(), p, _done_cb,
                                                           pend.handle))

    def finish(self, job: str, version: int, rank: int) -> None:
        """Rank ``rank`` wrote all it will write; returns when the version is
        restorable (every rank finished, every object protected)."""
        self._check(lib.cks_version_finish(self._handle(), _encode(job, "job"), version, rank),
                    f"finish {job}@{version} rank {rank}")

    def finish_async(self, job: str, version: int, rank: int) -> Request:
        """As :meth:`finish`, returning a :class:`Request` that completes
        when the version is restorable."""
        jb = ffi.new("char[]", _encode(job, "job"))
        pend = self._pending(f"finish {job}@{version} rank {rank}", jb)
        return self._submit(pend, lib.cks_version_finish_nb(self._handle(), jb, version, rank,
                                                            _done_cb, pend.handle))

    def seal(self, job: str, version: int) -> None:
        """Seal a single-rank version; returns once it is restorable (on a
        cluster: PROTECTED, every stripe with its parity)."""
        self._check(lib.cks_version_seal(self._handle(), _encode(job, "job"), version),
                    f"seal {job}@{version}")

    def seal_async(self, job: str, version: int) -> Request:
        """As :meth:`seal`, returning a :class:`Request`."""
        jb = ffi.new("char[]", _encode(job, "job"))
        pend = self._pending(f"seal {job}@{version}", jb)
        return self._submit(pend, lib.cks_version_seal_nb(self._handle(), jb, version,
                                                          _done_cb, pend.handle))

    def abort(self, job: str, version: int) -> None:
        """Give up on an open version (it becomes ABORTED)."""
        self._check(lib.cks_version_abort(self._handle(), _encode(job, "job"), version),
                    f"abort {job}@{version}")

    def delete(self, job: str, version: int) -> None:
        """Delete a version and free its space."""
        self._check(lib.cks_version_delete(self._handle(), _encode(job, "job"), version),
                    f"delete {job}@{version}")

    def delete_object(self, job: str, version: int, key: str) -> None:
        """Hide the parent's object ``key`` from an open child version."""
        self._check(lib.cks_object_delete(self._handle(), _encode(job, "job"), version,
                                          _encode(key, "key")),
                    f"delete object {key} of {job}@{version}")

    def stat(self, job: str, version: int) -> VersionInfo:
        """One version's record."""
        v = ffi.new("cks_version_info_t *")
        self._check(lib.cks_version_stat(self._handle(), _encode(job, "job"), version, v),
                    f"stat {job}@{version}")
        return VersionInfo._from_c(v)

    def latest(self, job: str) -> Optional[VersionInfo]:
        """The newest restorable version of a job, or None when it has none."""
        v = ffi.new("cks_version_info_t *")
        st = lib.cks_version_latest(self._handle(), _encode(job, "job"), v)
        if st in (Status.ERR_NO_SUCH_JOB, Status.ERR_NO_SUCH_VERSION):
            return None
        self._check(st, f"latest of {job}")
        return VersionInfo._from_c(v)

    def versions(self, job: str) -> List[VersionInfo]:
        """Every version of a job, oldest first (empty for an unknown job)."""
        out: List[VersionInfo] = []
        arr = ffi.new("cks_version_info_t[64]")
        count = ffi.new("size_t *")
        more = ffi.new("int *")
        after = ffi.new("uint64_t *")
        jb = _encode(job, "job")
        first = True
        for _ in range(1 << 20):
            st = lib.cks_version_list(self._handle(), jb, ffi.NULL if first else after, arr,
                                      64, count, more)
            if st == Status.ERR_NO_SUCH_JOB:
                return out
            self._check(st, f"list versions of {job}")
            out.extend(VersionInfo._from_c(arr[i]) for i in range(count[0]))
            if not more[0] or count[0] == 0:
                break
            after[0] = arr[count[0] - 1].version
            first = False
        return out

    def jobs(self) -> List[str]:
        """Names of the jobs that have versions."""
        out: List[str] = []
        names = ffi.new("char[64][129]")
        count = ffi.new("size_t *")
        more = ffi.new("int *")
        after = ffi.NULL
        for _ in range(1 << 20):
            self._check(lib.cks_job_list(self._handle(), after, names, 64, count, more),
                        "list jobs")
            out.extend(ffi.string(names[i]).decode() for i in range(count[0]))
            if not more[0] or count[0] == 0:
                break
            after = ffi.new("char[]", out[-1].encode())
        return out

    def stats(self) -> ClusterStats:
        """Figures of the servers (arena use, encoder work)."""
        s = ffi.new("cks_cluster_stats_t *")
        self._check(lib.cks_cluster_stats(self._handle(), s), "cluster stats")
        return ClusterStats(s.servers, s.answered, s.arena_used, s.arena_capacity,
                            s.encoded_bytes, s.encode_cpu_ns, s.encoder_cpu_ns)

    # ---- staging memory ---------------------------------------------------
    def alloc(self, size: int) -> StagingBuffer:
        """``size`` bytes of staging memory (``cks_mem_alloc()``): puts from it
        and gets into it skip the kernel's copy with a server on this host.
        Prefer a few large buffers, carved with :meth:`StagingBuffer.view`."""
        if size <= 0:
            raise ValueError("ckstore: staging size must be positive")
        pp = ffi.new("void **")
        self._check(lib.cks_mem_alloc(self._handle(), size, pp), f"alloc {size} bytes")
        b = StagingBuffer(self, pp[0], size)
        self._staging.add(b)
        return b

    # ---- objects ------------------------------------------------------------
    def _put_params(self, job, version, key, data, tags, mem_type):
        ptr, size, mem, keep = _as_cbuffer(data, writable=False, mem_type=mem_type)
        p = ffi.new("cks_put_params_t *")
        jb = ffi.new("char[]", _encode(job, "job"))
        kb = ffi.new("char[]", _encode(key, "key"))
        p.job, p.version, p.key = jb, version, kb
        p.buffer, p.size = ptr, size
        if tags is not None:
            p.field_mask |= 1 << 0
            p.tags.kind, p.tags.layer = int(tags.kind), tags.layer
            p.tags.expert, p.tags.rank = tags.expert, tags.rank
        if mem:
            p.field_mask |= 1 << 1
            p.mem_type = mem
        return p, (p, jb, kb, keep, data)

    def put(self, job: str, version: int, key: str, data: Any,
            tags: Optional[Tags] = None, *, mem_type: Optional[MemType] = None) -> None:
        """Store ``data`` (any C-contiguous buffer, or a tensor) as object
        ``key`` of the open version, zero-copy; returns once the server holds
        the bytes (STORED). ``mem_type``: see :class:`MemType` (default: from
        ``data``; a CUDA tensor goes through the library's device path)."""
        p, keep = self._put_params(job, version, key, data, tags, mem_type)
        self._check(lib.cks_put(self._handle(), p), f"put {key} in {job}@{version}")

    def put_async(self, job: str, version: int, key: str, data: Any,
                  tags: Optional[Tags] = None, *,
                  mem_type: Optional[MemType] = None) -> Request:
        """As :meth:`put`; ``data`` must stay unchanged until the request is
        done (the request keeps a reference to it). A request the library
        refuses at once (``ERR_UNSUPPORTED`` for device memory without a
        device, bad parameters) raises :class:`CkstoreError` here."""
        p, keep = self._put_params(job, version, key, data, tags, mem_type)
        pend = self._pending(f"put {key} in {job}@{version}", keep)
        return self._submit(pend, lib.cks_put_nb(self._handle(), p, _done_cb, pend.handle))

    def open(self, job: str, version: int = LATEST, *, check: bool = False,
             fallback: bool = False) -> "Restore":
        """Open a restorable version (default the newest) for reading.
        ``check``: verify first that every object can be restored;
        ``fallback``: open the newest older version that passes instead."""
        jb = ffi.new("char[]", _encode(job, "job"))
        rp = ffi.new("cks_restore_h *")
        if check or fallback:
            p = ffi.new("cks_restore_params_t *")
            p.field_mask = 1 << 0
            p.job, p.version = jb, version
            p.flags = (0x1 if check else 0) | (0x2 if fallback else 0)
            st = lib.cks_restore_open_ex(self._handle(), p, rp)
        else:
            st = lib.cks_restore_open(self._handle(), jb, version, rp)
        what = "latest" if version == LATEST else str(version)
        self._check(st, f"open {job}@{what}")
        return Restore(self, job, rp[0])


class Restore:
    """A restorable version opened for reading (:meth:`Client.open`). Close it
    (or use ``with``) when done."""

    def __init__(self, client: Client, job: str, r: Any) -> None:
        self.client = client
        self.job = job
        self._r = r
        v = ffi.new("cks_version_info_t *")
        client._check(lib.cks_restore_info(r, v), "restore info")
        self.info = VersionInfo._from_c(v)
        self.version = self.info.version

    def _handle(self):
        if self._r is None:
            raise ValueError("ckstore: restore handle is closed")
        self.client._handle()
        return self._r

    def close(self) -> None:
        """Close the version for reading (idempotent)."""
        if self._r is not None and self.client._c is not None:
            lib.cks_restore_close(self._r)
        self._r = None

    def __enter__(self) -> "Restore":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def stat(self, key: str) -> ObjectInfo:
        """One object's record."""
        o = ffi.new("cks_object_info_t *")
        self.client._check(lib.cks_object_stat(self._handle(), _encode(key, "key"), o),
                           f"stat {key} of {self.job}@{self.version}")
        return ObjectInfo._from_c(o)

    def objects(self, *, kind: Optional[Kind] = None, layer: Optional[int] = None,
                expert: Optional[int] = None, rank: Optional[int] = None
                ) -> Iterator[ObjectInfo]:
        """The objects of the version in key order, those with the given tags
        only when any is given."""
        arr = ffi.new("cks_object_info_t[128]")
        count = ffi.new("size_t *")
        more = ffi.new("int *")
        flt = None
        if any(x is not None for x in (kind, layer, expert, rank)):
            flt = ffi.new("cks_tag_filter_t *")
            for bit, name, val in ((0, "kind", kind), (1, "layer", layer),
                                   (2, "expert", expert), (3, "rank", rank)):
                if val is not None:
                    flt.field_mask |= 1 << bit
                    setattr(flt.tags, name, int(val))
        after = ffi.NULL
        for _ in range(1 << 24):
            if flt is None:
                st = lib.cks_object_list(self._handle(), after, arr, 128, count, more)
            else:
                st = lib.cks_object_find(self._handle(), after, flt, arr, 128, count, more)
            self.client._check(st, f"list objects of {self.job}@{self.version}")
            batch = [ObjectInfo._from_c(arr[i]) for i in range(count[0])]
            yield from batch
            if not more[0] or not batch:
                return
            after = ffi.new("char[]", batch[-1].key.encode())

    def _get_params(self, key, out, offset, length, verify, mem_type):
        ptr, size, mem, keep = _as_cbuffer(out, writable=True, mem_type=mem_type)
        g = ffi.new("cks_get_params_t *")
        kb = ffi.new("char[]", _encode(key, "key"))
        g.key, g.buffer, g.buffer_size = kb, ptr, size
        if offset is not None or length is not None:
            g.field_mask |= 1 << 0
            g.offset = offset or 0
            g.length = size if length is None else length
        if mem:
            g.field_mask |= 1 << 1
            g.mem_type = mem
        if verify:
            g.field_mask |= 1 << 2
            g.flags = 0x1
        n = ffi.new("uint64_t *")
        return g, n, (g, kb, keep, out)

    def get_into(self, key: str, out: Any, *, offset: Optional[int] = None,
                 length: Optional[int] = None, verify: bool = False,
                 mem_type: Optional[MemType] = None) -> int:
        """Read object ``key`` (or ``length`` bytes from ``offset``) straight
        into ``out`` (a writable C-contiguous buffer or tensor, large enough);
        returns the bytes read. ``verify`` checks the whole object's CRC.
        ``mem_type``: see :class:`MemType` (default: from ``out``)."""
        g, n, keep = self._get_params(key, out, offset, length, verify, mem_type)
        self.client._check(lib.cks_get(self._handle(), g, n),
                           f"get {key} of {self.job}@{self.version}")
        return n[0]

    def get_async(self, key: str, out: Any, *, offset: Optional[int] = None,
                  length: Optional[int] = None, verify: bool = False,
                  mem_type: Optional[MemType] = None) -> Request:
        """As :meth:`get_into`; the request's result is the bytes read. Do not
        touch ``out`` until the request is done. A request the library
        refuses at once raises :class:`CkstoreError` here."""
        g, n, keep = self._get_params(key, out, offset, length, verify, mem_type)
        pend = self.client._pending(f"get {key} of {self.job}@{self.version}", (keep, n))
        pend.value = lambda: int(n[0])
        return self.client._submit(pend, lib.cks_get_nb(self._handle(), g, n, _done_cb,
                                                        pend.handle))

    def get(self, key: str, *, verify: bool = False) -> bytearray:
        """A whole object as a new bytearray (one copy-free read into it)."""
        size = self.stat(key).size
        out = bytearray(size)
        if size:
            self.get_into(key, out, verify=verify)
        return out
