"""Export a run directory to TensorBoard event files with TensorBoard's own writer and reader.

The files go to `DIR/<job>/` (one run per job, so `tensorboard --logdir DIR` compares runs). Each
metric is a scalar with verl's key as its tag at verl's step; the report's summary figures are
scalars at the last step; the config is a text summary `config` (one `key = value` per line) at
step 0. Idempotent: the (tag, step) pairs already in the directory's event files, read back with
TensorBoard's `EventAccumulator`, are not written again, so a second export adds nothing (and
creates no new event file). TensorBoard stores scalars as 32-bit floats.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from pathlib import Path

from launcher.export.source import RunData

CONFIG_TAG = "config"


@dataclass
class TensorBoardResult:
    """What one export wrote."""

    log_dir: Path
    scalars: int = 0
    texts: int = 0

    @property
    def sent(self) -> int:
        return self.scalars + self.texts


def read_scalars(log_dir: str | Path) -> dict[str, dict[int, float]]:
    """Every scalar in the event files of `log_dir`: {tag: {step: value}} (the last event wins)."""
    from tensorboard.backend.event_processing import event_accumulator as ea

    acc = ea.EventAccumulator(str(log_dir), size_guidance={ea.SCALARS: 0, ea.TENSORS: 0})
    acc.Reload()
    return {tag: {e.step: e.value for e in acc.Scalars(tag)} for tag in acc.Tags().get(ea.SCALARS, [])}


def read_text_tags(log_dir: str | Path) -> set[str]:
    """Tags of the text (tensor) summaries in `log_dir`."""
    from tensorboard.backend.event_processing import event_accumulator as ea

    acc = ea.EventAccumulator(str(log_dir), size_guidance={ea.TENSORS: 0})
    acc.Reload()
    return set(acc.Tags().get(ea.TENSORS, []))


def _text_summary(tag: str, text: str):
    """A TensorBoard text summary (the `text` plugin's format), built from TensorBoard's protos."""
    from tensorboard.compat.proto import summary_pb2, tensor_pb2, tensor_shape_pb2, types_pb2

    tensor = tensor_pb2.TensorProto(dtype=types_pb2.DT_STRING, string_val=[text.encode("utf-8")],
                                    tensor_shape=tensor_shape_pb2.TensorShapeProto(
                                        dim=[tensor_shape_pb2.TensorShapeProto.Dim(size=1)]))
    meta = summary_pb2.SummaryMetadata(plugin_data=summary_pb2.SummaryMetadata.PluginData(plugin_name="text"))
    return summary_pb2.Summary(value=[summary_pb2.Summary.Value(tag=tag, metadata=meta, tensor=tensor)])


class TensorBoardExporter:
    """Writes one run directory's data under `root/<job>/`."""

    def __init__(self, root: str | Path):
        self.root = Path(root)
        self._done: dict[str, dict[int, float]] | None = None
        self._texts: set[str] | None = None
        self._writer = None
        self.log_dir: Path | None = None

    def _open(self, data: RunData):
        if self.log_dir is None:
            self.log_dir = self.root / data.job
            self.log_dir.mkdir(parents=True, exist_ok=True)
            self._done = read_scalars(self.log_dir)
            self._texts = read_text_tags(self.log_dir)
        return self.log_dir

    def _events(self, data: RunData) -> tuple[list[tuple[str, int, float]], list[tuple[str, str]]]:
        assert self._done is not None and self._texts is not None
        scalars: list[tuple[str, int, float]] = []
        for row in data.rows:
            step = int(row["step"])
            for key, value in row.items():
                if key != "step" and step not in self._done.get(key, {}):
                    scalars.append((key, step, float(value)))
        last = data.last_step or 0
        for key, value in data.summary.items():
            old = self._done.get(key, {}).get(last)
            # float32 storage: compare at that precision
            if old is None or not math.isclose(old, value, rel_tol=1e-6, abs_tol=1e-12):
                scalars.append((key, last, float(value)))
        texts = []
        if CONFIG_TAG not in self._texts and data.params:
            texts.append((CONFIG_TAG, "\n\n".join(f"`{k}` = `{v}`" for k, v in sorted(data.params.items()))))
        return scalars, texts

    def export(self, data: RunData) -> TensorBoardResult:
        """Append the events the directory does not hold yet (no file at all when there are none)."""
        from tensorboard.compat.proto import event_pb2, summary_pb2
        from tensorboard.summary.writer.event_file_writer import EventFileWriter

        log_dir = self._open(data)
        scalars, texts = self._events(data)
        result = TensorBoardResult(log_dir, len(scalars), len(texts))
        if not scalars and not texts:
            return result
        if self._writer is None:
            self._writer = EventFileWriter(str(log_dir))
        now = time.time()
        for tag, step, value in scalars:
            summary = summary_pb2.Summary(value=[summary_pb2.Summary.Value(tag=tag, simple_value=value)])
            self._writer.add_event(event_pb2.Event(wall_time=now, step=step, summary=summary))
            self._done.setdefault(tag, {})[step] = value
        for tag, text in texts:
            self._writer.add_event(event_pb2.Event(wall_time=now, step=0, summary=_text_summary(tag, text)))
            self._texts.add(tag)
        self._writer.flush()
        return result

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None
