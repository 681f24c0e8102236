"""Every validation rule, with its message: a table of good and bad configs."""

from __future__ import annotations

from pathlib import Path

import pytest

from launcher.spec.load import load_spec
from launcher.errors import BadInput

EXP3 = Path(__file__).resolve().parents[2] / "configs" / "grpo-exp3.yaml"

GOOD = [
    [],
    ["rollout.n=4", "data.max_response_length=512"],  # exp4
    # 7×2 = 14 samples, divisible by 2 GPUs; 7 per GPU, so the micro-batch must divide 7
    ["data.train_batch_size=7", "actor.ppo_mini_batch_size=7", "actor.ppo_micro_batch_size_per_gpu=7",
     "rollout.log_prob_micro_batch_size_per_gpu=7"],
    ["resources.gpus_per_node=8", "rollout.tensor_parallel_size=2", "data.train_batch_size=32",
     "actor.ppo_mini_batch_size=16"],
    ["resources.nodes=2", "data.train_batch_size=16", "actor.ppo_mini_batch_size=16"],
    ["algorithm.use_kl_loss=true", "algorithm.kl_loss_coef=0.01"],
    ["backend=rayjob"],
    ["backend=trainjob"],
    ["backend=trainjob", "resources.nodes=2", "data.train_batch_size=16", "actor.ppo_mini_batch_size=16"],
    ["backend=trainjob", "name=" + "a" * 38],
    ["scheduling.queue=team-a", "scheduling.priority_class=high"],
    ["storage.claim_name=grpo-data", "storage.create=true", "storage.size=500Gi"],
    ["name=" + "a" * 38],
    ["resources.gpu_type=H100-80GB"],
    ["trainer.resume_mode=resume_path", "trainer.resume_from_path=/workspace/ckpt/global_step_10"],
    # CPU-only pods for the smoke workload, one worker per pod for the batch rules
    ["workload=smoke", "resources.gpus_per_node=0"],
    ["workload=smoke", "resources.gpus_per_node=0", "resources.nodes=2", "backend=rayjob"],
    ["workload=smoke", "resources.gpus_per_node=0", "resources.nodes=4"],  # 16 samples / 4 pods
    ["workload=smoke"],  # the smoke workload on GPU pods (NCCL all-reduce)
    # 6 × 2 = 12 samples padded to 16 (a multiple of lcm(2 GPUs, 4 × 2)): 8 per GPU, which 4 divides (12 / 2 = 6 would not)
    ["data.train_batch_size=6", "actor.ppo_mini_batch_size=4", "rollout.log_prob_micro_batch_size_per_gpu=4"],
]


@pytest.mark.parametrize("sets", GOOD, ids=lambda s: " ".join(s) or "exp3")
def test_good_configs_pass(sets):
    load_spec(EXP3, sets)


# (overrides, field named in the message, fragment of what was expected, the value shown as got)
BAD = [
    (["data.train_batch_size=7"], "actor.ppo_mini_batch_size", "at most data.train_batch_size (7)", "got 8"),
    (["data.train_batch_size=7", "actor.ppo_mini_batch_size=7", "rollout.n=1"], "data.train_batch_size",
     "divisible by the GPU count 2", "got 7"),
    (["actor.ppo_mini_batch_size=3", "rollout.n=1", "data.train_batch_size=4"], "actor.ppo_mini_batch_size",
     "ppo_mini_batch_size × rollout.n divisible by the GPU count 2", "got 3"),
    (["actor.ppo_micro_batch_size_per_gpu=3"], "actor.ppo_micro_batch_size_per_gpu",
     "a divisor of the per-GPU mini-batch", "got 3"),
    # verl's validate_config accepts this; its FSDP worker then fails (7×2/2 = 7 per GPU, micro 2)
    (["data.train_batch_size=7", "actor.ppo_mini_batch_size=7"], "actor.ppo_micro_batch_size_per_gpu",
     "ppo_mini_batch_size × rollout.n / GPUs = 7 × 2 / 2 = 7", "got 2"),
    # verl pads a step's samples and splits each GPU's share into log-prob micro-batches at run time
    # (8 × 2 = 16 samples, padded to a multiple of lcm(2 GPUs, 8 × 2) = 16, / 2 GPUs = 8 per GPU; 3 does not divide 8)
    (["rollout.log_prob_micro_batch_size_per_gpu=3"], "rollout.log_prob_micro_batch_size_per_gpu",
     "a divisor of the per-GPU log-prob batch", "= 8, got 3"),
    # padding counts: 6 × 2 = 12 samples, padded to a multiple of lcm(2, 4 × 2) = 8, so 16, / 2 GPUs = 8 per GPU
    (["data.train_batch_size=6", "actor.ppo_mini_batch_size=4", "rollout.log_prob_micro_batch_size_per_gpu=3"],
     "rollout.log_prob_micro_batch_size_per_gpu", "a divisor of the per-GPU log-prob batch", "= 8, got 3"),
    (["rollout.tensor_parallel_size=4"], "rollout.tensor_parallel_size", "a divisor of resources.gpus_per_node (2)",
     "got 4"),
    (["rollout.tensor_parallel_size=3", "resources.gpus_per_node=4"], "rollout.tensor_parallel_size",
     "tensor parallelism stays within a node", "got 3"),
    (["resources.nodes=3"], "data.train_batch_size", "GPU count 6", "got 8"),
    (["name=" + "a" * 39], "name", "at most 38 characters", "got 'aaaa"),
    (["name=Grpo_Exp"], "name", "a string matching", "got 'Grpo_Exp'"),
    # a CPU-only pod runs only the smoke workload: verl's GRPO trainer with vLLM needs GPUs
    (["resources.gpus_per_node=0"], "resources.gpus_per_node", "at least 1 for workload grpo", "got 0"),
    (["resources.gpus_per_node=-1"], "resources.gpus_per_node", "a number ≥ 0", "got -1"),
    (["workload=train"], "workload", "one of 'grpo' or 'smoke'", "got 'train'"),
    (["workload=smoke", "smoke.steps=0"], "smoke.steps", "a number ≥ 1", "got 0"),
    (["workload=smoke", "smoke.min_shm=big"], "smoke.min_shm", "a string matching", "got 'big'"),
    # a CPU pod counts as one worker per node for verl's batch arithmetic: 3 pods, 8 × 2 = 16 samples
    (["workload=smoke", "resources.gpus_per_node=0", "resources.nodes=3"], "data.train_batch_size",
     "GPU count 3 (resources.nodes 3 × resources.gpus_per_node 0, a CPU pod counts as 1)", "got 8"),
    (["rollout.n=0"], "rollout.n", "a number ≥ 1", "got 0"),
    (["rollout.gpu_memory_utilization=1.5"], "rollout.gpu_memory_utilization", "a number ≤ 1", "got 1.5"),
    (["actor.lr=0"], "actor.lr", "a number > 0", "got 0"),
    (["resources.memory=lots"], "resources.memory", "a string matching", "got 'lots'"),
    (["resources.gpu_type=A200"], "resources.gpu_type", "one of ['A100-40GB'", "got 'A200'"),
    (["backend=slurm"], "backend", "one of 'pytorchjob', 'rayjob' or 'trainjob'", "got 'slurm'"),
    # Kubeflow Trainer v2.2: the TrainJob CRD's CEL rule wants an RFC 1035 label (a letter first)
    (["backend=trainjob", "name=3-exp"], "name", "a name starting with a letter for backend trainjob", "got '3-exp'"),
    (["backend=trainjob", "run_policy.clean_pod_policy=All"], "run_policy.clean_pod_policy",
     "None for backend trainjob (JobSet has no clean-pod policy", "got 'All'"),
    # Trainer's torch plugin sets (and its webhook reserves) these; the training-operator sets some of them too
    (["env=[{name: PET_MASTER_ADDR, value: x}]"], "env[0].name", "spec.RESERVED_ENV", "got 'PET_MASTER_ADDR'"),
    (["rollout.nn=4"], "rollout.nn", "a known key", "got 4"),
    (["data.max_response_length=abc"], "data.max_response_length", "valid integer", "got 'abc'"),
    (["trainer.resume_mode=resume_path"], "trainer.resume_from_path", "a global_step_N path", "got None"),
    (["trainer.resume_from_path=/x/y"], "trainer.resume_from_path", "a path containing 'global_step_'", "got '/x/y'"),
    (["trainer.logger=[console, wandb]"], "secrets.wandb_api_key", "a Secret reference", "got None"),
    (["storage.create=true"], "storage.claim_name", "a claim name when storage.create is true", "got None"),
    (["scheduling.namespace=Team_A"], "scheduling.namespace", "a string matching", "got 'Team_A'"),
    (["model.local_dir=relative/path"], "model.local_dir", "a string matching", "got 'relative/path'"),
    (["scheduling.node_selector={'bad key!': x}"], "scheduling.node_selector.bad key! (key)", "a string matching", "got 'bad key!'"),
]


def test_every_bad_case_names_what_was_expected():
    # an empty fragment is in every line: it would check nothing
    assert [sets for sets, _, expected, _ in BAD if not expected.strip()] == []


@pytest.mark.parametrize("sets,field,expected,got", BAD, ids=lambda v: v if isinstance(v, str) else None)
def test_bad_configs_name_field_expected_and_got(sets, field, expected, got):
    with pytest.raises(BadInput) as info:
        load_spec(EXP3, sets)
    message = str(info.value)
    line = next((ln for ln in message.splitlines() if ln.strip().startswith(f"- {field}:")), None)
    assert line is not None, message
    assert expected in line, line
    assert got in line, line
    assert info.value.exit_code == 2


def test_trainjob_names_fit_at_the_longest_job_name_and_most_nodes():
    # JobSet v0.11 names: `<job>-node-0` (Job, label value), `<job>-node-0-<i>` (hostname), `<job>` (Service)
    from launcher.spec.names import JOB_NAME_MAX, trainjob_names

    names = trainjob_names("a" * JOB_NAME_MAX, 1024)
    assert names["hostname"] == "a" * JOB_NAME_MAX + "-node-0-1023"
    assert max(len(n) for n in names.values()) <= 63
    # a pod's name is generateName `<job>-node-0-<i>-` + 5 random characters; the API server cuts the prefix to
    # 58, so names always fit, and up to 100 nodes at the longest job name they keep the whole node index
    assert len(trainjob_names("a" * JOB_NAME_MAX, 100)["hostname"]) + 1 <= 63 - 5


def test_every_problem_is_reported_at_once():
    with pytest.raises(BadInput) as info:
        load_spec(EXP3, ["rollout.n=0", "actor.lr=-1", "resources.cpu=x"])
    assert "3 problem(s)" in str(info.value)
