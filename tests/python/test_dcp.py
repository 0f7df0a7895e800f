"""torch.distributed._shard.checkpoint (torch 1.13) with ckstore.dcp: a
sharded state dict saved by 4 ranks (gloo, 127.0.0.1) as one multi-rank
version, loaded into 2 and into 3 ranks (resharding), each rank checking
its shards, the replicated tensor and the plain values."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cks_servers import free_port
from conftest import torch_or_skip

torch = torch_or_skip()
try:
    import ckstore.dcp  # noqa: F401
except ImportError as e:
    pytest.skip(f"this PyTorch has no torch.distributed._shard.checkpoint ({e})",
                allow_module_level=True)

HERE = Path(__file__).resolve().parent


def run(cluster, mode, world, job, step):
    args = [sys.executable, str(HERE / "dcp_worker.py"), mode, "--world", str(world),
            "--port", str(free_port()), "--step", str(step), "--cluster", str(cluster.map),
            "--secret", str(cluster.secret), "--job", job, "--timeout", "100"]
    env = dict(os.environ, UCX_NET_DEVICES="lo", OMP_NUM_THREADS="1")
    p = subprocess.run(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True, timeout=150)
    assert p.returncode == 0, p.stdout
    return p.stdout


@pytest.fixture(scope="module")
def saved(cluster):
    job = f"dcp-{os.getpid()}"
    run(cluster, "save", 4, job, 7)
    return job


@pytest.mark.parametrize("world", [2, 3])
def test_four_rank_checkpoint_loads_into_fewer_ranks(cluster, saved, world):
    out = run(cluster, "load", world, saved, 7)
    assert out.count("loaded") == world, out
    if world == 3:  # 10 rows over 3 ranks: 4, 4, 2
        assert "u rows [8]" in out, out
