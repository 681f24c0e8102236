"""Log follower against the in-memory `FakeKube`: exactly-once raw logs and metrics through cuts,
restarts of the launcher and of the container, and stopping by job status (not end of stream)."""
from __future__ import annotations

import json
import threading
import time

import pytest

from kube_fakes import FakeKube, pod, pytorchjob
import simlog
from launcher.run.follow import LogFollower
from launcher.run.logpos import FollowState, parse_ts
from launcher.kube import client, jobs as J
from launcher.run.dirs import RunDir
from follow_support import raw, rows, wait_until

JOB = "exp-12345678"
POD = f"{JOB}-master-0"


def simlog_lines(steps=6, seed=0) -> list[str]:
    return [ln.rstrip("\n") for ln in simlog.generate(steps=steps, seed=seed)]


def ref_of(fk: FakeKube) -> J.JobRef:
    return J.JobRef("pytorchjob", JOB, fk.get(J.JOB_RESOURCES["pytorchjob"], JOB))


def finish(fk: FakeKube, ok=True, restart=0) -> None:
    fk.put(pod(POD, JOB, phase="Succeeded" if ok else "Failed", state="terminated", restart=restart))
    fk.put(pytorchjob(JOB, conditions=(("Succeeded" if ok else "Failed", "True"),)))


def start(fk, run_dir, **kw):
    out: dict = {}
    lines: list = []
    f = LogFollower(fk, ref_of(fk), run_dir, poll_interval=0.05, read_timeout=2,
                    on_line=lambda p, line: lines.append((p, line)), **kw)
    t = threading.Thread(target=lambda: out.setdefault("result", f.run()), daemon=True)
    t.start()
    return f, t, out, lines


def raised_by_run(f: LogFollower, timeout: float = 10) -> tuple[threading.Thread, dict]:
    """Run `f.run()` in a thread for at most `timeout` s; `out["raised"]` is what it raised, if anything."""
    out: dict = {}

    def go():
        try:
            f.run()
        except BaseException as exc:  # noqa: BLE001 - the test inspects what run() raised
            out["raised"] = exc

    t = threading.Thread(target=go, daemon=True)
    t.start()
    t.join(timeout)
    return t, out


def test_parse_ts_handles_trimmed_fractions_and_offsets():
    a = parse_ts(b"2026-01-01T00:00:00.5Z x")
    b = parse_ts(b"2026-01-01T00:00:00.123456789Z x")
    c = parse_ts(b"2026-01-01T01:00:00+01:00 x")
    assert a[0] == 1767225600_500000000 and b[0] == 1767225600_123456789 and a[0] > b[0]
    assert c[0] == 1767225600_000000000 and a[1] == len("2026-01-01T00:00:00.5Z ")
    assert parse_ts(b"step:1 - a:1") is None


def test_follow_to_success_exactly_once(tmp_path):
    fk = FakeKube()
    fk.put(pytorchjob(JOB))
    fk.put(pod(POD, JOB))
    lines = simlog_lines(8)
    fk.append(POD, "pytorch", 0, lines[:10])
    run_dir = RunDir(tmp_path / JOB)
    f, t, out, printed = start(fk, run_dir)
    for i in range(10, len(lines), 4):
        time.sleep(0.05)
        fk.append(POD, "pytorch", 0, lines[i:i + 4])
    time.sleep(0.2)
    finish(fk)
    t.join(10)
    assert not t.is_alive(), "the follower must stop on job status, even though the fake stream never ends"
    assert out["result"].state.succeeded
    assert raw(run_dir) == lines
    assert [p for p, _ in printed] == ["master-0"] * len(lines)
    expected = simlog.expected_rows(steps=8)
    got = rows(run_dir)
    assert [r["step"] for r in got] == list(range(1, 9))
    assert got == json.loads(json.dumps(expected))


def test_cut_streams_lose_and_duplicate_nothing_even_within_one_second(tmp_path):
    """Every attach is cut after 2 chunks; many lines share timestamps (some identical), and the
    server resends from the start of the second, so the boundary dedupe is exercised on every cut."""
    fk = FakeKube()
    fk.chunk_lines = 2
    fk.put(pytorchjob(JOB))
    fk.put(pod(POD, JOB))
    base = simlog_lines(5)
    lines = []
    for i, ln in enumerate(base):
        lines += [ln, "same", "same"] if i % 3 == 0 else [ln]
    cuts = []

    def hook(key, chunks):
        # cut the first 8 attaches at different places (a fixed place would replay forever: same second)
        n = len(cuts)
        for i, c in enumerate(chunks):
            if n < 8 and i == 1 + n % 3:
                cuts.append(key)
                raise ConnectionResetError("cut by test")
            yield c

    # 3 lines per timestamp (identical timestamps across chunk boundaries), groups 0.4 s apart so that
    # a sinceTime truncated to the second resends lines from before the mark
    t0 = 1767225600 * 10**9
    for g, i in enumerate(range(0, len(lines), 3)):
        fk.append(POD, "pytorch", 0, lines[i:i + 3], ns=t0 + g * 400_000_000, step_ns=0)
    run_dir = RunDir(tmp_path / JOB)
    f, t, out, _ = start(fk, run_dir, stream_hook=hook)
    time.sleep(1.0)
    finish(fk)
    t.join(20)
    assert len(cuts) == 8
    assert raw(run_dir) == lines
    assert [r["step"] for r in rows(run_dir)] == [1, 2, 3, 4, 5]
    assert any(r["since_time"] for r in fk.log_requests), "re-attach must resume with sinceTime"


def test_restarted_launcher_cuts_uncommitted_tail_and_resumes(tmp_path):
    fk = FakeKube()
    fk.put(pytorchjob(JOB))
    fk.put(pod(POD, JOB))
    lines = simlog_lines(6)
    half = len(lines) // 2
    fk.append(POD, "pytorch", 0, lines[:half])
    run_dir = RunDir(tmp_path / JOB)
    # first launcher: read what exists, then stop (as if killed right after its last save)
    LogFollower(fk, ref_of(fk), run_dir, poll_interval=0.05).run(follow=False)
    assert raw(run_dir) == lines[:half]
    # a kill between "raw log flushed" and "state saved" leaves lines the state does not know about
    with open(run_dir.pod_log(POD), "a") as fh:
        fh.write(lines[half] + "\n" + "torn partial li")
    fk.append(POD, "pytorch", 0, lines[half:])
    f, t, out, printed = start(fk, run_dir)
    time.sleep(0.4)
    finish(fk)
    t.join(10)
    assert raw(run_dir) == lines
    assert [line for _, line in printed] == lines[half:]
    assert [r["step"] for r in rows(run_dir)] == list(range(1, 7))


def test_container_restart_reads_previous_then_new_and_new_attempt_wins(tmp_path):
    fk = FakeKube()
    fk.put(pytorchjob(JOB))
    fk.put(pod(POD, JOB))
    first = simlog_lines(4, seed=1)
    second = simlog_lines(6, seed=2)  # resumed run logs steps 1..6 again with other values
    fk.append(POD, "pytorch", 0, first[:8])
    run_dir = RunDir(tmp_path / JOB)
    f, t, out, printed = start(fk, run_dir)
    time.sleep(0.3)
    # the last lines of attempt 0 arrive right before the restart: only `previous=true` still has them
    fk.append(POD, "pytorch", 0, first[8:])
    fk.put(pod(POD, JOB, restart=1))
    fk.append(POD, "pytorch", 1, second)
    time.sleep(0.5)
    finish(fk, restart=1)
    t.join(10)
    assert raw(run_dir) == first + second
    assert any(r["previous"] for r in fk.log_requests)
    got = {r["step"]: r for r in rows(run_dir)}
    want = {r["step"]: r for r in json.loads(json.dumps(simlog.expected_rows(steps=6, seed=2)))}
    assert sorted(got) == [1, 2, 3, 4, 5, 6]
    assert got == want, "a restarted container re-logging a step must win over the old attempt"
    meta = json.loads((run_dir.path / "metrics.meta.json").read_text())
    assert meta["step_attempt"]["1"].endswith("/000001")  # `<pod created>/<uid>/<restart>`: restart 1 won


def test_pending_pod_reports_scheduler_message_and_is_not_followed(tmp_path):
    fk = FakeKube()
    fk.put(pytorchjob(JOB, conditions=(("Created", "True"),)))
    p = pod(POD, JOB, phase="Pending", state="ContainerCreating")
    p["status"]["containerStatuses"] = []
    p["status"]["conditions"] = [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                                  "message": "0/3 nodes are available: 3 Insufficient nvidia.com/gpu."}]
    fk.put(p)
    notices = []
    f = LogFollower(fk, ref_of(fk), RunDir(tmp_path / JOB), poll_interval=0.05, on_notice=notices.append)
    t = threading.Thread(target=f.run, daemon=True)
    t.start()
    time.sleep(0.3)
    assert any("Unschedulable: 0/3 nodes are available: 3 Insufficient nvidia.com/gpu." in n for n in notices)
    assert not fk.log_requests
    fk.put(pytorchjob(JOB, conditions=(("Failed", "True"),)))
    t.join(5)
    assert not t.is_alive()


def test_second_follower_on_same_run_dir_is_refused(tmp_path):
    from launcher.errors import BadInput

    fk = FakeKube()
    fk.put(pytorchjob(JOB))
    run_dir = RunDir(tmp_path / JOB)
    a = LogFollower(fk, ref_of(fk), run_dir)
    with pytest.raises(BadInput, match="already following"):
        LogFollower(fk, ref_of(fk), run_dir)
    a.close()
    LogFollower(fk, ref_of(fk), run_dir).close()


def test_state_file_is_keyed_by_pod_container_uid_attempt(tmp_path):
    fk = FakeKube()
    fk.put(pytorchjob(JOB))
    fk.put(pod(POD, JOB, phase="Succeeded", state="terminated"))
    fk.append(POD, "pytorch", 0, ["a", "b"])
    run_dir = RunDir(tmp_path / JOB)
    finish(fk)
    LogFollower(fk, ref_of(fk), run_dir).run()
    st = FollowState(run_dir.follow_state)
    assert list(st.positions) == [f"{POD}/pytorch/uid-{POD}/0"]
    assert st.positions[f"{POD}/pytorch/uid-{POD}/0"].done
    assert st.files == {f"{POD}.log": len("a\nb\n")}


@pytest.mark.parametrize("mode", ["watch", "poll"])
def test_api_server_outage_is_ridden_out(tmp_path, monkeypatch, mode):
    """Every request raises 'connection refused' for a while (an API server restart: open watches end with it);
    the follower keeps going, by watch (re-watching from the last resourceVersion) and by poll alike."""
    from launcher.kube import ClusterUnreachable

    monkeypatch.setenv("LAUNCHER_FOLLOW_STATE", mode)
    fk = FakeKube()
    fk.put(pytorchjob(JOB))
    fk.put(pod(POD, JOB))
    lines = simlog_lines(4)
    fk.append(POD, "pytorch", 0, lines[:10])
    down = threading.Event()

    def refused(real):
        def call(*a, **k):
            if down.is_set():
                raise ClusterUnreachable("cannot reach the API server at fake://: connection refused")
            return real(*a, **k)
        return call

    for name in ("get", "list", "list_with_version", "watch", "pod_log"):
        setattr(fk, name, refused(getattr(fk, name)))
    notices = []
    run_dir = RunDir(tmp_path / JOB)
    f, t, out, _ = start(fk, run_dir, on_notice=notices.append)
    time.sleep(0.3)
    down.set()
    with fk.cond:
        for w in fk.open_watches:
            w.close()  # the server's end of every watch goes away with it
    for r in list(f.followers.values()):
        r.interrupt()  # the open stream dies with the server
    fk.append(POD, "pytorch", 0, lines[10:])
    time.sleep(1.5)  # longer than the informer's pause before re-watching a watch that ended early
    assert t.is_alive()
    down.clear()
    time.sleep(0.3)
    finish(fk)
    t.join(10)
    assert out["result"].state.succeeded
    assert any("API server unavailable" in n for n in notices)
    assert raw(run_dir) == lines
    assert [r["step"] for r in rows(run_dir)] == [1, 2, 3, 4]


def test_broken_pipe_in_on_line_ends_the_follow_and_keeps_saving(tmp_path):
    """`logs -f | head`: the line sink's reader leaves while the job runs. The follower stops (it would otherwise
    go on until the job ends, the error lost in a pod thread), saves what it read and re-raises the error."""
    fk = FakeKube()
    fk.put(pytorchjob(JOB))
    fk.put(pod(POD, JOB))
    lines = simlog_lines(4)
    fk.append(POD, "pytorch", 0, lines)
    run_dir = RunDir(tmp_path / JOB)
    printed = []

    def closed_after_two(pod_name, line):
        if len(printed) == 2:
            raise BrokenPipeError(32, "Broken pipe")
        printed.append(line)

    f = LogFollower(fk, ref_of(fk), run_dir, poll_interval=0.05, read_timeout=2, on_line=closed_after_two)
    t, out = raised_by_run(f)  # the job stays Running: only the closed output can end the follow
    assert not t.is_alive(), "a closed stdout must end the follow"
    assert isinstance(out.get("raised"), BrokenPipeError)
    assert printed == lines[:2]
    assert raw(run_dir) == lines  # every line read is still saved


def test_a_refused_pod_log_ends_the_follow_with_the_permission_error(tmp_path):
    """No `get pods/log` (403): retrying cannot help. The follow ends while the job still runs and raises the
    API server's refusal, so `logs`/`submit --follow` exit 3 naming the permission instead of exiting 0."""
    from launcher.kube.client import ApiError

    fk = FakeKube()
    fk.put(pytorchjob(JOB))
    fk.put(pod(POD, JOB))
    calls = []

    def refused(pod_name, **kw):
        calls.append(pod_name)
        raise ApiError(403, f'pods "{pod_name}" is forbidden: User "u" cannot get resource "pods/log"',
                       f"logs of pod {pod_name}", fk.server)

    fk.pod_log = refused
    f = LogFollower(fk, ref_of(fk), RunDir(tmp_path / JOB), poll_interval=0.05, read_timeout=2,
                    on_line=lambda p, line: None)
    t, out = raised_by_run(f)  # the job stays Running: only the refusal can end the follow
    assert not t.is_alive(), "a refused log must end the follow"
    assert isinstance(out.get("raised"), ApiError) and out["raised"].status == 403
    assert 'cannot get resource "pods/log"' in str(out["raised"])
    assert len(calls) == 1  # not retried


def test_launcher_killed_in_its_first_delivery_restarts_without_duplicates(tmp_path):
    """What a SIGKILL leaves when it lands after the first lines reached the raw log (and metrics) but before the
    state was saved (the save is throttled): the raw log's length was recorded when its follower started, so
    the restarted follower cuts it back and reads those lines once."""
    import shutil

    fk = FakeKube()
    fk.put(pytorchjob(JOB))
    fk.put(pod(POD, JOB))
    lines = simlog_lines(4)
    fk.append(POD, "pytorch", 0, lines[:12])
    run_dir = RunDir(tmp_path / "live" / JOB)
    f, t, out, _ = start(fk, run_dir)
    real_save = f.state.save
    f.state.save = lambda force=False, interval=0.2, **kw: real_save(force=True, **kw) if force else None
    assert wait_until(lambda: run_dir.pod_log(POD).exists() and len(raw(run_dir)) == 12)
    killed = tmp_path / "killed" / JOB
    shutil.copytree(run_dir.path, killed)  # the disk as the killed launcher left it
    finish(fk)
    t.join(10)
    fk.append(POD, "pytorch", 0, lines[12:])
    again = RunDir(killed)
    LogFollower(fk, ref_of(fk), again, poll_interval=0.05, read_timeout=2).run()
    assert raw(again) == lines
    assert [r["step"] for r in rows(again)] == [1, 2, 3, 4]




@pytest.mark.parametrize("cut_after", [None, 3])
def test_a_line_stamped_before_the_one_above_it_is_kept_once(tmp_path, cut_after):
    """The runtime stamps stdout and stderr apart, so a line can be stamped microseconds before the line written
    above it (CI lost eval's `[eval] model=checkpoint` line so). Kept, in file order, once, read in one attach or
    re-read after a cut below it. (A cut between the two lines still loses it: logpos.Resent says why.)"""
    fk = FakeKube()
    fk.chunk_lines = 1
    fk.put(pytorchjob(JOB))
    fk.put(pod(POD, JOB))
    t0 = 1767225600 * 10**9
    stamped = [("[entrypoint] starting eval", 10), ("[entrypoint] model checkpoint", 2_000),
               ("[eval] model=checkpoint", 1_500), ("[eval] done", 3_000)]
    for text, us in stamped:
        fk.append(POD, "pytorch", 0, [text], ns=t0 + us * 1000)
    cuts = []

    def hook(key, chunks):
        for i, c in enumerate(chunks):
            yield c
            if cut_after is not None and not cuts and i + 1 == cut_after:
                cuts.append(key)
                raise ConnectionResetError("cut by test")

    run_dir = RunDir(tmp_path / JOB)
    f, t, out, _ = start(fk, run_dir, stream_hook=hook)
    wait_until(lambda: (run_dir.logs / f"{POD}.log").exists() and len(raw(run_dir)) == len(stamped), timeout=10)
    finish(fk)
    t.join(10)
    assert not t.is_alive()
    assert len(cuts) == (cut_after is not None)
    assert raw(run_dir) == [text for text, _ in stamped]


def test_a_pod_replaced_under_its_name_is_not_read_by_the_old_pods_follower(tmp_path):
    """Eviction: the pod is deleted and the operator creates one of the same name. A log request names the pod, not
    its uid, so the old pod's follower, reading on, would get the replacement's log and file its lines a second
    time. Once the replacement is listed, the old follower stops: each line is in the raw log once."""
    fk = FakeKube()
    fk.put(pytorchjob(JOB))
    fk.put(pod(POD, JOB, uid="first"))
    before = [f"first pod line {i}" for i in range(5)]
    fk.append(POD, "pytorch", 0, before)
    run_dir = RunDir(tmp_path / JOB)
    f, t, out, _ = start(fk, run_dir)
    assert wait_until(lambda: (run_dir.logs / f"{POD}.log").exists() and raw(run_dir) == before)
    fk.delete(client.POD, POD)
    fk.put(pod(POD, JOB, state="ContainerCreating"))  # the replacement, listed before its container starts
    assert wait_until(lambda: f.followers["first"].replaced.is_set())
    with fk.cond:
        del fk.logs[(POD, "pytorch", 0)]  # the name's log is the replacement's from now on
    after = [f"replacement line {i}" for i in range(8)]
    fk.put(pod(POD, JOB))
    fk.append(POD, "pytorch", 0, after)
    assert wait_until(lambda: len(raw(run_dir)) >= len(before) + len(after))
    finish(fk)
    t.join(10)
    assert not t.is_alive()
    assert raw(run_dir) == before + after
