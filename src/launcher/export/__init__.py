"""Launcher-side export of a run directory to experiment trackers (MLflow, TensorBoard).

Works on any cluster, including one whose pods cannot reach the tracking server: the source is
`runs/<job>/metrics.jsonl` (what the follower parsed from the pods' logs), not the pods.

- `source.RunData`: the rows of `metrics.jsonl` (non-finite values restored from `metrics.meta.json`),
  the config flattened to params, the report's summary figures and the run's tags.
- `mlflow_export.MlflowExporter`: one MLflow run per job, found by the tag `grpo.launcher.io/job`;
  every (metric, step) not already logged with the same value is sent with `MlflowClient.log_batch`.
- `tensorboard_export.TensorBoardExporter`: event files under `DIR/<job>/`, written with
  TensorBoard's own `EventFileWriter`; (tag, step) pairs already in the directory's event files (read
  with TensorBoard's `EventAccumulator`) are not written again.
- `live.LiveExport`: the same exporters, driven by the follower as steps arrive.

Both exporters are idempotent: a second export of an unchanged run directory writes nothing.
"""

from __future__ import annotations

from launcher.export.source import RunData, load_run_data

__all__ = ["RunData", "load_run_data"]
