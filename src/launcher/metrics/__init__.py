"""verl console metrics: streaming parser (`parser`) and run-directory writer (`sink`).

Typical use from a log follower::

    parser = LogParser()                      # one per byte stream (pod container attach)
    with MetricsSink(run_dir) as sink:
        for chunk in stream:                  # bytes, any chunking
            sink.add_many(parser.feed(chunk), attempt=restart_count)
        sink.add_many(parser.finish(), attempt=restart_count)
        sink.add_counters(parser.counters)

Never imports the Kubernetes client (ARCHITECTURE.md "Walls").
"""

from launcher.metrics.parser import (
    MAX_LINE_BYTES,
    LineSplitter,
    LogParser,
    ParseCounters,
    StepRecord,
    parse_line,
    parse_value,
)
from launcher.metrics.sink import CSV, JSONL, META, MetricsSink, encode_row

__all__ = [
    "CSV",
    "JSONL",
    "MAX_LINE_BYTES",
    "META",
    "LineSplitter",
    "LogParser",
    "MetricsSink",
    "ParseCounters",
    "StepRecord",
    "encode_row",
    "parse_line",
    "parse_value",
]
