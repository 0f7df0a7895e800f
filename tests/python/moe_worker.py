"""One rank of the MoE training in tests/python/test_moe.py (run as a process).

Trains examples/train_moe.py's model with torch.distributed (gloo) on
127.0.0.1, checkpointing into ckstore as the example does. --die-after N:
SIGKILL itself after step N (before that step's checkpoint). --rejoin-port P:
when a collective fails (a peer died), leave the process group, join a new
one on port P, restore the newest checkpoint and go on. --dump: the final
state (torch.save); --dump-dir: the state at each checkpoint step.
"""
import argparse
import datetime
import os
import signal
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "python"))
sys.path.insert(0, str(ROOT / "examples"))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

import ckstore  # noqa: E402
import train_moe as tm  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    for name in ("rank", "world", "port", "steps", "every", "full_every", "per_step",
                 "die_after", "rejoin_port"):
        ap.add_argument("--" + name.replace("_", "-"), type=int, default=0)
    ap.add_argument("--cluster", required=True)
    ap.add_argument("--secret", required=True)
    ap.add_argument("--job", required=True)
    ap.add_argument("--resume", action="store_true")
    ap.add_argument("--dump", required=True)
    ap.add_argument("--dump-dir")
    a = ap.parse_args()
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)

    def join(port: int) -> None:
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=a.rank,
                                world_size=a.world, timeout=datetime.timedelta(seconds=60))

    join(a.port)
    with ckstore.Client(cluster=a.cluster, secret=a.secret, ec=(2, 1), chunk_size=65536,
                        timeout_ms=60000) as client:
        model, opt = tm.build()
        torch.manual_seed(1000 + a.rank)
        tm.random.seed(1000 + a.rank)
        step = 0
        if a.resume:
            step = tm.restore(client, a.job, model, opt, a.rank, a.world)
            print(f"rank {a.rank}: restored step {step}", flush=True)
        ck = tm.Checkpointer(client, a.job, model, opt, a.rank, a.world, a.every,
                             a.full_every, a.per_step)
        while step < a.steps:
            try:
                tm.train_step(model, opt, a.world)
            except RuntimeError as e:
                if not a.rejoin_port:
                    raise
                print(f"rank {a.rank}: step {step + 1} failed ({str(e)[:120]}); rejoining",
                      flush=True)
                dist.destroy_process_group()
                join(a.rejoin_port)
                a.rejoin_port = 0
                step = tm.restore(client, a.job, model, opt, a.rank, a.world)
                ck = tm.Checkpointer(client, a.job, model, opt, a.rank, a.world, a.every,
                                     a.full_every, a.per_step)
                print(f"rank {a.rank}: restored step {step}", flush=True)
                continue
            step += 1
            if step == a.die_after:
                print(f"rank {a.rank}: dying after step {step}", flush=True)
                os.kill(os.getpid(), signal.SIGKILL)
            ck.maybe_save(step)
            if a.dump_dir and step % a.every == 0:
                s = tm.checkpoint_state(model, opt, step, 0)
                torch.save(s, os.path.join(a.dump_dir, f"step{step}.r{a.rank}.pt"))
        torch.save(tm.checkpoint_state(model, opt, step, 0), a.dump)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
