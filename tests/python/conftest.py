"""pytest fixtures: the package from python/ of this tree, real servers."""
import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "python"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from cks_servers import LocalCluster, build_dir  # noqa: E402

os.environ.setdefault("CKSTORE_LIB", str(build_dir() / "client-lib" / "libckstore.so"))

@pytest.fixture(scope="session")
def standalone():
    c = LocalCluster(0)
    yield c
    c.close()


@pytest.fixture(scope="session")
def cluster():
    c = LocalCluster(3, arena_size="1G")
    yield c
    c.close()


@pytest.fixture
def sclient(standalone):
    import ckstore
    with ckstore.Client(**standalone.client_kwargs(), timeout_ms=20000) as c:
        yield c


@pytest.fixture
def cclient(cluster):
    import ckstore
    with ckstore.Client(**cluster.client_kwargs(), timeout_ms=20000) as c:
        yield c


def torch_or_skip():
    try:
        import torch
    except ImportError as e:
        pytest.skip(f"PyTorch is not installed ({e}); scripts/deps --python installs it",
                    allow_module_level=True)
    return torch


def same(a, b, path="", bits=False):
    """Assert that a and b are equal, tensors, dicts, lists and tuples
    recursively (path names the place in messages): tensors of the same
    dtype and shape, equal by torch.equal. bits: a and b also of the same
    type at every level, and tensors compared byte for byte instead."""
    import torch

    if bits:
        assert type(a) is type(b), path
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor) and a.dtype == b.dtype and a.shape == b.shape, path
        if bits:
            assert torch.equal(a.view(-1).view(torch.uint8) if a.numel() else a,
                               b.view(-1).view(torch.uint8) if b.numel() else b), path
        else:
            assert torch.equal(a, b), f"{path} differs"
    elif isinstance(a, dict):
        assert list(a) == list(b), path
        for k in a:
            same(a[k], b[k], f"{path}/{k}", bits)
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b)):
            same(x, y, f"{path}/{i}", bits)
    else:
        assert a == b, f"{path}: {a!r} != {b!r}"
