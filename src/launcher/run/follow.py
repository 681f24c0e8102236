"""Follow a run's pod logs: wait through Pending, re-attach, persist raw logs, feed the metrics sink.

How it stays exactly-once (no duplicated, no lost lines):

- Logs are read with `timestamps=true`. Each stream (pod uid + container + restartCount, an
  *attempt*) remembers the timestamp of the last line it handled and the lines seen at exactly that
  timestamp (a multiset). A re-attach asks for `sinceTime=<last timestamp>`; the server truncates
  that to whole seconds and returns the overlap again, so until the answer passes the mark, lines older
  than it are dropped and lines at it are dropped once per remembered copy (`logpos.Resent`: stamps need not
  rise line by line). A line is never lost: the server's window always starts at or before the mark.
- The positions live in `runs/<job>/logs/.follow-state.json` together with the byte length of each
  `logs/<pod>.log`, written atomically after the raw log is flushed. A restarted launcher first cuts
  each raw log back to the recorded length (dropping lines written after the last save), then
  resumes from the recorded positions: the two always agree, even after SIGKILL. Metric rows need no
  such care: `MetricsSink` ignores a row it already holds.
- When a job is over, streams are not trusted to end (KWOK's follow stream never does, and a
  dropped connection looks the same as the end): a terminated container is read once more without
  `follow`, from its mark to EOF, and only then marked done. A restarted container's old log is
  read the same way with `previous=true` before the new one is followed.

Stopping is decided from job and pod status (`kube.jobs.job_state`), never from end of stream.

Where job and pod status come from (`StateSource`): by default `WatchState`, the shared watches of
`kube.informer.ClusterStateCache` (one per kind for every run followed in this process; re-listed on 410
Gone), so a followed run costs the API server its log streams and almost nothing else. `PollState` is
the former way (a job GET and the pod LISTs every `poll_interval`), kept for comparison
(`LAUNCHER_FOLLOW_STATE=poll`, bench/bench_follow_api.py) and for a `Kube` stand-in without `watch`.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Iterator

from launcher.errors import ClusterError
from launcher.kube import jobs as J
from launcher.kube.client import NODE, ApiError, Kube, transient
from launcher.run import placement, provenance
from launcher.run.dirs import RunDir, write_atomic
from launcher.run.jobstate import PollState, state_source
from launcher.run.logpos import FollowState, Position, Resent, format_since, lock, parse_ts


LineSink = Callable[[str, str], None]  # (pod short name, line text)
RecordSink = Callable[[list], None]  # parsed StepRecords
StreamHook = Callable[[str, Iterator[bytes]], Iterator[bytes]]  # (stream key, chunks) -> chunks


class PodFollower(threading.Thread):
    """Reads one pod container's log through its restarts until told the pod is finished."""

    def __init__(self, owner: LogFollower, pod: dict, container: str):
        md = pod["metadata"]
        super().__init__(name=f"follow-{md['name']}", daemon=True)
        self.owner = owner
        self.pod_name = md["name"]
        self.uid = md.get("uid", "")
        self.container = container
        self.short = J.short_name(pod, owner.ref.name)
        self.pod = pod  # latest status, updated by the owner
        self.finish = threading.Event()  # the owner says: the job/pod is over, drain and stop
        # the owner says: a pod of the same name but another uid replaced this one (eviction, node loss). A log
        # request names the pod, not its uid, so any further read would be the replacement's log, filed here.
        self.replaced = threading.Event()
        self.wake = threading.Event()
        self._resp = None
        self._resp_lock = threading.Lock()
        self.parsers: dict[int, object] = {}
        self.error: str | None = None
        self.done = threading.Event()

    # the owner calls these -------------------------------------------------------------------

    def update(self, pod: dict) -> None:
        old = self.restart_count
        self.pod = pod
        if self.restart_count != old or J.pod_finished(pod):
            self.interrupt()

    def interrupt(self) -> None:
        """Unblock a follow read (the container restarted or finished; the job ended)."""
        self.wake.set()
        with self._resp_lock:
            if self._resp is not None:
                with contextlib.suppress(Exception):
                    self._resp.shutdown()

    @property
    def restart_count(self) -> int:
        return int(J.container_status(self.pod, self.container).get("restartCount") or 0)

    def key(self, attempt: int) -> str:
        return f"{self.pod_name}/{self.container}/{self.uid}/{attempt}"

    def order(self, attempt: int, first_ns: int) -> str:
        """Sortable id of one container attempt: `<pod created>/<first line, epoch ns>/<uid>/<restart>`. A pod the
        operator recreates (eviction, node loss) restarts its count at 0 under a new uid; its creation time, and
        within the same second (creationTimestamp has whole seconds) its first log line, keep it later."""
        created = (self.pod.get("metadata") or {}).get("creationTimestamp") or ""
        return f"{created}/{first_ns:020d}/{self.uid}/{attempt:06d}"

    # the thread -------------------------------------------------------------------------------

    def run(self) -> None:
        try:
            self._run()
        except Exception as exc:  # a follower must not die silently: the owner reports it
            self.error = f"{self.short}: {type(exc).__name__}: {exc}"
        finally:
            self.done.set()

    def _first_attempt(self) -> int:
        st = self.owner.state
        mine = [int(k.rsplit("/", 1)[1]) for k, p in st.positions.items()
                if k.startswith(f"{self.pod_name}/{self.container}/{self.uid}/") and not p.done]
        if mine:
            return min(mine)
        done = [int(k.rsplit("/", 1)[1]) for k in st.positions
                if k.startswith(f"{self.pod_name}/{self.container}/{self.uid}/")]
        if done:  # all read: resume after them, but never past the container that exists now
            return min(max(done) + 1, self.restart_count)
        # never seen this pod: its previous container's log (if it restarted) is the oldest one still readable
        return max(self.restart_count - 1, 0)

    def _run(self) -> None:
        attempt = self._first_attempt()
        # When a follow stream ends by itself, a kubelet saw the container exit. Until the pod status says
        # whether it restarted, the container's "current" log may already be the NEXT attempt's: reading it now
        # would file the new attempt's first lines under this one and show them twice (seen on a real kubelet).
        # So wait for the status (restart -> read "previous"; finished -> drain), re-attaching only after a
        # grace period in which it still says the same container runs (a clean end for another reason).
        exited_at: float | None = None
        while True:
            current = self.restart_count
            if attempt < current:
                exited_at = None
                # that container is gone: its log is the "previous" one (kubelet keeps exactly one)
                if attempt == current - 1:
                    self._drain(attempt, previous=True)
                else:
                    self.owner.notice(f"[{self.short}] log of container attempt {attempt} is no longer available")
                self._mark_done(attempt)
                attempt += 1
                continue
            cs = J.container_status(self.pod, self.container)
            state = cs.get("state") or {}
            if self.finish.is_set() or (state.get("terminated") and J.pod_finished(self.pod)):
                gone = self._drain(attempt, previous=False) == "gone"
                if gone or state.get("terminated"):
                    self._mark_done(attempt)  # a still-running container (logs without -f) stays resumable
                return
            if exited_at is not None and time.monotonic() - exited_at < self.owner.exit_grace_s:
                self._sleep()
                continue
            exited_at = None
            if not (state.get("running") or state.get("terminated")):
                self._sleep()  # not started yet (or waiting to restart): no log to read
                continue
            ended = self._read(attempt, follow=True, previous=False)
            if ended == "gone":  # the pod was deleted (its log with it): nothing more will come
                self._mark_done(attempt)
                return
            if ended == "eof" and not self.finish.is_set():
                exited_at = time.monotonic()
                self._sleep()

    def _drain(self, attempt: int, *, previous: bool, tries: int = 5) -> str:
        """Read a finished container's log to EOF; a cut read is retried from the new mark."""
        cuts = 0
        deadline = time.monotonic() + self.owner.outage_limit
        while cuts < tries and time.monotonic() < deadline:
            result = self._read(attempt, follow=False, previous=previous)
            if result == "unavailable":
                continue  # the API server is away: wait for it rather than give up on the log's end
            if result != "cut":
                return result
            cuts += 1
        self.owner.notice(f"[{self.short}] could not read the end of the log after {tries} tries; it may be incomplete")
        return "cut"

    def _sleep(self) -> None:
        self.wake.wait(self.owner.poll_interval)
        self.wake.clear()

    def _mark_done(self, attempt: int) -> None:
        pos = self.owner.state.position(self.key(attempt))
        with self.owner.state.lock:
            pos.done = True
        self.owner.state.save(force=True)

    def _read(self, attempt: int, *, follow: bool, previous: bool) -> str:
        """One attach: read until EOF, interruption or error: "eof", "cut", "gone" or "unavailable"."""
        if self.replaced.is_set():
            return "gone"
        key = self.key(attempt)
        pos = self.owner.state.position(key)
        resent = Resent(pos.ns, Counter(pos.at_mark))
        since = format_since(pos.ns) if pos.ns is not None else None
        kube = self.owner.kube
        try:
            resp = kube.pod_log(self.pod_name, container=self.container, follow=follow, since_time=since,
                                timestamps=True, previous=previous, read_timeout=self.owner.read_timeout)
        except ApiError as exc:
            if exc.status in (400, 404):  # pod gone, or no (previous) container log: nothing more to read
                return "gone"
            if exc.status in (401, 403):  # no retry fixes a missing permission: end the follow with it
                self.owner.refuse(exc)
                return "gone"
            self.owner.notice(f"[{self.short}] {exc}; retrying")
            self._sleep()
            return "cut"  # an answer, just not the log (e.g. 500 "failed to open log file"): counted retries
        except ClusterError as exc:
            self.owner.notice(f"[{self.short}] {exc}; retrying")
            self._sleep()
            return "unavailable"
        with self._resp_lock:
            self._resp = resp
        if follow and (self.finish.is_set() or self.restart_count != attempt or J.pod_finished(self.pod)):
            self.interrupt()  # the state changed between the decision and the attach
        pending = b""
        result = "eof"
        try:
            chunks = _chunks(resp)
            if self.owner.stream_hook is not None:
                chunks = self.owner.stream_hook(key, chunks)
            for chunk in chunks:
                pending += chunk
                if b"\n" not in pending:
                    continue
                complete, _, pending = pending.rpartition(b"\n")
                self._handle(attempt, pos, resent, complete.split(b"\n"))
        except Exception:  # timeout, reset, shutdown(): a partial last line is dropped, the re-attach resends it
            result = "cut"
        finally:
            with self._resp_lock:
                self._resp = None
            with contextlib.suppress(Exception):
                resp.release_conn()
        if pending and result == "eof" and not follow:
            # a finished log may lack its final newline; the line is complete
            self._handle(attempt, pos, resent, [pending])
        return result

    def _handle(self, attempt: int, pos: Position, resent: Resent, lines: list[bytes]) -> None:
        """Drop what the server sent again, append to the raw log, feed metrics, then record the new position."""
        out: list[str] = []
        times: list[int] = []
        for raw in lines:
            if raw.endswith(b"\r"):
                raw = raw[:-1]
            ts = parse_ts(raw)
            if ts is None:
                continue  # not a log line (timestamps=true prefixes every line); nothing to place it by
            ns, cut = ts
            text = raw[cut:].decode("utf-8", "replace")
            with self.owner.state.lock:
                if resent.again(ns, text):
                    continue
                # the mark is the latest stamp handled: a line stamped earlier than the one before it (stdout and
                # stderr are stamped apart, see logpos.Resent) is new all the same, and leaves the mark where it is
                if pos.ns is None or ns > pos.ns:
                    pos.ns = ns
                    pos.at_mark = Counter({text: 1})
                elif ns == pos.ns:
                    pos.at_mark[text] += 1
            out.append(text)
            times.append(ns)
        if out:
            self.owner.deliver(self, attempt, out, pos, times)


def _chunks(resp) -> Iterator[bytes]:
    """Bytes as they arrive (chunked transfer: one HTTP chunk at a time; else whatever read1 has)."""
    if getattr(resp, "chunked", False):
        yield from resp.stream(None, decode_content=True)
        return
    while True:
        data = resp.read1(65536)
        if not data:
            return
        yield data


@dataclass
class FollowResult:
    state: J.JobState
    lines: int
    rows: int
    errors: list[str]


class LogFollower:
    """Follows every pod of a run until the job finishes (or, with `follow=False`, prints what is there)."""

    def __init__(self, kube: Kube, ref: J.JobRef, run_dir: RunDir, *, container: str | None = None,
                 pods: Iterable[str] | None = None, on_line: LineSink | None = None,
                 on_records: RecordSink | None = None, on_notice: Callable[[str], None] | None = None,
                 on_status: Callable[[J.JobState, list[dict]], None] | None = None,
                 poll_interval: float = 1.0, read_timeout: float = 30.0, stream_hook: StreamHook | None = None,
                 metrics: bool = True, outage_limit: float = 300.0, exit_grace_s: float | None = None,
                 state=None):
        """`state`: where job and pod status come from (`state_source` by default: the shared watches)."""
        self.kube = kube
        self._state_arg = state
        self.ref = ref
        self.run_dir = run_dir.ensure()
        self.container = container
        self.pod_filter = set(pods) if pods else None
        self.on_line = on_line or (lambda pod, line: None)
        self.on_records = on_records or (lambda recs: None)
        self.on_notice = on_notice or (lambda msg: None)
        self.on_status = on_status or (lambda st, pods: None)
        self.poll_interval = poll_interval
        self.read_timeout = read_timeout
        self.stream_hook = stream_hook
        self.outage_limit = outage_limit
        # how long a follow stream's clean end holds off re-attaching while the status catches up (see _run)
        self.exit_grace_s = 10 * poll_interval if exit_grace_s is None else exit_grace_s
        self._lock_fd = lock(run_dir.follow_state.with_suffix(".lock"))
        self.state = FollowState(run_dir.follow_state)
        self.state.restore_files(run_dir.logs)
        self._files: dict[str, object] = {}
        self._deliver_lock = threading.Lock()
        self.followers: dict[str, PodFollower] = {}
        self.lines = 0
        self.rows = 0
        self._notices: set[str] = set()
        self._queue_checked = float("-inf")
        self._kueue_version: str | None = None
        self._queued_since: float | None = None
        # what ran, for relaunch/diff (launcher.run.provenance): each container's imageID, verl's start-up config
        self.images = provenance.ImageRecorder(self.run_dir)
        self._config_captures: dict[str, provenance.VerlConfigCapture] | None = (
            None if self.run_dir.verl_config.exists() else {})
        self.output_closed = False  # on_line raised BrokenPipeError: run() stops and re-raises it
        self.refused: ApiError | None = None  # a pod's log was refused (401/403): run() stops and raises it
        self.sink = None
        if metrics:
            from launcher.run.attempts import AttemptLog
            from launcher.metrics import MetricsSink

            self.sink = MetricsSink(run_dir.path, derived_interval_s=5.0)
            self.attempts = AttemptLog(run_dir.path)

    # called by PodFollower threads -----------------------------------------------------------

    def refuse(self, exc: ApiError) -> None:
        """A pod follower's log request was refused for good: the first refusal ends the follow."""
        if self.refused is None:
            self.refused = exc

    def notice(self, msg: str) -> None:
        if msg not in self._notices:
            self._notices.add(msg)
            self.on_notice(msg)

    def deliver(self, pf: PodFollower, attempt: int, lines: list[str], pos: Position,
                times: list[int] | None = None) -> None:
        """Raw log first (flushed), then metrics, then the position: a crash between steps re-reads, never skips."""
        from launcher.metrics import LogParser

        with self._deliver_lock:
            fname = f"{pf.pod_name}.log"
            f = self._files.get(fname)
            if f is None:
                f = self._files[fname] = open(self.run_dir.logs / fname, "ab")
            f.write(("\n".join(lines) + "\n").encode("utf-8"))
            f.flush()
            size = f.tell()
            if not self.output_closed:
                try:
                    for line in lines:
                        self.on_line(pf.short, line)
                except BrokenPipeError:
                    # stdout's reader left (`logs -f | head`): keep saving, stop printing, and end the follow
                    # (in this thread the error would only kill one pod's follower, and the run would go on)
                    self.output_closed = True
            self.lines += len(lines)
            self._capture_config(pf, attempt, lines)
            if self.sink is not None:
                parser = pf.parsers.setdefault(attempt, LogParser())
                recs = parser.feed_lines(lines)
                stream = pf.key(attempt)
                order = pf.order(attempt, self.attempts.first_ns(stream, times[0] if times else 0))
                if times is not None:
                    self.attempts.observe(stream, order, pf.short, lines, times)
                if recs:
                    # ordered across pods: a recreated pod's re-logged steps replace the old pod's
                    self.rows += self.sink.add_many(recs, attempt=order)
                    self.on_records(recs)
            with self.state.lock:
                self.state.files[fname] = size
            self.state.save()

    def _capture_config(self, pf: PodFollower, attempt: int, lines: list[str]) -> None:
        if self._config_captures is None:
            return
        cap = self._config_captures.setdefault(f"{pf.pod_name}/{attempt}", provenance.VerlConfigCapture())
        config = cap.feed(lines)
        if config is not None:
            provenance.save_verl_config(self.run_dir, config, pf.pod_name)
            self._config_captures = None  # one per run directory: the first attempt's config is what ran

    # main loop -------------------------------------------------------------------------------

    def run(self, *, follow: bool = True, timeout: float | None = None) -> FollowResult:
        """Follow until the job is finished (status, not end of stream); `follow=False` reads what exists.

        Raises BrokenPipeError (after saving what was read) when `on_line` did: its reader is gone."""
        deadline = None if timeout is None else time.monotonic() + timeout
        finishing = not follow
        st = J.job_state(self.ref.backend, self.ref.obj)
        outage_since = None
        source = self._state_arg
        try:
            if source is None:  # reading what is there once (`logs` without -f) is one GET and LIST: no watch
                source = state_source(self.kube, self.ref) if follow else PollState(self.kube)
            while True:
                try:
                    obj, pods = source.read(self.ref)
                    if obj is not None:  # its status names the RayCluster, whose pods we select by label
                        self.ref = J.JobRef(self.ref.backend, self.ref.name, obj)
                    pods = self._filter(pods)
                except ClusterError as exc:
                    # an API server restart or blip: keep following once it is back; give up after a while
                    if not transient(exc) or (outage_since and time.monotonic() - outage_since > self.outage_limit):
                        raise
                    outage_since = outage_since or time.monotonic()
                    self.notice(f"API server unavailable ({exc}); retrying")
                    time.sleep(self.poll_interval * 2)
                    continue
                if outage_since is not None:
                    self.on_notice("API server reachable again; resuming")
                    self._notices = {n for n in self._notices if not n.startswith("API server unavailable")}
                    outage_since = None
                st = J.job_state(self.ref.backend, obj)
                if st.phase == "Queued":
                    self._queue_notice(st)
                else:
                    self._queued_since = None  # queued again later (pre-empted): look often again
                self.on_status(st, pods)
                if (st.finished or self.output_closed or self.refused is not None
                        or (deadline is not None and time.monotonic() > deadline)):
                    finishing = True
                for pod in pods:
                    self._track(pod, finishing)
                self._replaced(pods)
                if finishing:
                    for pf in self.followers.values():
                        pf.finish.set()
                        pf.interrupt()
                    for pf in self.followers.values():
                        pf.join()
                    break
                source.wait(self.poll_interval)
        finally:
            if source is not None and source is not self._state_arg:
                source.close()
            for pf in self.followers.values():
                pf.finish.set()
                pf.interrupt()
            for pf in self.followers.values():
                pf.join(timeout=10)
            self.close()
        if self.output_closed:
            raise BrokenPipeError("the reader of the log lines went away")
        if self.refused is not None:
            raise self.refused
        errors = [pf.error for pf in self.followers.values() if pf.error]
        return FollowResult(st, self.lines, self.rows, errors)

    def _queue_notice(self, st: J.JobState) -> None:
        """A run held by Kueue: say why it waits (its Workload, looked up every 15 s, after two minutes every 60 s).
        Waiting is no error: the follow goes on through queueing and through a pre-emption that suspends it again."""
        from launcher.kube import kueue as Q

        now = time.monotonic()
        # every 15 s for the first two minutes (the Workload's reason settles), then every 60 s, with the served
        # version found once: a run queued for long costs about one request a minute
        if self._queued_since is None:
            self._queued_since = now
        if now - self._queue_checked < (15 if now - self._queued_since < 120 else 60):
            return
        self._queue_checked = now
        try:
            if self._kueue_version is None:
                self._kueue_version = Q.served_version(self.kube) or ""
            version = self._kueue_version
            wl = Q.workload_for(self.kube, self.ref.obj, version) if version else None
        except ClusterError:  # (a refused Workload list included): the job's own reason still says it is queued
            wl = None
        self.notice("queued: " + (Q.admission(wl).line() if wl else st.reason))

    def _filter(self, pods: list[dict]) -> list[dict]:
        if self.pod_filter:
            pods = [p for p in pods if p["metadata"]["name"] in self.pod_filter
                    or J.short_name(p, self.ref.name) in self.pod_filter]
        return pods

    def _track(self, pod: dict, finishing: bool) -> None:
        md = pod["metadata"]
        uid = md.get("uid") or md["name"]
        self.images.record(pod)
        pf = self.followers.get(uid)
        if pf is not None:
            pf.update(pod)
            return
        container = J.main_container(pod, self.container)
        if container is None:
            self.notice(f"[{md['name']}] has no container {self.container!r}")
            return
        phase = (pod.get("status") or {}).get("phase")
        cs = J.container_status(pod, container)
        started = bool((cs.get("state") or {}).get("running") or (cs.get("state") or {}).get("terminated")
                       or cs.get("restartCount"))
        if not started:
            self.notice(f"[{J.short_name(pod, self.ref.name)}] {phase or 'Pending'}: {J.pending_reason(pod)}")
            return
        # where it ran (KWOK fake or real node), for the report's "simulated" note (launcher.run.placement), and
        # said on the console as the pod starts: real training or a simulation
        entry = record_node(self.kube, self.run_dir.path, pod)
        if entry is not None and entry["simulated"] is not None:
            kind = "KWOK fake" if entry["simulated"] else "real"
            what = placement.headline(entry["simulated"], tiny_cpu=placement.tiny_cpu(self.run_dir.saved_spec()))
            self.notice(f"[{J.short_name(pod, self.ref.name)}] on {kind} node {entry['node']}: {what[0].upper()}{what[1:]}")
        self._register_log(f"{md['name']}.log")
        pf = PodFollower(self, pod, container)
        if finishing:
            pf.finish.set()
        self.followers[uid] = pf
        pf.start()

    def _replaced(self, pods: list[dict]) -> None:
        """Stop the follower of a pod that another pod of its name replaced (only then: a pod merely missing from
        this listing may still be there, and a deleted one answers its log requests with 404 by itself)."""
        uids = {p["metadata"]["name"]: p["metadata"].get("uid") or p["metadata"]["name"] for p in pods}
        for uid, pf in self.followers.items():
            if uids.get(pf.pod_name, uid) != uid and not pf.replaced.is_set():
                pf.replaced.set()
                pf.interrupt()

    def _register_log(self, fname: str) -> None:
        """Record a raw log's length before its follower first reads: a launcher killed in its first delivery
        (raw lines written, state not yet saved) then restarts from that length, not from an unknown tail."""
        with self.state.lock:
            if fname in self.state.files:
                return
            p = self.run_dir.logs / fname
            self.state.files[fname] = p.stat().st_size if p.exists() else 0
        self.state.save(force=True, throttle=False)

    def close(self) -> None:
        with self._deliver_lock:
            for f in self._files.values():
                f.close()
            self._files.clear()
            self.state.save(force=True)
            if self.sink is not None:
                self.sink.close()
                self.sink = None
                self.attempts.save(force=True)
            if self._lock_fd is not None:
                import os

                os.close(self._lock_fd)  # releases the flock
                self._lock_fd = None


def record_node(kube: Kube, run_dir: Path, pod: dict) -> dict | None:
    """Add `pod`'s node to `run_dir/pods.json` (`launcher.run.placement`); best effort: a node that cannot be read
    (no `get nodes`, a cluster-scoped permission) is recorded as unknown. A pod created again on another node (its
    node lost, say) keeps its name: the entry then names the new node and lists the earlier ones in `moved_from`.
    Returns the new or changed entry ({"node", "simulated"[, "moved_from"]}), or None when the pod was recorded
    already on that node or is not placed."""
    name = pod["metadata"]["name"]
    node_name = (pod.get("spec") or {}).get("nodeName")
    pods = placement.load(run_dir) or {}
    before = pods.get(name)
    if not node_name or (before and before.get("node") == node_name):
        return None
    try:
        node = kube.get(NODE, node_name)
    except ClusterError:  # e.g. 403: the run goes on, the report says "unknown"
        node = None
    entry: dict = {"node": node_name, "simulated": None if node is None else placement.is_kwok_node(node)}
    if before:
        entry["moved_from"] = [*before.get("moved_from", []), before.get("node")]
        entry["simulated"] = placement.either(before.get("simulated"), entry["simulated"])
    pods[name] = entry
    write_atomic(Path(run_dir) / placement.PODS_FILE, json.dumps({"pods": pods}, indent=1, sort_keys=True) + "\n")
    return entry
