"""ckstore.pec: the PEC helpers through Python, and a partial save."""
import os

import pytest

np = pytest.importorskip("numpy", reason="NumPy is not installed (scripts/deps --python)")

import ckstore  # noqa: E402
from ckstore import CkstoreError, Status  # noqa: E402
from ckstore.pec import NEVER, Pec  # noqa: E402


def test_round_robin_covers_every_expert_within_the_period():
    pec = Pec(4, 8, 2, ranks=2)
    b = pec.bounds()
    assert (b.period, b.max_staleness, b.saved_per_ckpt, b.experts_per_rank) == (4, 3, 8, 4)
    assert [pec.expert_rank(e) for e in range(8)] == [0, 0, 0, 0, 1, 1, 1, 1]
    seen = np.zeros((4, 8), dtype=int)
    for c in range(b.period):
        m = pec.select_round_robin(c)
        assert m.dtype == bool and (m.sum(axis=1) == 2).all()
        seen += m
    assert (seen == 1).all()


def test_load_aware_staleness_and_plt():
    pec = Pec(2, 4, 1, max_age=4)
    last = np.full((2, 4), NEVER, dtype=np.uint64)
    tokens = np.array([[5, 50, 1, 2], [0, 0, 9, 3]], dtype=np.uint64)
    m = pec.select_load_aware(tokens, last, 0)
    assert np.argwhere(m).tolist() == [[0, 1], [1, 2]]
    pec.note_saved(m, 0, last, tokens)
    assert last[0, 1] == 0 and last[1, 2] == 0 and last[0, 0] == NEVER
    assert tokens[0, 1] == 0 and tokens[0, 0] == 5
    saved = np.array([[3, 7, 7, NEVER], [7, 7, 7, 7]], dtype=np.uint64)
    st, stats = pec.staleness(7, saved)
    assert st[0, 0] == 4 and st[0, 3] == NEVER and stats.max == 4 and stats.never == 1
    assert stats.stale == 2
    assert pec.plt(np.full((2, 4), 10, dtype=np.uint64), 160) == pytest.approx(0.5)


def test_bad_input_is_an_error():
    with pytest.raises(CkstoreError) as e:
        Pec(4, 8, 9)
    assert e.value.status == Status.ERR_INVALID_PARAM
    with pytest.raises(CkstoreError):
        Pec(4, 8, 2, ranks=3)
    pec = Pec(1, 2, 1)
    with pytest.raises(CkstoreError) as e:
        pec.staleness(1, np.array([[2, 0]], dtype=np.uint64))
    assert e.value.status == Status.ERR_INVALID_PARAM
    with pytest.raises(ValueError, match="shape"):
        pec.plt(np.zeros(3, dtype=np.uint64), 1)


def test_partial_save_writes_dense_and_selected_experts(cclient):
    torch = pytest.importorskip("torch", reason="PyTorch is not installed "
                                "(scripts/deps --python)")
    import ckstore.pec
    import ckstore.torch as ckt
    job = f"pec-{os.getpid()}"
    sd = {"model": {f"layers.{l}.experts.{e}.w": torch.full((64,), float(l * 10 + e))
                    for l in range(2) for e in range(4)}}
    sd["model"]["embed"] = torch.ones(8)
    tagger = ckstore.pec.model_tagger(torch.nn.Module())
    ckt.save(sd, cclient, job, 1, tagger=tagger)
    for t in sd["model"].values():
        t.add_(100)
    pec = Pec(2, 4, 1)
    mask = pec.select_round_robin(0)
    n = ckstore.pec.save_partial(sd, cclient, job, 2, parent=1, mask=mask, tagger=tagger)
    assert n == 1 + 2  # the dense tensor and one expert per layer
    got, info = ckt.load(cclient, job, with_info=True)
    assert info.version == 2
    assert sorted(info.sources.values()).count(2) == n + 1  # and __meta__
    steps = ckstore.pec.expert_steps(info, 2, 4)
    assert np.array_equal(steps, np.where(mask, 2, 1).astype(np.uint64))
    for l in range(2):
        for e in range(4):
            want = l * 10 + e + (100 if mask[l, e] else 0)
            assert got["model"][f"layers.{l}.experts.{e}.w"][0].item() == want
    assert got["model"]["embed"][0].item() == 101
