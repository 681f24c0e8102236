{{/*
Names, labels and the pod template: the Helm mirror of launcher/spec/names.py and launcher/render/manifests.py.
Every value is written with toJson (JSON is YAML), as the launcher's templates write every value
through its `q`/`json` encoders: no value can inject YAML, and numbers that Helm holds as float64
print as integers (`{{ 1000000 }}` would print 1e+06).
*/}}

{{/* The spec as a mapping: the values rebuilt key for key by the generated grpo-exp3.specJson. */}}
{{- define "grpo-exp3.spec" -}}
{{- include "grpo-exp3.specJson" . -}}
{{- end -}}

{{/*
Namespace of every object: scheduling.namespace as the spec resolves it (null: the release namespace,
so `helm install -n team-a` needs no value); _validate.tpl refuses any other namespace.
*/}}
{{- define "grpo-exp3.namespace" -}}
{{- (include "grpo-exp3.spec" . | fromJson).scheduling.namespace -}}
{{- end -}}

{{/* Config hash: sha256 of the canonical JSON of the spec, as ExperimentSpec.config_hash. */}}
{{- define "grpo-exp3.hash" -}}
{{- $c := include "grpo-exp3.constants" . | fromJson -}}
{{- include "grpo-exp3.specJson" . | sha256sum | trunc (int $c.hashLen) -}}
{{- end -}}

{{/* Training job name `<name>-<hash>` (labels.job_name); grpo-exp3.instance is the rendered job's name. */}}
{{- define "grpo-exp3.jobName" -}}
{{- printf "%s-%s" .Values.name (include "grpo-exp3.hash" .) -}}
{{- end -}}

{{/*
Evaluation (`launcher eval`, commands/eval.py): the chart-only `eval` values, never part of the spec.
With eval.enabled the release is the evaluation job instead of the training job: every object then
takes the eval job's name as its instance and `eval` as its component.
"true" when eval.enabled, else empty.
*/}}
{{- /* the run's checkpoint directory (ExperimentSpec.checkpoint_path): per job name, so per config hash */ -}}
{{- define "grpo-exp3.checkpointPath" -}}
{{- $s := include "grpo-exp3.spec" . | fromJson -}}
{{- printf "%s/%s/%s" $s.trainer.checkpoint_dir $s.trainer.project_name (include "grpo-exp3.jobName" .) -}}
{{- end -}}

{{- define "grpo-exp3.evalEnabled" -}}
{{- if (.Values.eval | default dict).enabled }}true{{ end -}}
{{- end -}}

{{/* eval.checkpoint as the CLI passes it: "latest", a step number without leading zeros, or empty (null). */}}
{{- define "grpo-exp3.evalCheckpoint" -}}
{{- $ck := (.Values.eval | default dict).checkpoint -}}
{{- if kindIs "string" $ck }}{{ $ck }}{{ else if not (kindIs "invalid" $ck) }}{{ int64 $ck }}{{ end -}}
{{- end -}}

{{/* What the eval job evaluates (commands.eval.models_key): "base", "checkpoint=N", "base+checkpoint=latest". */}}
{{- define "grpo-exp3.evalModels" -}}
{{- $parts := list -}}
{{- if (.Values.eval | default dict).baseline }}{{ $parts = append $parts "base" }}{{ end -}}
{{- with include "grpo-exp3.evalCheckpoint" . }}{{ $parts = append $parts (printf "checkpoint=%s" .) }}{{ end -}}
{{- join "+" $parts -}}
{{- end -}}

{{/* The entrypoint's extra arguments (commands.eval.entry_args) as a JSON list; [] for training. */}}
{{- define "grpo-exp3.entryArgs" -}}
{{- $args := list -}}
{{- if include "grpo-exp3.evalEnabled" . -}}
{{- $args = list "--mode" "eval" -}}
{{- if .Values.eval.baseline }}{{ $args = append $args "--baseline" }}{{ end -}}
{{- with include "grpo-exp3.evalCheckpoint" . }}{{ $args = concat $args (list "--checkpoint" .) }}{{ end -}}
{{- end -}}
{{- $args | toJson -}}
{{- end -}}

{{/* app.kubernetes.io/component: "eval" with eval.enabled, else "trainer". */}}
{{- define "grpo-exp3.component" -}}
{{- ternary "eval" "trainer" (eq (include "grpo-exp3.evalEnabled" .) "true") -}}
{{- end -}}

{{/*
Name of the rendered job, its instance label and its ConfigMap's prefix: the training job name, or
with eval.enabled the eval job name (labels.eval_job_name): `<name cut to evalNameMax, trailing
dashes removed>-eval-<sha256(config hash + "|" + models)[:8]>`.
*/}}
{{- define "grpo-exp3.instance" -}}
{{- if include "grpo-exp3.evalEnabled" . -}}
{{- $c := include "grpo-exp3.constants" . | fromJson -}}
{{- $prefix := regexReplaceAll "-+$" (trunc (int $c.evalNameMax) .Values.name) "" -}}
{{- $digest := printf "%s|%s" (include "grpo-exp3.hash" .) (include "grpo-exp3.evalModels" .) | sha256sum | trunc (int $c.hashLen) -}}
{{- printf "%s-eval-%s" $prefix $digest -}}
{{- else -}}
{{- include "grpo-exp3.jobName" . -}}
{{- end -}}
{{- end -}}

{{/* Selector labels (labels.selector_labels), as JSON. */}}
{{- define "grpo-exp3.selectorLabels" -}}
{{- $c := include "grpo-exp3.constants" . | fromJson -}}
{{- dict "app.kubernetes.io/name" $c.appName $c.instanceLabel (include "grpo-exp3.instance" .) | toJson -}}
{{- end -}}

{{/*
Common labels (labels.common_labels), as JSON. managed-by is Helm's own (the launcher writes
grpo-launcher and acts on both); helm.sh/chart is Helm bookkeeping. Those two are the only labels
that differ from the launcher's (labels.HELM_BOOKKEEPING).
*/}}
{{- define "grpo-exp3.labels" -}}
{{- $c := include "grpo-exp3.constants" . | fromJson -}}
{{- $l := include "grpo-exp3.selectorLabels" . | fromJson -}}
{{- $_ := set $l "app.kubernetes.io/version" .Chart.AppVersion -}}
{{- $_ = set $l $c.componentLabel (include "grpo-exp3.component" .) -}}
{{- $_ = set $l "app.kubernetes.io/managed-by" .Release.Service -}}
{{- $_ = set $l "app.kubernetes.io/part-of" $c.partOf -}}
{{- $_ = set $l $c.experimentLabel .Values.name -}}
{{- $_ = set $l $c.hashLabel (include "grpo-exp3.hash" .) -}}
{{- $_ = set $l "helm.sh/chart" (printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_") -}}
{{- with .Values.scheduling.queue -}}
{{- $_ = set $l $c.queueLabel . -}}
{{- end -}}
{{- $l | toJson -}}
{{- end -}}

{{/* ConfigMap carrying the spec (render.configmap_name). */}}
{{- define "grpo-exp3.configMapName" -}}
{{- printf "%s-spec" (include "grpo-exp3.instance" .) -}}
{{- end -}}

{{/*
Pod template (templates/_pod.j2 with render._pod_parts). Argument: dict with
  root: the chart context; gpu: GPU pod (true) or Ray head (false); container: container name;
  command: the container command or nil (Ray pods run what KubeRay starts).
*/}}
{{- define "grpo-exp3.podTemplate" -}}
{{- $root := .root -}}
{{- $s := include "grpo-exp3.spec" $root | fromJson -}}
{{- $c := include "grpo-exp3.constants" $root | fromJson -}}
{{- $res := $s.resources -}}
{{- $sched := $s.scheduling -}}
{{- $instance := include "grpo-exp3.instance" $root -}}
{{- /* environment (render._env_vars) */ -}}
{{- $env := list
  (dict "name" "LAUNCHER_SPEC" "value" $c.specPath)
  (dict "name" "PYTHONUNBUFFERED" "value" "1")
  (dict "name" "HOME" "value" $c.homeDir)
  (dict "name" "POD_NAME" "valueFrom" (dict "fieldRef" (dict "fieldPath" "metadata.name")))
  (dict "name" "POD_NAMESPACE" "valueFrom" (dict "fieldRef" (dict "fieldPath" "metadata.namespace")))
  (dict "name" "POD_IP" "valueFrom" (dict "fieldRef" (dict "fieldPath" "status.podIP")))
  (dict "name" "NCCL_DEBUG" "value" $s.network.nccl_debug)
  (dict "name" "NCCL_IB_DISABLE" "value" (ternary "0" "1" $s.network.nccl_ib)) -}}
{{- with $s.network.nccl_socket_ifname -}}
{{- $env = append $env (dict "name" "NCCL_SOCKET_IFNAME" "value" .) -}}
{{- end -}}
{{- /* on the pod, not only by the entrypoint: Ray workers on other pods inherit the pod's env */ -}}
{{- $ckpt := include "grpo-exp3.checkpointPath" $root -}}
{{- $env = concat $env (list
  (dict "name" "HF_HOME" "value" $s.model.cache_dir)
  (dict "name" "RAY_COLOR_PREFIX" "value" "0")
  (dict "name" "RAY_DEDUP_LOGS" "value" "0")
  (dict "name" "VERL_FILE_LOGGER_PATH" "value" (printf "%s/metrics/$(POD_NAME).jsonl" $ckpt))) -}}
{{- if $s.model.offline -}}
{{- range list "HF_HUB_OFFLINE" "HF_DATASETS_OFFLINE" "TRANSFORMERS_OFFLINE" -}}
{{- $env = append $env (dict "name" . "value" "1") -}}
{{- end -}}
{{- end -}}
{{- /* trackers (render._tracking_env): verl reads these; the loggers are trainer.logger plus every enabled tracker */ -}}
{{- $tk := $s.tracking -}}
{{- $mlflowOn := or $tk.mlflow.enabled (has "mlflow" $s.trainer.logger) -}}
{{- if and $mlflowOn $tk.mlflow.tracking_uri -}}
{{- $env = concat $env (list
  (dict "name" "MLFLOW_TRACKING_URI" "value" $tk.mlflow.tracking_uri)
  (dict "name" "MLFLOW_EXPERIMENT_NAME" "value" ($tk.mlflow.experiment | default $s.trainer.project_name))) -}}
{{- end -}}
{{- if or $tk.tensorboard.enabled (has "tensorboard" $s.trainer.logger) -}}
{{- $env = append $env (dict "name" "TENSORBOARD_DIR" "value" ($tk.tensorboard.log_dir | default (printf "%s/tensorboard" $ckpt))) -}}
{{- end -}}
{{- if or $tk.wandb.enabled (has "wandb" $s.trainer.logger) -}}
{{- with $tk.wandb.entity -}}
{{- $env = append $env (dict "name" "WANDB_ENTITY" "value" .) -}}
{{- end -}}
{{- with $tk.wandb.base_url -}}
{{- $env = append $env (dict "name" "WANDB_BASE_URL" "value" .) -}}
{{- end -}}
{{- end -}}
{{- /* secrets reach the pod only as references to existing Secrets, never as values */ -}}
{{- $refs := list (list "HF_TOKEN" $s.secrets.hf_token) (list "WANDB_API_KEY" ($tk.wandb.api_key | default $s.secrets.wandb_api_key))
  (list "RAY_AUTH_TOKEN" $s.secrets.ray_auth_token) -}}
{{- if $tk.mlflow.enabled -}}
{{- $refs = concat $refs (list (list "MLFLOW_TRACKING_USERNAME" $tk.mlflow.username)
  (list "MLFLOW_TRACKING_PASSWORD" $tk.mlflow.password) (list "MLFLOW_TRACKING_TOKEN" $tk.mlflow.token)) -}}
{{- end -}}
{{- range $refs -}}
{{- $ref := index . 1 -}}
{{- if $ref -}}
{{- $env = append $env (dict "name" (index . 0) "valueFrom" (dict "secretKeyRef" (dict "name" $ref.name "key" $ref.key))) -}}
{{- end -}}
{{- end -}}
{{- /* the user's env: last; _validate.tpl refused the names the launcher sets (render.user_env_var) */ -}}
{{- range $s.env -}}
{{- if .secret_key_ref -}}
{{- $env = append $env (dict "name" .name "valueFrom" (dict "secretKeyRef" (dict "name" .secret_key_ref.name "key" .secret_key_ref.key))) -}}
{{- else if .config_map_key_ref -}}
{{- $env = append $env (dict "name" .name "valueFrom" (dict "configMapKeyRef" (dict "name" .config_map_key_ref.name "key" .config_map_key_ref.key))) -}}
{{- else -}}
{{- $env = append $env (dict "name" .name "value" .value) -}}
{{- end -}}
{{- end -}}
{{- /* security contexts (render._security) */ -}}
{{- $sec := $s.security -}}
{{- $podSec := dict "runAsNonRoot" true "runAsUser" $sec.run_as_user "runAsGroup" $sec.run_as_group "fsGroup" $sec.run_as_group "seccompProfile" (dict "type" "RuntimeDefault") -}}
{{- $caps := $sec.extra_capabilities | default list -}}
{{- if and $s.network.nccl_ib (not (has "IPC_LOCK" $caps)) -}}
{{- /* RDMA registers (pins) memory */ -}}
{{- $caps = append $caps "IPC_LOCK" -}}
{{- end -}}
{{- $capabilities := dict "drop" (list "ALL") -}}
{{- if $caps -}}
{{- $_ := set $capabilities "add" (sortAlpha $caps) -}}
{{- end -}}
{{- $ctrSec := dict "allowPrivilegeEscalation" false "privileged" false "readOnlyRootFilesystem" $sec.read_only_root_filesystem "runAsNonRoot" true "capabilities" $capabilities -}}
{{- /* volumes (render._volumes) */ -}}
{{- $st := $s.storage -}}
{{- $workspace := dict "name" "workspace" "emptyDir" dict -}}
{{- if $st.claim_name -}}
{{- $workspace = dict "name" "workspace" "persistentVolumeClaim" (dict "claimName" $st.claim_name) -}}
{{- end -}}
{{- $volumes := list
  (dict "name" "spec" "configMap" (dict "name" (include "grpo-exp3.configMapName" $root)))
  (dict "name" "dshm" "emptyDir" (dict "medium" "Memory" "sizeLimit" $res.shm_size))
  $workspace
  (dict "name" "tmp" "emptyDir" dict)
  (dict "name" "home" "emptyDir" dict) -}}
{{- $mounts := list
  (dict "name" "spec" "mountPath" $c.specMount "readOnly" true)
  (dict "name" "dshm" "mountPath" "/dev/shm")
  (dict "name" "workspace" "mountPath" $st.mount_path)
  (dict "name" "tmp" "mountPath" "/tmp")
  (dict "name" "home" "mountPath" $c.homeDir) -}}
{{- /* tolerations (render._tolerations): unset fields left out, camelCase keys */ -}}
{{- $tolerations := list -}}
{{- range $sched.tolerations -}}
{{- $t := dict "operator" .operator -}}
{{- if not (kindIs "invalid" .key) }}{{ $_ := set $t "key" .key }}{{ end -}}
{{- if not (kindIs "invalid" .value) }}{{ $_ := set $t "value" .value }}{{ end -}}
{{- if not (kindIs "invalid" .effect) }}{{ $_ := set $t "effect" .effect }}{{ end -}}
{{- if not (kindIs "invalid" .toleration_seconds) }}{{ $_ := set $t "tolerationSeconds" (int64 .toleration_seconds) }}{{ end -}}
{{- $tolerations = append $tolerations $t -}}
{{- end -}}
{{- /* resources, node selector, tolerations and affinity: GPU pods vs the Ray head; a CPU-only pod
       (gpus_per_node 0, workload smoke) asks for no GPU and is not pinned to a GPU product
       (render._pod_parts, gpu_select.TABLE via $c.gpuSelectors); scheduling.node_selector and
       scheduling.affinity win over the GPU preset */ -}}
{{- $presetSelector := dict -}}
{{- $resources := dict "cpu" $res.head_cpu "memory" $res.head_memory -}}
{{- $affinity := dict -}}
{{- if .gpu -}}
{{- $resources = dict "cpu" $res.cpu "memory" $res.memory -}}
{{- if gt (int64 $res.gpus_per_node) 0 -}}
{{- $_ := set $resources $res.gpu_resource (int64 $res.gpus_per_node) -}}
{{- if not (kindIs "invalid" $res.gpu_type) -}}
{{- if eq $res.gpu_label_scheme "gfd" -}}
{{- $_ = set $presetSelector $res.gpu_product_label (index $c.gpuProducts $res.gpu_type) -}}
{{- else -}}
{{- $preset := index $c.gpuSelectors $res.gpu_label_scheme $res.gpu_type -}}
{{- $presetSelector = deepCopy $preset.nodeSelector -}}
{{- with $preset.matchExpressions -}}
{{- $_ = set $affinity "nodeAffinity" (dict "requiredDuringSchedulingIgnoredDuringExecution" (dict "nodeSelectorTerms" (list (dict "matchExpressions" .)))) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- /* GPU node pools are usually tainted <gpu_resource>:NoSchedule (render._tolerations) */ -}}
{{- if $sched.gpu_toleration -}}
{{- $has := false -}}
{{- range $tolerations -}}
{{- if eq (get . "key") $res.gpu_resource }}{{ $has = true }}{{ end -}}
{{- end -}}
{{- if not $has -}}
{{- $tolerations = append $tolerations (dict "key" $res.gpu_resource "operator" "Exists" "effect" "NoSchedule") -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- if gt (int64 $res.nodes) 1 -}}
{{- /* one GPU pod per node, so a multi-node run really spans nodes */ -}}
{{- $_ := set $affinity "podAntiAffinity" (dict "requiredDuringSchedulingIgnoredDuringExecution" (list (dict "labelSelector" (dict "matchLabels" (dict $c.instanceLabel $instance $c.roleLabel "gpu")) "topologyKey" "kubernetes.io/hostname"))) -}}
{{- end -}}
{{- end -}}
{{- $nodeSelector := merge (deepCopy ($sched.node_selector | default dict)) $presetSelector -}}
{{- range $k, $val := ($sched.affinity | default dict) -}}
{{- $_ := set $affinity $k $val -}}
{{- end -}}
{{- /* init container: fixed on GPU pods, a CPU-only pod's own size (render._init_resources) */ -}}
{{- $initResources := dict "cpu" "1" "memory" "2Gi" -}}
{{- if eq (int64 $res.gpus_per_node) 0 -}}
{{- $initResources = deepCopy $resources -}}
{{- end -}}
{{- $imagePullSecrets := list -}}
{{- range $s.secrets.image_pull_secrets -}}
{{- $imagePullSecrets = append $imagePullSecrets (dict "name" .) -}}
{{- end -}}
{{- $labels := include "grpo-exp3.labels" $root | fromJson -}}
{{- $_ := set $labels $c.roleLabel (ternary "gpu" "head" .gpu) -}}
{{- if get . "submitter" -}}
{{- /* KubeRay's `ray job submit` pod (render._submitter_parts): small, /tmp and $HOME only */ -}}
{{- $_ := set $labels $c.roleLabel "submitter" -}}
{{- $subEnv := list -}}
{{- range $env -}}
{{- if has .name (list "PYTHONUNBUFFERED" "HOME" "POD_NAME" "POD_NAMESPACE" "RAY_COLOR_PREFIX" "RAY_AUTH_TOKEN") -}}
{{- $subEnv = append $subEnv . -}}
{{- end -}}
{{- end -}}
{{- $size := dict "cpu" "500m" "memory" "1Gi" }}
metadata:
  labels: {{ $labels | toJson }}
  annotations: {{ $sched.pod_annotations | default dict | toJson }}
spec:
  restartPolicy: "Never"
  automountServiceAccountToken: false
  enableServiceLinks: false
{{- with $sched.node_selector }}
  nodeSelector: {{ . | toJson }}
{{- end }}
{{- with $tolerations }}
  tolerations: {{ . | toJson }}
{{- end }}
{{- with $affinity }}
  affinity: {{ . | toJson }}
{{- end }}
{{- with $imagePullSecrets }}
  imagePullSecrets: {{ . | toJson }}
{{- end }}
  securityContext: {{ $podSec | toJson }}
  containers:
  - name: "ray-job-submitter"
    image: {{ $s.image | toJson }}
    imagePullPolicy: {{ $s.image_pull_policy | toJson }}
    env: {{ $subEnv | toJson }}
    resources:
      requests: {{ $size | toJson }}
      limits: {{ $size | toJson }}
    securityContext: {{ $ctrSec | toJson }}
    volumeMounts: {{ list (dict "name" "tmp" "mountPath" "/tmp") (dict "name" "home" "mountPath" $c.homeDir) | toJson }}
  volumes: {{ list (dict "name" "tmp" "emptyDir" dict) (dict "name" "home" "emptyDir" dict) | toJson }}
{{- else }}
metadata:
  labels: {{ $labels | toJson }}
  annotations: {{ $sched.pod_annotations | default dict | toJson }}
spec:
  restartPolicy: {{ get . "restartPolicy" | default "Never" | quote }}
  automountServiceAccountToken: false
  enableServiceLinks: false
  terminationGracePeriodSeconds: 120
{{- with $sched.service_account }}
  serviceAccountName: {{ . | toJson }}
{{- end }}
{{- with $sched.priority_class }}
  priorityClassName: {{ . | toJson }}
{{- end }}
{{- with $nodeSelector }}
  nodeSelector: {{ . | toJson }}
{{- end }}
{{- with $tolerations }}
  tolerations: {{ . | toJson }}
{{- end }}
{{- with $affinity }}
  affinity: {{ . | toJson }}
{{- end }}
{{- with $imagePullSecrets }}
  imagePullSecrets: {{ . | toJson }}
{{- end }}
  securityContext: {{ $podSec | toJson }}
  initContainers:
  - name: "prepare-data"
    image: {{ $s.image | toJson }}
    imagePullPolicy: {{ $s.image_pull_policy | toJson }}
    command: {{ concat $c.entrypoint (list "--prepare-data-only") | toJson }}
    env: {{ $env | toJson }}
    resources: {{ dict "requests" $initResources "limits" $initResources | toJson }}
    securityContext: {{ $ctrSec | toJson }}
    volumeMounts: {{ $mounts | toJson }}
  containers:
  - name: {{ .container | toJson }}
    image: {{ $s.image | toJson }}
    imagePullPolicy: {{ $s.image_pull_policy | toJson }}
{{- with .command }}
    command: {{ . | toJson }}
{{- end }}
    env: {{ $env | toJson }}
    resources:
      requests: {{ $resources | toJson }}
      limits: {{ $resources | toJson }}
    securityContext: {{ $ctrSec | toJson }}
    volumeMounts: {{ $mounts | toJson }}
  volumes: {{ $volumes | toJson }}
{{- end }}
{{- end -}}

{{/*
Name of the `helm test` objects (templates/tests/): `<release>-<chart>-test`, cut to 63 characters. Tied
to the release, not the job: a test belongs to the release and is replaced by the next `helm test`.
*/}}
{{- define "grpo-exp3.testName" -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 58 | trimSuffix "-" | printf "%s-test" -}}
{{- end -}}

{{/*
Labels of the `helm test` objects, as JSON: the common labels without app.kubernetes.io/instance (the
launcher selects a run's pods by it, and the test pod is not one of them), component `helm-test`.
*/}}
{{- define "grpo-exp3.testLabels" -}}
{{- $l := include "grpo-exp3.labels" . | fromJson -}}
{{- $c := include "grpo-exp3.constants" . | fromJson -}}
{{- $_ := unset $l $c.instanceLabel -}}
{{- $_ = set $l $c.componentLabel "helm-test" -}}
{{- $l | toJson -}}
{{- end -}}
