"""Two ranks (forked from this process, gloo on 127.0.0.1) save one
multi-rank version with ckstore.torch.save; rank 1's state dict holds a
tensor that cannot be written (on the meta device), so its save fails after
the version began. Rank 1 must raise and abort the version; rank 0's save
must then fail with the abort's status, not wait for its request timeout.
Prints each rank's outcome; exit status 0 when both went as expected.
Used by tests/python/test_torch.py."""
import datetime
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "python"))

import torch  # noqa: E402

from rank_procs import run_ranks  # noqa: E402


def rank_main(rank, port, cluster, secret, job):
    import torch.distributed as dist

    import ckstore
    import ckstore.torch as ckt

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=2, timeout=datetime.timedelta(seconds=60))
    state = {"w": torch.arange(1000.0)}
    if rank == 1:
        state["bad"] = torch.empty(1000, device="meta")
    with ckstore.Client(cluster=cluster, secret=secret, ec=(2, 1), chunk_size=65536,
                        timeout_ms=60000) as client:
        try:
            ckt.save(state, client, job, 1, pack_below=0)
        except ValueError as e:
            assert rank == 1, e
            print(f"rank 1: {e}", flush=True)
        except ckstore.CkstoreError as e:
            assert rank == 0, e
            assert e.status != ckstore.Status.ERR_TIMEOUT, e
            print(f"rank 0: {e.name}", flush=True)
        else:
            raise AssertionError(f"rank {rank}: the save did not fail")
        if rank == 0:
            assert client.stat(job, 1).state == ckstore.VState.ABORTED
            print("rank 0: version ABORTED", flush=True)


def main():
    port, cluster, secret, job = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
    return run_ranks(rank_main, 2, (port, cluster, secret, job), 100)


if __name__ == "__main__":
    sys.exit(main())
