"""Test support: real ckstore-server processes on 127.0.0.1, ports picked at
run time (below the ephemeral range, as tests/support/cks_test.c picks them),
each stopped by its own pid. UCX is held to the loopback device."""
from __future__ import annotations

import os
import random
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import List, Optional

ROOT = Path(__file__).resolve().parents[2]
os.environ["UCX_NET_DEVICES"] = "lo"


def build_dir() -> Path:
    """The build whose libckstore and ckstore-server the tests use:
    $CKSTORE_BUILD, else build-test, else build."""
    env = os.environ.get("CKSTORE_BUILD")
    if env:
        return Path(env).resolve()
    for d in ("build-test", "build"):
        if (ROOT / d / "server" / "ckstore-server").exists():
            return ROOT / d
    return ROOT / "build"


def _port_range():
    lo, hi = 32768, 60999
    try:
        lo, hi = map(int, Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
    except (OSError, ValueError):
        pass
    if lo >= 12000:
        return 10000, lo
    if hi <= 63000:
        return hi + 1, 65536
    return 20000, 60000


def free_port() -> int:
    """A port on 127.0.0.1 that is free now, outside the ephemeral range (no
    outgoing connection can take it meanwhile), e.g. for torch.distributed's
    rendezvous."""
    lo, hi = _port_range()
    for _ in range(200):
        port = random.randrange(lo, hi)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        return port
    raise RuntimeError("no free port found in 200 tries")


class Server:
    def __init__(self, cluster: "LocalCluster", i: int):
        self.cluster, self.id = cluster, i
        self.proc: Optional[subprocess.Popen] = None
        self.port = 0
        d = cluster.dir
        self.arena = f"/dev/shm/ckstore-pytest-{os.getpid()}-{id(cluster) & 0xffff}-{i}.arena"
        self.data = d / f"md{i}"
        self.log = d / f"server{i}.log"

    @property
    def addr(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, timeout_s: float = 30.0) -> bool:
        c = self.cluster
        args = [str(c.server_bin)]
        if c.map is not None:
            args += ["--cluster", str(c.map), "--id", str(self.id),
                     "--peer-secret", str(c.peer_secret)]
        else:
            args += ["--listen", "127.0.0.1", "--port", "0"]
        args += ["--secret", str(c.secret), "--arena-size", c.arena_size,
                 "--arena-file", self.arena, "--data-dir", str(self.data),
                 "--log-level", "warn"]
        out = c.dir / f"out{self.id}"
        with open(out, "wb") as o, open(self.log, "ab") as e:
            self.proc = subprocess.Popen(args, stdout=o, stderr=e, stdin=subprocess.DEVNULL)
        tag = "ckstore-server listening on "
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            text = out.read_text(errors="replace")
            if tag in text and "\n" in text.split(tag, 1)[1]:
                line = text.split(tag, 1)[1].split("\n", 1)[0]
                self.port = int(line.rsplit(":", 1)[1])
                return True
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        self.stop()
        return False

    def kill(self) -> None:
        """SIGKILL, by pid."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)
        self.proc = None

    def stop(self) -> None:
        """SIGTERM (a clean stop), by pid; SIGKILL after 10 s."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.kill()
        self.proc = None


class LocalCluster:
    """n servers (n >= 1) in a cluster map on 127.0.0.1, one node each, racks
    r0..r(racks-1); n = 0: one standalone server. A cluster secret, and the
    servers' own peer secret (clients never get it)."""

    def __init__(self, n: int, racks: int = 3, arena_size: str = "256M"):
        bd = build_dir()
        self.server_bin = bd / "server" / "ckstore-server"
        if not self.server_bin.exists():
            raise FileNotFoundError(f"{self.server_bin} not built")
        self.n, self.racks, self.arena_size = n, racks, arena_size
        self.dir = Path(tempfile.mkdtemp(prefix="ckstore-pytest."))
        self.secret = self.dir / "cluster.key"
        fd = os.open(self.secret, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        os.write(fd, secrets.token_hex(32).encode())
        os.close(fd)
        self.peer_secret = self.dir / "peer.key"
        fd = os.open(self.peer_secret, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        os.write(fd, secrets.token_hex(32).encode())
        os.close(fd)
        self.map: Optional[Path] = self.dir / "cluster.map" if n > 0 else None
        self.servers: List[Server] = [Server(self, i) for i in range(max(n, 1))]
        lo, hi = _port_range()
        for attempt in range(4):
            if self.map is not None:
                ports = random.sample(range(lo, hi), n)
                lines = ["epoch 1"] + [f"server {i} 127.0.0.1:{p} node=n{i} rack=r{i % racks}"
                                       for i, p in enumerate(ports)]
                self.map.write_text("\n".join(lines) + "\n")
            if all(s.start() for s in self.servers):
                return
            for s in self.servers:
                s.stop()
        logs = "\n".join(s.log.read_text(errors="replace")[-2000:] for s in self.servers
                         if s.log.exists())
        self.close()
        raise RuntimeError(f"ckstore servers did not start:\n{logs}")

    def client_kwargs(self) -> dict:
        if self.map is not None:
            # RS(2,1) with 64 KiB chunks: 3 nodes are enough
            return {"cluster": str(self.map), "secret": str(self.secret), "ec": (2, 1),
                    "chunk_size": 65536}
        return {"server": self.servers[0].addr, "secret": str(self.secret)}

    def close(self) -> None:
        for s in self.servers:
            s.stop()
            try:
                os.unlink(s.arena)
            except FileNotFoundError:
                pass
        shutil.rmtree(self.dir, ignore_errors=True)
