"""ckstore.Client against real servers: versions, zero-copy blocking and
async puts and gets of buffer-protocol objects, staging memory, errors."""
import os
import random
import subprocess
import sys

import pytest

import ckstore
from ckstore import CkstoreError, Kind, Status, Tags, VState
from conftest import ROOT, torch_or_skip

np = pytest.importorskip("numpy", reason="NumPy is not installed (scripts/deps --python)")


def seed():
    s = int.from_bytes(os.urandom(4), "little")
    print(f"seed {s}")
    return random.Random(s)


def test_abi_sizes_match_the_c_compiler(tmp_path):
    """The cffi declarations must lay the structs out as the C compiler does."""
    from ckstore._ffi import ffi
    names = ["cks_client_params_t", "cks_version_params_t", "cks_cluster_stats_t",
             "cks_version_info_t", "cks_tags_t", "cks_put_params_t", "cks_object_info_t",
             "cks_restore_skip_t", "cks_restore_params_t", "cks_tag_filter_t",
             "cks_get_params_t", "cks_pec_params_t", "cks_pec_bounds_t",
             "cks_pec_staleness_stats_t"]
    src = tmp_path / "sizes.c"
    src.write_text('#include "ckstore.h"\n#include <stdio.h>\nint main(void) {\n' +
                   "".join(f'printf("%zu\\n", sizeof({n}));\n' for n in names) +
                   "return 0;\n}\n")
    exe = tmp_path / "sizes"
    cc = subprocess.run(["cc", "-I", str(ROOT / "include"), str(src), "-o", str(exe)],
                        capture_output=True, text=True)
    if cc.returncode != 0:
        pytest.skip(f"no C compiler to compare with: {cc.stderr[:200]}")
    got = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout.split()
    assert [int(x) for x in got] == [ffi.sizeof(n) for n in names]


def test_versions_lifecycle(sclient):
    job = f"life-{os.getpid()}"
    assert sclient.latest(job) is None
    assert sclient.versions(job) == []
    sclient.begin(job, 10)
    assert sclient.stat(job, 10).state == VState.OPEN
    sclient.put(job, 10, "a", b"hello")
    sclient.seal(job, 10)
    info = sclient.stat(job, 10)
    assert info.state >= VState.SEALED and info.nobjects == 1 and info.bytes == 5
    sclient.begin(job, 11)
    sclient.abort(job, 11)
    assert sclient.stat(job, 11).state == VState.ABORTED
    assert [v.version for v in sclient.versions(job)] == [10, 11]
    assert sclient.latest(job).version == 10
    assert job in sclient.jobs()
    sclient.delete(job, 10)
    with pytest.raises(CkstoreError) as e:
        sclient.stat(job, 10)
    assert e.value.status == Status.ERR_NO_SUCH_VERSION


def test_buffers_round_trip_zero_copy(sclient):
    rnd = seed()
    job = f"buf-{os.getpid()}"
    sclient.begin(job, 1)
    data = {
        "bytes": rnd.randbytes(1000),
        "bytearray": bytearray(rnd.randbytes(70000)),
        "memoryview": memoryview(rnd.randbytes(4096))[10:2000],
        "numpy": np.frombuffer(rnd.randbytes(8 * 3000), dtype=np.float64).reshape(30, 100),
        "empty": b"",
    }
    for k, v in data.items():
        sclient.put(job, 1, k, v, tags=Tags(Kind.DENSE, layer=1))
    sclient.seal(job, 1)
    with sclient.open(job) as r:
        assert r.version == 1
        keys = [o.key for o in r.objects()]
        assert keys == sorted(data)
        assert [o.key for o in r.objects(kind=Kind.DENSE, layer=1)] == keys
        assert list(r.objects(layer=2)) == []
        for k, v in data.items():
            want = np.ascontiguousarray(v).tobytes() if isinstance(v, np.ndarray) else bytes(v)
            assert r.get(k, verify=True) == want
            assert r.stat(k).size == len(want)
        # straight into a NumPy array
        out = np.zeros((30, 100), dtype=np.float64)
        assert r.get_into("numpy", out) == out.nbytes
        assert out.tobytes() == data["numpy"].tobytes()  # random bits: NaNs too
        # a byte range
        part = bytearray(100)
        assert r.get_into("bytearray", part, offset=500, length=100) == 100
        assert part == data["bytearray"][500:600]


def test_torch_tensors_round_trip(sclient):
    torch = torch_or_skip()
    job = f"tensor-{os.getpid()}"
    g = torch.Generator().manual_seed(5)
    ts = {"f32": torch.randn(64, 33, generator=g),
          "bf16": torch.randn(100, generator=g).to(torch.bfloat16),
          "i64": torch.randint(0, 1 << 40, (17,), generator=g),
          "scalar": torch.tensor(3.5), "bool": torch.rand(9, generator=g) > 0.5}
    sclient.begin(job, 3)
    for k, t in ts.items():
        sclient.put(job, 3, k, t)
    with pytest.raises(ValueError, match="contiguous"):
        sclient.put(job, 3, "t", ts["f32"].t())
    sclient.seal(job, 3)
    with sclient.open(job, 3) as r:
        for k, t in ts.items():
            out = torch.empty_like(t)
            r.get_into(k, out)
            assert torch.equal(out, t), k


def test_async_puts_and_gets_from_staging(cclient):
    rnd = seed()
    job = f"async-{os.getpid()}"
    n, size = 24, 100_000
    with cclient.alloc(n * size) as stage:
        arr = stage.numpy()
        arr[:] = np.frombuffer(rnd.randbytes(n * size), dtype=np.uint8)
        want = bytes(arr)
        cclient.begin_async(job, 7).result(30)
        reqs = [cclient.put_async(job, 7, f"obj{i:03d}", stage.view(i * size, size),
                                  tags=Tags(Kind.EXPERT, layer=i % 4, expert=i))
                for i in range(n)]
        assert all(r.result(60) is None for r in reqs)
        assert cclient.seal_async(job, 7).result(60) is None
        assert cclient.stat(job, 7).state == VState.PROTECTED
        arr[:] = 0
        with cclient.open(job, 7, check=True) as r:
            gets = [r.get_async(f"obj{i:03d}", stage.view(i * size, size)) for i in range(n)]
            assert [g.result(60) for g in gets] == [size] * n
            assert [o.expert for o in (x.tags for x in r.objects(layer=1))] == [1, 5, 9, 13,
                                                                                  17, 21]
        assert bytes(arr) == want
        t = stage.tensor() if "torch" in sys.modules else None
        if t is not None:
            assert t.numel() == n * size


def test_errors_carry_status_and_server_text(sclient, cclient):
    job = f"err-{os.getpid()}"
    with pytest.raises(CkstoreError) as e:
        sclient.open(job, 99)
    assert e.value.status in (Status.ERR_NO_SUCH_JOB, Status.ERR_NO_SUCH_VERSION)
    sclient.begin(job, 1)
    sclient.put(job, 1, "k", b"x")
    with pytest.raises(CkstoreError) as e:
        sclient.put(job, 1, "k", b"y")
    assert e.value.status == Status.ERR_DUPLICATE_KEY
    assert e.value.name == "CKS_ERR_DUPLICATE_KEY" and e.value.text
    req = sclient.put_async(job, 1, "k", b"z")
    with pytest.raises(CkstoreError) as e:
        req.result(30)
    assert e.value.status == Status.ERR_DUPLICATE_KEY
    with pytest.raises(CkstoreError) as e:
        sclient.begin(job, 1)
    assert e.value.status == Status.ERR_VERSION_EXISTS
    sclient.seal(job, 1)
    with sclient.open(job) as r:
        with pytest.raises(CkstoreError) as e:
            r.get_into("k", bytearray(0))
        assert e.value.status < 0
        with pytest.raises(CkstoreError) as e:
            r.stat("nope")
        assert e.value.status == Status.ERR_NO_SUCH_KEY
        with pytest.raises(TypeError):
            r.get_into("k", b"read-only")
    with pytest.raises(CkstoreError) as e:
        cclient.seal(job, 12345)
    assert e.value.status in (Status.ERR_NO_SUCH_JOB, Status.ERR_NO_SUCH_VERSION)
    assert str(e.value).startswith(f"seal {job}@12345: CKS_ERR_NO_SUCH_")
    with pytest.raises(CkstoreError) as e:
        ckstore.Client(server="127.0.0.1:1", timeout_ms=500)
    assert e.value.status in (Status.ERR_UNREACHABLE, Status.ERR_TIMEOUT, Status.ERR_CONN_LOST,
                              Status.ERR_TRANSPORT)
    with pytest.raises(ValueError):
        ckstore.Client()


def test_member_timeout_is_checked_and_sent(cluster):
    """member_timeout_ms outside 100 .. 600000 ms is refused at once; one in
    range goes with the puts and the begin, and the version commits."""
    for bad in (99, 600001):
        with pytest.raises(CkstoreError) as e:
            ckstore.Client(**cluster.client_kwargs(), member_timeout_ms=bad)
        assert e.value.status == Status.ERR_INVALID_PARAM
    job = f"mt-{os.getpid()}"
    with ckstore.Client(**cluster.client_kwargs(), timeout_ms=20000,
                        member_timeout_ms=2000) as c:
        c.begin(job, 1)
        c.put(job, 1, "k", b"member timeout")
        c.seal(job, 1)
        with c.open(job, 1) as r:
            buf = bytearray(14)
            r.get_into("k", buf)
            assert bytes(buf) == b"member timeout"


def test_close_fails_requests_in_flight_and_refuses_more(standalone):
    c = ckstore.Client(**standalone.client_kwargs())
    job = f"close-{os.getpid()}"
    c.begin(job, 1)
    buf = bytearray(1 << 20)
    reqs = [c.put_async(job, 1, f"k{i}", buf) for i in range(8)]
    c.close()
    for r in reqs:
        try:
            r.result(30)
        except CkstoreError as e:
            assert e.status == Status.ERR_CANCELED
    with pytest.raises(ValueError, match="closed"):
        c.put(job, 1, "x", b"")
    c.close()
