"""The Python stacks of every process in a running pod's container, taken through the API server (an incident).

One small program runs with the image's python3 (argv, never a shell) through `create pods/exec`, the only
privilege the launcher needs. It lists the container's processes from /proc (pid, parent, state, name, command
line) and reads the stacks of each Python process with py-spy (in the image: Ray's dependency) in
`--nonblocking` mode: py-spy reads the process's memory without pausing it, so a stopped process (state T) and a
busy one are read alike and training is never interrupted.

py-spy needs the kernel's ptrace access to the processes: a process of the same user has it unless Yama's
`kernel.yama.ptrace_scope` is 1 or more (Ubuntu's default) or the node's AppArmor/SELinux profile forbids it.
There, add `SYS_PTRACE` through `security.extra_capabilities`; without it each process's entry carries py-spy's
refusal and the incident keeps everything else (README "Incidents").

Ray's own infrastructure (dashboard modules, log monitor, runtime-env agent, idle workers, multiprocessing
helpers) is listed but not read: its stacks never explain a hung step and reading them doubles the time.
"""

from __future__ import annotations

import json

# Python processes whose stacks are not read (matched against the start of the command line, after setproctitle)
SKIPPED = ("ray::IDLE", "ray::DashboardAgent", "ray::RuntimeEnvAgent", "ray-dashboard-")
SKIPPED_SCRIPTS = ("ray/_private/log_monitor.py", "ray/autoscaler/_private/monitor.py", "ray/dashboard/dashboard.py",
                   "multiprocessing.forkserver", "multiprocessing.resource_tracker")

STACKS = r"""
import json, os, shutil, subprocess, sys
from concurrent.futures import ThreadPoolExecutor
skip, skip_scripts, timeout = json.loads(sys.argv[1]), json.loads(sys.argv[2]), float(sys.argv[3])
pyspy = shutil.which("py-spy")
mine = {os.getpid(), os.getppid()}
procs = []
for name in os.listdir("/proc"):
    if not name.isdigit() or int(name) in mine:
        continue
    pid = int(name)
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmd = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        continue  # ended meanwhile
    try:
        exe = os.readlink(f"/proc/{pid}/exe")
    except OSError:
        exe = None
    rest = stat[stat.rindex(")") + 2:].split()
    entry = {"pid": pid, "ppid": int(rest[1]), "state": rest[0], "comm": stat[stat.index("(") + 1:stat.rindex(")")],
             "cmdline": cmd[:400], "exe": exe, "rss_kib": int(rest[21]) * (os.sysconf("SC_PAGE_SIZE") // 1024)}
    python = os.path.basename(exe or "").startswith("python") or (exe is None and "python" in cmd)
    entry["read"] = python and not cmd.startswith(tuple(skip)) and not any(s in cmd for s in skip_scripts)
    procs.append(entry)

def dump(entry):
    try:
        r = subprocess.run([pyspy, "dump", "--pid", str(entry["pid"]), "--nonblocking", "--json"],
                           capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        entry["error"] = f"py-spy gave no answer within {timeout:g}s"
        return
    if r.returncode == 0:
        try:
            entry["threads"] = json.loads(r.stdout)
            return
        except ValueError:
            pass
    entry["error"] = (r.stderr or r.stdout).strip()[-600:] or f"py-spy exited {r.returncode}"

wanted = [p for p in procs if p["read"]]
if pyspy:
    with ThreadPoolExecutor(4) as pool:
        list(pool.map(dump, wanted))
else:
    for p in wanted:
        p["error"] = "py-spy is not in the image's PATH"
print(json.dumps({"py_spy": pyspy, "processes": sorted(procs, key=lambda p: p["pid"])}))
"""


def capture_stacks(kube, pod: str, *, container: str | None = None, per_process_s: float = 20,
                   timeout: float = 120) -> dict:
    """`{"py_spy": path|None, "processes": [...]}` for the pod's container (see the module); a process that was read
    has `threads` (py-spy's JSON: thread_id, thread_name, active, owns_gil, frames innermost first) or `error`.
    Raises `ApiError`/`ClusterError` when the exec itself fails (no pods/exec, the container gone)."""
    from launcher.errors import ClusterError

    out, err, code = kube.run_in_pod(
        pod, ["python3", "-c", STACKS, json.dumps(SKIPPED), json.dumps(SKIPPED_SCRIPTS), str(per_process_s)],
        container=container, timeout=timeout)
    if code != 0:
        raise ClusterError(f"the stack capture in pod {pod} exited {code}: {(err.strip() or out.strip())[-500:]}")
    return json.loads(out)
