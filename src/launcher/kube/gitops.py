"""GitOps as the launcher sees it: which Flux Kustomization applied a run, from which git source, whether its
last apply worked, and which git revision created the run.

Flux's kustomize-controller labels every object it applies with `kustomize.toolkit.fluxcd.io/name` and
`.../namespace` (the Kustomization's). The Kustomization (kustomize.toolkit.fluxcd.io/v1) says in its status
what it last applied and attempted, whether that worked (condition Ready; a commit the API server refused is
Ready=False with the server's message) and keeps `status.history`: at most 5 snapshots, one per digest of
the objects it built (and per result), each with `firstReconciled`, `lastReconciled`, `lastReconciledStatus`
and `metadata.revision` (`main@sha1:<40 hex>`).

Flux records no "created by" on the objects, so the revision that created a run is derived from that history
(`creating_revision`): the succeeded snapshot first applied at or after the job's creationTimestamp, earliest
first. Flux sets `firstReconciled` at the end of the reconcile that created the job, so it is never earlier
than the job; both have 1-second resolution, so times are compared floored to the second. What the history
cannot say is said, never guessed: a run older than the 5 snapshots is "unknown"; a snapshot's revision is the
newest commit that built the same objects (Flux keeps one snapshot per digest), so an earlier commit with
identical manifests may be the one that applied them first.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from launcher.kube.client import ApiError, Resource

KS_GROUP, KS_VERSION = "kustomize.toolkit.fluxcd.io", "v1"
SOURCE_GROUP, SOURCE_VERSION = "source.toolkit.fluxcd.io", "v1"
NAME_LABEL = f"{KS_GROUP}/name"
NAMESPACE_LABEL = f"{KS_GROUP}/namespace"
KUSTOMIZATION = Resource("Kustomization", KS_GROUP, KS_VERSION, "kustomizations")
GITREPOSITORY = Resource("GitRepository", SOURCE_GROUP, SOURCE_VERSION, "gitrepositories")
HISTORY_MAX = 5  # meta.HistoryMaxSize (github.com/fluxcd/pkg/apis/meta)
SUCCEEDED = "ReconciliationSucceeded"
NOT_FLUX = "not created by Flux (no kustomize.toolkit.fluxcd.io labels): submitted by the launcher / applied by hand"


def flux_owner(job: dict) -> tuple[str, str] | None:
    """(namespace, name) of the Kustomization that applied `job`, from Flux's labels; None when Flux did not."""
    labels = (job.get("metadata") or {}).get("labels") or {}
    name = labels.get(NAME_LABEL)
    if not name:
        return None
    return labels.get(NAMESPACE_LABEL) or (job.get("metadata") or {}).get("namespace") or "", name


def flux_installed(kube) -> bool:
    """Whether the cluster serves Flux's Kustomization API (API discovery: every user may do it)."""
    return "kustomizations" in (kube.api_resources(KS_GROUP, KS_VERSION) or [])


def _second(ts: str | None) -> int | None:
    """An RFC3339 time as whole seconds since the epoch (floored: Flux and the API server keep seconds)."""
    if not ts:
        return None
    t = dt.datetime.fromisoformat(ts.replace("Z", "+00:00"))
    return int(t.timestamp() // 1)


@dataclass(frozen=True)
class Revision:
    """The revision that created a run, as far as the Kustomization's history tells it."""

    revision: str | None  # e.g. main@sha1:<40 hex>; None when unknown
    certain: bool
    note: str
    first_reconciled: str | None = None
    digest: str | None = None

    def line(self) -> str:
        if self.revision is None:
            return f"unknown ({self.note})"
        return self.revision + (f" ({self.note})" if self.note else "")

    def as_dict(self) -> dict:
        return {"revision": self.revision, "known": self.revision is not None, "certain": self.certain,
                "firstReconciled": self.first_reconciled, "digest": self.digest, "note": self.note}


def creating_revision(history: list[dict], created: str | None) -> Revision:
    """The git revision whose apply created a job made at `created`, from a Kustomization's `status.history`.

    The succeeded snapshot with the smallest `firstReconciled` >= the job's creationTimestamp (both floored to
    the second). Marked uncertain when the history is full and all of it is newer than the job (a snapshot
    rotated out may have been the one), or when several snapshots were first applied in that same second.
    Without such a snapshot, a succeeded one that was first applied before the job and was still being
    re-applied after it (Flux re-creating a job deleted by hand) is the answer; else "unknown"."""
    job_s = _second(created)
    if job_s is None:
        return Revision(None, False, "the job has no creationTimestamp")
    snaps = [s for s in history or [] if _second(s.get("firstReconciled")) is not None]
    ok = [s for s in snaps if s.get("lastReconciledStatus") == SUCCEEDED]
    after = [s for s in ok if _second(s["firstReconciled"]) >= job_s]
    if after:
        # history is newest-first (by lastReconciled): among equal seconds the later one in the list came first
        order = {id(s): i for i, s in enumerate(snaps)}
        best = min(after, key=lambda s: (_second(s["firstReconciled"]), -order[id(s)]))
        notes = []
        certain = True
        ties = [s for s in after if _second(s["firstReconciled"]) == _second(best["firstReconciled"])]
        if len(ties) > 1:
            certain = False
            notes.append(f"uncertain: {len(ties)} snapshots were first applied in the same second")
        full = len(history) >= HISTORY_MAX
        if full and all((_second(s.get("lastReconciled")) or 0) >= job_s for s in snaps):
            certain = False
            notes.append(f"uncertain: the history of {HISTORY_MAX} is full and newer than the job; "
                         "an older snapshot rotated out may have created it")
        return Revision(_rev(best), certain, "; ".join(notes), best.get("firstReconciled"), best.get("digest"))
    spanning = [s for s in ok if _second(s["firstReconciled"]) < job_s <= (_second(s.get("lastReconciled")) or 0)]
    if spanning:
        s = max(spanning, key=lambda s: _second(s["firstReconciled"]))
        return Revision(_rev(s), False, "re-applied: these objects were first applied before the job existed, "
                                        "so it was re-created (e.g. after a deletion by hand)",
                        s.get("firstReconciled"), s.get("digest"))
    return Revision(None, False, f"older than the Kustomization's history of {HISTORY_MAX}")


def _rev(snapshot: dict) -> str | None:
    md = snapshot.get("metadata") or {}
    return md.get("revision") or md.get("originRevision")


def _condition(obj: dict, kind: str) -> dict | None:
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c.get("type") == kind:
            return {"status": c.get("status"), "reason": c.get("reason") or "",
                    "message": " ".join((c.get("message") or "").split())}
    return None


def _forbidden(res: Resource, ns: str, exc: ApiError) -> str:
    return f"cannot get {res.plural}.{res.group} in namespace {ns} (forbidden){': ' + exc.server_message if exc.server_message else ''}"


def describe(kube, job: dict, *, installed: bool | None = None) -> dict:
    """What Flux says about the run `job`: a dict for `-o json` (see README, 'GitOps') with `line`, the
    one-line summary `launcher status` prints, and `lines`, what `gitops-status` prints.

    Optional reads (rbac.CALLS): a forbidden or absent Kustomization/GitRepository is one line, not an error."""
    owner = flux_owner(job)
    if owner is None:
        return {"managedBy": None, "line": NOT_FLUX, "lines": [NOT_FLUX]}
    ns, name = owner
    out: dict = {"managedBy": "flux", "kustomization": {"namespace": ns, "name": name}}
    where = f"Kustomization {ns}/{name}"
    if installed is None:
        installed = flux_installed(kube)
    out["fluxInstalled"] = installed
    if not installed:
        text = f"applied by Flux {where}, but Flux is not installed (no {KS_GROUP}/{KS_VERSION} served)"
        return {**out, "line": text, "lines": [text]}
    try:
        ks = kube.get(KUSTOMIZATION, name, namespace=ns)
    except ApiError as exc:
        if exc.status != 403:
            raise
        text = f"applied by Flux {where}: {_forbidden(KUSTOMIZATION, ns, exc)}: revision not shown"
        return {**out, "error": "forbidden", "line": text, "lines": [text]}
    if ks is None:
        text = f"applied by Flux {where}, which no longer exists: revision not shown"
        return {**out, "error": "notFound", "line": text, "lines": [text]}
    st = ks.get("status") or {}
    ready = _condition(ks, "Ready")
    created = (job.get("metadata") or {}).get("creationTimestamp")
    rev = creating_revision(st.get("history") or [], created)
    out.update({
        "source": _source(kube, ks, ns),
        "ready": ready,
        "lastAppliedRevision": st.get("lastAppliedRevision"),
        "lastAttemptedRevision": st.get("lastAttemptedRevision"),
        "createdByRevision": rev.as_dict(),
    })
    ready_text = "Ready unknown" if ready is None else (
        f"Ready={ready['status']}" + (f" {ready['reason']}" if ready["reason"] else "")
        + (f": {ready['message']}" if ready["message"] else ""))
    src = out["source"]
    lines = [
        f"kustomization: {ns}/{name}",
        f"source: {src['line']}",
        f"ready: {ready_text}",
        f"lastAppliedRevision: {st.get('lastAppliedRevision') or '-'}",
        f"lastAttemptedRevision: {st.get('lastAttemptedRevision') or '-'}",
        f"created by revision: {rev.line()}"
        + (f", first applied {rev.first_reconciled}" if rev.first_reconciled else "") + " (from Flux's history)",
    ]
    line = f"Flux {where}, created by {rev.revision or 'an unknown revision'}; {ready_text}"
    return {**out, "line": line, "lines": lines}


def _source(kube, ks: dict, ks_ns: str) -> dict:
    """The Kustomization's source (a GitRepository: url, ref, artifact revision); other kinds by name only."""
    ref = (ks.get("spec") or {}).get("sourceRef") or {}
    kind, name = ref.get("kind") or "GitRepository", ref.get("name") or ""
    ns = ref.get("namespace") or ks_ns
    out = {"kind": kind, "namespace": ns, "name": name}
    if kind != "GitRepository":
        return {**out, "line": f"{kind} {ns}/{name}"}
    try:
        repo = kube.get(GITREPOSITORY, name, namespace=ns)
    except ApiError as exc:
        if exc.status != 403:
            raise
        return {**out, "error": "forbidden", "line": f"GitRepository {ns}/{name}: {_forbidden(GITREPOSITORY, ns, exc)}"}
    if repo is None:
        return {**out, "error": "notFound", "line": f"GitRepository {ns}/{name}: not found"}
    spec_ref = (repo.get("spec") or {}).get("ref") or {}
    url = (repo.get("spec") or {}).get("url")
    artifact = ((repo.get("status") or {}).get("artifact") or {}).get("revision")
    refs = " ".join(f"{k} {v}" for k, v in spec_ref.items() if v)
    out.update({"url": url, "ref": spec_ref, "artifactRevision": artifact})
    return {**out, "line": f"GitRepository {ns}/{name} {url} {refs or '(default branch)'}"
                           + (f", artifact {artifact}" if artifact else "")}
