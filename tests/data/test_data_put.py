"""`launcher data put` without a cluster: what it refuses before any request, the copy pod it renders, the parquet
check the init container makes, and the copy protocol (kube.transfer's two in-pod programs, run here as the pod
runs them: `python3 -c PROGRAM ARGS` with the same stdin). The copy through a real pod on the real node, and the
RBAC it needs, are in tests/e2e/test_real_training_e2e.py and tests/e2e/test_rbac_e2e.py."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from kube_fakes import cli_api  # noqa: F401 - fixture `api`
from launcher.cli.main import main
from launcher.entrypoint.user_data import check_parquet, check_user_parquet
from launcher.errors import BadInput, ClusterError
from launcher.kube import transfer as T
from launcher.render.manifests import render, render_data_pod
from launcher.spec.load import load_spec
from launcher.spec.names import KUEUE_QUEUE_LABEL

ROOT = Path(__file__).resolve().parents[2]
CPU = str(ROOT / "configs" / "grpo-exp3-cpu.yaml")
PARQUET = ["data.dataset=parquet", "data.source_dir=null", "data.dir=/workspace/data/mine",
           "storage.claim_name=team-data"]


def verl_rows(n: int) -> list[dict]:
    return [{"prompt": [{"role": "user", "content": f"What is {i} + {i}?"}], "data_source": "user/doubling",
             "reward_model": {"style": "rule", "ground_truth": str(2 * i)}, "extra_info": {"index": i}}
            for i in range(n)]


def write(path: Path, rows: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


# --- the init container's check -------------------------------------------------------------------


def test_verl_shaped_files_pass_with_their_row_counts(tmp_path):
    spec = load_spec(CPU, [*PARQUET, f"data.train_files={write(tmp_path / 'a.parquet', verl_rows(5))}",
                           f"data.val_files={write(tmp_path / 'b.parquet', verl_rows(2))}"])
    checks = check_user_parquet(spec)
    assert [(c.rows, c.columns) for c in checks] == [(5, ("prompt", "data_source", "reward_model", "extra_info")),
                                                     (2, ("prompt", "data_source", "reward_model", "extra_info"))]
    assert checks[0].line() == f"{tmp_path / 'a.parquet'}: 5 rows, columns prompt, data_source, reward_model, extra_info"


@pytest.mark.parametrize("rows,words", [
    ([{"question": "q", "answer": "1"}], "missing prompt, data_source, reward_model (has question, answer)"),
    ([{**r, "prompt": "What is 1 + 1?"} for r in verl_rows(1)], "prompt as a list of {role, content} messages (got string)"),
    ([{**r, "reward_model": {"style": "rule"}} for r in verl_rows(1)], "reward_model as a struct with ground_truth"),
])
def test_files_verl_would_fail_on_are_refused_naming_what_is_wrong(tmp_path, rows, words):
    path = write(tmp_path / "train.parquet", rows)
    with pytest.raises(BadInput) as exc:
        check_parquet(str(path))
    assert str(exc.value).startswith(f"{path}: expected ") and words in str(exc.value), str(exc.value)


def test_empty_missing_and_non_parquet_files_are_refused(tmp_path):
    empty = tmp_path / "empty.parquet"
    pq.write_table(pa.Table.from_pylist(verl_rows(1)).slice(0, 0), empty)
    (tmp_path / "text.parquet").write_text("not parquet")
    for path, words in ((empty, "expected at least one row, got none"),
                        (tmp_path / "text.parquet", "expected a readable parquet file, got"),
                        (tmp_path / "none.parquet", "found nothing (put files with `launcher data put`)")):
        with pytest.raises(BadInput) as exc:
            check_parquet(str(path))
        assert words in str(exc.value), str(exc.value)


def test_source_dir_is_refused_with_parquet():
    with pytest.raises(BadInput) as exc:
        load_spec(CPU, ["data.dataset=parquet"])  # the CPU config converts its GSM8K fixture from source_dir
    assert "data.source_dir: expected null with data.dataset parquet" in str(exc.value)


# --- refusals before any request ------------------------------------------------------------------


@pytest.mark.parametrize("sets,local,words", [
    (["storage.claim_name=null"], "ds", "storage.claim_name: expected the PersistentVolumeClaim the run mounts"),
    (["data.dir=/data/mine"], "ds", "data.dir: expected a directory under storage.mount_path (/workspace)"),
    ([], "missing", "expected a directory of parquet files, found nothing"),
    ([], "empty", "expected *.parquet files, found none"),
    ([], "bad", "expected the columns verl reads"),
])
def test_bad_input_exits_2_before_any_request(api, tmp_path, capsys, sets, local, words):
    write(tmp_path / "ds" / "train.parquet", verl_rows(3))
    (tmp_path / "empty").mkdir()
    write(tmp_path / "bad" / "train.parquet", [{"question": "q"}])
    argv = ["data", "put", CPU, str(tmp_path / local), *[a for s in [*PARQUET, *sets] for a in ("--set", s)]]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert words in err and err.startswith("error: ") and "Traceback" not in err, err
    assert api.requests == []


# --- the copy pod -----------------------------------------------------------------------------------


def test_the_copy_pod_runs_like_the_runs_pods_on_their_volume():
    spec = load_spec(CPU, [*PARQUET, "scheduling.queue=team-a", "scheduling.node_selector.pool=cpu"])
    pod = render_data_pod(spec)
    trainer = render(spec)[-1]["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]
    assert pod["metadata"]["name"] == "grpo-exp3-cpu-data-put"
    assert pod["metadata"]["labels"]["app.kubernetes.io/component"] == "data"
    assert KUEUE_QUEUE_LABEL not in pod["metadata"]["labels"]  # never queued behind training for quota
    spec_ = pod["spec"]
    assert spec_["securityContext"] == trainer["securityContext"]
    (c,) = spec_["containers"]
    assert c["securityContext"] == trainer["containers"][0]["securityContext"]
    assert c["image"] == trainer["containers"][0]["image"] and "nvidia.com/gpu" not in json.dumps(c)
    assert (spec_["nodeSelector"], spec_.get("tolerations")) == (trainer["nodeSelector"], trainer.get("tolerations"))
    assert {"name": "workspace", "persistentVolumeClaim": {"claimName": "team-data"}} in spec_["volumes"]
    assert {"name": "workspace", "mountPath": "/workspace"} in c["volumeMounts"]
    assert spec_["restartPolicy"] == "Never" and spec_["activeDeadlineSeconds"] == 3600
    assert spec_["automountServiceAccountToken"] is False


# --- the copy protocol: the two in-pod programs, run as the pod runs them ---------------------------


class LocalSession:
    """A `Kube.exec` session over a local `python3 -c PROGRAM` process (what the container runs), so the
    protocol is exercised for real; `cut_after` chunks, the stream breaks (the launcher killed mid-copy)."""

    def __init__(self, argv: list[str], cut_after: int | None):
        self.proc = subprocess.Popen([sys.executable, *argv[1:]], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True)
        self.cut_after, self.chunks, self.out, self.err = cut_after, 0, None, None

    def write_stdin(self, text: str) -> None:
        if self.cut_after is not None and self.chunks >= self.cut_after:
            self.proc.stdin.close()  # what the container sees when the websocket goes
            raise ConnectionError("stream cut")
        self.chunks += 1
        self.proc.stdin.write(text)

    def is_open(self) -> bool:
        if self.out is None:
            self.out, self.err = self.proc.communicate()
        return False

    def update(self, timeout):  # pragma: no cover - is_open is False once the process has ended
        pass

    def peek_stdout(self):
        return bool(self.out)

    def read_stdout(self):
        out, self.out = self.out, ""
        return out

    def peek_stderr(self):
        return bool(self.err)

    def read_stderr(self):
        err, self.err = self.err, ""
        return err

    @property
    def returncode(self):
        return self.proc.returncode

    def close(self):  # the websocket goes: the program in the pod reads the end of its stdin and exits
        if not self.proc.stdin.closed:
            self.proc.stdin.close()
        self.proc.wait(timeout=60)


class LocalPod:
    """`Kube` with only `exec`, into this machine (the pod's volume is a directory here)."""

    def __init__(self, cut_after: int | None = None):
        self.cut_after, self.execs = cut_after, []

    def exec(self, pod, argv, *, container=None):
        self.execs.append(argv[3:])
        program_is_receive = argv[2] == T.RECEIVE
        return LocalSession(argv, self.cut_after if program_is_receive else None)


def test_a_copy_is_verified_skipped_when_there_and_resumed_after_a_cut(tmp_path, monkeypatch):
    monkeypatch.setattr(T, "CHUNK", 1000)
    src = tmp_path / "local"
    src.mkdir()
    (src / "train.parquet").write_bytes(bytes(range(256)) * 40)  # 10,240 bytes: 11 chunks
    (src / "test.parquet").write_bytes(b"small")
    files = [T.LocalFile.of(p) for p in sorted(src.iterdir())]
    dest = tmp_path / "volume" / "data"

    cut = LocalPod(cut_after=4)  # each copy's stream breaks after 4 writes: the small file is in, the large is not
    with pytest.raises(ConnectionError):
        T.put_files(cut, "pod", files, str(dest))
    assert (dest / "test.parquet").read_bytes() == b"small"
    assert not (dest / "train.parquet").exists() and (dest / "train.parquet.part").exists()

    got: list[int] = []
    sent = T.put_files(LocalPod(), "pod", files, str(dest), on_bytes=got.append)
    assert [(s.name, s.skipped, s.offset) for s in sent] == [("test.parquet", True, 0), ("train.parquet", False, 4000)]
    for f in files:
        assert (dest / f.path.name).read_bytes() == f.path.read_bytes()
    assert sum(got) == sum(f.size for f in files) and not list(dest.glob("*.part"))

    # a second put finds both and sends nothing
    again = T.put_files(LocalPod(), "pod", files, str(dest))
    assert [s.line().split(":")[1].strip() for s in again] == ["already there (5 bytes, sha256 "
                                                               f"{files[0].sha256[:12]}), skipped",
                                                               f"already there (10240 bytes, sha256 "
                                                               f"{files[1].sha256[:12]}), skipped"]


def test_a_cut_inside_a_large_file_resumes_at_its_last_whole_chunk(tmp_path, monkeypatch):
    monkeypatch.setattr(T, "CHUNK", 1000)
    src = tmp_path / "train.parquet"
    src.write_bytes(bytes(range(256)) * 40)
    f = T.LocalFile.of(src)
    dest = tmp_path / "volume"
    with pytest.raises(ConnectionError):
        T.put_files(LocalPod(cut_after=4), "pod", [f], str(dest))
    assert (dest / "train.parquet.part").stat().st_size == 4000  # whole chunks only: a prefix of the file
    (sent,) = T.put_files(LocalPod(), "pod", [f], str(dest))
    assert (sent.offset, sent.skipped) == (4000, False) and "resumed at byte 4000" in sent.line()
    assert (dest / "train.parquet").read_bytes() == src.read_bytes()


def test_a_part_that_is_not_a_prefix_is_sent_again_and_a_bad_arrival_is_refused(tmp_path):
    src = tmp_path / "train.parquet"
    src.write_bytes(b"the real content")
    dest = tmp_path / "volume"
    dest.mkdir()
    (dest / "train.parquet.part").write_bytes(b"something else")
    (sent,) = T.put_files(LocalPod(), "pod", [T.LocalFile.of(src)], str(dest))
    assert sent.offset == 0 and (dest / "train.parquet").read_bytes() == b"the real content"
    # the receiver checks what arrived against what the launcher says it sent
    liar = T.LocalFile(src, src.stat().st_size, hashlib.sha256(b"other").hexdigest())
    with pytest.raises(ClusterError) as exc:
        T.put_files(LocalPod(), "pod", [liar], str(tmp_path / "v2"))
    assert "not verified on arrival in pod pod (arrived as 16 bytes" in str(exc.value)
    assert not (tmp_path / "v2" / "train.parquet").exists()


def test_a_refused_exec_handshake_reads_as_the_api_servers_own_line():
    """websocket-client reports a refused upgrade as text (status line, headers, the body's repr): the launcher's
    error is the Status message, as for every other refusal (tests/e2e/test_rbac_e2e.py sees it for real)."""
    from launcher.kube.client import _handshake

    body = (b'{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"pods \\"p\\" is '
            b'forbidden: User \\"u\\" cannot create resource \\"pods/exec\\" in API group \\"\\" in the namespace '
            b'\\"ns\\"","reason":"Forbidden","code":403}\n')
    line = 'pods "p" is forbidden: User "u" cannot create resource "pods/exec" in API group "" in the namespace "ns"'
    for shown in (repr(body), body.decode()):  # the body's repr (older clients) or its text (kubernetes 37)
        assert _handshake(f"Handshake status 403 Forbidden -+-+- {{'audit-id': 'x'}} -+-+- {shown}") == (403, line)
    assert _handshake("Handshake status 500 Internal Server Error") == (500, "")
