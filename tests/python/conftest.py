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

# erasure coding of the test cluster: 3 servers, RS(2,1), 64 KiB chunks
EC = (2, 1)
CHUNK = 64 * 1024


@pytest.fixture(scope="session")
def standalone():
    c = LocalCluster(0)
    yield c
    c.close()


@pytest.fixture(scope="session")
def cluster():
    c = LocalCluster(3)
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
    with ckstore.Client(**cluster.client_kwargs(), ec=EC, chunk_size=CHUNK,
                        timeout_ms=20000) as c:
        yield c


def torch_or_skip():
    try:
        import torch
    except ImportError as e:
        pytest.skip(f"PyTorch is not installed ({e}); scripts/deps --python installs it")
    return torch
