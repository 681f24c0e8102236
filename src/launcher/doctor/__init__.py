"""`launcher doctor`: can this cluster run this experiment as configured?

Each check returns a `Check` (`check`): a status (`ok`, `fail`, `warn`), what was found, and for every
failure the fix (a command, a config field, what to install). The verb (`launcher.cli.commands.doctor`)
runs them in order and prints them: the API server, the namespace, what the cluster serves (the backend's
CRDs, Kueue and the queue) and RBAC (`cluster`); the nodes that can hold the pods (labels, taints, free
GPUs: `nodes`); optionally the smoke job (`smoke`: its spec and verdicts, pure functions of what it left
behind; `smokelog`: its `[smoke]` lines parsed).

The modules import no Kubernetes client code at module level except `cluster` (`launcher.kube.kueue`).
"""
