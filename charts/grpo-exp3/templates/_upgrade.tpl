{{/*
`helm upgrade` never silently deletes a running job. Changed values are a new run with a new job name
(the config hash), so an upgrade would make Helm delete the release's old job, and with it a training
in progress (a PyTorchJob/RayJob/TrainJob spec cannot be changed in place anyway). On upgrade, every job of
this release (Helm's meta.helm.sh/release-name/-namespace annotations) whose kind/name the new values
no longer render is looked up; if one has not finished, the upgrade fails before changing anything,
naming the job and the ways on. A finished job is replaced as usual (its pods go with it).
`lookup` is empty under `helm template`/`--dry-run=client`, so the guard only acts against a cluster
(`helm upgrade --dry-run=server` runs it too); a kind the cluster does not serve is skipped.
`helm rollback` reuses a stored manifest and is not checked.
*/}}
{{- define "grpo-exp3.upgradeGuard" -}}
{{- if .Release.IsUpgrade -}}
{{- $ns := include "grpo-exp3.namespace" . -}}
{{- $jobKinds := (include "grpo-exp3.constants" . | fromJson).jobKinds -}}
{{- $newKind := (index $jobKinds .Values.backend).kind -}}
{{- $newName := include "grpo-exp3.instance" . -}}
{{- $running := list -}}
{{- range $backend := keys $jobKinds | sortAlpha -}}
{{- $apiVersion := (index $jobKinds $backend).apiVersion -}}
{{- $kind := (index $jobKinds $backend).kind -}}
{{- if $.Capabilities.APIVersions.Has (printf "%s/%s" $apiVersion $kind) -}}
{{- range (index (lookup $apiVersion $kind $ns "") "items") | default list -}}
{{- $ann := .metadata.annotations | default dict -}}
{{- $ours := and (eq (get $ann "meta.helm.sh/release-name") $.Release.Name) (eq (get $ann "meta.helm.sh/release-namespace") $.Release.Namespace) -}}
{{- $kept := and (eq $kind $newKind) (eq .metadata.name $newName) -}}
{{- if and $ours (not $kept) (not (include "grpo-exp3.jobFinished" (dict "kind" $kind "job" .))) -}}
{{- $running = append $running (printf "%s/%s" ($kind | lower) .metadata.name) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- with $running -}}
{{- $first := first . -}}
{{- fail (printf "\n%s: helm upgrade refused: it would delete %s, which has not finished (the new values render %s/%s instead: changed values are a new run with a new name, and Helm deletes the old job with its pods). Either wait for it to finish (python -m launcher wait %s --namespace %s), or stop it yourself (kubectl -n %s delete %s) and run the upgrade again, or start the new run as its own release (helm install <new-release> ...)." $.Chart.Name (join ", " .) ($newKind | lower) $newName (base $first) $ns $ns $first) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* "true" when the job object (argument: dict kind, job) has finished: a PyTorchJob Succeeded/Failed, a
TrainJob Complete/Failed, or a terminal RayJob. */}}
{{- define "grpo-exp3.jobFinished" -}}
{{- $status := .job.status | default dict -}}
{{- if has .kind (list "PyTorchJob" "TrainJob") -}}
{{- $done := ternary (list "Succeeded" "Failed") (list "Complete" "Failed") (eq .kind "PyTorchJob") -}}
{{- range $status.conditions | default list -}}
{{- if and (has .type $done) (eq .status "True") }}true{{ end -}}
{{- end -}}
{{- else if has ($status.jobDeploymentStatus | default "") (list "Complete" "Failed") -}}
true
{{- end -}}
{{- end -}}
