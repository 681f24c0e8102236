"""`launcher status NAME`: job state, each pod's phase and what is wrong with it, and the relevant events."""

from __future__ import annotations

import argparse

from launcher.cli.cluster import add_run_arguments
from launcher.cli.common import add_output_argument

HELP = "show a run's state, its pods and why they are stuck (NAME: job or experiment)"

# Event reasons worth a user's attention even when typed Normal (scheduling, pulls, kills, evictions).
INTERESTING = {"FailedScheduling", "Failed", "BackOff", "Evicted", "OOMKilling", "Killing", "FailedMount",
               "FailedCreate", "Preempted", "Unschedulable", "SuccessfulCreate", "Scheduled", "Pulling",
               "ErrImagePull", "JobFailed", "Suspended", "Started", "Completed"}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_run_arguments(parser)  # --runs-dir: the attempts the follower saw (runs/<job>/attempts.json)
    parser.add_argument("--events", type=int, default=15, metavar="N", help="show the last N events (default 15)")
    add_output_argument(parser, "the run, its pods and events")


def run(args: argparse.Namespace) -> int:
    from launcher.cli.cluster import connect
    from launcher.run.attempts import describe
    from launcher.cli.common import check_format
    from launcher.kube import jobs as J

    fmt = check_format(args.output)  # bad input: before any cluster call
    kube = connect(args)
    ref = J.find_run(kube, args.name)
    state = J.job_state(ref.backend, ref.obj)
    if fmt:
        return _emit(kube, ref, state, args.events, fmt, _attempts(ref.name, args.runs_dir), args.runs_dir)
    md = ref.obj.get("metadata") or {}
    print(f"{ref.resource.kind} {ref.name}  namespace {kube.namespace}  experiment {ref.experiment or '-'}  "
          f"age {J.age(md.get('creationTimestamp'))}")
    print(f"state: {state.phase}" + (f" ({state.reason})" if state.reason else ""))
    status = ref.obj.get("status") or {}
    if ref.backend == "rayjob":
        print(f"  jobDeploymentStatus={status.get('jobDeploymentStatus', '-')} jobStatus={status.get('jobStatus', '-')}"
              f" rayCluster={status.get('rayClusterName', '-')}")
    queue = _queue(kube, ref)
    if queue:
        print(f"kueue: {queue['line']}")
    gitops = _gitops(kube, ref)
    if gitops:
        print(f"gitops: {gitops['line']}")
    for c in status.get("conditions") or []:
        print(f"  condition {c.get('type')}={c.get('status')}: {c.get('reason') or ''} {c.get('message') or ''}".rstrip())
    if ref.backend == "trainjob":
        for j in status.get("jobsStatus") or []:
            print(f"  replicated Job {j.get('name')}: " + " ".join(
                f"{k}={j.get(k, 0)}" for k in ("active", "ready", "succeeded", "failed", "suspended")))
        js = _jobset(kube, ref)
        if js is None:
            print("jobset: none (not created yet, or deleted after it finished)")
        elif js.get("forbidden"):
            print(f"jobset {js['name']}: cannot get jobsets.jobset.x-k8s.io (forbidden): its conditions not shown")
        else:
            print(f"jobset {js['name']}: restarts={js['restarts']}"
                  + (f" terminalState={js['terminalState']}" if js["terminalState"] else ""))
            for c in js["conditions"]:
                print(f"  condition {c.get('type')}={c.get('status')}: {c.get('reason') or ''} "
                      f"{c.get('message') or ''}".rstrip())
    pods = J.job_pods(kube, ref)
    if pods:
        print(f"pods ({len(pods)}):")
    elif state.finished:
        print("pods: none left (a failed PyTorchJob's pods are deleted by the training-operator, a JobSet's with "
              "its TTL; `launcher logs` shows what a follower saved)")
    else:
        print("pods: none yet")
    placement = _placement(kube, pods)
    for p in pods:
        st = p.get("status") or {}
        restarts = sum(int(cs.get("restartCount") or 0) for cs in st.get("containerStatuses") or [])
        problem = J.pod_problem(p)
        line = f"  {p['metadata']['name']:<48} {st.get('phase', '?'):<10} restarts={restarts}"
        node = (p.get("spec") or {}).get("nodeName")  # (set when the pod is bound; a pod's status has no node)
        if node:
            line += f" node={node}"
        print(line)
        if problem:
            print(f"    ! {problem}")
        if p["metadata"]["name"] in placement:
            print(f"    ! {placement[p['metadata']['name']]}")
    attempts = _attempts(ref.name, args.runs_dir)
    if len(attempts) > 1 or any(a["action"] != "fresh" for a in attempts):
        print(f"attempts ({len(attempts)}, as followed into runs/{ref.name}/):")
        for a in attempts:
            print(f"  {describe(a)}")
    incidents = _incidents(ref.name, args.runs_dir)
    if incidents:
        from launcher.run.incidents import describe as describe_incident

        print(f"incidents ({len(incidents)}, in runs/{ref.name}/incidents/):")
        for i in incidents:
            print(f"  {describe_incident(i)}")
    shown = _events(kube, ref, pods, args.events)
    if shown:
        print("events:")
        for e in shown:
            obj = e.get("involvedObject") or {}
            when = e.get("lastTimestamp") or e.get("eventTime") or ""
            count = f" x{e['count']}" if (e.get("count") or 1) > 1 else ""
            print(f"  {when} {e.get('type', ''):<7} {e.get('reason', ''):<18} {obj.get('kind', '')}/{obj.get('name', '')}"
                  f"{count}: {' '.join((e.get('message') or '').split())}")
    return 0


def _unschedulable(pod: dict) -> bool:
    return (pod.get("status") or {}).get("phase") == "Pending" and not (pod.get("spec") or {}).get("nodeName") and any(
        c.get("type") == "PodScheduled" and c.get("status") == "False" for c in (pod.get("status") or {}).get("conditions") or [])


def _placement(kube, pods: list[dict]) -> dict[str, str]:
    """For each pod the scheduler could not place: the node labels it requires that no node has, and
    the GPU nodes there are with theirs (`no node matches K=V; nodes with nvidia.com/gpu: n1 (K=W, 8 ...)`).
    Nothing when nodes cannot be listed (no ClusterRole): the scheduler's own reason is still shown."""
    from launcher.spec.gpu import pod_placement_problem
    from launcher.kube import NODE, unless_forbidden

    stuck = [p for p in pods if _unschedulable(p)]
    if not stuck:
        return {}
    nodes = unless_forbidden(kube.list, NODE)
    if nodes is None:
        return {}
    problems = {p["metadata"]["name"]: pod_placement_problem(p, nodes) for p in stuck}
    return {name: text for name, text in problems.items() if text}


def _attempts(job: str, runs_dir: str | None) -> list[dict]:
    """The run's attempts from its run directory (`launcher.run.attempts`); [] when it was never followed here."""
    from launcher.run.attempts import load, summarise
    from launcher.run.dirs import RunDir

    return summarise(load(RunDir.of(job, runs_dir).path))


def _queue(kube, ref) -> dict | None:
    """For a run sent to a Kueue LocalQueue: its Workload's admission (state, reason, ClusterQueue, flavors)."""
    from launcher.spec import names as L
    from launcher.kube import kueue as Q

    queue = ref.labels.get(L.KUEUE_QUEUE_LABEL)
    if not queue:
        return None
    version = Q.served_version(kube)
    if version is None:
        return {"localQueue": queue, "workload": None, "state": "Unknown",
                "line": f"LocalQueue {queue}, but the cluster serves no Kueue API ({Q.GROUP}): nothing will admit it"}
    from launcher.kube.client import FORBIDDEN, unless_forbidden

    wl = unless_forbidden(Q.workload_for, kube, ref.obj, version, default=FORBIDDEN)
    if wl is FORBIDDEN:
        # an optional read (rbac.CALLS): the job's own state still says it is queued
        return {"localQueue": queue, "workload": None, "state": "Unknown",
                "line": f"LocalQueue {queue}: cannot list workloads.{Q.GROUP} (forbidden): admission not shown"}
    if wl is None:
        return {"localQueue": queue, "workload": None, "state": "Unknown",
                "line": f"LocalQueue {queue}: no Workload yet (Kueue has not seen the job)"}
    a = Q.admission(wl)
    return {"localQueue": queue, "workload": wl["metadata"]["name"], "apiVersion": f"{Q.GROUP}/{version}",
            "state": a.state, "reason": a.reason, "message": a.message, "clusterQueue": a.cluster_queue or None,
            "flavors": a.flavors or None,
            "line": f"LocalQueue {queue}, Workload {wl['metadata']['name']}: {a.line()}"}


def _gitops(kube, ref) -> dict | None:
    """For a run Flux applied (its kustomize.toolkit.fluxcd.io labels): what launcher.kube.gitops says; else None."""
    from launcher.kube import gitops as G

    return G.describe(kube, ref.obj) if G.flux_owner(ref.obj) else None


def _jobset(kube, ref) -> dict | None:
    """The JobSet Kubeflow Trainer made for a TrainJob (same name): its conditions and restarts; None when absent."""
    from launcher.kube import FORBIDDEN, JOBSET, unless_forbidden

    obj = unless_forbidden(kube.get, JOBSET, ref.name, default=FORBIDDEN)
    if obj is FORBIDDEN:
        # an optional read (rbac.CALLS): the TrainJob carries the JobSet's final conditions
        return {"name": ref.name, "forbidden": True, "restarts": None, "terminalState": "", "conditions": []}
    if obj is None:
        return None
    st = obj.get("status") or {}
    return {"name": obj["metadata"]["name"], "restarts": st.get("restarts") or 0,
            "terminalState": st.get("terminalState") or "", "conditions": st.get("conditions") or []}


def _events(kube, ref, pods: list[dict], last: int) -> list[dict]:
    """The last `last` events of the job and its pods worth a user's attention, oldest first (a TrainJob's
    also those of its JobSet and the JobSet's Jobs, where scheduling and pod-creation failures show)."""
    names = {ref.name} | {p["metadata"]["name"] for p in pods}
    if ref.backend == "trainjob":
        names |= {o.get("name") for p in pods for o in (p.get("metadata") or {}).get("ownerReferences") or []
                  if o.get("kind") == "Job"}
        names.add(f"{ref.name}-node-0")
    events = kube.events_for(names)
    return [e for e in events if e.get("type") == "Warning" or e.get("reason") in INTERESTING][-last:] if last > 0 else []


def _incidents(job: str, runs_dir: str | None) -> list[dict]:
    """The run's incidents from its run directory (`launcher.run.incidents`); [] when none were captured here."""
    from launcher.run.dirs import RunDir
    from launcher.run.incidents import load_incidents

    return load_incidents(RunDir.of(job, runs_dir).path)


def _emit(kube, ref, state, last_events: int, fmt: str, attempts: list[dict], runs_dir: str | None) -> int:
    """`-o json|yaml`: the Run shape plus conditions, pods and events (launcher.cli.common)."""
    from launcher.cli.common import emit, run_object
    from launcher.kube import jobs as J

    status = ref.obj.get("status") or {}
    out = run_object(ref, kube.namespace, state)
    out["conditions"] = status.get("conditions") or []
    queue = _queue(kube, ref)
    if queue:
        out["kueue"] = {k: v for k, v in queue.items() if k != "line"}
    gitops = _gitops(kube, ref)
    if gitops:
        out["gitops"] = {k: v for k, v in gitops.items() if k not in ("line", "lines")}
    if ref.backend == "rayjob":
        out["ray"] = {k: status.get(k) for k in ("jobDeploymentStatus", "jobStatus", "rayClusterName")}
    if ref.backend == "trainjob":
        out["jobsStatus"] = status.get("jobsStatus") or []
        out["jobSet"] = _jobset(kube, ref)
    pods = J.job_pods(kube, ref)
    placement = _placement(kube, pods)
    out["pods"] = [{
        "name": p["metadata"]["name"],
        "role": J.short_name(p, ref.name),
        "phase": (p.get("status") or {}).get("phase"),
        "restarts": sum(int(cs.get("restartCount") or 0) for cs in (p.get("status") or {}).get("containerStatuses") or []),
        "node": (p.get("spec") or {}).get("nodeName"),
        "problem": J.pod_problem(p),
        "placement": placement.get(p["metadata"]["name"]),
    } for p in pods]
    out["events"] = [{
        "time": e.get("lastTimestamp") or e.get("eventTime"),
        "type": e.get("type"),
        "reason": e.get("reason"),
        "object": f"{(e.get('involvedObject') or {}).get('kind', '')}/{(e.get('involvedObject') or {}).get('name', '')}",
        "count": e.get("count") or 1,
        "message": " ".join((e.get("message") or "").split()),
    } for e in _events(kube, ref, pods, last_events)]
    out["attempts"] = attempts
    out["incidents"] = [{"id": i["id"], "time": i.get("time"), "step": (i.get("last_step") or {}).get("step"),
                         "class": (i.get("verdict") or {}).get("class"), "why": (i.get("verdict") or {}).get("why"),
                         "action": i.get("action"), "path": i["path"]} for i in _incidents(ref.name, runs_dir)]
    emit(out, fmt)
    return 0
