"""ckstore.torch.save / load / async_save of a model and its optimizer."""
import os

import pytest

from conftest import same, torch_or_skip

torch = torch_or_skip()
import ckstore  # noqa: E402
import ckstore.torch as ckt  # noqa: E402
from ckstore import CkstoreError, Kind, MemType, Status, VState  # noqa: E402


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
    same(sd, got, bits=True)
    assert meta.version == 100 and set(meta.sources.values()) == {100}
    # small tensors are packed by their tags
    assert meta.tags["pack/optimizer/-1/-1/0"].kind == Kind.OPTIMIZER
    assert meta.tags["pack/dense/-1/-1/0"].kind == Kind.DENSE
    # and with packing off, each tensor is its own object
    ckt.save(sd, client, job, 101, pack_below=0)
    got2, meta2 = ckt.load(client, job, with_info=True)
    same(sd, got2, bits=True)
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
    """On a CUDA device: tensors go through libckstore's device path (large
    ones from and into their own device memory), any dtype, contiguous or
    not, and come back equal on the device."""
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device (or a CPU-only PyTorch build): CUDA tensors not tested")
    job = f"torch-cuda-{os.getpid()}"
    w = torch.randn(1000, device="cuda")
    big = torch.randn(512, 1024, device="cuda")                      # 2 MiB: its own object
    sd = {"w": w, "big": big, "bf16": big.to(torch.bfloat16),
          "strided": big.t(), "small": torch.arange(5, device="cuda")}
    ckt.save(sd, cclient, job, 1)
    if ckt.device_path(cclient) is False:
        pytest.skip("this libckstore has no device path (built without CUDA): "
                    "CUDA tensors were copied through the host")
    assert ckt.device_path(cclient) is True
    got = ckt.load(cclient, job, map_location="cuda")
    for k, v in sd.items():
        assert got[k].is_cuda and got[k].dtype == v.dtype and torch.equal(got[k], v), k
    on_cpu = ckt.load(cclient, job)
    assert not on_cpu["big"].is_cuda and torch.equal(on_cpu["big"], big.cpu())


def test_device_memory_without_a_device_is_unsupported(sclient):
    """The answer the fallback of CUDA tensors relies on: without a CUDA
    device, libckstore refuses device memory at once with ERR_UNSUPPORTED
    and says why, and the version goes on with host memory."""
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is here: the library takes device memory")
    job = f"torch-nodev-{os.getpid()}"
    sclient.begin(job, 1)
    with pytest.raises(CkstoreError) as e:
        sclient.put(job, 1, "k", bytearray(4096), mem_type=MemType.CUDA)
    assert e.value.status == Status.ERR_UNSUPPORTED and "no CUDA device" in e.value.text
    with pytest.raises(CkstoreError) as e:
        sclient.put_async(job, 1, "k", bytearray(4096), mem_type=MemType.CUDA)
    assert e.value.status == Status.ERR_UNSUPPORTED
    # AUTO: the library finds no device, so the buffer is host memory
    sclient.put(job, 1, "k", b"x" * 4096, mem_type=MemType.AUTO)
    sclient.seal(job, 1)
    with sclient.open(job, 1) as r:
        out = bytearray(4096)
        with pytest.raises(CkstoreError) as e:
            r.get_into("k", out, mem_type=MemType.CUDA)
        assert e.value.status == Status.ERR_UNSUPPORTED
        assert r.get_into("k", out) == 4096 and out == b"x" * 4096


def test_cuda_path_falls_back_to_host_copies_once_the_library_refuses(sclient, standalone,
                                                                      monkeypatch):
    """Which path ckstore.torch picks: CPU tensors never ask for the device
    path; a CUDA tensor asks once per client, and where the library answers
    ERR_UNSUPPORTED (a real answer: there is no CUDA device here) it is
    copied through host memory, with one warning. PyTorch here has no CUDA,
    so the tensors are CPU tensors that ckstore._device is told are device
    memory (its is_device() test); the library's answer, the save and the
    load are real."""
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is here: test_cuda_tensors covers the device path")
    import ckstore._device as dev
    job = f"torch-fallback-{os.getpid()}"
    sd = {"big": torch.randn(256, 512), "bf16": torch.randn(300, 600).to(torch.bfloat16),
          "small": torch.arange(10)}
    ckt.save(sd, sclient, job, 1, pack_below=1024)
    assert ckt.device_path(sclient) is None            # CPU tensors: host path only

    puts, gets = [], []
    real_put = sclient.put_async
    monkeypatch.setattr(sclient, "put_async",
                        lambda *a, **kw: puts.append(kw.get("mem_type")) or real_put(*a, **kw))
    real_get = ckstore.Restore.get_async
    monkeypatch.setattr(ckstore.Restore, "get_async",
                        lambda self, *a, **kw: gets.append(kw.get("mem_type")) or
                        real_get(self, *a, **kw))
    monkeypatch.setattr(dev, "is_device", lambda t: True)
    monkeypatch.setattr(dev, "_warned", False)
    with pytest.warns(RuntimeWarning, match="does not take CUDA memory") as w:
        ckt.save(sd, sclient, job, 2, pack_below=1024)
    assert len([x for x in w if "CUDA memory" in str(x.message)]) == 1
    assert ckt.device_path(sclient) is False
    # the first tensor asked for the device path, was refused and went from
    # host memory; the others went from host memory at once
    assert puts.count(MemType.CUDA) == 1 and puts[0] == MemType.CUDA, puts
    assert puts.count(None) == 4, puts                 # big, bf16, the pack, __meta__

    with ckstore.Client(**standalone.client_kwargs(), timeout_ms=20000) as c2:
        got = ckt.load(c2, job, 2)
        assert ckt.device_path(c2) is False
    assert gets.count(MemType.CUDA) == 1, gets         # one refused device read
    for k, v in sd.items():
        assert torch.equal(got[k], v), k
    # a client that was refused does not ask again
    puts.clear()
    ckt.save(sd, sclient, job, 3, pack_below=1024)
    assert MemType.CUDA not in puts and len(puts) == 4, puts


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
