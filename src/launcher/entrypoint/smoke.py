"""The smoke workload (`workload: smoke`): the GRPO pods' wiring exercised end to end, no trainer, no GPU needed.

    python -m launcher.entrypoint.smoke --config /etc/grpo/spec.yaml --role ROLE

The entrypoint runs this instead of verl, as its child (`runner.run_child`), by role exactly as
training: `single-node` (starts the local Ray verl would start), `ray-head` (multi-node PyTorchJob:
run by `ray_cluster.run_head` once every pod's raylet joined, attached through RAY_ADDRESS),
`ray-job-driver` (RayJob: attached through RAY_ADDRESS), and `ray-worker` (the other pods of a
multi-node PyTorchJob: a participant beside the raylet, `ray_cluster.run_worker(companion_argv=)`).

In order, every result one line `[smoke] check <name> ok|FAIL <detail>` (`smoke_checks`):
1. this pod: `user`, `root_readonly`, `writable:{tmp,home,shm,storage}`, `shm_size`, `dataset`;
2. PyTorchJob: `rendezvous` of one gloo rank per pod at MASTER_ADDR:MASTER_PORT (RANK, WORLD_SIZE
   from the training-operator) and a first `allreduce`; on GPU pods `nccl_allreduce` over every GPU
   of every pod at MASTER_PORT+1 (`nccl_check`). Done before the slow checks below so the other pods
   wait the least;
3. driver only: `verl_config` (the launcher's override list, verl's Hydra config and validate_config),
   `ray_init`, `ray_nodes` (alive == resources.nodes, + the head for RayJob), `ray_task@<host>` (one
   task pinned to each Ray node, returning its hostname and IP) and that node's pod checks as
   `<name>@<host>` for every node other than the driver's own; RayJob: one `GlooMember` actor per
   worker node forms the gloo group (`rendezvous`, `allreduce`, `nccl_allreduce`);
4. `memory` (smoke.memory_mb > 0): every all-reduce process allocates and touches that much;
5. smoke.steps steps: sleep step_seconds, all-reduce, a Ray task (driver), log_lines_per_step
   `[smoke] pad ...` lines and one verl-format metric line (driver only, like verl's one console
   logger), parsed by `launcher.metrics`:
       step:<N> - smoke/allreduce_ms:<float> - smoke/ray_task_ms:<float> - smoke/world_size:<int> - timing_s/step:<float>
   (keys without a value that step are left out), then a `steps` check.
Last line: `[smoke] result ok` or `[smoke] result FAIL <failed check names, comma-separated>`.

Exit status: 0 every check passed, 1 a check failed, 2 bad config, 128+N on signal N (SIGTERM:
143; Ray's own handler would exit 15, so this module re-installs its own after `ray.init`).
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import sys
import time
from typing import Any, Mapping, Sequence

from launcher.spec.load import load_spec
from launcher.entrypoint import environment as E
from launcher.entrypoint import nccl_check as N
from launcher.entrypoint import ray_cluster as R
from launcher.entrypoint.smoke_checks import PREFIX, Check, check_verl_config, pod_checks
from launcher.entrypoint.smoke_dist import GlooMember, Reduced, TorchGroup, ballast, node_ip
from launcher.errors import LauncherError
from launcher.spec.model import ExperimentSpec
from launcher.spec.verl import verl_overrides

ROLES = ("single-node", "ray-head", "ray-worker", "ray-job-driver")
PAD_WIDTH = 120  # characters per padding line (kubelet rotates by bytes)
# Ray's resource that only the head node carries (how a RayJob's worker nodes are told apart).
HEAD_RESOURCE = "node:__internal_head__"


# --------------------------------------------------------------------------------------------------
# Output


def metric_line(step: int, metrics: Mapping[str, Any]) -> str:
    """verl 0.9.1's console line (`concat_dict_to_str`): `step:N - key:value - ...`, numbers only."""
    return " - ".join([f"step:{step}", *(f"{k}:{v!r}" for k, v in metrics.items() if isinstance(v, (int, float)))])


def pad_lines(step: int, count: int) -> list[str]:
    """Filler lines for the log-rotation test: fixed width, never a metric line."""
    out = []
    for i in range(1, count + 1):
        head = f"{PREFIX} pad step={step} line={i}/{count} "
        out.append(head + "x" * max(0, PAD_WIDTH - len(head)))
    return out


class Report:
    """The checks so far; prints each as it is added."""

    def __init__(self) -> None:
        self.checks: list[Check] = []

    def add(self, check: Check) -> Check:
        self.checks.append(check)
        say(check.line())
        return check

    def failed(self) -> list[str]:
        return [c.name for c in self.checks if not c.ok]

    def result_line(self) -> str:
        failed = self.failed()
        return f"{PREFIX} result ok" if not failed else f"{PREFIX} result FAIL {','.join(failed)}"

    def finish(self) -> int:
        say(self.result_line())
        return 1 if self.failed() else 0


def say(text: str) -> None:
    print(text, flush=True)


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0] if text else ''}"


def _on_signal(signum, _frame) -> None:
    say(f"{PREFIX} received signal {signum}; exiting with status {128 + signum}")
    os._exit(128 + signum)  # no clean-up: the runner kills this process group (Ray included) next


def install_signal_handlers() -> None:
    """SIGTERM/SIGINT end the smoke at once with 128+N (the pod is being deleted)."""
    for s in (signal.SIGTERM, signal.SIGINT):
        signal.signal(s, _on_signal)


# --------------------------------------------------------------------------------------------------
# torch.distributed across the pods of a PyTorchJob


def join_pytorchjob_group(spec: ExperimentSpec, env: Mapping[str, str], report: Report) -> TorchGroup | None:
    """One gloo rank per pod from the operator's RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT; None if it failed."""
    nodes = spec.resources.nodes
    addr = env.get("MASTER_ADDR") or "127.0.0.1"
    port = int(env.get("MASTER_PORT") or N.DEFAULT_PORT)
    started = time.monotonic()
    try:
        topo = R.topology_from_env(env, nodes=nodes, job_name=spec.job_name, default_rank=0)
        group = TorchGroup.join(rank=topo.rank, world_size=nodes, master_addr=addr, master_port=port,
                                connect_timeout_s=spec.smoke.connect_timeout_s)
    except (LauncherError, N.RendezvousError, ValueError) as exc:
        report.add(Check("rendezvous", False, str(exc)))
        return None
    report.add(Check("rendezvous", True, f"gloo rank {group.rank} of {nodes} via MASTER_ADDR:MASTER_PORT "
                                         f"{addr}:{port} in {time.monotonic() - started:.1f}s"))
    _first_allreduce(group.allreduce, nodes, "gloo", report)
    if not spec.resources.cpu_only:
        cfg = N.Config(world_size=nodes * spec.resources.gpus_per_node, nnodes=nodes, node_rank=group.rank,
                       backend="nccl", master_addr=addr, master_port=port + 1, timeout_s=spec.smoke.connect_timeout_s)
        _nccl_check(cfg, N.run_node(cfg), report)
    return group


def _first_allreduce(allreduce, world: int, backend: str, report: Report) -> bool:
    try:
        r = allreduce(0)
    except Exception as exc:
        report.add(Check("allreduce", False, _one_line(exc)))
        return False
    report.add(Check("allreduce", r.ok, f"{backend}, {world} rank(s): {r.value:g} (expected {r.expected:g}) "
                                        f"in {r.ms:.2f}ms"))
    return r.ok


def _nccl_check(cfg: N.Config, results: Sequence[N.RankResult], report: Report) -> None:
    for r in results:
        if not r.ok:
            say(r.line())
    ok = bool(results) and all(r.ok for r in results)
    report.add(Check("nccl_allreduce", ok, N.summary_line(cfg, results).split(" result ", 1)[1]))


# --------------------------------------------------------------------------------------------------
# Ray


def node_report(spec_json: str, run_checks: bool) -> dict:
    """Ray task body, pinned to one node: where it ran, and (optionally) that pod's checks."""
    spec = ExperimentSpec.model_validate_json(spec_json)
    checks = pod_checks(spec, os.environ) if run_checks else []
    return {"host": socket.gethostname(), "ip": node_ip(), "checks": [(c.name, c.ok, c.detail) for c in checks]}


def noop() -> int:
    return os.getpid()


def _pinned(node_id: str):
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    return NodeAffinitySchedulingStrategy(node_id=node_id, soft=False)


class RayPart:
    """The Ray side of the smoke: connect, count nodes, one pinned task per node, per-step round trips."""

    def __init__(self, spec: ExperimentSpec, report: Report):
        self.spec, self.report = spec, report
        self.nodes: list[dict] = []
        self.connected = False

    def connect(self, env: Mapping[str, str], cpus: int) -> bool:
        import ray

        address = env.get("RAY_ADDRESS")
        started = time.monotonic()
        try:
            # The same Ray verl uses: attach where the role has a cluster, else a local one pinned to
            # the container's CPU limit (verl's ray_kwargs.ray_init.num_cpus).
            if address:
                ray.init(address=address)
            else:
                ray.init(num_cpus=cpus)
        except Exception as exc:
            self.report.add(Check("ray_init", False, _one_line(exc)))
            return False
        install_signal_handlers()  # ray.init's SIGTERM handler exits 15, not 143
        self.connected = True
        how = f"attached to {address}" if address else f"local Ray with num_cpus={cpus}"
        self.report.add(Check("ray_init", True, f"{how} in {time.monotonic() - started:.1f}s"))
        return self._wait_for_nodes()

    @property
    def expected_nodes(self) -> int:
        return self.spec.resources.nodes + (1 if self.spec.backend == "rayjob" else 0)

    def _wait_for_nodes(self) -> bool:
        import ray

        deadline = time.monotonic() + self.spec.smoke.connect_timeout_s
        while True:
            self.nodes = [n for n in ray.nodes() if n.get("Alive")]
            if len(self.nodes) >= self.expected_nodes or time.monotonic() >= deadline:
                break
            time.sleep(1.0)
        ok = len(self.nodes) == self.expected_nodes
        what = "resources.nodes" + (" + the RayJob head" if self.spec.backend == "rayjob" else "")
        self.report.add(Check("ray_nodes", ok, f"{len(self.nodes)} alive, expected {self.expected_nodes} ({what})"))
        return ok

    def probe_nodes(self) -> None:
        """One CPU task pinned to every node; the other nodes' pod checks come back with it."""
        import ray

        here = ray.get_runtime_context().get_node_id()
        task = ray.remote(num_cpus=0)(node_report)
        spec_json = self.spec.model_dump_json()
        for n in self.nodes:
            node_id = n["NodeID"]
            started = time.monotonic()
            try:
                out = ray.get(task.options(scheduling_strategy=_pinned(node_id)).remote(spec_json, node_id != here),
                              timeout=self.spec.smoke.connect_timeout_s)
            except Exception as exc:
                self.report.add(Check(f"ray_task@{n.get('NodeManagerAddress', node_id[:8])}", False, _one_line(exc)))
                continue
            host = out["host"]
            self.report.add(Check(f"ray_task@{host}", True, f"ip={out['ip']} node={node_id[:8]} "
                                                            f"in {(time.monotonic() - started) * 1000:.0f}ms"))
            for name, ok, detail in out["checks"]:
                self.report.add(Check(name, ok, detail).on(host))

    def round_trip_ms(self) -> float:
        import ray

        started = time.perf_counter()
        ray.get(ray.remote(num_cpus=0)(noop).remote(), timeout=self.spec.smoke.connect_timeout_s)
        return (time.perf_counter() - started) * 1000

    def worker_nodes(self) -> list[dict]:
        """A RayJob's worker nodes (every node but the head), in a stable order."""
        return sorted((n for n in self.nodes if HEAD_RESOURCE not in n.get("Resources", {})),
                      key=lambda n: n["NodeManagerAddress"])

    def shutdown(self) -> None:
        if self.connected:
            import ray

            ray.shutdown()


class ActorGroup:
    """RayJob: one `GlooMember` actor per worker node, forming the gloo group across the worker pods."""

    def __init__(self, actors: list, world_size: int, timeout_s: float):
        self.actors, self.world_size, self.timeout_s = actors, world_size, timeout_s

    @classmethod
    def create(cls, spec: ExperimentSpec, nodes: list[dict], report: Report) -> "ActorGroup | None":
        import ray

        timeout = spec.smoke.connect_timeout_s
        member = ray.remote(num_cpus=0, num_gpus=spec.resources.gpus_per_node)(GlooMember)
        actors = [member.options(scheduling_strategy=_pinned(n["NodeID"])).remote(rank, len(nodes))
                  for rank, n in enumerate(nodes)]
        try:
            host, ip, port = ray.get(actors[0].where.remote(), timeout=timeout)
            errors = ray.get([a.join.remote(ip, port, timeout) for a in actors], timeout=timeout + 60)
        except Exception as exc:
            report.add(Check("rendezvous", False, f"actors on the worker nodes did not start: {_one_line(exc)}"))
            return None
        bad = [e for e in errors if e]
        report.add(Check("rendezvous", not bad, bad[0] if bad else
                         f"gloo across {len(nodes)} worker node actor(s), master {ip}:{port} ({host})"))
        if bad:
            return None
        group = cls(actors, len(nodes), timeout)
        if _first_allreduce(group.allreduce, len(nodes), "gloo", report) and not spec.resources.cpu_only:
            cfgs = [N.Config(world_size=len(nodes) * spec.resources.gpus_per_node, nnodes=len(nodes), node_rank=i,
                             backend="nccl", master_addr=ip, master_port=port + 1, timeout_s=timeout)
                    for i in range(len(nodes))]
            results = ray.get([a.nccl.remote(c) for a, c in zip(actors, cfgs)], timeout=timeout + N.COLLECTIVE_TIMEOUT_S)
            _nccl_check(cfgs[0], [r for rs in results for r in rs], report)
        return group

    def allreduce(self, k: int) -> Reduced:
        import ray

        results = ray.get([a.allreduce.remote(k) for a in self.actors], timeout=self.timeout_s + N.COLLECTIVE_TIMEOUT_S)
        return Reduced(all(r.ok for r in results), max(r.ms for r in results), results[0].value, results[0].expected)

    def allocate(self, megabytes: int) -> None:
        import ray

        ray.get([a.allocate.remote(megabytes) for a in self.actors])


# --------------------------------------------------------------------------------------------------
# The roles


TRACKED = ("mlflow", "tensorboard", "wandb")


def open_tracker(spec: ExperimentSpec, report: Report):
    """verl's own `Tracking` for the spec's trackers (mlflow, tensorboard, wandb), or None when none is on.

    The smoke workload logs its step metrics through the same class verl's trainer uses, with the
    environment the entrypoint prepared (MLFLOW_TRACKING_URI, MLFLOW_RUN_ID, TENSORBOARD_DIR, ...), so a
    smoke run proves the pod reaches the tracking server with the image's packages.
    """
    backends = [b for b in spec.loggers if b in TRACKED]
    if not backends:
        return None
    try:
        from verl.utils.tracking import Tracking

        tracker = Tracking(project_name=spec.trainer.project_name, experiment_name=spec.name,
                           default_backend=backends, config=None)
    except Exception as exc:
        report.add(Check("tracking", False, f"verl's Tracking({backends}) failed: {_one_line(exc)}"))
        return None
    missing = [b for b in backends if b not in tracker.logger]
    if missing:  # verl logs and skips an MLflow server it cannot reach
        report.add(Check("tracking", False, f"verl's Tracking started without {missing} (see its warnings above)"))
        return None
    return tracker


def _steps(spec: ExperimentSpec, report: Report, allreduce, *, ray_part: RayPart | None, world: int,
           print_metrics: bool, tracker: Any = None) -> None:
    """smoke.steps steps; records one `steps` check (the first failing step stops the all-reduces)."""
    sm = spec.smoke
    failure = ""
    for step in range(1, sm.steps + 1):
        started = time.perf_counter()
        time.sleep(sm.step_seconds)
        metrics: dict[str, float | int] = {}
        if allreduce is not None and not failure:
            try:
                r = allreduce(step)
                metrics["smoke/allreduce_ms"] = round(r.ms, 3)
                if not r.ok:
                    failure = f"step {step}: all-reduce gave {r.value:g}, expected {r.expected:g}"
            except Exception as exc:
                failure = f"step {step}: all-reduce failed: {_one_line(exc)}"
        if ray_part is not None:
            try:
                metrics["smoke/ray_task_ms"] = round(ray_part.round_trip_ms(), 3)
            except Exception as exc:
                failure = failure or f"step {step}: Ray task failed: {_one_line(exc)}"
        if print_metrics:
            metrics["smoke/world_size"] = world
            metrics["timing_s/step"] = round(time.perf_counter() - started, 3)
            for line in pad_lines(step, sm.log_lines_per_step):
                say(line)
            say(metric_line(step, metrics))
            if tracker is not None:
                try:
                    tracker.log(data=metrics, step=step)
                except Exception as exc:
                    failure = failure or f"step {step}: tracker failed: {_one_line(exc)}"
    if tracker is not None:
        tracker.finish()
        report.add(Check("tracking", True, f"{sm.steps} step(s) logged through verl's Tracking "
                         f"({', '.join(b for b in spec.loggers if b in TRACKED)})"))
    if allreduce is None:
        failure = failure or "no all-reduce group (see the rendezvous check)"
    report.add(Check("steps", not failure, failure or
                     f"{sm.steps} step(s), every all-reduce equal to its independently computed sum"))


def _memory(spec: ExperimentSpec, report: Report, allocate) -> object:
    mb = spec.smoke.memory_mb
    if mb <= 0:
        return None
    started = time.monotonic()
    held = allocate(mb)
    report.add(Check("memory", True, f"allocated and touched {mb} MiB in {time.monotonic() - started:.1f}s"))
    return held


def run_driver(spec: ExperimentSpec, env: Mapping[str, str], role: str, report: Report, *, cpus: int) -> int:
    """single-node, ray-head and ray-job-driver: everything, and the metric lines."""
    group: Any = None
    if spec.backend in ("pytorchjob", "trainjob"):
        group = join_pytorchjob_group(spec, env, report)
    report.add(check_verl_config(spec, verl_overrides(spec, ray_num_cpus=cpus if role == "single-node" else None)))
    ray_part = RayPart(spec, report)
    try:
        if ray_part.connect(env, cpus):
            ray_part.probe_nodes()
        if spec.backend == "rayjob" and ray_part.connected:
            workers = ray_part.worker_nodes()
            group = ActorGroup.create(spec, workers, report) if workers else None
            if not workers:
                report.add(Check("rendezvous", False, "no Ray worker node to form the gloo group on"))
        held = None
        if group is not None:
            held = _memory(spec, report, group.allocate if isinstance(group, ActorGroup) else ballast)
        _steps(spec, report, group.allreduce if group is not None else None,
               ray_part=ray_part if ray_part.connected else None, world=spec.resources.nodes, print_metrics=True,
               tracker=open_tracker(spec, report))
        del held
    finally:
        if isinstance(group, TorchGroup):
            group.close()
        ray_part.shutdown()
    return report.finish()


def run_participant(spec: ExperimentSpec, env: Mapping[str, str], report: Report) -> int:
    """ray-worker (multi-node PyTorchJob): this pod's rank of the gloo group, beside its raylet."""
    group = join_pytorchjob_group(spec, env, report)
    try:
        held = _memory(spec, report, ballast) if group is not None else None
        _steps(spec, report, group.allreduce if group is not None else None, ray_part=None,
               world=spec.resources.nodes, print_metrics=False)
        del held
    finally:
        if group is not None:
            group.close()
    return report.finish()


def argv_for(config: str, role: str) -> list[str]:
    """The entrypoint's child command for this workload (this interpreter, so the image's venv).

    The path is made absolute: the child runs in the experiment's checkpoint directory, as verl does.
    """
    return [sys.executable, "-m", "launcher.entrypoint.smoke", "--config", os.path.abspath(config), "--role", role]


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m launcher.entrypoint.smoke", description=__doc__.splitlines()[0])
    p.add_argument("--config", required=True, help="experiment config (the ConfigMap's spec.yaml)")
    p.add_argument("--role", choices=ROLES, required=True, help="this pod's role (the entrypoint passes it)")
    args = p.parse_args(argv)
    install_signal_handlers()
    try:
        spec = load_spec(args.config)
    except LauncherError as exc:
        print(f"{PREFIX} error: {exc}", file=sys.stderr, flush=True)
        return exc.exit_code
    env = R.operator_env(os.environ)  # a TrainJob's PET_* as the training-operator's names
    cpus = E.probe_container().cpus
    res = spec.resources
    say(f"{PREFIX} start role={args.role} backend={spec.backend} nodes={res.nodes} gpus_per_node={res.gpus_per_node} "
        f"cpus={cpus} steps={spec.smoke.steps} host={socket.gethostname()}")
    report = Report()
    for check in pod_checks(spec, env):
        report.add(check)
    if args.role == "ray-worker":
        return run_participant(spec, env, report)
    return run_driver(spec, env, args.role, report, cpus=cpus)


if __name__ == "__main__":
    sys.exit(main())
