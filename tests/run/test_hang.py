"""What hung (launcher.run.hang): a stall classified from the stacks of the run's processes.

The first cases are real captures: vLLM's engine process stopped with SIGSTOP during real CPU GRPO runs on the local
cluster's real node (tests/fixtures/incidents/*.json.gz, taken by launcher.kube.stacks), once while the trainer was in
its weight sync and once while it waited for samples. The others edit the first: the driver's main thread placed in
each verl phase, a rank waiting in a collective, nothing read.
"""

from __future__ import annotations

import copy
import gzip
import json
from pathlib import Path

import pytest

from launcher.run.hang import CLASSES, classify, frame_class

FIXTURES = Path(__file__).parents[1] / "fixtures" / "incidents"
REAL = json.loads(gzip.decompress((FIXTURES / "vllm-enginecore-stopped.json.gz").read_bytes()))
IN_ROLLOUT = json.loads(gzip.decompress((FIXTURES / "vllm-enginecore-stopped-in-rollout.json.gz").read_bytes()))


def _frame(name: str, path: str, line: int = 1) -> dict:
    return {"name": name, "short_filename": path, "filename": f"/opt/venv/lib/python3.11/site-packages/{path}",
            "line": line}


def _proc(capture: dict, startswith: str) -> dict:
    [p] = [p for p in capture["processes"] if p["cmdline"].startswith(startswith) and p.get("threads")][:1]
    return p


def _driver(capture: dict) -> dict:
    return next(p for p in capture["processes"] if p.get("threads") and any(
        f["name"] == "PPOTrainer.fit" for t in p["threads"] for f in t["frames"]))


def _running(capture: dict) -> dict:
    """The capture with every process running again (no suspect)."""
    out = copy.deepcopy(capture)
    for p in out["processes"]:
        p["state"] = "S"
    return out


def _driver_in(capture: dict, *inner: dict) -> dict:
    """The capture, running, with the driver's main thread at `inner` (innermost first) called from PPOTrainer.fit."""
    out = _running(capture)
    main = next(t for t in _driver(out)["threads"] if t["thread_name"] == "MainThread")
    fit = next(i for i, f in enumerate(main["frames"]) if f["name"] == "PPOTrainer.fit")
    main["frames"] = [*inner, *main["frames"][fit:]]
    return out


def test_real_capture_vllm_engine_stopped_is_rollout_and_names_the_trainer_phase():
    v = classify({"master-0": REAL})
    assert v.kind == "rollout"
    assert v.suspects == ["852 VLLM::EngineCore (stopped)"] and v.process == "852 VLLM::EngineCore"
    assert v.frames[0] == "EngineCoreProc._process_input_queue (vllm/v1/engine/core.py:1285)"  # its main thread
    # the trainer itself waits in the weight sync that the stopped engine never answers
    assert v.phase == "weight_sync" and v.phase_frame.startswith("CheckpointEngineManager.update_weights (")
    assert v.why.startswith("process stopped: 852 VLLM::EngineCore in EngineCoreProc._process_input_queue")


def test_real_capture_vllm_engine_stopped_while_the_trainer_waits_for_samples():
    v = classify({"master-0": IN_ROLLOUT})
    assert (v.kind, v.phase) == ("rollout", "rollout")
    assert v.suspects == ["849 VLLM::EngineCore (stopped)"]
    assert v.frames[:2] == ["sched_yield (vllm/distributed/utils.py:48)",
                            "SpinCondition.wait (vllm/distributed/device_communicators/shm_broadcast.py:196)"]
    assert v.phase_frame == "ReplayBuffer._wait_for_next_poll (verl/trainer/ppo/v1/replay_buffer.py:409)"


def test_nothing_stopped_the_trainer_loop_names_the_phase():
    v = classify({"master-0": _running(REAL)})
    assert (v.kind, v.suspects) == ("weight_sync", [])
    assert v.why.startswith("the trainer loop waits: 461 ray::TaskRunnerV1.run in CheckpointEngineManager.update_weights")


@pytest.mark.parametrize("inner, kind", [
    ([_frame("ReplayBuffer._wait_for_next_poll", "verl/trainer/ppo/v1/replay_buffer.py"),
      _frame("ReplayBuffer.sample", "verl/trainer/ppo/v1/replay_buffer.py")], "rollout"),
    ([_frame("get", "ray/_private/worker.py"), _frame("PPOTrainer._compute_old_log_prob",
                                                      "verl/trainer/ppo/v1/trainer_base.py")], "update"),
    ([_frame("get", "ray/_private/worker.py"), _frame("PPOTrainer._update_actor",
                                                      "verl/trainer/ppo/v1/trainer_base.py")], "update"),
    ([_frame("save", "torch/serialization.py"), _frame("PPOTrainer._save_checkpoint",
                                                       "verl/trainer/ppo/v1/trainer_base.py")], "checkpoint"),
    ([_frame("_MultiProcessingDataLoaderIter._next_data", "torchdata/stateful_dataloader/stateful_dataloader.py"),
      _frame("PPOTrainer._fetch_one_gen_batch", "verl/trainer/ppo/v1/trainer_base.py")], "data_loading"),
    ([_frame("get", "ray/_private/worker.py"), _frame("PPOTrainer._compute_reward_colocate",
                                                      "verl/trainer/ppo/v1/trainer_base.py")], "reward"),
])
def test_the_driver_phase_decides_when_nothing_is_stopped(inner, kind):
    v = classify({"master-0": _driver_in(REAL, *inner)})
    decisive = next(f for f in inner if frame_class(f))  # the innermost frame a rule matches
    assert (v.kind, v.phase, v.frames[0]) == (kind, kind, f"{decisive['name']} ({decisive['short_filename']}:1)")


def test_a_rank_waiting_in_a_collective_wins_over_the_phase():
    capture = _driver_in(REAL, _frame("get", "ray/_private/worker.py"),
                         _frame("PPOTrainer._update_actor", "verl/trainer/ppo/v1/trainer_base.py"))
    worker = _proc(capture, "ray::WorkerDict")
    worker["threads"][0]["frames"] = [_frame("all_reduce", "torch/distributed/distributed_c10d.py", 2800),
                                      _frame("clip_grad_norm_", "torch/nn/utils/clip_grad.py"),
                                      _frame("DataParallelPPOActor.update_policy", "verl/workers/actor/dp_actor.py"),
                                      *worker["threads"][0]["frames"]]
    v = classify({"worker-0": capture})
    assert v.kind == "collective" and v.phase == "update"
    assert v.frames[:3] == ["all_reduce (torch/distributed/distributed_c10d.py:2800)",
                            "clip_grad_norm_ (torch/nn/utils/clip_grad.py:1)",
                            "DataParallelPPOActor.update_policy (verl/workers/actor/dp_actor.py:1)"]
    assert "waits in a collective" in v.why and "the trainer loop waits in update" in v.why


def test_the_actor_in_the_real_capture_is_in_its_weight_send():
    """Not stopped, the actor worker's asyncio thread is in verl's bucketed weight send (weight_sync, not rollout,
    although the file sits under verl/workers/rollout/)."""
    capture = _running(REAL)
    v = classify({"master-0": {"processes": [_proc(capture, "ray::WorkerDict")]}})
    assert v.kind == "weight_sync" and v.frames[0].startswith("BucketedWeightSender._init_buffer (")


def test_a_stopped_actor_that_was_idle_leaves_the_decision_to_the_trainer_loop():
    capture = _driver_in(REAL, _frame("get", "ray/_private/worker.py"),
                         _frame("PPOTrainer._update_actor", "verl/trainer/ppo/v1/trainer_base.py"))
    worker = _proc(capture, "ray::WorkerDict")
    worker["state"], worker["cmdline"] = "T", "ray::WorkerDict"  # between methods Ray titles it by its class
    for t in worker["threads"]:  # parked: nothing of verl on its stacks
        t["frames"] = [_frame("Worker.main_loop", "ray/_private/worker.py")]
    v = classify({"master-0": capture})
    assert v.kind == "update" and v.suspects == [f"{worker['pid']} {worker['cmdline']} (stopped)"]
    assert "the trainer loop waits: 461 ray::TaskRunnerV1.run in PPOTrainer._update_actor" in v.why


def test_a_stopped_actor_whose_frames_say_nothing_is_judged_by_the_method_its_title_names():
    """Seen on the real node: the actor stopped while fetching its batch from the TransferQueue (no rule's frames);
    Ray's process title names the method it runs."""
    capture = _running(REAL)
    worker = _proc(capture, "ray::WorkerDict")
    worker["state"], worker["cmdline"] = "T", "ray::WorkerDict.actor_rollout_update_actor"
    for t in worker["threads"]:
        t["frames"] = [_frame("AsyncTransferQueueClient.async_get_data", "transfer_queue/client.py")]
    v = classify({"master-0": capture})
    assert (v.kind, v.process) == ("update", f"{worker['pid']} ray::WorkerDict.actor_rollout_update_actor")
    assert v.frames == ["actor_rollout_update_actor (Ray actor method, the process title:-)"]
    assert v.why.startswith(f"process stopped: {worker['pid']} ray::WorkerDict.actor_rollout_update_actor in ")
    worker["cmdline"] = "ray::WorkerDict.init_model"  # a method no rule names: the trainer loop decides
    assert classify({"master-0": capture}).process.startswith("461 ray::TaskRunnerV1")


def test_the_dataloader_workers_forked_from_the_driver_are_not_the_driver():
    """verl's DataLoader workers are forks of the driver: their stacks begin with its PPOTrainer.fit frames. With the
    driver's own main thread parked, its phase is unknown, not the workers' data loading."""
    v = classify({"master-0": _driver_in(REAL, _frame("Event.wait", "threading.py"))})
    assert v.phase is None


def test_nothing_read_is_unknown_and_names_the_suspects():
    capture = copy.deepcopy(REAL)
    for p in capture["processes"]:
        p.pop("threads", None)
        p["error"] = "Permission denied (os error 13)"
    v = classify({"master-0": capture, "worker-0": {}})
    assert v.kind == "unknown" and v.why == "no stacks could be read; suspects: 852 VLLM::EngineCore (stopped)"
    assert classify({}).kind == "unknown"


@pytest.mark.parametrize("name, path, kind", [
    ("broadcast", "torch/distributed/distributed_c10d.py", "collective"),
    ("CollectiveGroup.allreduce", "ray/util/collective/collective.py", "collective"),
    ("FSDPCheckpointManager.save_checkpoint", "verl/utils/checkpoint/fsdp_checkpoint_manager.py", "checkpoint"),
    ("save_file", "safetensors/torch.py", "checkpoint"),
    ("Qwen2ForCausalLM.load_weights", "vllm/model_executor/models/qwen2.py", "weight_sync"),
    ("NCCLCheckpointEngine.send_weights", "verl/checkpoint_engine/nccl_checkpoint_engine.py", "weight_sync"),
    ("RLHFDataset.__getitem__", "verl/utils/dataset/rl_dataset.py", "data_loading"),
    ("compute_score", "grpo_verl_cpu/reward.py", "reward"),
    ("backward", "torch/autograd/__init__.py", "update"),
    ("AdamW.step", "torch/optim/adamw.py", "update"),
    ("PPOTrainer.step", "verl/trainer/ppo/v1/trainer_base.py", None),  # the loop itself says nothing
    ("EngineCore.step", "vllm/v1/engine/core.py", "rollout"),
    ("AgentLoopWorker.generate_sequences", "verl/experimental/agent_loop/agent_loop.py", "rollout"),
    ("Condition.wait", "threading.py", None),
])
def test_frame_rules(name, path, kind):
    assert frame_class(_frame(name, path)) == kind
    assert kind is None or kind in CLASSES
