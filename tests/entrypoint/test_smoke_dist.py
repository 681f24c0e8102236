"""torch.distributed for real on this machine's CPUs: gloo all-reduces between local processes.

The NCCL path of `launcher.entrypoint.nccl_check` needs GPUs and is not run here: its CPU/gloo
fallback is, through the same functions (`run_node`, `allreduce_once`, `rendezvous`).
"""

from __future__ import annotations

import multiprocessing as mp

import pytest

from launcher.entrypoint import nccl_check as N
from launcher.entrypoint import smoke_dist as D

# torch comes with the verl test environment (make verl-env).
pytestmark = pytest.mark.verl


@pytest.fixture(autouse=True, scope="module")
def _real_torch():
    import torch  # noqa: F401 - a missing torch must fail these tests (`make verl-env`), not skip them


@pytest.mark.timeout(180)
def test_nccl_check_cli_gloo_fallback_two_processes(capsys):
    rc = N.main(["--world-size", "2", "--backend", "gloo", "--size-mb", "0.25", "--iters", "2", "--timeout-s", "60"])
    out = capsys.readouterr().out.splitlines()
    assert rc == 0, out
    assert out[0].startswith("[nccl_check] rank 0 ok backend=gloo device=cpu ")
    assert out[1].startswith("[nccl_check] rank 1 ok backend=gloo device=cpu ")
    assert all("value=3 expected=3" in line for line in out[:2])  # 1 + 2, computed without torch
    assert out[2].startswith("[nccl_check] result ok backend=gloo world_size=2 nnodes=1 size_mb=0.25 ")


@pytest.mark.timeout(120)
def test_rendezvous_failure_names_master_addr_and_port():
    """A rank whose master never comes up fails within the timeout, saying the pods cannot reach each other."""
    port = N.free_port()  # nothing listens there
    with pytest.raises(N.RendezvousError) as info:
        N.rendezvous(backend="gloo", rank=1, world_size=2, master_addr="127.0.0.1", master_port=port,
                     connect_timeout_s=3)
    assert f"127.0.0.1:{port}" in str(info.value) and "cannot reach each other" in str(info.value)


def _member(rank: int, world: int, port: int, queue) -> None:
    """One 'pod': join the smoke's gloo group and all-reduce for k = 0, 1, 2."""
    try:
        group = D.TorchGroup.join(rank=rank, world_size=world, master_addr="127.0.0.1", master_port=port,
                                  connect_timeout_s=60)
        out = [group.allreduce(k) for k in range(3)]
        group.close()
        queue.put((rank, [(r.ok, r.value, r.expected) for r in out]))
    except Exception as exc:  # reported to the test, never swallowed
        queue.put((rank, repr(exc)))


@pytest.mark.timeout(180)
def test_smoke_group_all_reduces_across_two_processes():
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    port = N.free_port()
    procs = [ctx.Process(target=_member, args=(r, 2, port, queue)) for r in range(2)]
    for p in procs:
        p.start()
    results = dict(queue.get(timeout=150) for _ in procs)
    for p in procs:
        p.join(timeout=30)
    # (rank + 1) * (k + 1) summed over ranks 0 and 1: 3 * (k + 1), computed here independently
    expected = [(True, 3.0 * (k + 1), 3.0 * (k + 1)) for k in range(3)]
    assert results == {0: expected, 1: expected}


def test_ballast_is_resident_and_sized():
    buf = D.ballast(8)
    assert len(buf) == 8 * 2**20
    assert buf[0] == 1 and buf[4096] == 1 and buf[-1] in (0, 1)
