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
