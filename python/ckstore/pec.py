"""Partial experts checkpoints (PEC) from Python: the selection, staleness
and PLT helpers of libckstore (docs/PEC.md), and saves that write the dense
part plus K experts per MoE layer as a child of the previous version.

Arrays are NumPy arrays of shape ``(layers, experts)``; a mask is ``bool``.

    pec = ckstore.pec.Pec(layers=4, experts=8, per_step=2)
    mask = pec.select_round_robin(ckpt)
    ckstore.pec.save_partial(state, client, job, step, parent=prev_step, mask=mask,
                             tagger=ckstore.pec.model_tagger(model, optimizer))
    state, info = ckstore.torch.load(client, job, with_info=True)
    steps = ckstore.pec.expert_steps(info, 4, 8)    # each expert's source step
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable, Dict, Optional, Tuple

import numpy as np
from numpy.typing import ArrayLike

from ._ffi import ffi, lib
from .client import CkstoreError, Client, Kind, Tags

__all__ = ["NEVER", "Pec", "Bounds", "StalenessStats", "save_partial", "expert_steps",
           "model_tagger"]

NEVER = 2**64 - 1
"""``last_saved`` / ``saved_step`` entry (and staleness) of a never-saved expert."""


@dataclass(frozen=True)
class Bounds:
    """What a round-robin schedule guarantees (cks_pec_bounds_t)."""
    period: int
    max_staleness: int
    saved_per_ckpt: int
    experts_per_rank: int
    rank_load_min: int
    rank_load_max: int


@dataclass(frozen=True)
class StalenessStats:
    max: int
    mean: float
    stale: int
    never: int


def _check(st: int, call: str) -> None:
    if st != 0:
        raise CkstoreError(st, "", call)


def _u64(a, shape, name):
    arr = np.ascontiguousarray(a, dtype=np.uint64)
    if arr.shape != shape:
        raise ValueError(f"ckstore: {name} must have shape {shape}, not {arr.shape}")
    return arr


class Pec:
    """PEC parameters (cks_pec_params_t): ``layers`` MoE layers of
    ``experts`` experts, ``per_step`` (K) experts saved per layer and
    checkpoint, ``ranks`` expert-parallel ranks, and optionally
    ``layer_offset`` and ``max_age``."""

    def __init__(self, layers: int, experts: int, per_step: int, *, ranks: int = 1,
                 layer_offset: Optional[int] = None, max_age: Optional[int] = None) -> None:
        self.layers, self.experts = layers, experts
        self.shape = (layers, experts)
        p = ffi.new("cks_pec_params_t *")
        p.layers, p.experts, p.per_step = layers, experts, per_step
        if ranks != 1:
            p.field_mask |= 1 << 0
            p.ranks = ranks
        if layer_offset is not None:
            p.field_mask |= 1 << 1
            p.layer_offset = layer_offset
        if max_age is not None:
            p.field_mask |= 1 << 2
            p.max_age = max_age
        self._p = p
        self.bounds()  # validates

    def bounds(self) -> Bounds:
        """What a round-robin schedule with these parameters guarantees
        (period, staleness bound, experts per checkpoint and per rank)."""
        b = ffi.new("cks_pec_bounds_t *")
        _check(lib.cks_pec_bounds(self._p, b), "cks_pec_bounds")
        return Bounds(b.period, b.max_staleness, b.saved_per_ckpt, b.experts_per_rank,
                      b.rank_load_min, b.rank_load_max)

    def expert_rank(self, expert: int) -> int:
        """The rank that holds ``expert`` (experts split evenly over ``ranks``)."""
        r = ffi.new("uint32_t *")
        _check(lib.cks_pec_expert_rank(self._p, expert, r), "cks_pec_expert_rank")
        return r[0]

    def _mask_out(self):
        return np.zeros(self.shape, dtype=np.uint8)

    def select_round_robin(self, ckpt: int) -> np.ndarray:
        """The experts to save at checkpoint number ``ckpt`` (0, 1, ...)."""
        m = self._mask_out()
        _check(lib.cks_pec_select_round_robin(self._p, ckpt, ffi.from_buffer("uint8_t[]", m)),
               "cks_pec_select_round_robin")
        return m.astype(bool)

    def select_load_aware(self, tokens_since_save: ArrayLike, last_saved: ArrayLike,
                          ckpt: int) -> np.ndarray:
        """The experts to save by tokens routed since their newest save
        (most first; with ``max_age``, overdue ones before them)."""
        t = _u64(tokens_since_save, self.shape, "tokens_since_save")
        s = _u64(last_saved, self.shape, "last_saved")
        m = self._mask_out()
        _check(lib.cks_pec_select_load_aware(self._p, ffi.from_buffer("uint64_t[]", t),
                                             ffi.from_buffer("uint64_t[]", s), ckpt,
                                             ffi.from_buffer("uint8_t[]", m)),
               "cks_pec_select_load_aware")
        return m.astype(bool)

    def note_saved(self, mask: ArrayLike, ckpt: int, last_saved: np.ndarray,
                   tokens_since_save: Optional[np.ndarray] = None) -> None:
        """After saving ``mask`` at ``ckpt``: update ``last_saved`` (and zero
        ``tokens_since_save``) in place; both uint64 arrays of the shape."""
        m = np.ascontiguousarray(mask, dtype=np.uint8)
        for a, n in ((last_saved, "last_saved"), (tokens_since_save, "tokens_since_save")):
            if a is not None and (a.dtype != np.uint64 or a.shape != self.shape or
                                  not a.flags.c_contiguous):
                raise ValueError(f"ckstore: {n} must be a C-contiguous uint64 array of "
                                 f"shape {self.shape}")
        _check(lib.cks_pec_note_saved(
            self._p, ffi.from_buffer("uint8_t[]", m), ckpt,
            ffi.from_buffer("uint64_t[]", last_saved, require_writable=True),
            ffi.NULL if tokens_since_save is None else
            ffi.from_buffer("uint64_t[]", tokens_since_save, require_writable=True)),
            "cks_pec_note_saved")

    def staleness(self, restored_step: int,
                  saved_step: ArrayLike) -> Tuple[np.ndarray, StalenessStats]:
        """Each expert's staleness after restoring ``restored_step``
        (``NEVER`` for a never-saved one), and a summary."""
        s = _u64(saved_step, self.shape, "saved_step")
        out = np.zeros(self.shape, dtype=np.uint64)
        st = ffi.new("cks_pec_staleness_stats_t *")
        _check(lib.cks_pec_staleness(self._p, restored_step, ffi.from_buffer("uint64_t[]", s),
                                     ffi.from_buffer("uint64_t[]", out), st),
               "cks_pec_staleness")
        return out, StalenessStats(st.max, st.mean, st.stale, st.never)

    def plt(self, tokens_lost: ArrayLike, tokens_routed: int) -> float:
        """Proportion of lost tokens: sum(tokens_lost) / tokens_routed."""
        t = _u64(tokens_lost, self.shape, "tokens_lost")
        out = ffi.new("double *")
        _check(lib.cks_pec_plt(self._p, ffi.from_buffer("uint64_t[]", t), tokens_routed, out),
               "cks_pec_plt")
        return out[0]


_NAME_RE = re.compile(r"layers?[._](\d+)[./].*?experts?[._](\d+)(?:[./]|$)")


def model_tagger(model: Any, optimizer: Any = None,
                 expert_of: Optional[Callable[[str], Optional[Tuple[int, int]]]] = None,
                 model_key: str = "model", optim_key: str = "optim"
                 ) -> Callable[[str], Tags]:
    """A tagger for :func:`ckstore.torch.save` that knows which parameters are
    experts: by name (``expert_of(name) -> (layer, expert)`` or None; default
    ``layers.<l>.`` ... ``experts.<e>.``), for the model's tensors under
    ``model_key`` and the optimizer's per-parameter state under
    ``optim_key`` (which the optimizer indexes by position)."""
    from .torch import default_tags

    def of(name: str):
        if expert_of is not None:
            return expert_of(name)
        m = _NAME_RE.search(name)
        return (int(m.group(1)), int(m.group(2))) if m else None

    by_index: Dict[str, Tuple[int, int]] = {}
    if optimizer is not None:
        names = {id(p): n for n, p in model.named_parameters()}
        i = 0
        for g in optimizer.param_groups:
            for p in g["params"]:
                le = of(names.get(id(p), ""))
                if le is not None:
                    by_index[str(i)] = le
                i += 1

    def tagger(path: str) -> Tags:
        parts = path.split("/")
        if parts[0] == model_key and len(parts) > 1:
            le = of(parts[1])
            return Tags(Kind.EXPERT, *le) if le else Tags(Kind.DENSE)
        if parts[0] == optim_key and len(parts) > 2 and parts[1] == "state":
            le = by_index.get(parts[2])
            return Tags(Kind.OPTIMIZER, *le) if le else Tags(Kind.OPTIMIZER)
        return default_tags(path)

    return tagger


def save_partial(state_dict: Any, client: Client, job: str, step: int, *, parent: int,
                 mask: ArrayLike, tagger: Callable[[str], Tags], **kw: Any) -> int:
    """Save ``state_dict`` as version ``step``, a child of ``parent`` (a
    cluster): every tensor except the experts (objects tagged with a layer
    and an expert, model or optimizer) that ``mask[layer, expert]`` leaves
    out; those keep the parent's copy. Returns the number of tensors
    written. Other arguments as :func:`ckstore.torch.save`."""
    from . import torch as ckt
    m = np.asarray(mask, dtype=bool)
    written = [0]

    def keep(path: str, tags: Tags) -> bool:
        if tags.layer >= 0 and tags.expert >= 0 and tags.kind in (Kind.EXPERT,
                                                                   Kind.OPTIMIZER):
            ok = bool(m[tags.layer, tags.expert])
        else:
            ok = True
        written[0] += ok
        return ok

    ckt.save(state_dict, client, job, step, parent=parent, tagger=tagger, keep=keep, **kw)
    return written[0]


def expert_steps(info: Any, layers: int, experts: int) -> np.ndarray:
    """From :func:`ckstore.torch.load`'s CheckpointInfo: the step each
    expert's saved copy came from (the oldest of its objects, model and
    optimizer), ``NEVER`` for an expert without objects."""
    out = np.full((layers, experts), NEVER, dtype=np.uint64)
    for key, tags in info.tags.items():
        if tags.layer >= 0 and tags.expert >= 0 and tags.kind in (Kind.EXPERT,
                                                                   Kind.OPTIMIZER):
            src = info.sources[key]
            cur = out[tags.layer, tags.expert]
            out[tags.layer, tags.expert] = src if cur == NEVER else min(int(cur), src)
    return out
