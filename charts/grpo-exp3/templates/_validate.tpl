{{/*
Cross-field rules that values.schema.json cannot express: the Helm mirror of spec.check_rules
(verl's batch arithmetic, name length, GPU type, CPU training's image and settings, built-in models,
resume/wandb/storage consistency, verl.overrides that set a key the launcher sets,
backend trainjob's name and clean-pod policy), and with
eval.enabled the refusals of `launcher eval` (commands/eval.plan). All problems
are reported at once, one line each, as `values.<key> must be ..., got <value>`.
The chart additionally requires scheduling.namespace, when set, to equal the release namespace
(null, the default, is the release namespace): the objects live in scheduling.namespace (it is part
of the spec, and so of the hash, exactly as with `launcher render`), and a release recorded in one
namespace with objects in another confuses `helm list`/`helm uninstall`/`helm test` users.
*/}}
{{- define "grpo-exp3.validate" -}}
{{- $v := .Values -}}
{{- $c := include "grpo-exp3.constants" . | fromJson -}}
{{- $errs := list -}}
{{- $res := $v.resources -}}
{{- $nodes := int64 $res.nodes -}}
{{- $gpus := int64 $res.gpus_per_node -}}
{{- /* a CPU-only pod (workload smoke) counts as one worker for verl's batch arithmetic (spec.workers_per_node) */ -}}
{{- $gpn := ternary $gpus 1 (gt $gpus 0) -}}
{{- $world := mul $nodes $gpn -}}
{{- $batch := int64 $v.data.train_batch_size -}}
{{- $n := int64 $v.rollout.n -}}
{{- $mini := int64 $v.actor.ppo_mini_batch_size -}}
{{- $micro := int64 $v.actor.ppo_micro_batch_size_per_gpu -}}
{{- $tp := int64 $v.rollout.tensor_parallel_size -}}
{{- if gt (len $v.name) (int $c.nameMax) -}}
{{- $errs = append $errs (printf "values.name must be at most %v characters (the job name adds '-<%v-char config hash>' and must stay within %v), got %q (%d characters)" $c.nameMax $c.hashLen $c.jobNameMax $v.name (len $v.name)) -}}
{{- end -}}
{{- /* the image tag (contract.image_tag): after the last "/", before any "@digest"; CPU images end in cpuImageTagSuffix */ -}}
{{- $imageName := splitList "/" (first (splitList "@" $v.image)) | last -}}
{{- $cpuImage := and (contains ":" $imageName) (hasSuffix $c.cpuImageTagSuffix (splitList ":" $imageName | last)) -}}
{{- $cpuTraining := and (eq $gpus 0) (eq $v.workload "grpo") -}}
{{- if $cpuTraining -}}
{{- /* spec.rules._cpu_training_problems */ -}}
{{- if not $cpuImage -}}
{{- $errs = append $errs (printf "values.resources.gpus_per_node must be at least 1 for workload grpo with image %s (0, CPU-only pods, needs an image carrying the verl CPU platform, whose tag ends in %s, e.g. %s; or workload smoke), got 0" $v.image $c.cpuImageTagSuffix $c.cpuImageExample) -}}
{{- end -}}
{{- if ne $v.actor.strategy "fsdp2" -}}
{{- $errs = append $errs (printf "values.actor.strategy must be fsdp2 on CPU-only pods (resources.gpus_per_node 0: verl's FSDP1 refuses CPU parameters), got %q" $v.actor.strategy) -}}
{{- end -}}
{{- if $v.actor.use_remove_padding -}}
{{- $errs = append $errs "values.actor.use_remove_padding must be false on CPU-only pods (resources.gpus_per_node 0: removing padding needs flash-attn's GPU kernels), got true" -}}
{{- end -}}
{{- if ne $v.rollout.name "vllm" -}}
{{- $errs = append $errs (printf "values.rollout.name must be vllm on CPU-only pods (resources.gpus_per_node 0: the image carries vLLM's CPU build), got %q" $v.rollout.name) -}}
{{- end -}}
{{- if ne $tp 1 -}}
{{- $errs = append $errs (printf "values.rollout.tensor_parallel_size must be 1 on CPU-only pods (resources.gpus_per_node 0: one vLLM CPU engine per pod), got %d" $tp) -}}
{{- end -}}
{{- end -}}
{{- /* spec.rules._model_problems: a builtin: model is one the contract knows, in the project's images (named
projectImageName, any registry) or a CPU image, without local_dir */ -}}
{{- if hasPrefix $c.builtinPrefix $v.model.path -}}
{{- $known := list -}}
{{- range $c.builtinModels -}}{{- $known = append $known (printf "%s%s" $c.builtinPrefix .) -}}{{- end -}}
{{- if not (has (trimPrefix $c.builtinPrefix $v.model.path) $c.builtinModels) -}}
{{- $errs = append $errs (printf "values.model.path must be a known built-in model (%s), a hub id or a path inside the pod, got %q" (join ", " $known) $v.model.path) -}}
{{- else -}}
{{- if not (or $cpuImage (eq (splitList ":" $imageName | first) $c.projectImageName)) -}}
{{- $errs = append $errs (printf "values.model.path must be a model image %s carries (%s is in the project's images, named %s in any registry, and in CPU images, whose tag ends in %s, e.g. %s), a hub id or a path inside the pod, got %q" $v.image $v.model.path $c.projectImageName $c.cpuImageTagSuffix $c.cpuImageExample $v.model.path) -}}
{{- end -}}
{{- if not (kindIs "invalid" $v.model.local_dir) -}}
{{- $errs = append $errs (printf "values.model.local_dir must be null with a built-in model (%s is already in the image), got %q" $v.model.path $v.model.local_dir) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- if not (kindIs "invalid" $res.gpu_type) -}}
{{- if not (hasKey $c.gpuProducts $res.gpu_type) -}}
{{- $errs = append $errs (printf "values.resources.gpu_type must be one of %v, got %q" $c.gpuTypes $res.gpu_type) -}}
{{- else if not (has $res.gpu_type (index $c.gpuTypesByScheme $res.gpu_label_scheme)) -}}
{{- $errs = append $errs (printf "values.resources.gpu_type must be a GPU gpu_label_scheme %s can select: one of %v, or null for any GPU node, got %q" $res.gpu_label_scheme (index $c.gpuTypesByScheme $res.gpu_label_scheme) $res.gpu_type) -}}
{{- end -}}
{{- end -}}
{{- if and (gt $world 0) (mod (mul $batch $n) $world) -}}
{{- $errs = append $errs (printf "values.data.train_batch_size must make train_batch_size × rollout.n divisible by the GPU count %d (resources.nodes %d × resources.gpus_per_node %d%s); %d × %d = %d, got %d" $world $nodes $gpus (ternary ", a CPU pod counts as 1" "" (eq $gpus 0)) $batch $n (mul $batch $n) $batch) -}}
{{- end -}}
{{- if gt $mini $batch -}}
{{- $errs = append $errs (printf "values.actor.ppo_mini_batch_size must be at most data.train_batch_size (%d), got %d" $batch $mini) -}}
{{- else if and (gt $world 0) (mod (mul $mini $n) $world) -}}
{{- $errs = append $errs (printf "values.actor.ppo_mini_batch_size must make ppo_mini_batch_size × rollout.n divisible by the GPU count %d; %d × %d = %d, got %d" $world $mini $n (mul $mini $n) $mini) -}}
{{- else if and (gt $world 0) (gt $micro 0) (mod (div (mul $mini $n) $world) $micro) -}}
{{- $errs = append $errs (printf "values.actor.ppo_micro_batch_size_per_gpu must be a divisor of the per-GPU mini-batch ppo_mini_batch_size × rollout.n / GPUs = %d × %d / %d = %d, got %d" $mini $n $world (div (mul $mini $n) $world) $micro) -}}
{{- else if and (gt $world 0) (not (mod (mul $batch $n) $world)) -}}
{{- /* verl pads train_batch_size × n up to a multiple of lcm(GPUs, ppo_mini_batch_size × n) and
       computes log-probs per GPU in micro-batches of log_prob_micro_batch_size_per_gpu.
       lcm through Euclid's gcd: 100 rounds are far more than any pair of int64 needs. */ -}}
{{- $samples := mul $mini $n -}}
{{- $a := $world -}}
{{- $b := $samples -}}
{{- range until 100 -}}
{{- if ne $b 0 -}}
{{- $t := mod $a $b -}}
{{- $a = $b -}}
{{- $b = $t -}}
{{- end -}}
{{- end -}}
{{- $multiple := div (mul $world $samples) $a -}}
{{- $perGpu := div (mul (div (add (mul $batch $n) (sub $multiple 1)) $multiple) $multiple) $world -}}
{{- $lpMicro := int64 $v.rollout.log_prob_micro_batch_size_per_gpu -}}
{{- if and (gt $lpMicro 0) (mod $perGpu $lpMicro) -}}
{{- $errs = append $errs (printf "values.rollout.log_prob_micro_batch_size_per_gpu must be a divisor of the per-GPU log-prob batch (train_batch_size × rollout.n padded to a multiple of lcm(GPUs, ppo_mini_batch_size × rollout.n), / GPUs) = %d, got %d" $perGpu $lpMicro) -}}
{{- end -}}
{{- end -}}
{{- if and (not $cpuTraining) (or (gt $tp $gpn) (and (gt $tp 0) (mod $gpn $tp))) -}}
{{- $errs = append $errs (printf "values.rollout.tensor_parallel_size must be a divisor of resources.gpus_per_node (%d): tensor parallelism stays within a node, got %d" $gpn $tp) -}}
{{- end -}}
{{- $tr := $v.trainer -}}
{{- if and (eq $tr.resume_mode "resume_path") (not $tr.resume_from_path) -}}
{{- $errs = append $errs "values.trainer.resume_from_path must be a global_step_N path when resume_mode is resume_path, got null" -}}
{{- end -}}
{{- if and $tr.resume_from_path (not (contains "global_step_" (toString $tr.resume_from_path))) -}}
{{- $errs = append $errs (printf "values.trainer.resume_from_path must be a path containing 'global_step_', got %q" $tr.resume_from_path) -}}
{{- end -}}
{{- /* trackers and env (spec._tracking_problems, spec._env_problems) */ -}}
{{- $tk := $v.tracking -}}
{{- if and (or $tk.wandb.enabled (has "wandb" $tr.logger)) (not (or $tk.wandb.api_key $v.secrets.wandb_api_key)) -}}
{{- $errs = append $errs (printf "values.%s must be a Secret reference when W&B logging is on (tracking.wandb.enabled or trainer.logger includes wandb), got null" (ternary "tracking.wandb.api_key" "secrets.wandb_api_key" (not (not $tk.wandb.enabled)))) -}}
{{- end -}}
{{- if and $tk.wandb.api_key $v.secrets.wandb_api_key -}}
{{- $errs = append $errs "values.tracking.wandb.api_key must be one W&B key reference: either tracking.wandb.api_key or secrets.wandb_api_key, got both are set" -}}
{{- end -}}
{{- if and (or $tk.mlflow.enabled (has "mlflow" $tr.logger)) (or (not $tk.mlflow.enabled) (not $tk.mlflow.tracking_uri)) -}}
{{- $errs = append $errs (printf "values.tracking.mlflow.tracking_uri must be a tracking server URI with tracking.mlflow.enabled when MLflow logging is on (verl's default, an SQLite file under /tmp in the pod, is lost with the pod), got %v" ($tk.mlflow.tracking_uri | default "null")) -}}
{{- end -}}
{{- if and $tk.mlflow.password (not $tk.mlflow.username) -}}
{{- $errs = append $errs "values.tracking.mlflow.username must be a Secret reference when tracking.mlflow.password is set, got null" -}}
{{- end -}}
{{- with $tk.tensorboard.log_dir -}}
{{- $mount := trimSuffix "/" $v.storage.mount_path -}}
{{- if not (or (eq . $mount) (hasPrefix (printf "%s/" $mount) .)) -}}
{{- $errs = append $errs (printf "values.tracking.tensorboard.log_dir must be a directory under storage.mount_path (%s), so the event files outlive the pod, got %q" $v.storage.mount_path .) -}}
{{- end -}}
{{- end -}}
{{- if $v.tensorboard_server.enabled -}}
{{- if not $v.storage.claim_name -}}
{{- $errs = append $errs "values.storage.claim_name must be a claim name when tensorboard_server.enabled is true (TensorBoard reads the run's event files from its volume), got null" -}}
{{- end -}}
{{- if not (or $tk.tensorboard.enabled (has "tensorboard" $tr.logger)) -}}
{{- $errs = append $errs "values.tracking.tensorboard.enabled must be true when tensorboard_server.enabled is true (nothing writes event files otherwise), got false" -}}
{{- end -}}
{{- end -}}
{{- $seen := dict -}}
{{- range $i, $e := $v.env -}}
{{- if or (has $e.name $c.reservedEnv) (hasPrefix $c.reservedEnvPrefix $e.name) -}}
{{- $errs = append $errs (printf "values.env[%d].name must be a variable the launcher does not set itself (it owns %s* and spec.RESERVED_ENV; tracking URIs, W&B and MLflow settings go in the tracking section), got %q" $i $c.reservedEnvPrefix $e.name) -}}
{{- end -}}
{{- if hasKey $seen $e.name -}}
{{- $errs = append $errs (printf "values.env[%d].name must be a name not already listed in env, got %q" $i $e.name) -}}
{{- end -}}
{{- $_ := set $seen $e.name true -}}
{{- $sources := 0 -}}
{{- range list "value" "secret_key_ref" "config_map_key_ref" -}}
{{- if not (kindIs "invalid" (index $e .)) -}}
{{- $sources = add1 $sources -}}
{{- end -}}
{{- end -}}
{{- if ne (int $sources) 1 -}}
{{- $errs = append $errs (printf "values.env[%d] must have exactly one of value, secret_key_ref, config_map_key_ref, got %d" $i (int $sources)) -}}
{{- end -}}
{{- end -}}
{{- /* verl.overrides: no key the launcher sets (spec.verl.override_conflicts): a typed field's, or one it owns */ -}}
{{- range $i, $o := $v.verl.overrides -}}
{{- $key := regexReplaceAll "^[+~]+" $o "" | splitList "=" | first -}}
{{- $why := "" -}}
{{- range $c.verlTypedKeys -}}
{{- $k := index . 0 -}}
{{- if and (not $why) (or (eq $key $k) (hasPrefix (printf "%s." $k) $key) (hasPrefix (printf "%s." $key) $k)) -}}
{{- $why = printf "%s is the typed field %s: set that instead" $k (index . 1) -}}
{{- end -}}
{{- end -}}
{{- range (ternary (concat $c.verlOwnedKeys $c.verlCpuKeys) $c.verlOwnedKeys $cpuTraining) -}}
{{- if and (not $why) (or (eq $key .) (hasPrefix (printf "%s." .) $key) (hasPrefix (printf "%s." $key) .)) -}}
{{- $why = printf "the launcher sets %s itself" . -}}
{{- end -}}
{{- end -}}
{{- if $why -}}
{{- $errs = append $errs (printf "values.verl.overrides[%d] must be a verl key the launcher does not set itself (%s), got %q" $i $why $o) -}}
{{- end -}}
{{- end -}}
{{- /* reward.function (spec.rules._reward_problems): a local file's content comes with --set-file; Helm cannot parse
Python, so the pod's entrypoint (which runs the same rules on spec.yaml) reports a file that is not Python */ -}}
{{- with $v.reward.function -}}
{{- if hasPrefix "pkg://" .path -}}
{{- if ne .source nil -}}
{{- $errs = append $errs (printf "values.reward.function.source must be unset for a pkg:// module (it comes from the image; source is the content of a local reward.function.path), got %d characters" (len .source)) -}}
{{- end -}}
{{- else if eq .source nil -}}
{{- $errs = append $errs (printf "values.reward.function.source must be the content of %s: --set-file reward.function.source=%s" .path .path) -}}
{{- end -}}
{{- end -}}
{{- /* health.stall.action restart (spec.rules): deleted pods must be started again by the operator to resume */ -}}
{{- if eq $v.health.stall.action "restart" -}}
{{- if ne $v.backend "pytorchjob" -}}
{{- $errs = append $errs (printf "values.health.stall.action must be %s, got restart" $c.stallRestartExpected) -}}
{{- else if lt (int $v.run_policy.backoff_limit) 1 -}}
{{- $errs = append $errs (printf "values.run_policy.backoff_limit must be %s, got %v" $c.stallRestartBackoff $v.run_policy.backoff_limit) -}}
{{- end -}}
{{- end -}}
{{- /* backend trainjob: what Kubeflow Trainer v2.2 and JobSet refuse (spec._trainjob_problems) */ -}}
{{- if eq $v.backend "trainjob" -}}
{{- $job := include "grpo-exp3.jobName" . -}}
{{- if not (regexMatch $c.trainjobNamePattern $job) -}}
{{- $errs = append $errs (printf "values.name must be a name starting with a letter for backend trainjob (a TrainJob's name is an RFC 1035 label: the CRD refuses one starting with a digit), got %q" $v.name) -}}
{{- end -}}
{{- /* spec.trainjob_names: the replicated Job, the last node's hostname, the headless Service */ -}}
{{- range $what, $name := dict "job" (printf "%s-node-0" $job) "hostname" (printf "%s-node-0-%d" $job (sub $nodes 1)) "service" $job -}}
{{- if gt (len $name) (int $c.dnsLabelMax) -}}
{{- $errs = append $errs (printf "values.name must be a shorter name: the JobSet's %s name %s would exceed %v characters, got %q" $what $name $c.dnsLabelMax $v.name) -}}
{{- end -}}
{{- end -}}
{{- if ne $v.run_policy.clean_pod_policy "None" -}}
{{- $errs = append $errs (printf "values.run_policy.clean_pod_policy must be None for backend trainjob (JobSet has no clean-pod policy: the pods stay until the TrainJob is deleted or run_policy.ttl_seconds_after_finished removes the JobSet), got %q" $v.run_policy.clean_pod_policy) -}}
{{- end -}}
{{- end -}}
{{- $st := $v.storage -}}
{{- if and $st.create (not $st.claim_name) -}}
{{- $errs = append $errs "values.storage.claim_name must be a claim name when storage.create is true, got null" -}}
{{- end -}}
{{- if and (gt $nodes 1) $st.claim_name (eq $st.access_mode "ReadWriteOnce") $st.create -}}
{{- $errs = append $errs (printf "values.storage.access_mode must be ReadWriteMany when several nodes share the created claim, got %v" $st.access_mode) -}}
{{- end -}}
{{- /* the evaluation job (eval.enabled): the refusals of `launcher eval` (commands/eval.plan) */ -}}
{{- if include "grpo-exp3.evalEnabled" . -}}
{{- $ck := include "grpo-exp3.evalCheckpoint" . -}}
{{- if and (not $v.eval.baseline) (not $ck) -}}
{{- $errs = append $errs "values.eval.checkpoint must be a step number >= 1 or \"latest\" when eval.enabled is true and eval.baseline is false (there is nothing else to evaluate), got null" -}}
{{- end -}}
{{- if and $ck (not $st.claim_name) -}}
{{- $errs = append $errs (printf "values.storage.claim_name must be a claim name when eval.checkpoint is set (%s): the checkpoint must be on a persistent volume shared with the training run, and without a claim it was an emptyDir lost with the training pod; set storage.claim_name for training and evaluation, or evaluate only eval.baseline with eval.checkpoint=null, got null" $ck) -}}
{{- end -}}
{{- if and $ck (not (kindIs "invalid" $tr.save_freq)) (eq (int64 $tr.save_freq) -1) -}}
{{- $errs = append $errs (printf "values.trainer.save_freq must not be -1 when eval.checkpoint is set (%s): training saved no checkpoint, got -1" $ck) -}}
{{- end -}}
{{- end -}}
{{- with $v.scheduling.namespace -}}
{{- if ne . $.Release.Namespace -}}
{{- $errs = append $errs (printf "values.scheduling.namespace must be null (the release namespace) or equal the release namespace %q (helm --namespace; the objects are created in scheduling.namespace), got %q" $.Release.Namespace .) -}}
{{- end -}}
{{- end -}}
{{- if $errs -}}
{{- fail (printf "\n%s: invalid values (%d problem(s)):\n  - %s" .Chart.Name (len $errs) (join "\n  - " $errs)) -}}
{{- end -}}
{{- end -}}
