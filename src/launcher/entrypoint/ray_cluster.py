"""One Ray cluster across the pods of a multi-node PyTorchJob or TrainJob, and the exit status that ends it.

The training-operator (v1.9, `pkg/controller.v1/pytorch/envvar.go` and `master.go`) gives every
container `MASTER_ADDR=<job>-master-0` (the master's headless Service), `MASTER_PORT`,
`WORLD_SIZE` (replicas × nprocPerNode, our manifests use nprocPerNode=1), `RANK` (0 on the master,
i+1 on `<job>-worker-<i>`), `PET_NPROC_PER_NODE`, `PET_NODE_RANK` (= RANK) and `PET_NNODES`
(replicas; "min:max" only with an elasticPolicy, which these jobs never have).

Kubeflow Trainer v2 (TrainJob, v2.2.0 `pkg/runtime/framework/plugins/torch/torch.go`) sets only the
`PET_*` variables, on the container named `node`: `PET_NNODES` (numNodes), `PET_NPROC_PER_NODE`
(the TrainJob's numProcPerNode, 1 here), `PET_NODE_RANK` (a fieldRef to the Indexed Job's
`batch.kubernetes.io/job-completion-index` annotation), `PET_MASTER_ADDR=<job>-node-0-0.<job>` (the
rank-0 pod's hostname under the JobSet's headless Service) and `PET_MASTER_PORT=29500`.
`operator_env` fills in the training-operator's names from them, so both backends take one path.

Rank 0 (role `ray-head`) runs `ray start --head --block`, waits until every pod's raylet has joined
with its GPUs, then runs verl attached to that cluster (`RAY_ADDRESS`, no `ray_num_cpus`). Ranks
≥1 (role `ray-worker`) wait until the head's GCS port answers, then run `ray start --address
<MASTER_ADDR>:6379 --block`. Every raylet carries a custom resource `grpo_node_rank_<rank>` so the
head can say which pods are missing.

Exit status: the head writes verl's exit status into the GCS key-value store (namespace
`grpo-launcher`, key `exit_code`) and waits (bounded) for each worker to acknowledge (`ack/<rank>`)
before it stops Ray. Workers poll that key through a driver-less `GcsClient` (a Ray driver would be
killed by Ray itself when the GCS goes away) and exit with the master's status. A worker that
loses the head (GCS unreachable for `head_lost_s`, or its raylet ends) without having read a
status exits 1: success is only ever reported when the master said so.
"""

from __future__ import annotations

import json
import os
import shlex
import socket
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping, Sequence

from launcher.entrypoint.runner import Child, SignalState, forward_signals, log
from launcher.errors import BadInput

RAY_PORT = 6379
KV_NAMESPACE = b"grpo-launcher"
EXIT_KEY = b"exit_code"
EXIT_CLUSTER_INCOMPLETE = 1


def ack_key(rank: int) -> bytes:
    return f"ack/{rank}".encode()


def rank_resource(rank: int) -> str:
    """Custom Ray resource naming the pod's rank (how the head tells which pods joined)."""
    return f"grpo_node_rank_{rank}"


# --------------------------------------------------------------------------------------------------
# Where this pod sits in the job


@dataclass(frozen=True)
class Topology:
    """This pod's place in a multi-node PyTorchJob, from the training-operator's variables."""

    rank: int
    nnodes: int
    master_addr: str
    job_name: str

    @property
    def is_head(self) -> bool:
        return self.rank == 0

    trainjob: bool = False

    def pod_name(self, rank: int) -> str:
        """The operator's name for `rank`'s pod: `<job>-master-0`, `<job>-worker-<rank-1>`; on a TrainJob the
        pod's hostname `<job>-node-0-<rank>` (its pod name adds a random suffix)."""
        if self.trainjob:
            return f"{self.job_name}-{TRAINJOB_NODE}-0-{rank}"
        return f"{self.job_name}-master-0" if rank == 0 else f"{self.job_name}-worker-{rank - 1}"


# Trainer v2's replicated Job of the trainer nodes (constants.Node): PET_MASTER_ADDR is `<job>-node-0-0.<job>`.
TRAINJOB_NODE = "node"


def is_trainjob_env(env: Mapping[str, str]) -> bool:
    """Trainer v2's PET_MASTER_ADDR (the training-operator v1.9 never sets it): this pod belongs to a TrainJob."""
    return bool(env.get("PET_MASTER_ADDR"))


def operator_env(env: Mapping[str, str]) -> dict[str, str]:
    """`env` with MASTER_ADDR/MASTER_PORT/RANK/WORLD_SIZE filled in from Trainer v2's PET_* where only those are set.

    WORLD_SIZE is the pod count, as the training-operator's with nprocPerNode 1 (one process per pod, the
    entrypoint); a variable already set is never changed."""
    out = dict(env)
    if not is_trainjob_env(env):
        return out
    for target, source in (("MASTER_ADDR", "PET_MASTER_ADDR"), ("MASTER_PORT", "PET_MASTER_PORT"),
                           ("RANK", "PET_NODE_RANK"), ("WORLD_SIZE", "PET_NNODES")):
        if not out.get(target) and env.get(source):
            out[target] = env[source]
    return out


def _job_from(name: str | None) -> str | None:
    if not name:
        return None
    host = name.split(".", 1)[0]
    marker = f"-{TRAINJOB_NODE}-0-"  # a TrainJob pod's hostname (PET_MASTER_ADDR's first label)
    head, sep, tail = host.rpartition(marker)
    if sep and head and tail.isdigit():
        return head
    for marker in ("-master-", "-worker-"):
        head, sep, tail = name.rpartition(marker)
        if sep and head and tail.isdigit():
            return head
    return None


def _int_env(env: Mapping[str, str], *names: str) -> tuple[str, int] | None:
    for name in names:
        text = env.get(name)
        if text is None or text == "":
            continue
        try:
            return name, int(text)
        except ValueError:
            raise BadInput(f"{name}={text!r}: expected an integer (set by the training-operator)") from None
    return None


def topology_from_env(env: Mapping[str, str], *, nodes: int, job_name: str, default_rank: int | None = None) -> Topology:
    """Read rank, node count and master address; errors name the variable and what was expected."""
    found = _int_env(env, "PET_NODE_RANK", "RANK")
    if found is None:
        if default_rank is None:
            raise BadInput(
                f"resources.nodes={nodes} needs the operator's PET_NODE_RANK/RANK in the environment; "
                "neither is set (is this running inside a PyTorchJob or TrainJob pod?)"
            )
        rank = default_rank
    else:
        rank = found[1]
    count = _int_env(env, "PET_NNODES", "WORLD_SIZE")
    if count is not None and count[1] != nodes:
        raise BadInput(f"{count[0]}={count[1]} but the spec has resources.nodes={nodes}; the pod and its config disagree")
    if not 0 <= rank < nodes:
        raise BadInput(f"rank {rank}: expected 0..{nodes - 1} for resources.nodes={nodes}")
    trainjob = is_trainjob_env(env)
    master = env.get("PET_MASTER_ADDR") or env.get("MASTER_ADDR") or ""
    if rank > 0 and not master:
        raise BadInput("MASTER_ADDR (PyTorchJob) or PET_MASTER_ADDR (TrainJob) is not set; a Ray worker needs the "
                       "master's address (set by the training-operator or Kubeflow Trainer)")
    job = _job_from(master) or (None if trainjob else _job_from(env.get("POD_NAME"))) or job_name
    return Topology(rank=rank, nnodes=nodes, master_addr=master or "127.0.0.1", job_name=job, trainjob=trainjob)


# --------------------------------------------------------------------------------------------------
# Settings and commands


def seconds_env(env: Mapping[str, str], name: str, default: float) -> float:
    """A positive number of seconds from `env[name]`, else `default`; BadInput when malformed."""
    text = env.get(name)
    if not text:
        return default
    try:
        value = float(text)
    except ValueError:
        raise BadInput(f"{name}={text!r}: expected a number of seconds") from None
    if value <= 0:
        raise BadInput(f"{name}={text!r}: expected a positive number of seconds")
    return value


@dataclass(frozen=True)
class BootstrapSettings:
    """Timeouts and knobs (environment `LAUNCHER_*`, defaults sized for pods being scheduled and pulled)."""

    port: int = RAY_PORT
    node_wait_s: float = 900.0  # head: every pod joined (covers image pulls on fresh nodes)
    head_wait_s: float = 900.0  # worker: the head's GCS answers
    head_lost_s: float = 60.0  # worker: head unreachable this long without an exit status -> exit 1
    ack_wait_s: float = 30.0  # head: workers read the exit status before Ray stops
    poll_s: float = 2.0
    ray_stop_grace_s: float = 5.0  # `ray start --block` drains up to 30 s on SIGTERM; nothing to save
    # worker: `ray start` runs this many times when it ends before the master published an exit status. Ray gives a
    # new raylet 30 s (a constant in ray/_private/node.py) to register with the GCS; a busy node or a pod at its CPU
    # limit can miss it ("The current node timed out during startup"), and the pod would fail the whole run
    ray_start_attempts: int = 3
    temp_dir: str | None = None  # `ray start --temp-dir` (tests run two nodes on one machine)
    node_ip: str | None = None  # `--node-ip-address` (POD_IP when the pod exposes it)
    extra_args: tuple[str, ...] = ()  # LAUNCHER_RAY_START_ARGS, appended to `ray start`

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> "BootstrapSettings":
        port = env.get("LAUNCHER_RAY_PORT") or str(RAY_PORT)
        if not port.isdigit() or not 0 < int(port) < 65536:
            raise BadInput(f"LAUNCHER_RAY_PORT={port!r}: expected a TCP port number")
        return cls(
            port=int(port),
            node_wait_s=seconds_env(env, "LAUNCHER_NODE_WAIT_S", cls.node_wait_s),
            head_wait_s=seconds_env(env, "LAUNCHER_HEAD_WAIT_S", cls.head_wait_s),
            head_lost_s=seconds_env(env, "LAUNCHER_HEAD_LOST_S", cls.head_lost_s),
            ack_wait_s=seconds_env(env, "LAUNCHER_ACK_WAIT_S", cls.ack_wait_s),
            poll_s=seconds_env(env, "LAUNCHER_POLL_S", cls.poll_s),
            ray_stop_grace_s=seconds_env(env, "LAUNCHER_RAY_STOP_GRACE_S", cls.ray_stop_grace_s),
            temp_dir=env.get("LAUNCHER_RAY_TEMP_DIR") or None,
            node_ip=env.get("POD_IP") or None,
            extra_args=tuple(shlex.split(env.get("LAUNCHER_RAY_START_ARGS", ""))),
        )


def ray_executable() -> str:
    """The `ray` CLI of this interpreter's environment (falls back to PATH)."""
    sibling = Path(sys.executable).parent / "ray"
    return str(sibling) if sibling.exists() else "ray"


def ray_start_argv(topo: Topology, settings: BootstrapSettings, *, cpus: int, gpus: int) -> list[str]:
    """`ray start ... --block` for this pod: the head on rank 0, a worker joining MASTER_ADDR otherwise."""
    argv = [ray_executable(), "start"]
    if topo.is_head:
        argv += ["--head", f"--port={settings.port}", "--include-dashboard=false"]
    else:
        argv += [f"--address={topo.master_addr}:{settings.port}"]
    argv += [
        f"--num-cpus={cpus}",
        f"--num-gpus={gpus}",
        "--resources=" + json.dumps({rank_resource(topo.rank): 1}, separators=(",", ":")),
        "--disable-usage-stats",
        "--block",
    ]
    if settings.node_ip:
        argv.append(f"--node-ip-address={settings.node_ip}")
    if settings.temp_dir and topo.is_head:
        argv.append(f"--temp-dir={settings.temp_dir}")
    return argv + list(settings.extra_args)


# --------------------------------------------------------------------------------------------------
# The GCS, without becoming a Ray driver


def tcp_reachable(host: str, port: int, timeout: float = 2.0) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


class Gcs:
    """Key-value and node table of the Ray GCS through `ray._raylet.GcsClient` (pinned Ray 2.60)."""

    def __init__(self, host: str, port: int, *, rpc_timeout: float = 5.0):
        self.host, self.port, self.rpc_timeout = host, port, rpc_timeout
        self._client = None

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def reachable(self) -> bool:
        return tcp_reachable(self.host, self.port)

    def _gcs(self):
        if self._client is None:
            # The constructor blocks ~40 s on an absent GCS; callers check `reachable()` first.
            os.environ.setdefault("RAY_py_gcs_connect_timeout_s", "10")
            from ray._raylet import GcsClient

            self._client = GcsClient(address=self.address)
        return self._client

    def get(self, key: bytes) -> bytes | None:
        return self._gcs().internal_kv_get(key, KV_NAMESPACE, timeout=self.rpc_timeout)

    def put(self, key: bytes, value: bytes) -> None:
        self._gcs().internal_kv_put(key, value, True, KV_NAMESPACE, timeout=self.rpc_timeout)

    def node_resources(self) -> list[dict[str, float]]:
        """`resources_total` of every ALIVE node."""
        infos = self._gcs().get_all_node_info(timeout=self.rpc_timeout)
        return [dict(n.resources_total) for n in infos.values() if n.state == 0]  # 0: ALIVE


class ClusterIncomplete(Exception):
    """Not every pod joined the Ray cluster in time; the message names the missing pods."""


def missing_nodes(topo: Topology, nodes: Sequence[Mapping[str, float]], gpus_per_node: int) -> list[str]:
    """Pods (`<name> (rank r)`) without an ALIVE raylet carrying their rank and `gpus_per_node` GPUs."""
    out = []
    for rank in range(topo.nnodes):
        mine = [n for n in nodes if n.get(rank_resource(rank), 0) >= 1]
        if not mine:
            out.append(f"{topo.pod_name(rank)} (rank {rank})")
        elif max(n.get("GPU", 0) for n in mine) < gpus_per_node:
            got = max(n.get("GPU", 0) for n in mine)
            out.append(f"{topo.pod_name(rank)} (rank {rank}, joined with {got:g} GPU(s), expected {gpus_per_node})")
    return out


def wait_for_nodes(gcs: Gcs, topo: Topology, *, gpus_per_node: int, timeout_s: float, poll_s: float,
                   keep_going: Callable[[], bool] = lambda: True) -> bool:
    """Until every pod's raylet is ALIVE with its GPUs; False if `keep_going` stopped it.

    Raises `ClusterIncomplete` after `timeout_s`, naming the pods that are missing.
    """
    deadline = time.monotonic() + timeout_s
    missing = [f"{topo.pod_name(r)} (rank {r})" for r in range(topo.nnodes)]
    last_logged: list[str] | None = None
    while keep_going():
        try:
            missing = missing_nodes(topo, gcs.node_resources(), gpus_per_node)
        except Exception as exc:  # GCS still starting
            log(f"GCS not answering yet ({type(exc).__name__})")
        if not missing:
            return True
        if missing != last_logged:
            log(f"waiting for {len(missing)} of {topo.nnodes} Ray node(s): {', '.join(missing)}")
            last_logged = missing
        if time.monotonic() >= deadline:
            joined = topo.nnodes - len(missing)
            raise ClusterIncomplete(
                f"Ray cluster incomplete after {timeout_s:g}s: {joined} of {topo.nnodes} node(s) joined with "
                f"{gpus_per_node} GPU(s) each; missing: {', '.join(missing)}. Check those pods "
                f"(kubectl describe pod / logs): Pending, crashed, or unable to reach {topo.master_addr}:{gcs.port}"
            )
        time.sleep(poll_s)
    return False


# --------------------------------------------------------------------------------------------------
# The two roles


def _publish_exit(gcs: Gcs, code: int, topo: Topology, settings: BootstrapSettings) -> None:
    """Write the exit status, then wait (bounded) for the workers to acknowledge it."""
    try:
        gcs.put(EXIT_KEY, str(code).encode())
    except Exception as exc:
        log(f"could not publish exit status {code} to the workers ({type(exc).__name__}: {exc}); "
            "they will exit 1 when the head goes away")
        return
    pending = set(range(1, topo.nnodes))
    deadline = time.monotonic() + settings.ack_wait_s
    while pending and time.monotonic() < deadline:
        for rank in sorted(pending):
            try:
                if gcs.get(ack_key(rank)) is not None:
                    pending.discard(rank)
            except Exception:
                pass
        if pending:
            time.sleep(min(settings.poll_s, 1.0))
    if pending:
        log("no acknowledgement from " + ", ".join(topo.pod_name(r) for r in sorted(pending))
            + f" within {settings.ack_wait_s:g}s; stopping Ray anyway")


def run_head(topo: Topology, settings: BootstrapSettings, *, env: Mapping[str, str], cpus: int,
             gpus_per_node: int, child_argv: Sequence[str], child_cwd: str | None = None,
             grace_s: float) -> int:
    """Rank 0: start the Ray head, wait for every pod, run `child_argv` attached, publish its status."""
    head = Child(ray_start_argv(topo, settings, cpus=cpus, gpus=gpus_per_node), env,
                 name="ray head", grace_s=settings.ray_stop_grace_s)
    gcs = Gcs("127.0.0.1", settings.port)
    children: list[Child] = [head]
    state = SignalState()
    with forward_signals(children, state):
        log(f"starting Ray head: {' '.join(head.argv)}")
        head.start()
        try:
            code = _head_phase(topo, settings, head, gcs, state, children, env=env,
                               gpus_per_node=gpus_per_node, child_argv=child_argv,
                               child_cwd=child_cwd, grace_s=grace_s)
        finally:
            head.stop()
    log(f"exiting with status {code}")
    return code


def _head_phase(topo, settings, head, gcs, state, children, *, env, gpus_per_node, child_argv,
                child_cwd, grace_s) -> int:
    started = time.monotonic()

    def keep_going() -> bool:
        return state.received is None and head.poll() is None

    # 1. The head's GCS answers.
    while keep_going() and not gcs.reachable():
        if time.monotonic() - started > settings.head_wait_s:
            log(f"ERROR: the Ray head did not open port {settings.port} within {settings.head_wait_s:g}s")
            return EXIT_CLUSTER_INCOMPLETE
        time.sleep(0.5)
    # 2. Every pod joined with its GPUs.
    try:
        complete = keep_going() and wait_for_nodes(
            gcs, topo, gpus_per_node=gpus_per_node, timeout_s=settings.node_wait_s,
            poll_s=settings.poll_s, keep_going=keep_going)
    except ClusterIncomplete as exc:
        log(f"ERROR: {exc}")
        _publish_exit(gcs, EXIT_CLUSTER_INCOMPLETE, topo, settings)
        return EXIT_CLUSTER_INCOMPLETE
    if not complete:
        if state.received is not None:
            code = 128 + state.received
            _publish_exit(gcs, code, topo, settings)
            return code
        code = head.poll() or 1
        log(f"ERROR: the Ray head process ended with status {code} before the cluster was complete")
        return code
    log(f"Ray cluster complete: {topo.nnodes} node(s) × {gpus_per_node} GPU(s) "
        f"in {time.monotonic() - started:.1f}s")
    # 3. verl, attached to the cluster.
    trainer = Child(child_argv, {**env, "RAY_ADDRESS": gcs.address}, name="trainer", grace_s=grace_s, cwd=child_cwd)
    children[:] = [trainer]  # signals now go to verl only; Ray stays up until it has finished
    log(f"starting verl: {' '.join(child_argv)}")
    trainer.start()
    if state.received is not None:
        trainer.terminate(state.received)
    code = trainer.wait()
    assert code is not None
    log(f"verl exited with status {code}; telling the workers")
    _publish_exit(gcs, code, topo, settings)
    return code


def run_worker(topo: Topology, settings: BootstrapSettings, *, env: Mapping[str, str], cpus: int,
               gpus_per_node: int, companion_argv: Sequence[str] | None = None, grace_s: float = 30.0) -> int:
    """Rank ≥1: join the head's Ray cluster and exit with the master's status when it publishes one.

    `companion_argv` (the smoke workload's participant: this pod's rank of the cross-pod
    all-reduce) starts once the raylet has started, gets the same signals, and is waited for before
    the pod exits; a companion that failed turns a master's 0 into its own status.
    """
    gcs = Gcs(topo.master_addr, settings.port)
    raylet = Child(ray_start_argv(topo, settings, cpus=cpus, gpus=gpus_per_node), env,
                   name="ray worker", grace_s=settings.ray_stop_grace_s)
    companion = Child(companion_argv, env, name="companion", grace_s=grace_s) if companion_argv else None
    state = SignalState()
    with forward_signals([raylet, *([companion] if companion else [])], state):
        code = _worker_phase(topo, settings, gcs, raylet, state,
                             on_joined=(lambda: _start_companion(companion)) if companion else None)
        if companion is not None and companion.proc is not None:
            # The master's status arrives once its own all-reduces ended, so the companion is
            # finishing too; a bounded wait, then it is stopped.
            own = companion.wait(timeout=settings.ack_wait_s)
            own = companion.stop() if own is None else own
            log(f"companion exited with status {own}")
            if code == 0 and own != 0:
                code = own
        raylet.stop()
    log(f"exiting with status {code}")
    return code


def _start_companion(companion: Child) -> None:
    log(f"starting companion: {' '.join(companion.argv)}")
    companion.start()


def _read_exit(gcs: Gcs) -> int | None:
    value = gcs.get(EXIT_KEY)
    return None if value is None else int(value.decode())


def _worker_phase(topo: Topology, settings: BootstrapSettings, gcs: Gcs, raylet: Child, state: SignalState,
                  on_joined: Callable[[], None] | None = None) -> int:
    master = topo.pod_name(0)
    started = time.monotonic()
    log(f"waiting for the Ray head at {gcs.address} ({master})")
    while not gcs.reachable():
        if state.received is not None:
            return 128 + state.received
        if time.monotonic() - started > settings.head_wait_s:
            log(f"ERROR: the Ray head {master} ({gcs.address}) was not reachable within {settings.head_wait_s:g}s")
            return 1
        time.sleep(min(settings.poll_s, 1.0))
    try:
        early = _read_exit(gcs)
    except Exception:
        early = None
    if early is not None:  # the master already gave up (or finished) before this pod arrived
        log(f"the master already published exit status {early}; not joining")
        _ack(gcs, topo)
        return early
    log(f"joining the Ray cluster: {' '.join(raylet.argv)}")
    raylet.start()
    if on_joined is not None and state.received is None:
        on_joined()
    last_contact = time.monotonic()
    starts = 1
    while True:
        if state.received is not None:
            raylet.wait(settings.ray_stop_grace_s)
            return 128 + state.received
        ended = raylet.poll()
        try:
            code = _read_exit(gcs)
            last_contact = time.monotonic()
        except Exception:
            code = None
        if code is not None:
            log(f"the master's verl exited with status {code}")
            _ack(gcs, topo)
            return code
        if ended is not None and ended != 0 and starts < settings.ray_start_attempts:
            starts += 1
            log(f"the Ray worker process ended (status {ended}) before the master published an exit status; "
                f"starting it again ({starts} of {settings.ray_start_attempts}: a raylet that misses Ray's 30 s to "
                "register on a busy node ends so)")
            raylet.stop()  # its process group: a raylet left half-started must not register beside the new one
            raylet.start()
            continue
        if ended is not None:
            log(f"ERROR: the Ray worker process ended (status {ended}) and the master published no exit status")
            return 1
        if time.monotonic() - last_contact > settings.head_lost_s:
            log(f"ERROR: the Ray head {master} ({gcs.address}) has been unreachable for {settings.head_lost_s:g}s "
                "and never published an exit status")
            return 1
        time.sleep(settings.poll_s)


def _ack(gcs: Gcs, topo: Topology) -> None:
    try:
        gcs.put(ack_key(topo.rank), b"1")
    except Exception:
        pass
