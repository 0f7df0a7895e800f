#!/usr/bin/env python3
"""Train a small Mixture-of-Experts transformer on CPU with torch.distributed
(gloo, data parallel) and checkpoint it into ckstore: a full checkpoint every
--full-every steps and, in between, partial-expert checkpoints (the dense
part and K experts per layer, children of the previous version). With
--resume, every rank restores the newest checkpoint first and goes on from
there: parameters, optimizer state and RNG state as they were saved.

Against the cluster scripts/demo starts (it prints the map's path):

    python3 examples/train_moe.py --cluster /tmp/ckstore-demo.XXXX/cluster.map \\
        --secret /tmp/ckstore-demo.XXXX/cluster.key --ranks 2 --steps 20

The model: 4 layers, each attention plus an MoE feed-forward block of 8
experts with a top-2 router; 0.64 M parameters (7.3 MiB with AdamW's state).
scripts/demo keeps its cluster up for this when run as CKS_DEMO_KEEP=1
scripts/demo (Ctrl-C stops it).
"""
from __future__ import annotations

import argparse
import datetime
import os
import random
import sys
import time
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F

try:
    import ckstore
except ImportError:  # a source checkout
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "python"))
    import ckstore
import ckstore.pec
import ckstore.torch

VOCAB, DIM, HEADS, LAYERS, EXPERTS, TOPK, HIDDEN, SEQ, BATCH = 256, 64, 4, 4, 8, 2, 128, 32, 8


class Expert(nn.Module):
    def __init__(self):
        super().__init__()
        self.up = nn.Linear(DIM, HIDDEN)
        self.down = nn.Linear(HIDDEN, DIM)

    def forward(self, x):
        return self.down(F.gelu(self.up(x)))


class MoE(nn.Module):
    """Top-2 routing over EXPERTS experts; counts the tokens each receives."""

    def __init__(self):
        super().__init__()
        self.router = nn.Linear(DIM, EXPERTS, bias=False)
        self.experts = nn.ModuleList(Expert() for _ in range(EXPERTS))
        self.register_buffer("tokens", torch.zeros(EXPERTS, dtype=torch.int64),
                             persistent=False)

    def forward(self, x):
        shape = x.shape
        x = x.reshape(-1, DIM)
        gates = F.softmax(self.router(x), dim=-1)
        weight, idx = gates.topk(TOPK, dim=-1)
        weight = weight / weight.sum(-1, keepdim=True)
        out = torch.zeros_like(x)
        for e in range(EXPERTS):
            rows, slot = (idx == e).nonzero(as_tuple=True)
            self.tokens[e] += rows.numel()
            if rows.numel():
                out.index_add_(0, rows, self.experts[e](x[rows]) * weight[rows, slot, None])
        return out.reshape(shape)


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(DIM), nn.LayerNorm(DIM)
        self.qkv, self.proj = nn.Linear(DIM, 3 * DIM), nn.Linear(DIM, DIM)
        self.moe = MoE()
        self.drop = nn.Dropout(0.1)

    def forward(self, x):
        b, t, _ = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, HEADS, DIM // HEADS).unbind(2)
        att = (q.transpose(1, 2) @ k.transpose(1, 2).transpose(-1, -2)) / (DIM // HEADS) ** 0.5
        mask = torch.ones(t, t, dtype=torch.bool).triu(1)
        att = att.masked_fill(mask, float("-inf")).softmax(-1)
        y = (att @ v.transpose(1, 2)).transpose(1, 2).reshape(b, t, DIM)
        x = x + self.drop(self.proj(y))
        return x + self.drop(self.moe(self.ln2(x)))


class MoETransformer(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, DIM)
        self.pos = nn.Parameter(torch.zeros(SEQ, DIM))
        self.layers = nn.ModuleList(Block() for _ in range(LAYERS))
        self.head = nn.Linear(DIM, VOCAB)

    def forward(self, tokens):
        x = self.embed(tokens) + self.pos[: tokens.shape[1]]
        for blk in self.layers:
            x = blk(x)
        return self.head(x)

    def expert_tokens(self) -> torch.Tensor:
        """Tokens routed to each expert so far, (LAYERS, EXPERTS)."""
        return torch.stack([blk.moe.tokens for blk in self.layers])


def expert_of(name: str):
    """(layer, expert) of an expert parameter's name, else None."""
    p = name.split(".")
    if len(p) > 4 and p[0] == "layers" and p[2] == "moe" and p[3] == "experts":
        return int(p[1]), int(p[4])
    return None


def build(seed: int = 1234):
    """The model and its optimizer, the same on every rank."""
    torch.manual_seed(seed)
    model = MoETransformer()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
    return model, opt


def train_step(model, opt, world: int) -> float:
    """One data-parallel step: a random batch from this rank's RNG, dropout,
    gradients averaged over the ranks (gloo), AdamW."""
    tokens = torch.randint(0, VOCAB, (BATCH, SEQ + 1))
    logits = model(tokens[:, :-1])
    loss = F.cross_entropy(logits.reshape(-1, VOCAB), tokens[:, 1:].reshape(-1))
    opt.zero_grad(set_to_none=False)
    loss.backward()
    params = [p for p in model.parameters()]
    for p in params:
        if p.grad is None:
            p.grad = torch.zeros_like(p)
    if world > 1:
        flat = torch.cat([p.grad.reshape(-1) for p in params])
        torch.distributed.all_reduce(flat)
        flat /= world
        off = 0
        for p in params:
            n = p.numel()
            p.grad.copy_(flat[off:off + n].view_as(p))
            off += n
    opt.step()
    return float(loss)


def rng_state() -> dict:
    return {"torch": torch.get_rng_state(), "python": random.getstate()}


def set_rng_state(s: dict) -> None:
    torch.set_rng_state(s["torch"])
    random.setstate(s["python"])


def checkpoint_state(model, opt, step: int, rank: int) -> dict:
    """What each rank saves: rank 0 the model and optimizer (the same on
    every rank under data parallelism), every rank its RNG state."""
    s = {"step": step, "rng": rng_state()}
    if rank == 0:
        s["model"] = model.state_dict()
        s["optim"] = opt.state_dict()
    return s


def restore(client, job: str, model, opt, rank: int, world: int, step=ckstore.LATEST):
    """Load a checkpoint into model and optimizer; returns its step."""
    mine = ckstore.torch.load(client, job, step, rank=rank, world_size=world)
    shared = mine if rank == 0 else ckstore.torch.load(client, job, mine["step"], rank=0,
                                                       world_size=world)
    model.load_state_dict(shared["model"])
    opt.load_state_dict(shared["optim"])
    set_rng_state(mine["rng"])
    return mine["step"]


class Checkpointer:
    """Full checkpoints every `full_every` steps, partial-expert ones (K
    experts per layer, round-robin) at every other `every` steps."""

    def __init__(self, client, job, model, opt, rank, world, every, full_every, per_step,
                 retain=None):
        self.client, self.job, self.model, self.opt = client, job, model, opt
        self.rank, self.world, self.every, self.full_every = rank, world, every, full_every
        self.pec = ckstore.pec.Pec(LAYERS, EXPERTS, per_step)
        self.tagger = ckstore.pec.model_tagger(model, opt, expert_of=expert_of)
        self.retain = retain
        self.last = None
        self.ckpt = 0

    def maybe_save(self, step: int) -> str:
        if step % self.every:
            return ""
        state = checkpoint_state(self.model, self.opt, step, self.rank)
        if self.last is None or step % self.full_every == 0:
            ckstore.torch.save(state, self.client, self.job, step, rank=self.rank,
                               world_size=self.world, tagger=self.tagger, retain=self.retain)
            kind = "full"
        else:
            mask = self.pec.select_round_robin(self.ckpt)
            ckstore.pec.save_partial(state, self.client, self.job, step, parent=self.last,
                                     mask=mask, tagger=self.tagger, rank=self.rank,
                                     world_size=self.world, retain=self.retain)
            kind = "partial"
        self.last = step
        self.ckpt += 1
        return kind


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cluster", required=True, help="cluster map of the ckstore servers")
    ap.add_argument("--secret", help="cluster secret file")
    ap.add_argument("--job", default="train-moe")
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--every", type=int, default=2, help="checkpoint every N steps")
    ap.add_argument("--full-every", type=int, default=6, help="full checkpoint every N steps")
    ap.add_argument("--per-step", type=int, default=2, help="experts per layer in a partial one")
    ap.add_argument("--resume", action="store_true", help="restore the newest checkpoint first")
    ap.add_argument("--ec", default="4,2", help="k,m of the versions (default 4,2)")
    ap.add_argument("--chunk", type=int, default=65536,
                    help="chunk size: every object takes k+m chunks at least (default 64 KiB)")
    ap.add_argument("--retain", type=int, default=6,
                    help="keep the newest N restorable versions (and what they use)")
    ap.add_argument("--port", type=int, default=29533, help="torch.distributed port on 127.0.0.1")
    a = ap.parse_args(argv)
    torch.multiprocessing.spawn(_rank_main, args=(a,), nprocs=a.ranks, join=True)
    return 0


def _rank_main(rank: int, a) -> None:
    os.environ.setdefault("UCX_NET_DEVICES", "lo")
    torch.set_num_threads(1)
    torch.distributed.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{a.port}",
                                         rank=rank, world_size=a.ranks,
                                         timeout=datetime.timedelta(seconds=60))
    k, m = (int(x) for x in a.ec.split(","))
    with ckstore.Client(cluster=a.cluster, secret=a.secret, ec=(k, m),
                        chunk_size=a.chunk) as client:
        model, opt = build()
        torch.manual_seed(1000 + rank)
        random.seed(1000 + rank)
        start = 0
        if a.resume and client.latest(a.job) is not None:
            start = restore(client, a.job, model, opt, rank, a.ranks)
            if rank == 0:
                print(f"restored step {start} of {a.job}", flush=True)
        ck = Checkpointer(client, a.job, model, opt, rank, a.ranks, a.every, a.full_every,
                          a.per_step, a.retain)
        for step in range(start + 1, a.steps + 1):
            loss = train_step(model, opt, a.ranks)
            t0 = time.perf_counter()
            kind = ck.maybe_save(step)
            if rank == 0:
                note = f"  {kind} checkpoint {1e3 * (time.perf_counter() - t0):.0f} ms" \
                    if kind else ""
                print(f"step {step:4d}  loss {loss:.4f}{note}", flush=True)
    torch.distributed.destroy_process_group()


if __name__ == "__main__":
    sys.exit(main())
