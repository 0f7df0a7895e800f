"""A small MoE transformer (examples/train_moe.py: 4 layers, 8 experts per
layer, top-2 router) trained on CPU by 2 processes with torch.distributed
(gloo, 127.0.0.1) against a real local cluster, checkpointed every 2 steps
(full, and partial-expert in between). A rank is SIGKILLed; the survivor
rejoins a new process group with a replacement process, both restore the
newest checkpoint and train on: the final parameters, optimizer state and
RNG state must be bit-identical to an uninterrupted run's."""
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cks_servers import free_port
from conftest import same, torch_or_skip

torch = torch_or_skip()
import numpy as np  # noqa: E402

import ckstore  # noqa: E402
import ckstore.pec  # noqa: E402
import ckstore.torch as ckt  # noqa: E402

HERE = Path(__file__).resolve().parent
STEPS, EVERY, FULL_EVERY, PER_STEP = 10, 2, 6, 2
TIMEOUT_S = 120


def spawn(cluster, job, rank, world, port, dump, *extra):
    args = [sys.executable, str(HERE / "moe_worker.py"), "--rank", str(rank), "--world",
            str(world), "--port", str(port), "--cluster", str(cluster.map), "--secret",
            str(cluster.secret), "--job", job, "--steps", str(STEPS), "--every", str(EVERY),
            "--full-every", str(FULL_EVERY), "--per-step", str(PER_STEP), "--dump", str(dump),
            *map(str, extra)]
    env = dict(os.environ, UCX_NET_DEVICES="lo", OMP_NUM_THREADS="1")
    return subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)


def wait_all(procs, timeout_s=TIMEOUT_S):
    """Wait for every process (bounded); kill the rest by pid on timeout."""
    deadline = time.monotonic() + timeout_s
    outs = []
    for p in procs:
        try:
            out, _ = p.communicate(timeout=max(1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            for q in procs:
                if q.poll() is None:
                    q.kill()
                    q.wait(10)
            raise AssertionError(f"a rank did not finish within {timeout_s} s")
        outs.append(out)
    return outs


def tm_names():
    sys.path.insert(0, str(HERE.parents[1] / "examples"))
    import train_moe
    return train_moe.build()[0].named_parameters()


@pytest.fixture(scope="module")
def reference(cluster, tmp_path_factory):
    """An uninterrupted run of 2 ranks: final state and states at each
    checkpoint step, and its checkpoints in job moe-ref."""
    d = tmp_path_factory.mktemp("moe-ref")
    job = f"moe-ref-{os.getpid()}"
    port = free_port()
    procs = [spawn(cluster, job, r, 2, port, d / f"final.r{r}.pt", "--dump-dir", d)
             for r in range(2)]
    outs = wait_all(procs)
    for p, out in zip(procs, outs):
        assert p.returncode == 0, out
    return job, d


def test_kill_a_rank_restore_and_continue_bit_identical(cluster, reference, tmp_path):
    ref_job, ref = reference
    job = f"moe-kill-{os.getpid()}"
    port, rejoin = free_port(), free_port()
    while rejoin == port:
        rejoin = free_port()
    survivor = spawn(cluster, job, 0, 2, port, tmp_path / "final.r0.pt",
                     "--rejoin-port", rejoin)
    victim = spawn(cluster, job, 1, 2, port, tmp_path / "unused.pt", "--die-after", 7)
    out_victim = wait_all([victim])[0]
    if victim.returncode != -9:  # it should have SIGKILLed itself after step 7
        survivor.kill()
        out_s = survivor.communicate(timeout=30)[0]
        raise AssertionError(f"rank 1:\n{out_victim}\nrank 0:\n{out_s}")
    # the replacement process for rank 1 joins the survivor's new group
    repl = spawn(cluster, job, 1, 2, rejoin, tmp_path / "final.r1.pt", "--resume")
    out_s, out_r = wait_all([survivor, repl])
    assert survivor.returncode == 0, out_s
    assert repl.returncode == 0, out_r
    assert "rank 0: restored step 6" in out_s and "rank 1: restored step 6" in out_r, \
        out_s + out_r
    for r in range(2):
        same(torch.load(ref / f"final.r{r}.pt"), torch.load(tmp_path / f"final.r{r}.pt"),
             f"rank {r}")
    # the first checkpoint after the restore (full: a new Checkpointer starts
    # with one) holds the uninterrupted run's state at step 8
    with ckstore.Client(**cluster.client_kwargs()) as c:
        assert [v.version for v in c.versions(job)] == [2, 4, 6, 8, 10]
        assert c.stat(job, 8).parent is None
        got = ckt.load(c, job, 8, rank=0, world_size=2)
    want = torch.load(ref / "step8.r0.pt")
    same({k: want[k] for k in ("model", "optim", "step")},
         {k: got[k] for k in ("model", "optim", "step")})


def test_partial_expert_version_restores_experts_from_their_source_step(cluster, reference):
    """Version 4 is partial (parent 2): the experts round-robin chose for it
    come from step 4, the others from step 2, with their optimizer state."""
    job, ref = reference
    pec = ckstore.pec.Pec(4, 8, PER_STEP)
    mask = pec.select_round_robin(1)  # checkpoint number 1 is step 4
    assert mask.sum() == 4 * PER_STEP
    with ckstore.Client(**cluster.client_kwargs()) as c:
        assert c.stat(job, 4).parent == 2 and c.stat(job, 6).parent is None
        state, info = ckt.load(c, job, 4, rank=0, world_size=2, with_info=True)
    steps = ckstore.pec.expert_steps(info, 4, 8)
    assert np.array_equal(steps, np.where(mask, 4, 2).astype(np.uint64))
    stale, stats = pec.staleness(4, steps)
    assert stats.max == 2 and stats.stale == 32 - 4 * PER_STEP and stats.never == 0
    s2, s4 = torch.load(ref / "step2.r0.pt"), torch.load(ref / "step4.r0.pt")
    def source(name):
        p = name.split(".")
        if len(p) > 4 and p[3] == "experts" and not mask[int(p[1]), int(p[4])]:
            return s2
        return s4

    for name, t in state["model"].items():
        assert torch.equal(t, source(name)["model"][name]), name
    # AdamW's state, indexed by parameter position (the order of named_parameters)
    names = [n for n in state["model"] if n in dict(tm_names())]
    for i, name in enumerate(names):
        for k in ("exp_avg", "exp_avg_sq"):
            want = source(name)["optim"]["state"][i][k]
            assert torch.equal(state["optim"]["state"][i][k], want), f"{name} {k}"
    # the step and the RNG state are dense: from step 4
    assert state["step"] == 4
    assert torch.equal(state["rng"]["torch"], s4["rng"]["torch"])
