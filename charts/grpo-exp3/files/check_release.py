"""`helm test` check of a grpo-exp3 release: its job exists, has not failed, and its pods are scheduled.

Runs in the test pod (templates/tests/check.yaml) with the pod's ServiceAccount token, which the test
Role allows to read the three job kinds and list pods in the release namespace, nothing else. Inputs
come from the environment the template sets; exit 0 and one line per pod on success, exit 1 naming
what is missing (the job, a pod, or the scheduler's reason) otherwise. Plain `kubernetes` client
only: the launcher's training image has it, and a check must not depend on the code it checks.
"""

from __future__ import annotations

import os
import sys
import time

# (group, version, plural) of each job kind the chart renders.
APIS = {"PyTorchJob": ("kubeflow.org", "v1", "pytorchjobs"), "RayJob": ("ray.io", "v1", "rayjobs"),
        "TrainJob": ("trainer.kubeflow.org", "v1alpha1", "trainjobs")}
# The conditions that end each kind's job (Kubeflow Trainer v2 says Complete where training-operator says Succeeded).
DONE = {"PyTorchJob": {"Succeeded": "succeeded", "Failed": "failed"},
        "TrainJob": {"Complete": "succeeded", "Failed": "failed"}}


def job_outcome(kind: str, job: dict) -> tuple[str, str]:
    """("failed" | "succeeded" | "suspended" | "active", why) of a PyTorchJob, RayJob or TrainJob object."""
    status = job.get("status") or {}
    if kind in DONE:
        for cond in status.get("conditions") or []:
            if cond.get("status") == "True" and cond.get("type") in DONE[kind]:
                return DONE[kind][cond["type"]], f"{cond.get('reason', '')}: {cond.get('message', '')}"
        spec = job.get("spec") or {}
        suspended = (spec.get("runPolicy") or {}).get("suspend") if kind == "PyTorchJob" else spec.get("suspend")
    else:
        deployment, run = status.get("jobDeploymentStatus"), status.get("jobStatus")
        if deployment == "Failed" or run == "FAILED":
            return "failed", f"jobDeploymentStatus={deployment} jobStatus={run}: {status.get('message', '')}"
        if deployment == "Complete" and run == "SUCCEEDED":
            return "succeeded", "jobStatus=SUCCEEDED"
        suspended = job.get("spec", {}).get("suspend")
    if suspended:
        return "suspended", "the job is suspended (a Kueue queue has not admitted it yet)"
    return "active", ""


def unscheduled(pods: list[dict], expected: int) -> list[str]:
    """What keeps the job's pods from being scheduled: one line per problem, [] when all `expected` are."""
    problems = []
    if len(pods) < expected:
        problems.append(f"{len(pods)} of {expected} pods exist")
    for pod in pods:
        name = pod["metadata"]["name"]
        cond = next((c for c in (pod.get("status") or {}).get("conditions") or [] if c.get("type") == "PodScheduled"), None)
        if cond is None or cond.get("status") != "True":
            why = f"{cond.get('reason', '')}: {cond.get('message', '')}" if cond else "not yet considered by the scheduler"
            problems.append(f"pod {name} is not scheduled ({why})")
    return problems


def check(co, core, env: dict, sleep=time.sleep, clock=time.monotonic) -> tuple[bool, list[str]]:
    """Poll until the job's pods are scheduled or it finished (ok), it failed or is missing, or the timeout."""
    from kubernetes.client.rest import ApiException

    kind, name, ns = env["JOB_KIND"], env["JOB_NAME"], env["JOB_NAMESPACE"]
    expected, deadline = int(env["EXPECTED_PODS"]), clock() + float(env["TIMEOUT_SECONDS"])
    selector = f"{env['INSTANCE_LABEL']}={name},{env['ROLE_LABEL']} in (gpu,head)"  # not the Ray submitter
    group, version, plural = APIS[kind]
    while True:
        try:
            job = co.get_namespaced_custom_object(group, version, ns, plural, name)
        except ApiException as exc:
            if exc.status == 404:
                return False, [f"{kind} {name} not found in namespace {ns} (deleted since the release was installed?)"]
            raise
        outcome, why = job_outcome(kind, job)
        if outcome == "failed":
            return False, [f"{kind} {name} failed: {why}"]
        pods = [p.to_dict() for p in core.list_namespaced_pod(ns, label_selector=selector).items]
        if outcome == "succeeded":
            return True, [f"{kind} {name} succeeded ({why}); {len(pods)} pod(s) left"]
        problems = [why] if outcome == "suspended" else unscheduled(pods, expected)
        if not problems:
            return True, [f"{kind} {name}: {len(pods)} of {expected} pods scheduled"] + [
                f"  pod {p['metadata']['name']} on node {p['spec']['node_name']} ({p['status']['phase']})" for p in pods]
        if clock() > deadline:
            return False, [f"{kind} {name}: not scheduled after {env['TIMEOUT_SECONDS']}s"] + [f"  {p}" for p in problems]
        sleep(2)


def main() -> int:
    from kubernetes import client, config

    config.load_incluster_config()
    api = client.ApiClient()
    ok, lines = check(client.CustomObjectsApi(api), client.CoreV1Api(api), dict(os.environ))
    print("\n".join(lines), file=sys.stdout if ok else sys.stderr)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
