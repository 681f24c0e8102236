"""Faults injected into real runs by the e2e tests and the benchmarks (one copy of each).

`STOP_ENGINE`: a program for `python3 -c` inside the trainer container that stops vLLM's engine-core process with
SIGSTOP (a hung generation engine) and prints its pid.
"""

STOP_ENGINE = """
import os, signal
for p in os.listdir("/proc"):
    try:
        cmd = open(f"/proc/{p}/cmdline", "rb").read() if p.isdigit() else b""
    except OSError:
        continue
    if cmd.startswith(b"VLLM::EngineCore"):
        os.kill(int(p), signal.SIGSTOP)
        print(p)
"""

# Stop the actor's worker process (Ray's `WorkerDict`) while it is inside its update: py-spy reads its stacks in a loop
# (without pausing it) until one shows the actor update, then SIGSTOPs it at once; prints the pid and that stack.
STOP_ACTOR_IN_UPDATE = """
import os, signal, subprocess, sys, time
def cmdline(p):
    try:
        return open(f"/proc/{p}/cmdline", "rb").read()
    except OSError:
        return b""
pids = [int(p) for p in os.listdir("/proc") if p.isdigit() and cmdline(p).startswith(b"ray::WorkerDict")]
deadline = time.monotonic() + float(sys.argv[1])
while time.monotonic() < deadline:
    for pid in pids:
        out = subprocess.run(["py-spy", "dump", "--pid", str(pid), "--nonblocking"], capture_output=True,
                             text=True).stdout
        if "update_policy (" in out or "update_actor (" in out:  # a frame, not the process title
            os.kill(pid, signal.SIGSTOP)
            print(pid)
            print(out)
            sys.exit(0)
sys.exit("the actor was never seen in its update")
"""
