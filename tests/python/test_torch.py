"""ckstore.torch.save / load / async_save of a model and its optimizer."""
import os

import pytest

from conftest import torch_or_skip

torch = torch_or_skip()
import ckstore.torch as ckt  # noqa: E402
from ckstore import CkstoreError, Kind, Status, VState  # noqa: E402


def make(seed):
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(),
                                torch.nn.Linear(32, 8))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    for _ in range(3):
        opt.zero_grad()
        model(torch.randn(4, 16)).pow(2).mean().backward()
        opt.step()
    return model, opt


def same(a, b, path="") -> None:
    assert type(a) is type(b), path
    if isinstance(a, torch.Tensor):
        assert a.dtype == b.dtype and a.shape == b.shape, path
        assert torch.equal(a.view(-1).view(torch.uint8) if a.numel() else a,
                           b.view(-1).view(torch.uint8) if b.numel() else b), path
    elif isinstance(a, dict):
        assert list(a) == list(b), path
        for k in a:
            same(a[k], b[k], f"{path}/{k}")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b)):
            same(x, y, f"{path}/{i}")
    else:
        assert a == b, path


def state(model, opt):
    return {"model": model.state_dict(), "optim": opt.state_dict(),
            "rng": {"torch": torch.get_rng_state()}, "step": 3,
            "misc": {"bf16": torch.arange(7, dtype=torch.bfloat16), "empty": torch.empty(0),
                     "tuple": (1, "two", torch.ones(2, dtype=torch.int8))}}


@pytest.mark.parametrize("where", ["standalone", "cluster"])
def test_save_load_model_and_optimizer(where, sclient, cclient):
    client = sclient if where == "standalone" else cclient
    job = f"torch-{where}-{os.getpid()}"
    model, opt = make(1)
    sd = state(model, opt)
    ckt.save(sd, client, job, 100)
    info = client.stat(job, 100)
    assert info.state == (VState.PROTECTED if where == "cluster" else info.state)
    assert info.state >= VState.SEALED
    got, meta = ckt.load(client, job, with_info=True)
    same(sd, got)
    assert meta.version == 100 and set(meta.sources.values()) == {100}
    # small tensors are packed by their tags
    assert meta.tags["pack/optimizer/-1/-1/0"].kind == Kind.OPTIMIZER
    assert meta.tags["pack/dense/-1/-1/0"].kind == Kind.DENSE
    # and with packing off, each tensor is its own object
    ckt.save(sd, client, job, 101, pack_below=0)
    got2, meta2 = ckt.load(client, job, with_info=True)
    same(sd, got2)
    assert meta2.version == 101 and meta2.tags["optim/state/0/exp_avg"].kind == Kind.OPTIMIZER
    assert meta2.tags["model/0.weight"].kind == Kind.DENSE
    # a fresh model and optimizer take the loaded state and agree exactly
    # a tensor held twice (tied weights) comes back as one tensor
    tied = torch.arange(4.0)
    ckt.save({"a": tied, "b": {"c": tied}}, client, job, 102)
    t2 = ckt.load(client, job, 102)
    assert t2["a"] is t2["b"]["c"] and torch.equal(t2["a"], tied)
    m2, o2 = make(2)
    m2.load_state_dict(got["model"])
    o2.load_state_dict(got["optim"])
    x = torch.randn(5, 16)
    assert torch.equal(model(x), m2(x))


def test_async_save_returns_after_the_copy(cclient):
    job = f"torch-async-{os.getpid()}"
    model, opt = make(3)
    sd = state(model, opt)
    want = {k: v.clone() for k, v in sd["model"].items()}
    fut = ckt.async_save(sd, cclient, job, 5)
    # training goes on at once: the saved bytes are the ones at the call
    with torch.no_grad():
        for p in model.parameters():
            p.add_(1.0)
    assert fut.result(60) is None
    assert cclient.stat(job, 5).state == VState.PROTECTED
    got = ckt.load(cclient, job, 5)
    for k, v in want.items():
        assert torch.equal(got["model"][k], v), k
    # a second one reuses the staging buffer
    fut2 = ckt.async_save(state(model, opt), cclient, job, 6)
    fut2.result(60)
    assert ckt.load(cclient, job)["model"]["0.weight"].equal(model[0].weight.detach())


def test_errors(sclient):
    job = f"torch-err-{os.getpid()}"
    with pytest.raises(CkstoreError) as e:
        ckt.load(sclient, job)
    assert e.value.status in (Status.ERR_NO_SUCH_JOB, Status.ERR_NO_SUCH_VERSION)
    ckt.save({"a": torch.ones(3)}, sclient, job, 1)
    with pytest.raises(CkstoreError) as e:
        ckt.save({"a": torch.ones(3)}, sclient, job, 1)
    assert e.value.status == Status.ERR_VERSION_EXISTS
    fut = ckt.async_save({"a": torch.ones(3)}, sclient, job, 2)
    fut.result(30)
    with pytest.raises(CkstoreError):
        ckt.async_save({"a": torch.ones(3)}, sclient, job, 2)
    assert sclient.stat(job, 2).state >= VState.SEALED
    with pytest.raises(RuntimeError, match="torch.distributed"):
        ckt.save({"a": torch.ones(1)}, sclient, job, 3, rank=1, world_size=2)


def test_cuda_tensors(cclient):
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device (or a CPU-only PyTorch build): CUDA tensors not tested")
    job = f"torch-cuda-{os.getpid()}"
    w = torch.randn(1000, device="cuda")
    ckt.save({"w": w}, cclient, job, 1)
    got = ckt.load(cclient, job, map_location="cuda")
    assert got["w"].is_cuda and torch.equal(got["w"], w)


def test_a_rank_that_fails_aborts_the_multi_rank_version(cluster):
    """Rank 1's save fails after the version began: it aborts the version,
    and rank 0's save fails with the abort instead of waiting (abort_worker.py)."""
    import subprocess
    import sys
    from pathlib import Path

    from cks_servers import free_port
    job = f"torch-abort-{os.getpid()}"
    p = subprocess.run([sys.executable, str(Path(__file__).parent / "abort_worker.py"),
                        str(free_port()), str(cluster.map), str(cluster.secret), job],
                       env=dict(os.environ, UCX_NET_DEVICES="lo", OMP_NUM_THREADS="1"),
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=150)
    assert p.returncode == 0, p.stdout
    assert "rank 0: version ABORTED" in p.stdout and "rank 1: " in p.stdout, p.stdout
