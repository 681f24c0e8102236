"""Export a run directory to an MLflow tracking server with MLflow's own client (`MlflowClient.log_batch`).

One MLflow run per job: the newest run of the experiment tagged `grpo.launcher.io/job=<job>` (the
pod's own run carries that tag too, so an export completes what the pod logged), else a new run
named after the job. Idempotent: a (metric, step) already logged with the same value is not sent
again, a param already set is not set again, and a tag is only written when it differs; a second
export of an unchanged run directory sends nothing. A step re-logged in `metrics.jsonl` with a new
value (a resumed attempt) is sent again at the same step, so MLflow's latest value is the file's.
"""

from __future__ import annotations

import math
import re
import time
from dataclasses import dataclass
from typing import Any

from launcher.errors import BadInput, ClusterError
from launcher.export.source import TAG_JOB, TAG_SOURCE, RunData

# MLflow's per-request limits (mlflow.utils.validation: MAX_METRICS_PER_BATCH, MAX_PARAMS_TAGS_PER_BATCH).
METRICS_PER_BATCH = 1000
PARAMS_PER_BATCH = 100
PARAM_VALUE_MAX = 6000


@dataclass
class ExportResult:
    """What one export sent."""

    run_id: str
    metrics: int = 0
    params: int = 0
    tags: int = 0
    created: bool = False

    @property
    def sent(self) -> int:
        return self.metrics + self.params + self.tags


_INVALID_KEY_CHARS = re.compile(r"[^/\w.\- :]")
_SLASHES = re.compile(r"/+")


def mlflow_key(key: str) -> str:
    """A verl key as MLflow accepts it, exactly as verl's own mlflow logger sanitizes it.

    verl 0.9.1 `_MlflowLoggingAdapter._sanitize_key`: `@` -> `_at_`, runs of `/` -> one, any other
    character MLflow refuses -> `_` (tests/verl prove the two agree), so an export and the pod's own
    logging name a metric the same way.
    """
    return _INVALID_KEY_CHARS.sub("_", _SLASHES.sub("/", key.replace("@", "_at_")))


def _same(a: float, b: float) -> bool:
    return a == b or (math.isnan(a) and math.isnan(b))


class MlflowExporter:
    """Writes one run directory's data to `tracking_uri`, experiment `experiment` (created when absent)."""

    def __init__(self, tracking_uri: str, experiment: str | None = None, *, client: Any = None):
        from mlflow import MlflowClient

        self.tracking_uri = tracking_uri
        self.experiment = experiment
        self.client = client or MlflowClient(tracking_uri=tracking_uri)
        self.run_id: str | None = None
        # (key, step) -> value already on the server, loaded once per exporter
        self._logged: dict[tuple[str, int], float] | None = None

    def _experiment_id(self, data: RunData) -> str:
        name = self.experiment or (data.params.get("trainer.project_name") or "grpo-launcher")
        exp = self.client.get_experiment_by_name(name)
        if exp is not None:
            if exp.lifecycle_stage != "active":
                raise BadInput(f"--mlflow-experiment: MLflow experiment {name!r} is deleted; restore it or pick another")
            return exp.experiment_id
        return self.client.create_experiment(name)

    def find_run(self, data: RunData) -> tuple[str, bool]:
        """The run for `data.job` (found by tag, or created); returns (run_id, created)."""
        if self.run_id is not None:
            return self.run_id, False
        exp_id = self._experiment_id(data)
        found = self.client.search_runs([exp_id], filter_string=f"tags.`{TAG_JOB}` = '{data.job}'",
                                        order_by=["attributes.start_time DESC"], max_results=1)
        if found:
            self.run_id = found[0].info.run_id
            return self.run_id, False
        run = self.client.create_run(exp_id, run_name=data.job, tags={TAG_JOB: data.job, TAG_SOURCE: "export"})
        self.run_id = run.info.run_id
        self._logged = {}
        return self.run_id, True

    def _load_logged(self, run_id: str, keys: set[str]) -> dict[tuple[str, int], float]:
        logged: dict[tuple[str, int], float] = {}
        run = self.client.get_run(run_id)
        for key in set(run.data.metrics) & keys:
            # history in logging order: the last value at a step is the one MLflow shows
            for m in sorted(self.client.get_metric_history(run_id, key), key=lambda m: (m.timestamp, m.step)):
                logged[(m.key, int(m.step))] = float(m.value)
        return logged

    def export(self, data: RunData) -> ExportResult:
        """Send what the server does not have yet; see the module docstring."""
        from mlflow.entities import Metric, Param, RunTag
        from mlflow.exceptions import MlflowException
        from requests.exceptions import RequestException

        try:
            run_id, created = self.find_run(data)
            result = ExportResult(run_id, created=created)
            keys = {mlflow_key(k) for r in data.rows for k in r if k != "step"} | {mlflow_key(k) for k in data.summary}
            if self._logged is None:
                self._logged = self._load_logged(run_id, keys)
            run = self.client.get_run(run_id)
            now = int(time.time() * 1000)
            metrics: list[Metric] = []
            for row in data.rows:
                step = int(row["step"])
                for verl_key, value in row.items():
                    if verl_key == "step":
                        continue
                    key = mlflow_key(verl_key)
                    old = self._logged.get((key, step))
                    if old is None or not _same(old, float(value)):
                        metrics.append(Metric(key, float(value), now, step))
            summary_step = data.last_step or 0
            for summary_key, value in data.summary.items():
                key = mlflow_key(summary_key)
                old = self._logged.get((key, summary_step))
                if old is None or not _same(old, value):
                    metrics.append(Metric(key, float(value), now, summary_step))
            params = [Param(k[:250], v[:PARAM_VALUE_MAX]) for k, v in sorted(data.params.items())
                      if k[:250] not in run.data.params]
            tags = [RunTag(k, v) for k, v in sorted(data.tags.items()) if run.data.tags.get(k) != v]
            for i in range(0, len(metrics), METRICS_PER_BATCH):
                self.client.log_batch(run_id, metrics=metrics[i:i + METRICS_PER_BATCH])
            for i in range(0, max(len(params), len(tags)), PARAMS_PER_BATCH):
                self.client.log_batch(run_id, params=params[i:i + PARAMS_PER_BATCH], tags=tags[i:i + PARAMS_PER_BATCH])
        except (MlflowException, RequestException) as exc:
            # the server is unreachable or refused the request: the "cluster" exit code, as for the API server
            raise ClusterError(f"MLflow at {self.tracking_uri}: {exc}") from exc
        for m in metrics:
            self._logged[(m.key, m.step)] = m.value
        result.metrics, result.params, result.tags = len(metrics), len(params), len(tags)
        return result
