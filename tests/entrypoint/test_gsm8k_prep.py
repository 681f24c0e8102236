"""GSM8K preparation (`launcher.entrypoint.gsm8k`): verl's exact row format and schema, sources, skipping,
atomic writes. No verl needed here; tests/verl/test_verl_dataset.py loads the output with verl's own dataset.

The expected values are written out literally (not imported from the module under test), so a change
to the prompt suffix, the schema or the ground-truth rule fails here.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import shutil
import sys
import types
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from launcher.spec.load import load_spec
from launcher.entrypoint.gsm8k import PrepResult, extract_solution, prepare_gsm8k
from launcher.errors import BadInput, RunFailed

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "tests" / "fixtures" / "gsm8k"
EXP3 = ROOT / "configs" / "grpo-exp3.yaml"

# verl.md §4.1: the schema verl's examples/data_preprocess/gsm8k.py produces.
VERL_SCHEMA = pa.schema(
    [
        ("data_source", pa.string()),
        ("prompt", pa.list_(pa.struct([("role", pa.string()), ("content", pa.string())]))),
        ("ability", pa.string()),
        ("reward_model", pa.struct([("style", pa.string()), ("ground_truth", pa.string())])),
        (
            "extra_info",
            pa.struct([("split", pa.string()), ("index", pa.int64()), ("answer", pa.string()), ("question", pa.string())]),
        ),
    ]
)
SUFFIX = ' Let\'s think step by step and output the final answer after "####".'


def _spec(tmp_path: Path, *extra: str, source: Path | None = FIXTURE):
    sets = [f"data.dir={tmp_path / 'data'}", *extra]
    if source is not None:
        sets.append(f"data.source_dir={source}")
    return load_spec(EXP3, sets)


def _raw(split: str) -> list[dict]:
    return pq.read_table(FIXTURE / "main" / f"{split}-00000-of-00001.parquet").to_pylist()


def test_fixture_is_gsm8k_shaped():
    """The fixture itself: HF card with a `main` config, calculator annotations, '#### N' final lines."""
    card = (FIXTURE / "README.md").read_text()
    assert "config_name: main" in card and "path: main/train-*" in card and "path: main/test-*" in card
    train, test = _raw("train"), _raw("test")
    assert len(train) >= 20 and len(test) >= 10
    for row in train + test:
        assert set(row) == {"question", "answer"}
        assert "<<" in row["answer"] and ">>" in row["answer"]
        assert row["answer"].rsplit("\n", 1)[-1].startswith("#### ")


def test_fixture_to_verl_parquet_exact(tmp_path):
    spec = _spec(tmp_path)
    result = prepare_gsm8k(spec, allow_download=False)
    assert isinstance(result, PrepResult)
    assert not result.skipped and result.source == str(FIXTURE)
    assert result.train_path == str(tmp_path / "data" / "train.parquet")
    assert result.val_path == str(tmp_path / "data" / "test.parquet")
    assert set(result.written) == {result.train_path, result.val_path}

    for split, path in (("train", result.train_path), ("test", result.val_path)):
        table = pq.read_table(path)
        assert table.schema.remove_metadata() == VERL_SCHEMA
        rows = table.to_pylist()
        raw = _raw(split)
        assert len(rows) == len(raw) == result.rows[split]
        for i, (row, src) in enumerate(zip(rows, raw)):
            assert row["data_source"] == "openai/gsm8k"
            assert row["ability"] == "math"
            assert row["prompt"] == [{"role": "user", "content": src["question"] + SUFFIX}]
            final = src["answer"].rsplit("#### ", 1)[1]
            assert row["reward_model"] == {"style": "rule", "ground_truth": final.replace(",", "")}
            assert row["extra_info"] == {"split": split, "index": i, "answer": src["answer"], "question": src["question"]}


def test_ground_truth_strips_commas_keeps_decimals(tmp_path):
    result = prepare_gsm8k(_spec(tmp_path), allow_download=False)
    truths = {r["reward_model"]["ground_truth"] for r in pq.read_table(result.train_path).to_pylist()}
    truths |= {r["reward_model"]["ground_truth"] for r in pq.read_table(result.val_path).to_pylist()}
    assert {"3600", "1250", "2.5"} <= truths  # from "#### 3,600", "#### 1,250", "#### 2.5"
    assert not any("," in t for t in truths)
    assert extract_solution("a\n#### -1,234.5") == "-1234.5"
    with pytest.raises(ValueError):
        extract_solution("The answer is 72.")


def test_skips_when_both_files_exist(tmp_path):
    spec = _spec(tmp_path)
    prepare_gsm8k(spec, allow_download=False)
    before = {p: os.stat(p).st_mtime_ns for p in (spec.data.train_path, spec.data.val_path)}
    # Even a source that no longer exists is not read: existing files win.
    spec2 = _spec(tmp_path, source=tmp_path / "gone")
    result = prepare_gsm8k(spec2, allow_download=False)
    assert result.skipped and result.written == () and result.source == "existing"
    assert {p: os.stat(p).st_mtime_ns for p in before} == before


def test_writes_only_the_missing_file(tmp_path):
    spec = _spec(tmp_path)
    prepare_gsm8k(spec, allow_download=False)
    train_mtime = os.stat(spec.data.train_path).st_mtime_ns
    os.unlink(spec.data.val_path)
    result = prepare_gsm8k(spec, allow_download=False)
    assert result.written == (spec.data.val_path,) and not result.skipped
    assert os.stat(spec.data.train_path).st_mtime_ns == train_mtime
    assert pq.read_table(spec.data.val_path).num_rows == len(_raw("test"))


def test_train_files_override_paths(tmp_path):
    spec = _spec(tmp_path, f"data.train_files={tmp_path / 'a' / 't.parquet'}", f"data.val_files={tmp_path / 'b' / 'v.parquet'}")
    result = prepare_gsm8k(spec, allow_download=False)
    assert Path(result.train_path) == tmp_path / "a" / "t.parquet" and Path(result.train_path).is_file()
    assert Path(result.val_path) == tmp_path / "b" / "v.parquet" and Path(result.val_path).is_file()


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_plain_directory_source(tmp_path, fmt):
    """A plain dir (no dataset card) with train/test files holding question/answer columns."""
    src = tmp_path / "plain"
    src.mkdir()
    for split in ("train", "test"):
        rows = _raw(split)
        if fmt == "jsonl":
            (src / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        else:
            pq.write_table(pa.Table.from_pylist(rows), src / f"{split}.parquet")
    result = prepare_gsm8k(_spec(tmp_path, source=src), allow_download=False)
    assert pq.read_table(result.train_path).num_rows == len(_raw("train"))
    assert pq.read_table(result.val_path).to_pylist()[0]["extra_info"]["split"] == "test"


def test_card_without_main_config_is_rejected(tmp_path):
    src = tmp_path / "card"
    shutil.copytree(FIXTURE, src)
    text = (src / "README.md").read_text().replace("config_name: main", "config_name: socratic")
    (src / "README.md").write_text(text)
    with pytest.raises(BadInput, match="no 'main' config"):
        prepare_gsm8k(_spec(tmp_path, source=src), allow_download=False)
    assert not (tmp_path / "data" / "train.parquet").exists()


def test_missing_split_and_bad_rows_are_errors(tmp_path):
    src = tmp_path / "plain"
    src.mkdir()
    (src / "train.jsonl").write_text(json.dumps({"question": "q?", "answer": "no final line"}) + "\n")
    with pytest.raises(BadInput, match="no test files"):
        prepare_gsm8k(_spec(tmp_path, source=src), allow_download=False)
    (src / "test.jsonl").write_text(json.dumps({"question": "q?", "answer": "x\n#### 4"}) + "\n")
    with pytest.raises(BadInput, match=r"train row 0: no '#### <number>'"):
        prepare_gsm8k(_spec(tmp_path, source=src), allow_download=False)
    assert not (tmp_path / "data").exists()  # converted before anything is written


def test_no_source_and_no_download_fails_without_writing(tmp_path):
    spec = _spec(tmp_path, source=None)
    with pytest.raises(RunFailed, match="downloads are not allowed"):
        prepare_gsm8k(spec, allow_download=False)
    assert not (tmp_path / "data").exists()


def test_hub_download_uses_datasets_lazily(tmp_path, monkeypatch):
    """With downloads allowed and no source_dir: datasets.load_dataset("openai/gsm8k", "main")."""
    calls = []

    def load_dataset(name, config):
        calls.append((name, config))
        return {"train": _raw("train"), "test": _raw("test")}

    monkeypatch.setitem(sys.modules, "datasets", types.SimpleNamespace(load_dataset=load_dataset))
    result = prepare_gsm8k(_spec(tmp_path, source=None), allow_download=True)
    assert calls == [("openai/gsm8k", "main")]
    assert result.source == "hub:openai/gsm8k"
    assert pq.read_table(result.train_path).num_rows == len(_raw("train"))


def _prepare_in_child(data_dir: str, barrier) -> None:
    spec = load_spec(EXP3, [f"data.dir={data_dir}", f"data.source_dir={FIXTURE}"])
    barrier.wait()
    prepare_gsm8k(spec, allow_download=False)


def test_concurrent_writers_leave_complete_files(tmp_path):
    """Several pods on one volume: every writer renames a complete temp file; no temp file survives."""
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(4)
    procs = [ctx.Process(target=_prepare_in_child, args=(str(tmp_path / "data"), barrier)) for _ in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    assert sorted(p.name for p in (tmp_path / "data").iterdir()) == ["test.parquet", "train.parquet"]
    assert pq.read_table(tmp_path / "data" / "train.parquet").num_rows == len(_raw("train"))
