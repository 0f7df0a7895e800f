"""torch.distributed._shard.checkpoint (torch 1.13) with ckstore.dcp: a
sharded state dict saved by 4 ranks (gloo, 127.0.0.1) as one multi-rank
version, loaded into 2 and into 3 ranks (resharding), each rank checking
its shards, the replicated tensor and the plain values; and the classes
under the calls torch >= 2 makes, in one process."""
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

import ckstore  # noqa: E402

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


def test_storage_classes_under_torch_2_call_sequence(cclient):
    """torch >= 2's torch.distributed.checkpoint cannot run here (Debian 12
    has torch 1.13). What can: our StorageWriter and StorageReader driven,
    in one process, by the calls torch >= 2's save and load make on them and
    with their names (reset(checkpoint_id), validate_checkpoint_id,
    set_up_storage_writer / set_up_storage_reader with the extra arguments
    later versions pass, storage_meta, read_metadata), with torch 1.13's
    default planners in between. A real version is written and read back."""
    if ckstore.dcp.TORCH_2:
        pytest.skip("torch >= 2: this test drives the classes with torch 1.13's planners "
                    "(their init()); with torch >= 2 run its own dcp.save and dcp.load")
    from torch.distributed._shard.checkpoint.default_planner import (DefaultLoadPlanner,
                                                                     DefaultSavePlanner)
    from ckstore.dcp import StorageReader, StorageWriter

    job = f"dcp-torch2-{os.getpid()}"
    state = {"w": torch.arange(24.0).reshape(4, 6), "b": torch.ones(3, dtype=torch.bfloat16),
             "meta": {"step": 9}}
    assert StorageWriter.validate_checkpoint_id(9) and StorageWriter.validate_checkpoint_id("9")
    assert not StorageWriter.validate_checkpoint_id("/ckpt/9")
    assert not StorageReader.validate_checkpoint_id(-1)

    w = StorageWriter(cclient, job, 0)
    w.reset("9")                               # dcp.save(..., checkpoint_id="9")
    w.set_up_storage_writer(True, rank=0, use_collectives=False)
    assert w.step == 9 and w.is_coordinator and w.storage_meta() is None
    planner = DefaultSavePlanner()
    planner.init(state, True)                  # torch >= 2: set_up_planner
    plans, md = planner.create_global_plan([w.prepare_local_plan(planner.create_local_plan())])
    plans = w.prepare_global_plan(plans)       # begins the version
    fut = w.write_data(planner.finish_plan(plans[0]), planner)
    fut.wait()
    w.finish(md, [fut.value()])
    assert cclient.stat(job, 9).state >= ckstore.VState.SEALED
    with pytest.raises(ValueError):
        w.reset("/ckpt/9")

    dest = {"w": torch.zeros(4, 6), "b": torch.zeros(3, dtype=torch.bfloat16),
            "meta": {"step": -1}}
    r = StorageReader(cclient, job, 0)
    r.reset(9)                                 # dcp.load(..., checkpoint_id=9)
    try:
        md2 = r.read_metadata()
        r.set_up_storage_reader(md2, True, rank=0)
        lp = DefaultLoadPlanner()
        lp.init(dest, md2, True)
        plans = r.prepare_global_plan([r.prepare_local_plan(lp.create_local_plan())])
        r.read_data(lp.finish_plan(plans[0]), lp).wait()
    finally:
        r.close()
    assert torch.equal(dest["w"], state["w"]) and torch.equal(dest["b"], state["b"])
    assert dest["meta"] == {"step": 9}
