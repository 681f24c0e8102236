"""`launcher rbac`: the least-privilege Role a user of the launcher needs, as YAML."""

from __future__ import annotations

import argparse
import re

HELP = "print the least-privilege RBAC (Role, RoleBinding, optional read-only ClusterRole) for launcher users"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-n", "--namespace", default="default", help="namespace the runs go to")
    who = parser.add_mutually_exclusive_group()
    who.add_argument("--serviceaccount", metavar="[NS:]NAME", help="bind a ServiceAccount (e.g. ci:launcher)")
    who.add_argument("--user", metavar="NAME", help="bind a user")
    who.add_argument("--group", metavar="NAME", help="bind a group")
    parser.add_argument("--name", default="grpo-launcher-user", help="name of the Role and bindings")
    parser.add_argument("--no-cluster-role", action="store_true",
                        help="namespace-only: skip the read-only ClusterRole (nodes, namespaces, pods, Kueue "
                             "ClusterQueues, Flux Kustomizations/GitRepositories cluster-wide); submit then skips the "
                             "GPU-capacity warning, status/gitops-status the Flux details")
    parser.add_argument("--explain", action="store_true",
                        help="print each API call the launcher makes, which verbs make it and why, instead")


def run(args: argparse.Namespace) -> int:
    from launcher.errors import BadInput
    from launcher.render.rbac import CALLS, rbac_objects
    from launcher.render.manifests import to_yaml
    from launcher.spec.types import DNS1123_LABEL_RE

    if args.explain:
        for c in CALLS:
            scope = "cluster" if c.cluster_scoped else "namespace"
            print(f"{c.verb} {c.group or 'core'}/{c.resource} ({scope}; {', '.join(c.used_by)}): {c.why}")
        return 0
    if args.serviceaccount:
        ns, _, name = args.serviceaccount.rpartition(":")
        kind, subject, sub_ns = "ServiceAccount", name, ns or args.namespace
    elif args.user:
        kind, subject, sub_ns = "User", args.user, None
    elif args.group:
        kind, subject, sub_ns = "Group", args.group, None
    else:
        raise BadInput("rbac: expected one of --serviceaccount, --user or --group (who gets the Role)")
    for label, value in (("--namespace", args.namespace), ("--name", args.name)):
        if not re.match(DNS1123_LABEL_RE, value):
            raise BadInput(f"{label}: expected a DNS-1123 label, got {value!r}")
    print(to_yaml(rbac_objects(args.namespace, kind, subject, name=args.name, subject_namespace=sub_ns,
                               cluster_role=not args.no_cluster_role)), end="")
    return 0
