"""N ranks (forked from this process) save or load a sharded state dict
through torch.distributed._shard.checkpoint with ckstore.dcp, gloo on
127.0.0.1. Each rank checks what it loaded; the exit status is 0 when every
rank succeeded. Used by tests/python/test_dcp.py."""
import argparse
import datetime
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "python"))

import torch  # noqa: E402

from rank_procs import run_ranks  # noqa: E402

# two sharded tensors: 12 rows (even chunks for 4, 3 and 2 ranks) and 10
# rows (uneven: 3,3,3,1 over 4 ranks, 4,4,2 over 3)
SHAPES = {"w": (12, 16), "u": (10, 6)}


def full(name, step):
    r, c = SHAPES[name]
    return torch.arange(r * c, dtype=torch.float32).reshape(r, c) * 0.5 + step + \
        (100 if name == "u" else 0)


def rank_main(rank, a):
    import torch.distributed as dist
    from ckstore.dcp import StorageReader, StorageWriter  # first: see ckstore/_compat.py
    from torch.distributed._shard import sharded_tensor
    from torch.distributed._shard.sharding_spec import ChunkShardingSpec
    import torch.distributed._shard.checkpoint as dcp

    import ckstore

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{a.port}", rank=rank,
                            world_size=a.world, timeout=datetime.timedelta(seconds=60))
    spec = ChunkShardingSpec(dim=0, placements=[f"rank:{i}/cpu" for i in range(a.world)])
    state = {}
    for name, shape in SHAPES.items():
        st = sharded_tensor.zeros(spec, *shape)
        if a.mode == "save":
            ref = full(name, a.step)
            for sh in st.local_shards():
                off, n = sh.metadata.shard_offsets[0], sh.metadata.shard_sizes[0]
                sh.tensor.copy_(ref[off:off + n])
        state[name] = st
    state["bias"] = torch.arange(5.0) + a.step if a.mode == "save" else torch.zeros(5)
    state["meta"] = {"step": a.step if a.mode == "save" else -1}
    with ckstore.Client(cluster=a.cluster, secret=a.secret, ec=(2, 1), chunk_size=65536,
                        timeout_ms=60000) as client:
        if a.mode == "save":
            w = StorageWriter(client, a.job, a.step)
            dcp.save_state_dict(state, w)
            w.wait(60)
            assert client.stat(a.job, a.step).nranks == a.world
        else:
            dcp.load_state_dict(state, StorageReader(client, a.job))
            for name in SHAPES:
                ref = full(name, a.step)
                shards = state[name].local_shards()
                for sh in shards:
                    off, n = sh.metadata.shard_offsets[0], sh.metadata.shard_sizes[0]
                    assert torch.equal(sh.tensor, ref[off:off + n]), (name, rank, off)
            assert torch.equal(state["bias"], torch.arange(5.0) + a.step)
            assert state["meta"]["step"] == a.step, state["meta"]
            print(f"rank {rank}/{a.world}: loaded " + ", ".join(
                f"{n} rows {[s.metadata.shard_offsets[0] for s in state[n].local_shards()]}"
                for n in SHAPES), flush=True)
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["save", "load"])
    ap.add_argument("--world", type=int, required=True)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--step", type=int, required=True)
    ap.add_argument("--cluster", required=True)
    ap.add_argument("--secret", required=True)
    ap.add_argument("--job", required=True)
    ap.add_argument("--timeout", type=float, default=100)
    a = ap.parse_args()
    return run_ranks(rank_main, a.world, (a,), a.timeout)  # forked: cheap ranks


if __name__ == "__main__":
    sys.exit(main())
