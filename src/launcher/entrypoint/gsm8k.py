"""GSM8K → the two parquet files verl's GRPO trainer reads (`data.train_files`, `data.val_files`).

The rows are exactly what verl's own `examples/data_preprocess/gsm8k.py` writes (verl 0.9.1 era):

    data_source  = "openai/gsm8k"            (also selects verl's GSM8K reward function)
    prompt       = [{"role": "user", "content": question + " " + INSTRUCTION}]
    ability      = "math"
    reward_model = {"style": "rule", "ground_truth": <the number after '#### ', commas removed>}
    extra_info   = {"split", "index" (int64), "answer" (full solution), "question" (raw question)}

with the parquet schema pinned in `VERL_SCHEMA`, so the file does not depend on how pyarrow would
infer types from Python values (an empty split, or `datasets` metadata, would otherwise change it).

Where the raw data comes from, in order:
1. `spec.data.source_dir`: a mounted copy of the Hugging Face dataset repo (README.md whose YAML front
   matter lists the `main` config's data files, e.g. `main/train-*.parquet`), or a plain directory
   with train/test files (parquet, or JSON lines) holding `question` and `answer` columns. Read with
   pyarrow only: no `datasets`, no network.
2. The hub (`datasets.load_dataset("openai/gsm8k", "main")`), only when the caller allows downloads.

Several pods may share the data volume and start at once, so each file is written to a unique
temporary name in the target directory, fsync'ed, then renamed over the target (`os.replace` is
atomic on one filesystem): a reader sees either no file or a complete one, never a partial write.
"""

from __future__ import annotations

import json
import os
import re
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from launcher.errors import BadInput, RunFailed

DATA_SOURCE = "openai/gsm8k"
HUB_CONFIG = "main"
# Appended to every question, verbatim from verl's examples/data_preprocess/gsm8k.py. The reward
# function looks for "#### <number>", so the prompt asks for exactly that format.
INSTRUCTION = 'Let\'s think step by step and output the final answer after "####".'
# verl's extract_solution: the first "#### <number>" in the reference solution.
_SOLUTION_RE = re.compile(r"#### (\-?[0-9\.\,]+)")
# verl's split names: the train file comes from "train", the validation file from "test".
SPLITS = {"train": "train", "val": "test"}
_RAW_SUFFIXES = (".parquet", ".jsonl", ".json")


def _verl_schema():
    import pyarrow as pa

    return pa.schema(
        [
            ("data_source", pa.string()),
            ("prompt", pa.list_(pa.struct([("role", pa.string()), ("content", pa.string())]))),
            ("ability", pa.string()),
            ("reward_model", pa.struct([("style", pa.string()), ("ground_truth", pa.string())])),
            (
                "extra_info",
                pa.struct(
                    [
                        ("split", pa.string()),
                        ("index", pa.int64()),
                        ("answer", pa.string()),
                        ("question", pa.string()),
                    ]
                ),
            ),
        ]
    )


@dataclass(frozen=True)
class PrepResult:
    """What `prepare_gsm8k` did.

    `skipped` is true when both files already existed (nothing was read or written); `written` lists
    the files this call wrote; `rows` maps each written split ("train", "test") to its row count;
    `source` says where the raw data came from ("existing", a directory, or "hub:openai/gsm8k").
    """

    train_path: str
    val_path: str
    source: str
    skipped: bool
    written: tuple[str, ...] = ()
    rows: dict[str, int] = field(default_factory=dict)


def extract_solution(answer: str) -> str:
    """The ground truth verl scores against: the number after '#### ', with commas removed.

    Raises `ValueError` when the solution has no '#### <number>' line (verl's script asserts).
    """
    match = _SOLUTION_RE.search(answer)
    if match is None:
        raise ValueError(f"no '#### <number>' final line in answer {answer[-80:]!r}")
    return match.group(0).split("#### ")[1].replace(",", "")


def make_row(question: str, answer: str, split: str, index: int) -> dict[str, Any]:
    """One verl GSM8K row from a raw (question, answer) pair, as verl's preprocessing script builds it."""
    return {
        "data_source": DATA_SOURCE,
        "prompt": [{"role": "user", "content": question + " " + INSTRUCTION}],
        "ability": "math",
        "reward_model": {"style": "rule", "ground_truth": extract_solution(answer)},
        "extra_info": {"split": split, "index": index, "answer": answer, "question": question},
    }


def convert(records: Iterable[dict[str, Any]], split: str, origin: str = "input") -> list[dict[str, Any]]:
    """Raw GSM8K records (dicts with `question` and `answer`) → verl rows, numbered from 0.

    A record without a string question/answer or without a final '#### <number>' line is an error
    naming the split and row, not a silently dropped row: the data set would otherwise shrink unseen.
    """
    rows = []
    for index, record in enumerate(records):
        question, answer = record.get("question"), record.get("answer")
        if not isinstance(question, str) or not question.strip() or not isinstance(answer, str):
            raise BadInput(f"{origin}: {split} row {index}: expected string 'question' and 'answer' columns, got {record!r:.200}")
        try:
            rows.append(make_row(question, answer, split, index))
        except ValueError as exc:
            raise BadInput(f"{origin}: {split} row {index}: {exc}") from None
    return rows


# --------------------------------------------------------------------------------------------------
# Reading raw GSM8K from a directory


def _front_matter(readme: Path) -> dict[str, Any]:
    """The YAML front matter of a Hugging Face dataset card ('---' ... '---'), or {} when absent."""
    import yaml

    text = readme.read_text(encoding="utf-8")
    if not text.startswith("---"):
        return {}
    end = text.find("\n---", 3)
    if end < 0:
        return {}
    data = yaml.safe_load(text[3:end])
    return data if isinstance(data, dict) else {}


def _card_patterns(root: Path) -> dict[str, list[str]] | None:
    """Split → glob patterns of the `main` config in README.md, or None when there is no card config.

    Hugging Face accepts both `data_files: [{split: train, path: main/train-*}]` (the form the real
    openai/gsm8k card uses) and `data_files: {train: main/train-*}`; a path may be one pattern or a list.
    """
    readme = root / "README.md"
    if not readme.is_file():
        return None
    configs = _front_matter(readme).get("configs")
    if not isinstance(configs, list):
        return None
    names = [c.get("config_name") for c in configs if isinstance(c, dict)]
    config = next((c for c in configs if isinstance(c, dict) and c.get("config_name") == HUB_CONFIG), None)
    if config is None:
        # The same failure `datasets.load_dataset(dir, "main")` reports, so the fix is the same.
        raise BadInput(f"{readme}: no '{HUB_CONFIG}' config in the dataset card (configs: {names})")
    files = config.get("data_files")
    out: dict[str, list[str]] = {}
    if isinstance(files, dict):
        items = list(files.items())
    elif isinstance(files, list):
        items = [(f.get("split"), f.get("path")) for f in files if isinstance(f, dict)]
    else:
        raise BadInput(f"{readme}: config '{HUB_CONFIG}' has no data_files")
    for split, paths in items:
        if isinstance(paths, str):
            paths = [paths]
        out.setdefault(str(split), []).extend(str(p) for p in paths)
    return out


def _plain_files(root: Path, split: str) -> list[Path]:
    """Files of `split` in a directory without a card: <split>.parquet, <split>-*.parquet, main/<split>-*..."""
    found: list[Path] = []
    for base in (root, root / HUB_CONFIG):
        if not base.is_dir():
            continue
        for path in sorted(base.iterdir()):
            name = path.name
            if path.is_file() and name.endswith(_RAW_SUFFIXES) and (
                name.split(".")[0] == split or name.startswith(f"{split}-") or name.startswith(f"{split}_")
            ):
                found.append(path)
        if found:
            break
    return found


def _read_records(path: Path) -> list[dict[str, Any]]:
    if path.name.endswith(".parquet"):
        import pyarrow.parquet as pq

        return pq.read_table(path, columns=["question", "answer"]).to_pylist()
    records = []
    with path.open(encoding="utf-8") as fh:
        for number, line in enumerate(fh, 1):
            if line.strip():
                try:
                    records.append(json.loads(line))
                except json.JSONDecodeError as exc:
                    raise BadInput(f"{path}:{number}: not a JSON line ({exc.msg})") from None
    return records


def read_source_dir(root: str | Path) -> dict[str, list[dict[str, Any]]]:
    """Raw GSM8K splits ("train", "test") from a directory, as lists of {question, answer} dicts.

    Uses the dataset card's `main` config when README.md has one, else looks for train/test files.
    """
    root = Path(root)
    if not root.is_dir():
        raise BadInput(f"data.source_dir {root}: not a directory")
    patterns = _card_patterns(root)
    out: dict[str, list[dict[str, Any]]] = {}
    for split in SPLITS.values():
        if patterns is not None:
            if split not in patterns:
                raise BadInput(f"{root}/README.md: config '{HUB_CONFIG}' lists no '{split}' split")
            files = sorted(
                {p for pattern in patterns[split] for p in root.glob(pattern) if p.is_file()},
                key=lambda p: str(p),
            )
            # Hugging Face patterns such as "main/train-*" match any extension; keep the data files.
            files = [p for p in files if p.name.endswith(_RAW_SUFFIXES)]
        else:
            files = _plain_files(root, split)
        if not files:
            raise BadInput(
                f"data.source_dir {root}: no {split} files (expected the Hugging Face layout README.md + "
                f"main/{split}-*.parquet, or {split}.parquet / {split}.jsonl)"
            )
        out[split] = [record for path in files for record in _read_records(path)]
    return out


def _read_hub() -> dict[str, list[dict[str, Any]]]:
    """Download openai/gsm8k (config main) with `datasets`, imported only here: it is heavy and optional."""
    try:
        import datasets
    except ImportError:
        raise RunFailed("downloading GSM8K needs the `datasets` package (it is in the training image)") from None
    ds = datasets.load_dataset(DATA_SOURCE, HUB_CONFIG)
    return {split: [{"question": r["question"], "answer": r["answer"]} for r in ds[split]] for split in SPLITS.values()}


# --------------------------------------------------------------------------------------------------
# Writing


def write_parquet_atomic(rows: list[dict[str, Any]], path: str | Path) -> None:
    """Write `rows` with verl's schema to `path` via a unique temp file + fsync + rename.

    The temp file lives in the target directory so the rename stays on one filesystem (atomic); its
    name is unique per process and call, so concurrent writers never share one.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.parent / f".{path.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp"
    try:
        table = pa.Table.from_pylist(rows, schema=_verl_schema())
        pq.write_table(table, tmp)
        with open(tmp, "rb") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()
    try:  # persist the rename itself (best effort: not every filesystem allows fsync on a directory)
        dir_fd = os.open(path.parent, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(dir_fd)
    except OSError:
        pass
    finally:
        os.close(dir_fd)


def prepare_gsm8k(spec, *, allow_download: bool) -> PrepResult:
    """Make `spec.data.train_path` and `spec.data.val_path` exist, in verl's GSM8K schema.

    Does nothing when both files already exist. Otherwise reads the raw data from
    `spec.data.source_dir` (offline) or, when `allow_download` is true and no source_dir is set, from
    the hub; then writes whichever of the two files is missing, atomically. Raises `BadInput` for
    unusable input (a missing or malformed source) and `RunFailed` when data must be downloaded but
    downloads are not allowed.
    """
    train_path, val_path = spec.data.train_path, spec.data.val_path
    targets = {"train": train_path, "test": val_path}
    missing = {split: path for split, path in targets.items() if not Path(path).is_file()}
    if not missing:
        return PrepResult(train_path, val_path, source="existing", skipped=True)

    if spec.data.source_dir:
        raw = read_source_dir(spec.data.source_dir)
        source = spec.data.source_dir
    elif allow_download:
        raw = _read_hub()
        source = f"hub:{DATA_SOURCE}"
    else:
        raise RunFailed(
            f"GSM8K is not prepared ({', '.join(sorted(missing.values()))} missing), data.source_dir is not set "
            "and downloads are not allowed (model.offline): mount the raw dataset and set data.source_dir, "
            "or pre-stage the parquet files"
        )

    rows: dict[str, int] = {}
    for split, path in missing.items():
        converted = convert(raw[split], split, origin=source)
        write_parquet_atomic(converted, path)
        rows[split] = len(converted)
    return PrepResult(train_path, val_path, source=source, skipped=False, written=tuple(missing.values()), rows=rows)

