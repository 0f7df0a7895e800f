#!/usr/bin/env python3
"""Time ckstore.torch.save / async_save / load of examples/train_moe.py's
model and AdamW state against torch.save / torch.load to a file in /dev/shm,
in the same run. Starts its own local cluster (real ckstore-server
processes on 127.0.0.1, UCX on the loopback device) from the build in
$CKSTORE_BUILD (default build-test, else build), or uses --cluster.

    /usr/bin/python3 python/tools/bench_torch.py --servers 6 --ec 4,2 --reps 7
"""
import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "python"), str(ROOT / "examples"), str(ROOT / "tests" / "python")]
os.environ.setdefault("UCX_NET_DEVICES", "lo")

import torch  # noqa: E402

import ckstore  # noqa: E402
import ckstore.torch as ckt  # noqa: E402
import train_moe as tm  # noqa: E402


def med(xs):
    return statistics.median(xs) * 1e3


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--servers", type=int, default=6)
    ap.add_argument("--ec", default="4,2")
    ap.add_argument("--chunk", type=int, default=1 << 20)
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--cluster", help="use this cluster map instead of starting one")
    ap.add_argument("--secret")
    a = ap.parse_args()
    torch.set_num_threads(1)
    k, m = (int(x) for x in a.ec.split(","))
    local = None
    if a.cluster:
        kw = {"cluster": a.cluster, "secret": a.secret}
    else:
        from cks_servers import LocalCluster
        local = LocalCluster(a.servers, racks=3, arena_size="1G")
        kw = {"cluster": str(local.map), "secret": str(local.secret)}
    try:
        model, opt = tm.build()
        for _ in range(2):
            tm.train_step(model, opt, 1)
        state = {"model": model.state_dict(), "optim": opt.state_dict(), "rng": tm.rng_state()}
        ntensors = sum(1 for _ in model.state_dict()) + sum(
            len(s) for s in opt.state_dict()["state"].values())
        nbytes = sum(t.numel() * t.element_size() for t in model.state_dict().values()) + sum(
            t.numel() * t.element_size() for s in opt.state_dict()["state"].values()
            for t in s.values() if isinstance(t, torch.Tensor))
        path = Path(f"/dev/shm/ckstore-bench-{os.getpid()}.pt")
        t = {x: [] for x in ("ts", "tl", "cs", "ca", "cap", "cl")}
        with ckstore.Client(**kw, ec=(k, m), chunk_size=a.chunk) as c:
            job = f"bench-torch-{os.getpid()}"
            for i in range(a.reps):
                t0 = time.perf_counter()
                torch.save(state, path)
                t["ts"].append(time.perf_counter() - t0)
                t0 = time.perf_counter()
                torch.load(path)
                t["tl"].append(time.perf_counter() - t0)
                t0 = time.perf_counter()
                ckt.save(state, c, job, 2 * i)
                t["cs"].append(time.perf_counter() - t0)
                t0 = time.perf_counter()
                fut = ckt.async_save(state, c, job, 2 * i + 1)
                t["ca"].append(time.perf_counter() - t0)
                fut.result()
                t["cap"].append(time.perf_counter() - t0)
                t0 = time.perf_counter()
                got = ckt.load(c, job, 2 * i)
                t["cl"].append(time.perf_counter() - t0)
            assert torch.equal(got["model"]["head.weight"], state["model"]["head.weight"])
        path.unlink()
    finally:
        if local is not None:
            local.close()
    cpu = subprocess.run("lscpu | grep 'Model name'", shell=True, capture_output=True,
                         text=True).stdout.strip()
    print(f"model: {ntensors} tensors, {nbytes / 2**20:.1f} MiB (parameters and AdamW "
          f"state); cluster: {a.servers} servers, RS({k},{m}), {a.chunk >> 10} KiB chunks; "
          f"median of {a.reps}")
    print(f"torch.save to /dev/shm        {med(t['ts']):8.1f} ms")
    print(f"torch.load from /dev/shm      {med(t['tl']):8.1f} ms")
    print(f"ckstore.torch.save            {med(t['cs']):8.1f} ms  (until PROTECTED)")
    print(f"ckstore.torch.async_save      {med(t['ca']):8.1f} ms  (returns: tensors copied)")
    print(f"  its future                  {med(t['cap']):8.1f} ms  (PROTECTED)")
    print(f"ckstore.torch.load            {med(t['cl']):8.1f} ms")
    print(cpu)
    print("uptime:" + subprocess.run(["uptime"], capture_output=True, text=True).stdout
          .split("load average:")[-1].rstrip())
    return 0


if __name__ == "__main__":
    sys.exit(main())
