"""CUDA tensors through libckstore's device path, with the host copy as the
fallback (ckstore.torch, ckstore.dcp).

A CUDA tensor is put from, and read into, its own device memory with
``MemType.CUDA``: the library copies it through its pinned ring on its own
CUDA streams (include/ckstore.h, "device memory"). Where the library answers
``ERR_UNSUPPORTED`` (no CUDA device at run time, or a build without CUDA) the
tensor is copied through host memory instead, a warning says so once per
process, and the client is not asked again. The library refuses such a
request when it is made (``cks_put_nb``/``cks_get_nb`` return the status),
so the fallback happens before anything is sent.
"""
from __future__ import annotations

import threading
import warnings
import weakref
from typing import Iterable, Optional, Union

import torch

from .client import CkstoreError, Client, MemType, Request, Restore, Status, Tags

# per client: True once a device request was taken, False once refused
_state: "weakref.WeakKeyDictionary[Client, bool]" = weakref.WeakKeyDictionary()
_lock = threading.Lock()
_warned = False


def is_device(t: torch.Tensor) -> bool:
    """Whether a tensor's memory is CUDA device memory (the device path's)."""
    return t.device.type == "cuda"


def device_path(client: Client) -> Optional[bool]:
    """Whether ``client``'s library takes CUDA tensors' device memory: True
    once it took a device request, False once it answered
    ``ERR_UNSUPPORTED`` (CUDA tensors are then copied through host memory),
    None before the first CUDA tensor."""
    with _lock:
        return _state.get(client)


def _note(client: Client, ok: bool, err: Optional[CkstoreError] = None) -> None:
    global _warned
    with _lock:
        _state[client] = ok
        tell = not ok and not _warned
        if tell:
            _warned = True
    if tell:
        why = (err.text or err.name) if err is not None else "unsupported"
        warnings.warn(f"ckstore: libckstore does not take CUDA memory here ({why}); "
                      f"CUDA tensors are copied through host memory", RuntimeWarning,
                      stacklevel=4)


def sync(tensors: Iterable[torch.Tensor]) -> None:
    """Wait for the work PyTorch queued on the devices of ``tensors``: the
    library's own streams do not wait for PyTorch's (a tensor a kernel still
    writes, or memory the caching allocator hands out while a kernel still
    uses it)."""
    for d in {t.device for t in tensors if t.device.type == "cuda"}:
        torch.cuda.synchronize(d)


def raw(t: torch.Tensor) -> Union[torch.Tensor, bytes]:
    """A contiguous tensor's bytes as a flat uint8 tensor on its device (b""
    when empty)."""
    return t.reshape(-1).view(torch.uint8) if t.numel() else b""


def put_tensor(client: Client, job: str, version: int, key: str, t: torch.Tensor,
               tags: Optional[Tags] = None) -> Request:
    """Put a contiguous tensor's bytes as object ``key``: a CUDA tensor from
    its device memory where the library takes it (call :func:`sync` first),
    else from host memory (a copy for a CUDA tensor)."""
    if is_device(t) and t.numel() and device_path(client) is not False:
        try:
            req = client.put_async(job, version, key, raw(t), tags=tags, mem_type=MemType.CUDA)
        except CkstoreError as e:
            if e.status != Status.ERR_UNSUPPORTED:
                raise
            _note(client, False, e)
        else:
            _note(client, True)
            return req
    if is_device(t):
        t = t.cpu()
    return client.put_async(job, version, key, raw(t), tags=tags)


def get_tensor(r: Restore, key: str, t: torch.Tensor, *, verify: bool = False
               ) -> Optional[Request]:
    """Read object ``key`` straight into a contiguous tensor: a CUDA one
    through the library's device path (call :func:`sync` first). None when
    the library does not take device memory: read it through host memory
    then (the caller allocates where it wants)."""
    if is_device(t):
        if device_path(r.client) is False:
            return None
        try:
            req = r.get_async(key, raw(t), verify=verify, mem_type=MemType.CUDA)
        except CkstoreError as e:
            if e.status != Status.ERR_UNSUPPORTED:
                raise
            _note(r.client, False, e)
            return None
        _note(r.client, True)
        return req
    return r.get_async(key, raw(t), verify=verify)
