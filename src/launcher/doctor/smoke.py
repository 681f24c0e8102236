"""`launcher doctor --smoke`: the smoke job's spec, and its verdicts (pure).

`smoke_spec` turns the experiment into a small real job (`workload: smoke`, named `<name>-doctor`); the verb
submits it, follows it and hands what it left behind (`SmokeOutcome`: its pods as last seen and their log
lines) to `smoke_checks`, which reads the `[smoke]` lines (`launcher.doctor.smokelog`) into doctor's checks.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from launcher.doctor import smokelog
from launcher.doctor.check import FAIL, OK, WARN, Check
from launcher.doctor.nodes import gpus_per_pod
from launcher.spec.model import ExperimentSpec


# --------------------------------------------------------------------------------------------------
# The smoke job's spec


DOCTOR_SUFFIX = "-doctor"


def doctor_name(name: str) -> str:
    """`<name>-doctor`, the experiment name shortened so it stays within `spec.NAME_MAX` (38)."""
    from launcher.spec.names import NAME_MAX

    return name[: NAME_MAX - len(DOCTOR_SUFFIX)].rstrip("-") + DOCTOR_SUFFIX


def smoke_spec(spec: ExperimentSpec) -> ExperimentSpec:
    """The experiment as a smoke job: same image, pods, resources, scheduling, backend and `smoke:` section;
    `workload: smoke`, named `<name>-doctor` (so its job never collides with the experiment's own).

    A config that already is a smoke config (configs/smoke-cpu.yaml) only gets the name.
    """
    from launcher.spec.load import spec_from_raw

    raw = spec.model_dump(mode="json")
    raw["workload"] = "smoke"
    raw["name"] = doctor_name(spec.name)
    return spec_from_raw(raw, f"{spec.name} as a smoke job")


# --------------------------------------------------------------------------------------------------
# The smoke job's verdict (pure)
#
# One doctor check per base name of the workload's checks (`launcher.doctor.smokelog`): `writable:tmp` ... `writable:storage`
# are one `smoke: writable`, and a pod check the driver ran on another pod's Ray node (`user@<host>`) counts for that
# pod (a multi-node PyTorchJob's worker prints its own too: the same pod, shown once). The finding names each pod
# (or host) with its detail; a failed check gets the fix of its base name (SMOKE_FIXES).


# The smoke checks by base name (`launcher.doctor.smokelog.CHECK_ORDER`): how doctor titles them.
SMOKE_TITLES = {
    "user": "container user",
    "root_readonly": "read-only root filesystem",
    "writable": "writable directories",
    "shm_size": "/dev/shm size",
    "dataset": "dataset (the init container's parquet files)",
    "verl_config": "verl's config",
    "ray_init": "Ray init",
    "ray_nodes": "Ray nodes alive",
    "ray_task": "a Ray task on every node",
    "rendezvous": "pods reach each other (torch.distributed rendezvous)",
    "allreduce": "gloo all-reduce across the pods",
    "nccl_allreduce": "NCCL all-reduce over every GPU",
    "memory": "memory ballast (smoke.memory_mb)",
    "steps": "steps",
}
_ADDR_PORT = re.compile(r"(?<![\w.-])([A-Za-z0-9][A-Za-z0-9.-]*):(\d{2,5})\b")


def _reach_fix(spec: ExperimentSpec, failed) -> str:
    ports = sorted({int(p) for c in failed for _, p in _ADDR_PORT.findall(c.detail)})
    port = (f"TCP port {', '.join(map(str, ports))}" if ports else
            "TCP to the master's MASTER_PORT (the training-operator's default: 23456)"
            if spec.backend == "pytorchjob" else
            "TCP to the master's PET_MASTER_PORT (Kubeflow Trainer's: 29500)" if spec.backend == "trainjob" else
            "TCP between the worker pods (the gloo master's port)")
    return (f"the pods cannot reach each other: allow pod-to-pod {port} between the run's pods (on other nodes "
            "too): check NetworkPolicies in the namespace, cloud security groups/firewall rules between the "
            "nodes and the CNI's routes (kubectl get networkpolicy; ping a pod IP from another pod)")


def _ray_fix(spec: ExperimentSpec, _failed) -> str:
    head = ("the head's Service (<job>-master-0, MASTER_ADDR) and Ray's ports (6379, the raylets' ports) "
            "between the pods" if spec.backend == "pytorchjob" else
            "the JobSet's headless Service (<job>-node-0-0.<job>, PET_MASTER_ADDR) and Ray's ports (6379, the "
            "raylets' ports) between the pods" if spec.backend == "trainjob" else
            "the RayCluster's head Service (<job>-...-head-svc) and Ray's ports between the head and the workers")
    return (f"Ray did not come up across the pods: check {head} are reachable (NetworkPolicies, security groups, "
            "CNI), that every pod started (smoke: pods), and that resources.cpu/memory leave Ray room; raise "
            "smoke.connect_timeout_s on a slow cluster")


# What to change when a smoke check fails, by base name: a string, or a function of (spec, failed checks).
SMOKE_FIXES = {
    "user": lambda spec, _: (
        f"the container must run as security.run_as_user/run_as_group ({spec.security.run_as_user}:"
        f"{spec.security.run_as_group}) and the image must name that user: set them to the image's user, or "
        "rebuild the image (docker/) with that user"),
    "root_readonly": (
        "security.read_only_root_filesystem is true but / or /opt is writable: an admission webhook or the "
        "pod security settings override the container's securityContext; check them (kubectl get pod -o yaml), "
        "or set security.read_only_root_filesystem=false"),
    "writable": lambda spec, _: (
        "/tmp, $HOME and /dev/shm are emptyDir volumes and the storage volume is mounted at "
        f"storage.mount_path ({spec.storage.mount_path}): check the volumes and security settings: the claim "
        f"({spec.storage.claim_name or 'none: an emptyDir'}) must be writable by gid "
        f"security.run_as_group ({spec.security.run_as_group}, the pod's fsGroup), no policy may make the "
        "volumes read-only"),
    "shm_size": lambda spec, _: (
        f"raise resources.shm_size (now {spec.resources.shm_size}) to at least smoke.min_shm "
        f"({spec.smoke.min_shm}): --set resources.shm_size=... (a memory-backed emptyDir; it counts against "
        "resources.memory; NCCL and Ray need it)"),
    "dataset": lambda spec, _: (
        "the data-prep init container did not leave readable parquet files at data.train_path/val_path: check "
        f"data.source_dir ({spec.data.source_dir or 'unset: the dataset is downloaded'}) exists in the image or "
        "on the volume, and read the init container's log (rerun with --keep, `launcher logs`); a hub download "
        "needs model.offline=false and network access"),
    "verl_config": (
        "the image's verl rejected the config the launcher generated: fix the config fields the message names "
        "(`launcher render CONFIG` shows the verl overrides), or use an image whose verl is the version the "
        "launcher targets (docker/)"),
    "ray_init": _ray_fix,
    "ray_nodes": _ray_fix,
    "ray_task": _ray_fix,
    "rendezvous": _reach_fix,
    "allreduce": _reach_fix,
    "nccl_allreduce": (
        "NCCL failed across the GPUs: check the NCCL environment (network.nccl_socket_ifname must name the "
        "pods' interface, network.nccl_ib only with InfiniBand/RoCE), the GPU drivers and device plugin on the "
        "nodes, and /dev/shm (resources.shm_size); pod-to-pod TCP to MASTER_PORT+1 must be allowed too; rerun "
        "with --set network.nccl_debug=INFO and read the pod logs (--keep)"),
    "memory": lambda spec, _: (
        f"the pods could not hold smoke.memory_mb ({spec.smoke.memory_mb} MiB): raise resources.memory "
        f"(now {spec.resources.memory})"),
    "steps": "see the rendezvous/all-reduce and Ray checks above; read the pod logs (--keep)",
}


def smoke_fix(spec: ExperimentSpec, base: str, failed) -> str:
    fix = SMOKE_FIXES.get(base)
    if fix is None:
        return "read the pod logs (rerun with --keep; `launcher logs`)"
    return fix if isinstance(fix, str) else fix(spec, failed)


# Waiting reasons that mean the image could not be pulled or started.
IMAGE_REASONS = ("ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull")


@dataclass
class SmokeOutcome:
    """What the smoke job left behind: its name, final state, pods as last seen, their log lines."""

    job: str
    state: object  # launcher.kube.jobs.JobState
    pods: list[dict]
    lines: dict[str, list[str]]
    timed_out: bool = False
    timeout: float = 0.0

    def where(self, host: str) -> str:
        """A pod's hostname (its pod name) as doctor shows pods: `master-0`, `worker-1`, `head-x7k2p`."""
        from launcher.kube import jobs as J

        for p in self.pods:
            if (p.get("metadata") or {}).get("name") == host:
                return J.short_name(p, self.job)
        return host.removeprefix(self.job + "-")


def _started(pod: dict) -> bool:
    st = pod.get("status") or {}
    return any((cs.get("state") or {}).get("running") or (cs.get("state") or {}).get("terminated")
               or cs.get("restartCount") for cs in st.get("containerStatuses") or [])


def _waiting(pod: dict) -> tuple[str, str] | None:
    st = pod.get("status") or {}
    for cs in (st.get("initContainerStatuses") or []) + (st.get("containerStatuses") or []):
        w = (cs.get("state") or {}).get("waiting") or {}
        if w.get("reason"):
            return w["reason"], " ".join((w.get("message") or "").split())
    return None


def image_check(spec: ExperimentSpec, outcome: SmokeOutcome, name: str = "smoke: pods") -> Check:
    """Did every pod start from the image? Else the waiting reason or the scheduler's message, and the fix."""
    from launcher.kube import jobs as J

    if not outcome.pods:
        why = "no pod was created" + (f" within {outcome.timeout:g}s" if outcome.timed_out else "")
        return Check(name, FAIL, f"{outcome.job}: {why} (job {outcome.state.phase}: "
                     f"{outcome.state.reason or 'no reason given'})",
                     f"`launcher status {outcome.job}` shows the job's conditions and events (with --keep)")
    # One entry per replica (master-0, worker-1, ...), every incarnation of it in creation order: a replica
    # started if any incarnation did. training-operator v1.9 deletes a failed pod and may create it again
    # after the job is already Failed; that late copy never starts and says nothing about the cluster.
    replicas: dict[str, list[dict]] = {}
    for p in outcome.pods:
        replicas.setdefault(J.short_name(p, outcome.job), []).append(p)
    bad = []
    fix = ""
    for short, incarnations in replicas.items():
        if any(_started(p) for p in incarnations):
            continue
        p = incarnations[-1]
        waiting = _waiting(p)
        if waiting and waiting[0] in IMAGE_REASONS:
            bad.append(f"{short}: {waiting[0]} {waiting[1]}".strip())
            fix = fix or (f"check the image name ({spec.image}, field image) exists and the nodes can pull it; "
                          "for a private registry set secrets.image_pull_secrets")
        elif waiting:
            bad.append(f"{short}: {waiting[0]} {waiting[1]}".strip())
            fix = fix or f"`launcher status {outcome.job}` (with --keep) shows the events"
        else:
            problem = J.pod_problem(p) or f"{(p.get('status') or {}).get('phase') or 'Pending'}: not started"
            bad.append(f"{short}: {problem}")
            fix = fix or ("see the gpu-nodes check: adjust resources, scheduling.node_selector or "
                          "scheduling.tolerations, or wait for capacity")
    if bad:
        when = f" within {outcome.timeout:g}s" if outcome.timed_out else ""
        return Check(name, FAIL, f"{len(bad)} of {len(replicas)} pod(s) never started{when}: "
                     + "; ".join(bad), fix)
    ran = {short: next(p for p in ps if _started(p)) for short, ps in replicas.items()}
    placed = sorted(f"{short} on {(p.get('spec') or {}).get('nodeName')}"
                    for short, p in ran.items() if (p.get("spec") or {}).get("nodeName"))
    return Check(name, OK, f"{len(replicas)} pod(s) started from {spec.image}"
                 + (f" ({', '.join(placed)})" if placed else ""))


def _where(outcome: SmokeOutcome, c) -> str:
    """Where a check ran: the pod that printed it, or the host its driver ran it on (`<name>@<host>`)."""
    return outcome.where(c.host) if c.host else c.pod


def _ok_summary(outcome: SmokeOutcome, got) -> tuple[str, list[str]]:
    """One passing check over its parts and pods: a shared detail once, differing ones per pod/host."""
    by_part: dict[str, dict[str, str]] = {}
    for c in got:
        by_part.setdefault(c.part, {})[_where(outcome, c)] = c.detail
    pieces = []
    for part, seen in by_part.items():
        details = list(dict.fromkeys(seen.values()))
        text = details[0] if len(details) == 1 else ", ".join(f"{w}: {d}" for w, d in seen.items())
        pieces.append(f"{part} {text}".strip() if part else text)
    places = sorted({_where(outcome, c) for c in got})
    return "; ".join(p for p in pieces if p) or "ok", places


def _failed_summary(outcome: SmokeOutcome, got) -> str:
    seen = {}
    for c in got:
        if not c.ok:
            seen.setdefault((_where(outcome, c), c.part, c.detail or "FAIL"), None)
    return "; ".join(f"{w}{' ' + part if part else ''}: {detail}" for w, part, detail in seen)


def smoke_checks(spec: ExperimentSpec, outcome: SmokeOutcome) -> list[Check]:
    """The image check, one check per base name any pod reported (`writable:*`, `<check>@<host>` grouped), the
    NCCL expectation on GPU pods, and the verdict."""
    from launcher.kube import jobs as J

    checks = [image_check(spec, outcome)]
    if checks[0].status == FAIL:
        return checks
    report = smokelog.collect(outcome.lines)
    for base in report.bases:
        got = report.reports(base)
        title = SMOKE_TITLES.get(base, base)
        if report.verdict(base):
            text, places = _ok_summary(outcome, got)
            checks.append(Check(f"smoke: {base}", OK, f"{title}: {text} ({len(places)} pod(s): "
                                f"{', '.join(places)})"))
        else:
            failed = [c for c in got if not c.ok]
            checks.append(Check(f"smoke: {base}", FAIL, f"{title}: {_failed_summary(outcome, got)}",
                                smoke_fix(spec, base, failed)))
    if checks[-1].name == "smoke: steps" and checks[-1].status == OK:  # the metric lines' timings
        ms, ray = report.metric("smoke/allreduce_ms"), report.metric("smoke/ray_task_ms")
        extra = [f"all-reduce max {max(ms):g}ms" if ms else "", f"Ray task max {max(ray):g}ms" if ray else ""]
        if ms or ray:
            checks[-1].finding += f"; {', '.join(x for x in extra if x)} over {max(len(ms), len(ray))} metric line(s)"
    if gpus_per_pod(spec) > 0 and report.verdict("nccl_allreduce") is None:
        # CPU-only pods (gpus_per_node 0) never run NCCL: no line is expected there.
        why = (" (not run: the rendezvous failed)" if report.verdict("rendezvous") is False else
               " (not run: the gloo all-reduce failed)" if report.verdict("allreduce") is False else "")
        checks.append(Check("smoke: nccl_allreduce", WARN, f"no pod reported the NCCL all-reduce on the GPU pods "
                            f"({spec.resources.gpus_per_node} GPU(s) each){why}",
                            "" if why else "read the pod logs (--keep): the smoke workload runs it on GPU pods"))
    state = outcome.state
    missing = report.without_result
    if report.result is True and not missing and state.succeeded:
        roles = ", ".join(f"{pod} {p.start['role']}" for pod, p in report.pods.items() if p.start.get("role"))
        checks.append(Check("smoke: result", OK, f"{outcome.job} succeeded; every pod reported ok"
                            + (f" ({roles})" if roles else "")))
    elif report.result is False:
        failed = []
        for p in report.pods.values():
            for f in p.failed:
                base, part, host = smokelog.split_name(f)
                failed.append(f"{base}{':' + part if part else ''}{'@' + outcome.where(host) if host else ''}")
        checks.append(Check("smoke: result", FAIL, f"{outcome.job}: FAIL {', '.join(sorted(set(failed)))}".rstrip(),
                            "see the failed checks above"))
    else:
        why = f"timed out after {outcome.timeout:g}s" if outcome.timed_out else \
            f"job {state.phase}: {state.reason or 'no reason given'}"
        problems = [f"{J.short_name(p, outcome.job)}: {J.pod_problem(p)}" for p in outcome.pods if J.pod_problem(p)]
        errors = [f"{pod}: {e}" for pod, p in report.pods.items() for e in p.errors]
        tail = []
        for pod, lines in outcome.lines.items():
            if pod in missing and lines:
                tail.append(f"{pod}: last line {lines[-1][:200]!r}")
        detail = "; ".join(problems + errors + tail)
        who = ", ".join(missing) if missing else "the pods"
        checks.append(Check("smoke: result", FAIL, f"{outcome.job}: {who} printed no `[smoke] result` line ({why})"
                            + (f"; {detail}" if detail else ""),
                            "fix what the pod status says, then rerun `launcher doctor --smoke`" if problems else
                            "the smoke workload refused the config: fix it (`launcher validate CONFIG`)" if errors else
                            "rerun with --keep and read `launcher logs` of the job; an OOMKilled pod needs more "
                            "resources.memory"))
    return checks
