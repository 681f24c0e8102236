"""The real nodes' networking, as a pod sees it: cluster DNS (CoreDNS), Service routing (kube-proxy), headless
Services resolving to pod IPs, pod-to-pod traffic across the two nodes, and a hermetic outside (NXDOMAIN).
A busybox image (Debian's busybox-static, imported by up.sh) keeps this test independent of the launcher's image."""
from __future__ import annotations

import http.client
import json
import os
import socket
import subprocess
import sys
import time

import pytest

import kwok_support as ks
import realnode as rn

pytestmark = [pytest.mark.cluster, pytest.mark.realnode, pytest.mark.smallpods]
TOOLBOX = "localhost/grpo-launcher/toolbox:busybox"
TOLERATE = [{"key": "grpo.launcher.io/real-node", "operator": "Exists", "effect": "NoSchedule"}]
LOCKED = {"runAsNonRoot": True, "runAsUser": 1000, "readOnlyRootFilesystem": True,
          "allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}


def pod(name: str, node: str, script: str, labels: dict | None = None, restart: str = "Always") -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels or {}},
            "spec": {"nodeName": node, "tolerations": TOLERATE, "automountServiceAccountToken": False,
                     "restartPolicy": restart,
                     "containers": [{"name": "c", "image": TOOLBOX, "imagePullPolicy": "Never",
                                     "command": ["/bin/busybox", "sh", "-c", script], "securityContext": LOCKED,
                                     "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}]}],
                     "volumes": [{"name": "tmp", "emptyDir": {}}]}}


def test_dns_services_and_pod_routing_across_real_nodes(kube_cluster, namespace):
    rn.ensure_real_node(kube_cluster, image=False)
    info, ns = kube_cluster, namespace
    web = pod("web", "grpo-node-1", "mkdir -p /tmp/w && echo hello-$(hostname) > /tmp/w/index.html && "
              "exec /bin/busybox httpd -f -p 8080 -h /tmp/w", labels={"app": "web"})
    services = [
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"},
         "spec": {"selector": {"app": "web"}, "ports": [{"port": 80, "targetPort": 8080}]}},
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web-headless"},
         "spec": {"clusterIP": "None", "selector": {"app": "web"}, "ports": [{"port": 8080}]}},
    ]
    info.kubectl("-n", ns, "apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List",
                                                                 "items": [web, *services]}))
    info.kubectl("-n", ns, "wait", "--for=condition=Ready", "pod/web", "--timeout=90s")
    web_ip = json.loads(info.kubectl("-n", ns, "get", "pod", "web", "-o", "json").stdout)["status"]["podIP"]
    cluster_ip = json.loads(info.kubectl("-n", ns, "get", "svc", "web", "-o", "json").stdout)["spec"]["clusterIP"]
    bb = "/bin/busybox"
    script = "; ".join([
        f"echo A=$({bb} nslookup web.{ns}.svc.cluster.local | {bb} awk '/^Address/ {{a=$2}} END {{print a}}')",
        f"echo H=$({bb} nslookup web-headless.{ns}.svc.cluster.local | {bb} awk '/^Address/ {{a=$2}} END {{print a}}')",
        f"echo K=$({bb} nslookup kubernetes.default.svc.cluster.local | {bb} awk '/^Address/ {{a=$2}} END {{print a}}')",
        # search path + ClusterIP via kube-proxy (which may still be programming the new Service: retry, as
        # clients do), then headless: straight to the pod on node 1
        f"for i in $({bb} seq 30); do S=$({bb} timeout 3 {bb} wget -qO- http://web/) && break; {bb} sleep 1; done; echo S=$S",
        f"echo D=$({bb} timeout 5 {bb} wget -qO- http://web-headless:8080/)",  # (busybox 1.35's wget -T segfaults)
        f"echo X=$({bb} nslookup pypi.org >/dev/null 2>&1 && echo resolved || echo nxdomain)",
    ])
    info.kubectl("-n", ns, "apply", "-f", "-", input=json.dumps(pod("client", "grpo-node-0", script, restart="Never")))
    ks.wait_for(lambda: json.loads(info.kubectl("-n", ns, "get", "pod", "client", "-o", "json").stdout)
                ["status"].get("phase") in ("Succeeded", "Failed"), timeout=90, what="client pod finished")
    out = dict(line.split("=", 1) for line in info.kubectl("-n", ns, "logs", "client").stdout.split("\n") if "=" in line)
    assert out["A"] == cluster_ip and out["H"] == web_ip and out["K"] == "10.0.0.1", out
    assert web_ip.startswith("10.244.1."), web_ip
    assert out["S"] == "hello-web" and out["D"] == "hello-web", out
    assert out["X"] == "nxdomain", out
    client_ip = json.loads(info.kubectl("-n", ns, "get", "pod", "client", "-o", "json").stdout)["status"]["podIP"]
    assert client_ip.startswith("10.244.0."), client_ip


def test_the_ray_dashboard_stand_in_answers_only_for_heads_it_can_prove_fake(kube_cluster, tmp_path):
    """hack/cluster/fake_ray_dashboard.py, as up.sh runs it (the real nodes' CoreDNS and pod range), asked as the
    KubeRay operator asks it (an absolute-URI proxy request): a name that resolves outside the real pod range (a
    KWOK pod, here the API server's Service) gets canned statuses; a name the cluster's DNS does not know gets 503
    with the reason, never an invented status, since it may be a real head that is not resolvable yet."""
    rn.ensure_real_node(kube_cluster, image=False)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "GRPO_REAL_POD_CIDR": "10.244.0.0/16", "GRPO_NODE_DNS": f"{rn.bridge_address()}:53"}
    proc = subprocess.Popen([sys.executable, str(ks.HACK_CLUSTER / "fake_ray_dashboard.py"), str(port), "0"],
                            env=env, stderr=subprocess.DEVNULL)
    try:
        def get(host: str) -> tuple[int, str]:
            for _ in range(100):  # until the stand-in listens
                try:
                    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
                    conn.request("GET", f"http://{host}:8265/api/jobs/rayjob-x")
                    break
                except ConnectionRefusedError:
                    time.sleep(0.1)
            resp = conn.getresponse()
            return resp.status, resp.read().decode(errors="replace")

        status, body = get("kubernetes.default.svc.cluster.local")  # 10.96.0.1: not a real pod
        assert status == 200 and json.loads(body)["status"] == "SUCCEEDED", body
        status, body = get("no-such-head-svc.default.svc.cluster.local")
        assert status == 503 and "no-such-head-svc.default.svc.cluster.local has no address" in body, (status, body)
    finally:
        proc.kill()
        proc.wait()
