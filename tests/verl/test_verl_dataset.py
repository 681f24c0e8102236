"""The prepared GSM8K parquet, read by verl 0.9.1's own code on CPU.

- `datasets.load_dataset(<fixture>, "main")` (what verl's preprocessing script calls with
  --local_dataset_path) reads the fixture: it is a valid Hugging Face repo layout.
- `verl.utils.dataset.rl_dataset.RLHFDataset`, built from the data config verl composes for exp3,
  loads what `prepare_gsm8k` wrote, filters over-long prompts with a tokenizer, and returns items.
  No hub download is possible here, so the tokenizer is a tiny WordLevel one trained on the fixture
  text, wrapped in `transformers.PreTrainedTokenizerFast` with a minimal chat template.
- verl's GSM8K reward (`default_compute_score`) gives the fixture's own reference solutions 1.0
  against the ground truth we wrote, and 0.0 against a wrong one.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from launcher.spec.load import load_spec
from launcher.entrypoint.gsm8k import prepare_gsm8k
from launcher.spec.verl import verl_overrides

from verl_harness import compose

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "tests" / "fixtures" / "gsm8k"
EXP3 = ROOT / "configs" / "grpo-exp3.yaml"
CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|> {{ m['content'] }} <|end|> {% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)
SPECIAL = ["[UNK]", "<|pad|>", "<|endoftext|>", "<|user|>", "<|assistant|>", "<|system|>", "<|end|>"]


@pytest.fixture(scope="module")
def tokenizer():
    """A word-level tokenizer trained on the fixture (no download), with a chat template."""
    import pyarrow.parquet as pq
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    texts = []
    for split in ("train", "test"):
        for row in pq.read_table(FIXTURE / "main" / f"{split}-00000-of-00001.parquet").to_pylist():
            texts += [row["question"], row["answer"]]
    texts.append('Let\'s think step by step and output the final answer after "####".')
    tok = Tokenizer(models.WordLevel(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.train_from_iterator(texts, trainers.WordLevelTrainer(special_tokens=SPECIAL))
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, unk_token="[UNK]", pad_token="<|pad|>", eos_token="<|endoftext|>"
    )
    fast.chat_template = CHAT_TEMPLATE
    return fast


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    out = tmp_path_factory.mktemp("data")
    spec = load_spec(EXP3, [f"data.dir={out}", f"data.source_dir={FIXTURE}"])
    result = prepare_gsm8k(spec, allow_download=False)
    return spec, result


def test_fixture_loads_with_datasets_main_config():
    import datasets

    ds = datasets.load_dataset(str(FIXTURE), "main")
    assert set(ds) == {"train", "test"}
    assert ds["train"].column_names == ["question", "answer"]
    assert (len(ds["train"]), len(ds["test"])) == (24, 12)


def _dataset(spec, tokenizer, path: str, **data_overrides):
    from omegaconf import open_dict
    from verl.utils.dataset.rl_dataset import RLHFDataset

    cfg = compose(verl_overrides(spec))  # the data config main_ppo would hand to create_rl_dataset
    with open_dict(cfg.data):
        for key, value in data_overrides.items():
            cfg.data[key] = value
    return RLHFDataset(data_files=path, tokenizer=tokenizer, config=cfg.data, processor=None)


def _prompt_tokens(tokenizer, messages) -> int:
    ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
    ids = ids["input_ids"] if isinstance(ids, dict) or hasattr(ids, "keys") else ids
    return len(ids)


def test_rlhf_dataset_loads_prepared_parquet(prepared, tokenizer, tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))  # verl's default cache_dir is ~/.cache/verl/rlhf
    spec, result = prepared
    ds = _dataset(spec, tokenizer, result.train_path)
    assert len(ds) == 24  # every fixture prompt is far below max_prompt_length=512
    item = ds[0]
    assert item["data_source"] == "openai/gsm8k"
    assert item["raw_prompt"] == [
        {
            "role": "user",
            "content": "Mira picks 14 apples in the morning and 9 apples in the afternoon. How many apples does "
            "she pick in total? Let's think step by step and output the final answer after \"####\".",
        }
    ]
    assert item["reward_model"] == {"style": "rule", "ground_truth": "23"}
    assert item["index"] == 0 and item["extra_info"]["split"] == "train"
    assert [ds[i]["index"] for i in range(len(ds))] == list(range(24))

    val = _dataset(spec, tokenizer, result.val_path)
    assert len(val) == 12 and val[11]["extra_info"]["split"] == "test"


def test_rlhf_dataset_filters_with_the_tokenizer(prepared, tokenizer, tmp_path, monkeypatch):
    """filter_overlong_prompts really tokenises our rows: the kept count matches an independent count."""
    monkeypatch.setenv("HOME", str(tmp_path))
    import pyarrow.parquet as pq

    spec, result = prepared
    rows = pq.read_table(result.train_path).to_pylist()
    lengths = sorted(_prompt_tokens(tokenizer, r["prompt"]) for r in rows)
    limit = lengths[len(lengths) // 2]  # the median: some rows kept, some dropped
    expected = sum(1 for n in lengths if n <= limit)
    assert 0 < expected < len(rows)
    ds = _dataset(spec, tokenizer, result.train_path, max_prompt_length=limit)
    assert len(ds) == expected


def test_verl_reward_scores_our_ground_truth(prepared):
    import pyarrow.parquet as pq
    from verl.utils.reward_score import default_compute_score

    _, result = prepared
    rows = pq.read_table(result.train_path).to_pylist() + pq.read_table(result.val_path).to_pylist()
    for row in rows:
        truth = row["reward_model"]["ground_truth"]
        # The reference solution itself (its '#### N' line, commas and all) is a correct answer.
        assert default_compute_score(row["data_source"], row["extra_info"]["answer"], truth) == 1.0
        assert default_compute_score(row["data_source"], "#### 999999", truth) == 0.0
