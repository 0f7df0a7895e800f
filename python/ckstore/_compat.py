"""Import torch 1.13's torch.distributed._shard under Python 3.11.

torch 1.13 (Debian 12's python3-torch) declares a dataclass field whose
default is an instance of another dataclass
(ShardedTensorMetadata.tensor_properties); Python 3.11 refuses such a
default as mutable ("use default_factory"), so torch.distributed._shard and
its checkpoint package fail to import at all. torch 2.0 declares it with a
default_factory. While importing it, and only then, we turn such defaults
into a default_factory that deep-copies them, which is what torch 2.0 does;
once imported, the modules stay in sys.modules and later imports of them
(the user's own) work. Nothing is changed on torch >= 2 or Python < 3.11.
"""
from __future__ import annotations

import copy
import dataclasses
import functools
import importlib
import sys
import threading
import types

_lock = threading.Lock()


def import_shard_checkpoint() -> types.ModuleType:
    """torch.distributed._shard.checkpoint, imported as described above."""
    import torch
    major = int(torch.__version__.split(".")[0])
    if major >= 2 or sys.version_info < (3, 11) or \
            "torch.distributed._shard.checkpoint" in sys.modules:
        return importlib.import_module("torch.distributed._shard.checkpoint")
    with _lock:
        orig = dataclasses._get_field

        def _get_field(cls, a_name, a_type, *rest):
            default = cls.__dict__.get(a_name, dataclasses.MISSING)
            f = default if isinstance(default, dataclasses.Field) else None
            value = f.default if f is not None else default
            if (dataclasses.is_dataclass(value) and not isinstance(value, type)
                    and type(value).__hash__ is None):
                factory = functools.partial(copy.deepcopy, value)
                if f is not None:
                    f.default, f.default_factory = dataclasses.MISSING, factory
                else:
                    setattr(cls, a_name, dataclasses.field(default_factory=factory))
            return orig(cls, a_name, a_type, *rest)

        dataclasses._get_field = _get_field
        try:
            return importlib.import_module("torch.distributed._shard.checkpoint")
        finally:
            dataclasses._get_field = orig
