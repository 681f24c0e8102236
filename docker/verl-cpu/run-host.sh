#!/usr/bin/env bash
# usage: run-host.sh NAME STEPS LR [extra overrides...]
# Bare `python -m verl.trainer.main_ppo` on the host with the CPU venv (README.md): GRPO exp3 algorithm, tiny
# model, CPU settings. RUN_ROOT holds data/{train,test}.parquet and model/; output goes to RUN_ROOT/out/NAME
# (log.txt with a wall-clock stamp per line, metrics.jsonl from verl's file logger, time.txt, ckpt/).
set -u
NAME=$1; STEPS=$2; LR=$3; shift 3
R=${RUN_ROOT:-/work/run28}; V=${VENV:-/work/venv-cpu}
REPO=${REPO:-$(cd "$(dirname "$0")/../.." && pwd)}
OUT=$R/out/$NAME; rm -rf "$OUT"; mkdir -p "$OUT"
# The 24-row GSM8K fixture at batch 8 is 3 steps per epoch; verl stops at the end of its epoch loop.
EPOCHS=$(( (STEPS + 2) / 3 ))
export PYTHONPATH=$REPO/docker/verl-cpu:$REPO/src
export VERL_USE_EXTERNAL_MODULES=grpo_verl_cpu.platform VERL_PLATFORM=cpu
export LD_PRELOAD=$V/lib/libiomp5.so VLLM_CPU_KVCACHE_SPACE=1
export VERL_FILE_LOGGER_PATH=$OUT/metrics.jsonl RAY_COLOR_PREFIX=0 TOKENIZERS_PARALLELISM=false
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 RAY_DEDUP_LOGS=0 HYDRA_FULL_ERROR=1
export TORCHDYNAMO_DISABLE=${TORCHDYNAMO_DISABLE-1}
OVR=(
  algorithm.adv_estimator=grpo
  algorithm.norm_adv_by_std_in_grpo=True
  algorithm.use_kl_in_reward=False
  algorithm.kl_ctrl.kl_coef=0.001
  data.train_files=$R/data/train.parquet
  data.val_files=$R/data/test.parquet
  data.train_batch_size=8
  data.max_prompt_length=128
  data.max_response_length=32
  data.filter_overlong_prompts=True
  data.truncation=error
  actor_rollout_ref.model.path=$R/model
  actor_rollout_ref.model.trust_remote_code=False
  actor_rollout_ref.model.use_remove_padding=False
  actor_rollout_ref.model.enable_gradient_checkpointing=True
  +actor_rollout_ref.model.override_config.attn_implementation=sdpa
  actor_rollout_ref.actor.strategy=fsdp2
  actor_rollout_ref.actor.fsdp_config.strategy=fsdp2
  '+actor_rollout_ref.actor.fsdp_config.mixed_precision={param_dtype:fp32,reduce_dtype:fp32,buffer_dtype:fp32}'
  actor_rollout_ref.actor.optim.lr=$LR
  actor_rollout_ref.actor.ppo_mini_batch_size=8
  actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2
  actor_rollout_ref.actor.use_kl_loss=False
  actor_rollout_ref.actor.kl_loss_coef=0.001
  actor_rollout_ref.actor.kl_loss_type=low_var_kl
  actor_rollout_ref.actor.entropy_coeff=0.0
  actor_rollout_ref.actor.fsdp_config.param_offload=False
  actor_rollout_ref.actor.fsdp_config.optimizer_offload=False
  actor_rollout_ref.rollout.name=vllm
  actor_rollout_ref.rollout.tensor_model_parallel_size=1
  actor_rollout_ref.rollout.gpu_memory_utilization=0.5
  actor_rollout_ref.rollout.n=2
  actor_rollout_ref.rollout.temperature=1.0
  actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=2
  actor_rollout_ref.rollout.dtype=float32
  actor_rollout_ref.rollout.enforce_eager=True
  actor_rollout_ref.rollout.free_cache_engine=False
  +actor_rollout_ref.rollout.enable_sleep_mode=False
  actor_rollout_ref.rollout.agent.num_workers=1
  actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=2
  actor_rollout_ref.ref.fsdp_config.param_offload=False
  reward.num_workers=1
  reward.custom_reward_function.path=pkg://grpo_verl_cpu.reward
  reward.custom_reward_function.name=compute_score
  transfer_queue.backend.SimpleStorage.num_data_storage_units=1
  +ray_kwargs.ray_init.num_gpus=1
  +ray_kwargs.ray_init.include_dashboard=False
  ray_kwargs.ray_init.num_cpus=16
  trainer.device=cpu
  trainer.critic_warmup=0
  trainer.logger=[console,file]
  trainer.project_name=verl_grpo_gsm8k
  trainer.experiment_name=$NAME
  trainer.n_gpus_per_node=1
  trainer.nnodes=1
  trainer.total_epochs=$EPOCHS
  trainer.total_training_steps=$STEPS
  trainer.default_local_dir=$OUT/ckpt
  trainer.val_before_train=False
  trainer.test_freq=-1
  trainer.save_freq=$STEPS
  trainer.resume_mode=disable
)
printf '%s\n' "${OVR[@]}" "$@" > "$OUT/overrides.txt"
cd "$OUT"
date +%s.%N > start
/usr/bin/time -v nice -n 10 $V/bin/python -m verl.trainer.main_ppo "${OVR[@]}" "$@" 2> time.txt | python3 -u -c "import sys,time
for l in sys.stdin: sys.stdout.write(f'{time.time():.1f} {l}')" > log.txt
echo ${PIPESTATUS[0]} > rc
date +%s.%N > end
