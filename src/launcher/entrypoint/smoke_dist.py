"""The smoke workload's torch.distributed pieces: a gloo group across pods, its all-reduce, memory ballast.

Every member of the group all-reduces a float64 tensor holding `(rank + 1) * (k + 1)`; the result
must equal `(k + 1) * world * (world + 1) / 2` element for element (`nccl_check.expected_sum`,
computed without torch). `k` is 0 for the check right after the rendezvous and the step number
after that, so a stale or mixed-up result cannot pass.

- PyTorchJob: one member per pod, `rank`/`world_size`/`MASTER_ADDR:MASTER_PORT` from the
  training-operator; the head's smoke driver is rank 0, the other pods run a participant.
- RayJob: one `GlooMember` Ray actor per worker node (the head runs only the driver), master =
  the first actor's IP and a port it picked.
"""

from __future__ import annotations

import mmap
import socket
import time
from dataclasses import dataclass

from launcher.entrypoint import nccl_check as N

# 1 MiB per all-reduce: enough to leave one packet, small enough for a half-CPU pod.
ELEMENTS = 128 * 1024


@dataclass(frozen=True)
class Reduced:
    """One all-reduce: did every element match, how long it took, what it held."""

    ok: bool
    ms: float
    value: float
    expected: float


class TorchGroup:
    """This process's membership of the default gloo process group."""

    def __init__(self, rank: int, world_size: int):
        self.rank, self.world_size = rank, world_size

    @classmethod
    def join(cls, *, rank: int, world_size: int, master_addr: str, master_port: int,
             connect_timeout_s: float) -> "TorchGroup":
        """Rendezvous (raises `nccl_check.RendezvousError` naming MASTER_ADDR:PORT on timeout)."""
        N.rendezvous(backend="gloo", rank=rank, world_size=world_size, master_addr=master_addr,
                     master_port=master_port, connect_timeout_s=connect_timeout_s)
        return cls(rank, world_size)

    def allreduce(self, k: int) -> Reduced:
        import torch
        import torch.distributed as dist

        t = torch.full((ELEMENTS,), float((self.rank + 1) * (k + 1)), dtype=torch.float64)
        want = N.expected_sum(self.world_size, k + 1)
        start = time.perf_counter()
        dist.all_reduce(t)
        ms = (time.perf_counter() - start) * 1000
        return Reduced(bool((t == want).all().item()), ms, float(t[0].item()), want)

    def close(self) -> None:
        import torch.distributed as dist

        if dist.is_initialized():
            dist.destroy_process_group()


def ballast(megabytes: int) -> bytearray:
    """Allocate `megabytes` MiB and write every page, so the memory is resident (and counted by the cgroup).

    `bytearray(n)` alone may map untouched zero pages; a container whose limit is below this is
    OOM-killed here, before step 1. Keep the returned object alive for as long as it should count.
    """
    buf = bytearray(megabytes * 2**20)
    page = mmap.PAGESIZE
    buf[::page] = b"\x01" * len(range(0, len(buf), page))
    return buf


def node_ip() -> str:
    """This pod's IP as the other pods reach it (the address gloo binds to)."""
    try:
        import ray

        return ray.util.get_node_ip_address()
    except Exception:
        return socket.gethostbyname(socket.gethostname())


class GlooMember:
    """A Ray actor pinned to one worker node of a RayJob: one rank of the gloo group (and its ballast)."""

    def __init__(self, rank: int, world_size: int):
        self.rank, self.world_size = rank, world_size
        self.group: TorchGroup | None = None
        self._ballast: bytearray | None = None

    def where(self) -> tuple[str, str, int]:
        """(hostname, IP, a free port): rank 0's IP and port become the group's master address."""
        return socket.gethostname(), node_ip(), N.free_port()

    def join(self, master_addr: str, master_port: int, connect_timeout_s: float) -> str:
        """'' when joined, else the rendezvous error (returned, so the driver prints it)."""
        try:
            self.group = TorchGroup.join(rank=self.rank, world_size=self.world_size, master_addr=master_addr,
                                         master_port=master_port, connect_timeout_s=connect_timeout_s)
        except N.RendezvousError as exc:
            return str(exc)
        return ""

    def allreduce(self, k: int) -> Reduced:
        assert self.group is not None, "join first"
        return self.group.allreduce(k)

    def allocate(self, megabytes: int) -> int:
        self._ballast = ballast(megabytes)
        return len(self._ballast)

    def nccl(self, cfg: N.Config) -> list[N.RankResult]:
        """The per-GPU NCCL all-reduce of this node (`nccl_check.run_node`)."""
        return N.run_node(cfg)

    def close(self) -> None:
        if self.group is not None:
            self.group.close()
