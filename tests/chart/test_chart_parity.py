"""The chart is a second renderer of the spec: `helm template` must produce what `launcher render` does.

For grpo-exp3 and grpo-exp4 on every backend (spec.BACKENDS), plus a config that exercises every optional branch
(multi-node, queue, created PVC, tolerations, secrets, RDMA, TTL, tiny floats, non-ASCII and
HTML-special strings), the chart rendered with the values `hack/gen_chart.py values CONFIG` writes
must equal the launcher's objects, compared parsed, after removing only Helm's bookkeeping labels.
The ConfigMap's spec.yaml is compared as the exact string (both sides write canonical JSON), and
so is the job name, whose hash Helm computes itself from the values.
With `eval.enabled` the chart is the evaluation job instead: it must equal what `launcher eval` renders
(commands.eval.plan: labels.eval_job_name, component `eval`, the entrypoint's `--mode eval` arguments).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from chart_support import (ROOT, assert_same_objects, gen_chart, helm_objects, launcher_eval_objects, launcher_objects,
                           values_file)
from launcher.spec import canonical
from launcher.spec import gpu as G
from launcher.spec.load import load_spec, spec_from_raw
from launcher.spec.names import BACKENDS

CONFIGS = [ROOT / "configs" / "grpo-exp3.yaml", ROOT / "configs" / "grpo-exp4.yaml"]

# Every optional branch of the templates at once; values chosen so the cross-field rules pass.
EVERYTHING = {
    "base": str(ROOT / "configs" / "grpo-exp3.yaml"),
    "name": "everything",
    "model": {"path": "/models/a<b>&c é 😀", "trust_remote_code": True, "local_dir": "/models/local"},
    "actor": {"lr": 3.0e-7, "ppo_mini_batch_size": 8},
    "algorithm": {"kl_coef": 0.25, "entropy_coeff": 1.0e-3, "use_kl_loss": True},
    "resources": {"nodes": 2, "gpus_per_node": 4, "gpu_type": "H100-80GB"},
    "data": {"train_batch_size": 16, "val_max_samples": 100},
    "rollout": {"n": 4, "tensor_parallel_size": 2, "temperature": 0.7},
    "storage": {"create": True, "claim_name": "data-pvc", "access_mode": "ReadWriteMany", "storage_class": "fast"},
    "scheduling": {
        "queue": "team-a", "priority_class": "high", "node_selector": {"pool": "gpu"},
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
                        {"key": "x", "value": "y", "toleration_seconds": 30}],
        "pod_annotations": {"pod-complete.stage.kwok.x-k8s.io/delay": "1s", "z": "multi\nline\t<&>",
                            "q": 'a": 1e-7'},
        "service_account": "trainer",
    },
    "run_policy": {"ttl_seconds_after_finished": 600, "active_deadline_seconds": 86400, "backoff_limit": 2},
    "network": {"nccl_ib": True, "nccl_socket_ifname": "eth0", "nccl_debug": "INFO"},
    "secrets": {"hf_token": {"name": "hf", "key": "token"}, "wandb_api_key": {"name": "wb", "key": "k"},
                "image_pull_secrets": ["regcred"]},
    "trainer": {"logger": ["console", "wandb"], "save_freq": 5, "max_actor_ckpt_to_keep": 2},
    "reward": {"function": {"path": "pkg://my_rewards.gsm8k_v2"}},  # name left to its default
    "verl": {"overrides": ["actor_rollout_ref.rollout.max_num_batched_tokens=2048", "+trainer.x='a<b>&c é'",
                           "~critic.optim", "++actor_rollout_ref.actor.checkpoint.save_contents=[model,optimizer]"]},
    "security": {"extra_capabilities": ["SYS_PTRACE"]},
    "tracking": {
        "mlflow": {"enabled": True, "tracking_uri": "https://mlflow.team-a.svc:5000/prefix", "experiment": "grpo runs",
                   "run_name": "everything-1", "username": {"name": "mlf", "key": "user"},
                   "password": {"name": "mlf", "key": "password"}, "token": {"name": "mlf", "key": "token"}},
        "tensorboard": {"enabled": True, "log_dir": "/workspace/tb/everything"},
        "wandb": {"enabled": True, "entity": "team-a", "base_url": "https://wandb.example"},
    },
    "env": [{"name": "HTTPS_PROXY", "value": "http://proxy:3128"},
            {"name": "EMPTY", "value": ""},
            {"name": "EXTRA_TOKEN", "secret_key_ref": {"name": "extra", "key": "t"}},
            {"name": "NCCL_P2P_LEVEL", "config_map_key_ref": {"name": "nccl", "key": "p2p"}}],
}


@pytest.fixture
def everything_config(tmp_path: Path) -> Path:
    path = tmp_path / "everything.yaml"
    path.write_text(yaml.safe_dump(EVERYTHING, allow_unicode=True))
    return path


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("config", CONFIGS, ids=lambda p: p.stem)
def test_chart_renders_what_the_launcher_renders(config, backend, tmp_path):
    values = values_file(tmp_path, config, backend=backend)
    assert_same_objects(launcher_objects(config, backend=backend), helm_objects("-f", str(values)))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("nodes", [1, 2])
def test_parity_on_cpu_only_smoke_pods(nodes, backend, tmp_path):
    """configs/smoke-cpu.yaml: no GPU limit or product selector, the init container sized like its pod."""
    config = ROOT / "configs" / "smoke-cpu.yaml"
    sets = [f"resources.nodes={nodes}"]
    values = values_file(tmp_path, config, sets=sets, backend=backend)
    launcher = launcher_objects(config, sets=sets, backend=backend)
    assert "nvidia.com/gpu" not in yaml.safe_dump(launcher[-1])  # the job (the ConfigMap holds the spec)
    assert_same_objects(launcher, helm_objects("-f", str(values)))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("nodes", [1, 2])
def test_parity_on_cpu_training(nodes, backend, tmp_path):
    """configs/grpo-exp3-cpu.yaml: verl's trainer on CPU-only pods (a RayJob's workers declare one logical GPU),
    its reward function carried in the spec and so in the hash."""
    config = ROOT / "configs" / "grpo-exp3-cpu.yaml"
    sets = [f"resources.nodes={nodes}"]
    values = values_file(tmp_path, config, sets=sets, backend=backend)
    launcher = launcher_objects(config, sets=sets, backend=backend)
    assert "nvidia.com/gpu" not in yaml.safe_dump(launcher[-1])
    assert '"function": {' in launcher[0]["data"]["spec.yaml"]
    assert_same_objects(launcher, helm_objects("-f", str(values)))


@pytest.mark.parametrize("backend", BACKENDS)
def test_parity_on_every_optional_branch(everything_config, backend, tmp_path):
    values = values_file(tmp_path, everything_config, backend=backend)
    launcher = launcher_objects(everything_config, backend=backend)
    assert {o["kind"] for o in launcher} >= {"PersistentVolumeClaim", "ConfigMap"}
    assert_same_objects(launcher, helm_objects("-f", str(values)))


@pytest.mark.parametrize("sets", [[], ["scheduling.queue=team-a", "resources.nodes=2"]], ids=["defaults", "queue-2-nodes"])
def test_trainjob_objects_in_the_launchers_apply_order(sets, tmp_path):
    """backend=trainjob: the chart writes the TrainingRuntime and the TrainJob as one v1 List, runtime first.

    Trainer's webhook refuses a TrainJob whose runtime does not exist yet, and Helm would sort the two kinds
    alphabetically (TrainJob first) if they were separate documents; in a List Helm keeps the written order.
    """
    config = ROOT / "configs" / "grpo-exp3.yaml"
    values = values_file(tmp_path, config, sets=sets, backend="trainjob")
    launcher = launcher_objects(config, sets=sets, backend="trainjob")
    raw = helm_objects("-f", str(values), flatten=False)
    assert [(o["apiVersion"], o["kind"]) for o in raw] == [("v1", "ConfigMap"), ("v1", "List")]
    items = raw[1]["items"]
    assert [o["kind"] for o in items] == ["TrainingRuntime", "TrainJob"] == [o["kind"] for o in launcher[1:]]
    assert_same_objects(launcher, helm_objects("-f", str(values)))
    # Kueue admits the TrainJob; the runtime carries no queue label (as render leaves it off)
    if sets:
        assert items[1]["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-a"
        assert items[1]["spec"]["suspend"] is True and items[1]["spec"]["trainer"]["numNodes"] == 2
        assert not any(k.startswith("kueue.x-k8s.io/") for k in items[0]["metadata"]["labels"])


def test_default_values_are_grpo_exp3():
    """`helm install grpo-exp3 ./charts/grpo-exp3` with no values is exactly `launcher render configs/grpo-exp3.yaml`."""
    config = ROOT / "configs" / "grpo-exp3.yaml"
    assert_same_objects(launcher_objects(config), helm_objects())


@pytest.mark.parametrize(
    "launcher_sets,helm_args",
    [
        (["rollout.n=4"], ["--set", "rollout.n=4"]),
        # helm --set keeps floats as strings (the schema refuses them); --set-json reads a number
        (["actor.lr=2.5e-7"], ["--set-json", "actor.lr=2.5e-7"]),
        (["resources.nodes=2", "backend=rayjob"], ["--set", "resources.nodes=2", "--set", "backend=rayjob"]),
        (["resources.nodes=2", "backend=trainjob"], ["--set", "resources.nodes=2", "--set", "backend=trainjob"]),
        (["scheduling.queue=team-a"], ["--set", "scheduling.queue=team-a"]),
        # a hand-written partial list item: the chart fills the missing keys with null as pydantic does
        # and the model's defaults (operator: Equal) where a key is left out
        (["scheduling.tolerations=[{key: gpu, operator: Exists}, {key: spot}]"],
         ["--set", "scheduling.tolerations[0].key=gpu", "--set", "scheduling.tolerations[0].operator=Exists",
          "--set", "scheduling.tolerations[1].key=spot"]),
    ],
    ids=["n", "tiny-float", "ray-2-nodes", "trainjob-2-nodes", "queue", "partial-toleration"],
)
def test_helm_overrides_match_launcher_sets(launcher_sets, helm_args):
    """Helm's own --set (ints as int64, floats parsed by Go) hashes and renders like launcher --set."""
    config = ROOT / "configs" / "grpo-exp3.yaml"
    assert_same_objects(launcher_objects(config, launcher_sets), helm_objects(*helm_args))


def test_job_name_hash_is_computed_by_helm_from_values(tmp_path):
    """The chart derives the hash itself: changing a value changes the name exactly as the launcher's does."""
    config = ROOT / "configs" / "grpo-exp4.yaml"
    spec = load_spec(config)
    objects = helm_objects("-f", str(values_file(tmp_path, config)))
    job = next(o for o in objects if o["kind"] == "PyTorchJob")
    assert job["metadata"]["name"] == spec.job_name == f"grpo-exp4-{spec.config_hash()}"
    assert job["metadata"]["labels"]["grpo.launcher.io/config-hash"] == spec.config_hash()


def test_configmap_text_is_identical_and_parses_to_the_spec(tmp_path, everything_config):
    spec = load_spec(everything_config)
    cm = next(o for o in helm_objects("-f", str(values_file(tmp_path, everything_config))) if o["kind"] == "ConfigMap")
    text = cm["data"]["spec.yaml"]
    assert text == canonical.yaml_document(spec.canonical_data())
    # YAML readers (the entrypoint, reports) get the spec back, tiny floats as floats
    assert yaml.safe_load(text) == spec.canonical_data()
    assert spec_from_raw(yaml.safe_load(text)) == spec
    assert isinstance(yaml.safe_load(text)["actor"]["lr"], float)


@pytest.mark.parametrize(
    "value,go",
    [(1e-6, "0.000001"), (1e-7, "1e-7"), (0.0, "0"), (1.0, "1"), (8, "8"), (0.001, "0.001"), (1e21, "1e+21"),
     (123456789.5, "123456789.5"), (2.5e-7, "2.5e-7"), (-3, "-3"), (100.0, "100"), (1e20, "100000000000000000000")],
)
def test_canonical_numbers_follow_go(value, go):
    """Go's encoding/json number forms (checked against helm's toJson in the parity tests above)."""
    assert canonical.go_number(value) == go


def test_canonical_strings_follow_go():
    assert canonical.dumps("<a & b>\u2028\n\t\x01é😀\"\\") == '"\\u003ca \\u0026 b\\u003e\\u2028\\n\\t\\u0001é😀\\"\\\\"'
    assert canonical.dumps({"b": [1, {}], "a": []}) == '{"a":[],"b":[1,{}]}'
    assert canonical.dumps({"b": 1, "a": {}}, indent=2) == '{\n  "a": {},\n  "b": 1\n}'


def test_values_command_writes_a_loadable_values_file(tmp_path):
    out = tmp_path / "v.yaml"
    assert gen_chart.main(["values", str(ROOT / "configs" / "grpo-exp4.yaml"), "--backend", "rayjob", "-o", str(out)]) == 0
    values = yaml.safe_load(out.read_text())
    assert values == load_spec(ROOT / "configs" / "grpo-exp4.yaml", backend="rayjob").model_dump(mode="json")


def test_entrypoint_reads_the_configmap_back_to_the_same_spec(tmp_path, everything_config):
    """The pod loads spec.yaml with the launcher's own loader: same spec, same hash, same job name."""
    spec = load_spec(everything_config)
    cm = next(o for o in launcher_objects(everything_config) if o["kind"] == "ConfigMap")
    mounted = tmp_path / "spec.yaml"
    mounted.write_text(cm["data"]["spec.yaml"])
    again = load_spec(mounted)
    assert again == spec and again.job_name == spec.job_name


# --------------------------------------------------------------------------------------------------
# eval.enabled: the chart renders `launcher eval`'s objects (and nothing of the training run)

EVAL_CASES = {
    # id: (launcher --set, baseline, checkpoint, helm args)
    "baseline": ([], True, None, []),
    "baseline-latest-claim": (["storage.claim_name=grpo-ckpt"], True, "latest",
                              ["--set", "storage.claim_name=grpo-ckpt", "--set", "eval.checkpoint=latest"]),
    "step-25-claim": (["storage.claim_name=grpo-ckpt"], False, "25",
                      ["--set", "storage.claim_name=grpo-ckpt", "--set", "eval.baseline=false",
                       "--set", "eval.checkpoint=25"]),
    # a created claim is rendered as the launcher renders it (so a `helm upgrade` to eval keeps the volume)
    "step-25-created-claim": (["storage.claim_name=grpo-ckpt", "storage.create=true"], False, "25",
                              ["--set", "storage.claim_name=grpo-ckpt", "--set", "storage.create=true",
                               "--set", "eval.baseline=false", "--set-json", "eval.checkpoint=\"25\""]),
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", list(EVAL_CASES), ids=list(EVAL_CASES))
def test_eval_chart_renders_what_launcher_eval_renders(case, backend):
    sets, baseline, checkpoint, helm_args = EVAL_CASES[case]
    config = ROOT / "configs" / "grpo-exp3.yaml"
    launcher = launcher_eval_objects(config, baseline, checkpoint, sets, backend)
    chart = helm_objects("--set", "eval.enabled=true", "--set", f"backend={backend}", *helm_args)
    assert_same_objects(launcher, chart)
    assert not any(o["metadata"]["name"] == load_spec(config, sets, backend).job_name for o in chart)


@pytest.mark.parametrize("backend", ["rayjob", "trainjob"])
def test_eval_parity_on_every_optional_branch(everything_config, tmp_path, backend):
    """Multi-node, queue, created claim, secrets, long values: the eval job still matches, step from a values file."""
    values = values_file(tmp_path, everything_config, backend=backend)
    extra = tmp_path / "eval.yaml"
    extra.write_text("eval: {enabled: true, baseline: true, checkpoint: 5}\n")
    launcher = launcher_eval_objects(everything_config, True, "5", backend=backend)
    assert_same_objects(launcher, helm_objects("-f", str(values), "-f", str(extra)))


def test_eval_name_keeps_the_budget_for_long_names():
    """A 38-character name is cut to 33 (trailing dashes dropped) as labels.eval_job_name cuts it."""
    name = "a" * 32 + "-" + "b" * 5  # 38 characters, a dash at the cut
    config = ROOT / "configs" / "grpo-exp3.yaml"
    launcher = launcher_eval_objects(config, True, None, [f"name={name}"])
    chart = helm_objects("--set", "eval.enabled=true", "--set", f"name={name}")
    assert_same_objects(launcher, chart)
    job = next(o for o in chart if o["kind"] == "PyTorchJob")["metadata"]["name"]
    assert job.startswith("a" * 32 + "-eval-") and len(job) <= 47


# Every GPU label scheme × every GPU type it offers (launcher.spec.gpu.TABLE), plus "any GPU" (null):
# the chart's copy of the table (gen_chart's gpuSelectors) must select exactly what render does.
SCHEME_CASES = [(scheme, gpu_type) for scheme, types in G.TABLE.items() for gpu_type in [*types, None]]


@pytest.mark.parametrize(("scheme", "gpu_type"), SCHEME_CASES, ids=lambda v: str(v))
def test_parity_for_every_gpu_label_scheme_and_type(scheme, gpu_type, tmp_path):
    config = ROOT / "configs" / "grpo-exp3.yaml"
    sets = [f"resources.gpu_label_scheme={scheme}", f"resources.gpu_type={'null' if gpu_type is None else gpu_type}"]
    values = values_file(tmp_path, config, sets=sets, backend="pytorchjob")
    launcher = launcher_objects(config, sets=sets, backend="pytorchjob")
    assert_same_objects(launcher, helm_objects("-f", str(values)))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("scheme", ["gke", "aks"])
def test_parity_user_selector_affinity_and_toleration_win_over_the_preset(scheme, backend, tmp_path):
    """Multi-node (anti-affinity) with the scheme's nodeAffinity, overridden piecewise by the user."""
    config = ROOT / "configs" / "grpo-exp3.yaml"
    affinity = {"podAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 50, "podAffinityTerm": {"topologyKey": "topology.kubernetes.io/zone",
                                           "labelSelector": {"matchLabels": {"team": "a"}}}}]}}
    sets = [f"resources.gpu_label_scheme={scheme}", "resources.gpu_type=H100-80GB", "resources.nodes=2",
            "scheduling.node_selector.pool=gpu", f"scheduling.affinity={json.dumps(affinity)}",
            "scheduling.gpu_toleration=false"]
    values = values_file(tmp_path, config, sets=sets, backend=backend)
    launcher = launcher_objects(config, sets=sets, backend=backend)
    assert_same_objects(launcher, helm_objects("-f", str(values)))


# A reward file with what YAML and JSON escape differently: quotes, backslashes, a tab, CRLF line ends, non-ASCII,
# HTML-special characters (Go's JSON writes \u003c), a trailing line without a newline.
REWARD_FILE = ('"""Scores <b>&amp;</b> \'é\' 😀."""\r\n\r\ndef compute_score(data_source, solution_str, ground_truth, '
               'extra_info=None):\r\n\treturn 1.0 if "\\\\" in solution_str else 0.0  # <&>')


@pytest.mark.parametrize("backend", BACKENDS)
def test_parity_with_a_reward_file_given_with_set_file(backend, tmp_path):
    """The user's reward file: the launcher reads reward.function.path; Helm takes --set-file reward.function.source.
    Both put it in the ConfigMap (spec.yaml and the mounted reward.py) and in the hash, byte for byte."""
    reward = tmp_path / "my_reward.py"
    reward.write_bytes(REWARD_FILE.encode())
    config = tmp_path / "exp.yaml"
    cpu = ROOT / "configs" / "grpo-exp3-cpu.yaml"
    config.write_text(yaml.safe_dump({"base": str(cpu), "reward": {"function": {"path": "./my_reward.py"}}}))
    launcher = launcher_objects(config, backend=backend)
    assert launcher[0]["data"]["reward.py"] == REWARD_FILE
    values = values_file(tmp_path, cpu, backend=backend)
    chart = helm_objects("-f", str(values), "--set", "reward.function.path=./my_reward.py",
                         "--set-file", f"reward.function.source={reward}")
    assert_same_objects(launcher, chart)
