"""An all-reduce across every GPU of every pod (NCCL on CUDA tensors), or across CPU processes (gloo).

    python -m launcher.entrypoint.nccl_check --world-size N [--nnodes M] [--node-rank R]
        [--backend auto|nccl|gloo] [--master-addr HOST] [--master-port PORT]
        [--size-mb S] [--iters K] [--timeout-s T]

One process per local GPU (`torch.multiprocessing` spawn): `nproc = world_size / nnodes` processes on
this machine, global rank `node_rank * nproc + local_rank`. Every rank fills a tensor with `rank + 1`,
all-reduces it (sum) `iters` times and checks every element against `world_size * (world_size + 1) / 2`,
computed independently. `--backend auto` is NCCL when this machine has `nproc` CUDA devices, else gloo
on CPU (so the check runs, and is unit-tested, on machines without a GPU).

Defaults: MASTER_ADDR / MASTER_PORT from the environment (the training-operator sets them), else
127.0.0.1 and a free port (single machine); `--nnodes`/`--node-rank` from PET_NNODES / PET_NODE_RANK,
else 1 and 0.

Output, one line per local rank and a summary:
    [nccl_check] rank <r> ok|FAIL backend=<b> device=<d> allreduce_ms=<x> value=<v> expected=<e> [error=<...>]
    [nccl_check] result ok|FAIL backend=<b> world_size=<N> nnodes=<M> size_mb=<S> allreduce_ms=<x> busbw_gbps=<y>
Exit status: 0 every local rank agreed, 1 a rank failed (rendezvous, mismatch, crash), 2 bad arguments.
The smoke workload (`launcher.entrypoint.smoke`) calls `run_node` on GPU pods; `launcher doctor --smoke`
uses the same workload.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
import time
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Sequence

PREFIX = "[nccl_check]"
DEFAULT_PORT = 29500
# Collectives may wait for a slow peer (another pod still importing torch): far longer than the
# rendezvous, which is what fails fast when pods cannot reach each other.
COLLECTIVE_TIMEOUT_S = 900.0


class RendezvousError(RuntimeError):
    """The ranks did not meet at MASTER_ADDR:MASTER_PORT in time; the message says who could not reach whom."""


def free_port() -> int:
    """A TCP port free on this machine right now (for a single-machine run)."""
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def rendezvous(*, backend: str, rank: int, world_size: int, master_addr: str, master_port: int,
               connect_timeout_s: float, collective_timeout_s: float = COLLECTIVE_TIMEOUT_S) -> None:
    """Join the default torch.distributed process group through a TCPStore at master_addr:master_port.

    The store is created here (rank 0 serves it and waits for every other rank) so the rendezvous has
    its own short timeout, separate from the collectives' long one. Raises `RendezvousError`.
    """
    import torch.distributed as dist

    # Rank 0 serves the store on every interface and reaches it over loopback: it must not depend on
    # resolving its own Service name (MASTER_ADDR) to join its own group.
    host = "127.0.0.1" if rank == 0 else master_addr
    try:
        store = dist.TCPStore(host, master_port, world_size, rank == 0, timeout=timedelta(seconds=connect_timeout_s),
                              wait_for_workers=True)
        dist.init_process_group(backend, store=store, rank=rank, world_size=world_size,
                                timeout=timedelta(seconds=collective_timeout_s))
    except Exception as exc:  # torch raises DistStoreError/RuntimeError/TimeoutError depending on the side
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        if rank == 0:
            why = (f"rank 0 served {master_addr}:{master_port} but not all {world_size} ranks connected within "
                   f"{connect_timeout_s:g}s: the pods cannot reach each other (or some never started)")
        else:
            why = (f"rank {rank} could not rendezvous with {master_addr}:{master_port} within {connect_timeout_s:g}s: "
                   "the pods cannot reach each other (check the master's Service, DNS and network policies)")
        raise RendezvousError(f"{why}; {type(exc).__name__}: {first}") from None


def expected_sum(world_size: int, multiplier: int = 1) -> float:
    """What every element holds after the all-reduce of `multiplier * (rank + 1)` over all ranks."""
    return float(multiplier * world_size * (world_size + 1) // 2)


@dataclass(frozen=True)
class Config:
    """One node's share of the check."""

    world_size: int
    nnodes: int = 1
    node_rank: int = 0
    backend: str = "auto"
    master_addr: str = "127.0.0.1"
    master_port: int = DEFAULT_PORT
    size_mb: float = 16.0
    iters: int = 5
    timeout_s: float = 60.0

    @property
    def nproc(self) -> int:
        return self.world_size // self.nnodes

    def resolved_backend(self) -> str:
        """nccl when this machine has a CUDA device per local rank (auto), else gloo."""
        if self.backend != "auto":
            return self.backend
        try:
            import torch

            return "nccl" if torch.cuda.is_available() and torch.cuda.device_count() >= self.nproc else "gloo"
        except ImportError:
            return "gloo"


@dataclass(frozen=True)
class RankResult:
    """What one rank saw."""

    rank: int
    ok: bool
    backend: str
    device: str
    allreduce_ms: float = 0.0
    value: float = 0.0
    expected: float = 0.0
    error: str = ""

    def line(self) -> str:
        text = (f"{PREFIX} rank {self.rank} {'ok' if self.ok else 'FAIL'} backend={self.backend} device={self.device} "
                f"allreduce_ms={self.allreduce_ms:.3f} value={self.value:g} expected={self.expected:g}")
        return text + (f" error={self.error}" if self.error else "")


def _rank_main(local_rank: int, cfg: Config, backend: str, queue) -> None:
    """One process: rendezvous, `iters` all-reduces, verify; puts a RankResult on `queue`."""
    rank = cfg.node_rank * cfg.nproc + local_rank
    device = f"cuda:{local_rank}" if backend == "nccl" else "cpu"
    try:
        queue.put(allreduce_once(cfg, backend, rank, device))
    except Exception as exc:  # reported, never raised: the parent prints every rank
        queue.put(RankResult(rank, False, backend, device, error=f"{type(exc).__name__}: {exc}".splitlines()[0]))


def allreduce_once(cfg: Config, backend: str, rank: int, device: str) -> RankResult:
    """In this process: join the group, all-reduce `iters` times, check the values, leave the group."""
    import torch
    import torch.distributed as dist

    if device.startswith("cuda"):
        torch.cuda.set_device(torch.device(device))
    try:
        rendezvous(backend=backend, rank=rank, world_size=cfg.world_size, master_addr=cfg.master_addr,
                   master_port=cfg.master_port, connect_timeout_s=cfg.timeout_s)
    except RendezvousError as exc:
        return RankResult(rank, False, backend, device, error=str(exc))
    try:
        elems = max(1, int(cfg.size_mb * 1024 * 1024 // 4))
        want = expected_sum(cfg.world_size)
        times, ok, value = [], True, 0.0
        for _ in range(cfg.iters):
            t = torch.full((elems,), float(rank + 1), dtype=torch.float32, device=device)
            if device.startswith("cuda"):
                torch.cuda.synchronize()
            start = time.perf_counter()
            dist.all_reduce(t)
            if device.startswith("cuda"):
                torch.cuda.synchronize()
            times.append((time.perf_counter() - start) * 1000)
            # small integers are exact in float32: equality, not a tolerance
            value = float(t[0].item())
            ok = ok and bool((t == want).all().item())
        # the first iteration pays for connection set-up; report the rest when there are any
        ms = sum(times[1:]) / (len(times) - 1) if len(times) > 1 else times[0]
        return RankResult(rank, ok, backend, device, ms, value, want,
                          "" if ok else "all-reduce result differs from the expected sum")
    finally:
        dist.destroy_process_group()


def run_node(cfg: Config) -> list[RankResult]:
    """Spawn this node's `nproc` ranks and collect their results (a crashed rank is a FAIL result)."""
    import torch.multiprocessing as mp

    backend = cfg.resolved_backend()
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    procs = [ctx.Process(target=_rank_main, args=(i, cfg, backend, queue), daemon=True) for i in range(cfg.nproc)]
    for p in procs:
        p.start()
    results: dict[int, RankResult] = {}
    deadline = time.monotonic() + cfg.timeout_s + COLLECTIVE_TIMEOUT_S
    while len(results) < cfg.nproc and time.monotonic() < deadline:
        try:
            r = queue.get(timeout=1.0)
            results[r.rank] = r
        except Exception:  # queue.Empty: check for ranks that died without reporting
            if all(not p.is_alive() for p in procs) and queue.empty():
                break
    for i, p in enumerate(procs):
        p.join(timeout=5)
        if p.is_alive():
            p.kill()
        rank = cfg.node_rank * cfg.nproc + i
        if rank not in results:
            dev = f"cuda:{i}" if backend == "nccl" else "cpu"
            results[rank] = RankResult(rank, False, backend, dev, error=f"process exited with {p.exitcode} without a result")
    return [results[k] for k in sorted(results)]


def bus_bandwidth_gbps(size_mb: float, world_size: int, ms: float) -> float:
    """NCCL-tests' all-reduce bus bandwidth: bytes × 2(n-1)/n per second, in GB/s."""
    if ms <= 0 or world_size < 2:
        return 0.0
    return size_mb * 1024 * 1024 * 2 * (world_size - 1) / world_size / (ms / 1000) / 1e9


def summary_line(cfg: Config, results: Sequence[RankResult]) -> str:
    ok = bool(results) and all(r.ok for r in results)
    ms = max((r.allreduce_ms for r in results), default=0.0)
    backend = results[0].backend if results else cfg.backend
    return (f"{PREFIX} result {'ok' if ok else 'FAIL'} backend={backend} world_size={cfg.world_size} "
            f"nnodes={cfg.nnodes} size_mb={cfg.size_mb:g} allreduce_ms={ms:.3f} "
            f"busbw_gbps={bus_bandwidth_gbps(cfg.size_mb, cfg.world_size, ms):.2f}")


def parse_args(argv: Sequence[str] | None, env: dict[str, str]) -> Config:
    p = argparse.ArgumentParser(prog="python -m launcher.entrypoint.nccl_check", description=__doc__.splitlines()[0])
    p.add_argument("--world-size", type=int, required=True, help="ranks in total, over every node")
    p.add_argument("--nnodes", type=int, default=int(env.get("PET_NNODES") or 1), help="nodes (default PET_NNODES or 1)")
    p.add_argument("--node-rank", type=int, default=int(env.get("PET_NODE_RANK") or 0),
                   help="this node's rank (default PET_NODE_RANK or 0)")
    p.add_argument("--backend", choices=["auto", "nccl", "gloo"], default="auto")
    p.add_argument("--master-addr", default=env.get("MASTER_ADDR") or "127.0.0.1")
    p.add_argument("--master-port", type=int, default=int(env["MASTER_PORT"]) if env.get("MASTER_PORT") else None,
                   help="default MASTER_PORT, else a free port (single node only)")
    p.add_argument("--size-mb", type=float, default=16.0, help="tensor size per rank in MiB (float32)")
    p.add_argument("--iters", type=int, default=5)
    p.add_argument("--timeout-s", type=float, default=60.0, help="rendezvous timeout")
    a = p.parse_args(argv)
    if a.world_size < 1 or a.nnodes < 1 or a.world_size % a.nnodes or not 0 <= a.node_rank < a.nnodes:
        p.error(f"--world-size {a.world_size} must be a positive multiple of --nnodes {a.nnodes}, "
                f"and --node-rank {a.node_rank} in 0..{a.nnodes - 1}")
    if a.iters < 1 or a.size_mb <= 0 or a.timeout_s <= 0:
        p.error("--iters, --size-mb and --timeout-s must be positive")
    if a.master_port is None:
        if a.nnodes > 1:
            p.error("--master-port (or MASTER_PORT) is required with --nnodes > 1")
        a.master_port = free_port()
    cfg = Config(world_size=a.world_size, nnodes=a.nnodes, node_rank=a.node_rank, backend=a.backend,
                 master_addr=a.master_addr, master_port=a.master_port, size_mb=a.size_mb, iters=a.iters,
                 timeout_s=a.timeout_s)
    return replace(cfg, backend=cfg.resolved_backend())


def main(argv: Sequence[str] | None = None) -> int:
    cfg = parse_args(argv, dict(os.environ))
    results = run_node(cfg)
    for r in results:
        print(r.line(), flush=True)
    print(summary_line(cfg, results), flush=True)
    return 0 if results and all(r.ok for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
