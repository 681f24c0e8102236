"""`data.dataset: parquet`: the user's own parquet files, checked before verl starts (the init container).

verl 0.9.1 reads them as they are (`RLHFDataset`): no conversion here, only what verl would otherwise fail on
minutes later, inside Ray, with a KeyError: each file is readable parquet with rows and the columns verl's GRPO
trainer reads. `prompt` is the chat (a list of {role, content}) that `data.prompt_key` names; `data_source`
chooses the reward rule (`data.reward_fn_key`) and reaches a custom reward function; `reward_model.ground_truth`
is what the reward scores against. `extra_info` is optional (verl passes it on when present).
"""

from __future__ import annotations

from dataclasses import dataclass

from launcher.errors import BadInput

REQUIRED_COLUMNS = ("prompt", "data_source", "reward_model")
EXAMPLE_ROW = ('{"prompt": [{"role": "user", "content": "..."}], "data_source": "my/dataset", '
               '"reward_model": {"style": "rule", "ground_truth": "42"}}')


@dataclass(frozen=True)
class ParquetCheck:
    """One file that passed: its path, row count and columns."""

    path: str
    rows: int
    columns: tuple[str, ...]

    def line(self) -> str:
        return f"{self.path}: {self.rows} rows, columns {', '.join(self.columns)}"


def check_parquet(path: str) -> ParquetCheck:
    """Read a parquet file's footer (not its data) and check it against what verl's GRPO trainer reads."""
    from pathlib import Path

    import pyarrow as pa
    import pyarrow.parquet as pq

    file = Path(path)
    if not file.is_file():
        raise BadInput(f"{path}: expected a parquet file in verl's schema, found "
                       f"{'a directory' if file.is_dir() else 'nothing'} (put files with `launcher data put`)")
    try:
        meta = pq.read_metadata(path)
        schema = meta.schema.to_arrow_schema()
    except (pa.ArrowException, OSError) as exc:
        raise BadInput(f"{path}: expected a readable parquet file, got {' '.join(str(exc).split())}") from None
    columns = tuple(schema.names)
    missing = [c for c in REQUIRED_COLUMNS if c not in columns]
    if missing:
        raise BadInput(f"{path}: expected the columns verl reads ({', '.join(REQUIRED_COLUMNS)}), missing "
                       f"{', '.join(missing)} (has {', '.join(columns) or 'none'}); a row looks like {EXAMPLE_ROW}")
    problems = []
    prompt = schema.field("prompt").type
    if not (pa.types.is_list(prompt) or pa.types.is_large_list(prompt)) or not (
            pa.types.is_struct(prompt.value_type) and prompt.value_type.get_field_index("content") >= 0):
        problems.append(f"prompt as a list of {{role, content}} messages (got {prompt})")
    reward = schema.field("reward_model").type
    if not pa.types.is_struct(reward) or reward.get_field_index("ground_truth") < 0:
        problems.append(f"reward_model as a struct with ground_truth (got {reward})")
    if problems:
        raise BadInput(f"{path}: expected {'; '.join(problems)}; a row looks like {EXAMPLE_ROW}")
    if meta.num_rows == 0:
        raise BadInput(f"{path}: expected at least one row, got none")
    return ParquetCheck(path, meta.num_rows, columns)


def check_user_parquet(spec) -> list[ParquetCheck]:
    """The train and validation files of a `data.dataset: parquet` spec, each checked (`check_parquet`)."""
    return [check_parquet(p) for p in dict.fromkeys((spec.data.train_path, spec.data.val_path))]
