"""What hung: a stall classified from the Python stacks of the run's processes (`launcher.kube.stacks`), pure.

Classes: `rollout` (vLLM generation, the agent loop, the trainer waiting for samples), `reward` (the reward
function or reward loop), `update` (log-prob, advantage and actor/critic update computations), `weight_sync`
(the trainer's weights pushed into the rollout engine), `collective` (a torch.distributed / NCCL / gloo wait),
`data_loading` (the trainer fetching a batch, a dataset item), `checkpoint` (saving or loading a checkpoint), or
`unknown`.

How it decides, in order:

1. A process that is stopped (state T) or in uninterruptible sleep (D) is a suspect: the evidence is its own
   stacks first, then the Ray actor method its process title names (Ray retitles a worker `ray::Class.method`
   while the method runs, e.g. `ray::WorkerDict.actor_rollout_update_actor`). Otherwise every process read counts.
2. A thread inside a collective (`torch/distributed/distributed_c10d.py`, Ray's collective library) means the
   wait is `collective`, whatever phase it is in: one rank is missing.
3. Otherwise the driver, the process running verl's trainer loop (`PPOTrainer.fit` and friends), names the phase
   it waits for: the innermost of its main thread's frames that matches a rule below. A suspect's own frames come
   first when it matched.
4. Otherwise the innermost matching frame of any process read; else `unknown`.

The frames that decided are returned with the class, innermost first, so a reader can check the call.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

CLASSES = ("rollout", "reward", "update", "weight_sync", "collective", "data_loading", "checkpoint", "unknown")
SUSPECT_STATES = {"T": "stopped", "t": "stopped by a tracer", "D": "in uninterruptible sleep (I/O)"}

# (class, function-name pattern or None, file pattern or None): a frame matches when both given patterns match.
# Function names are py-spy's (`Class.method`); files its short file names. Order matters within a frame only.
RULES: tuple[tuple[str, str | None, str | None], ...] = (
    ("collective", None, r"torch/distributed/distributed_c10d\.py$|ray/util/collective/"),
    ("collective", r"(^|\.)(all_reduce|all_gather\w*|reduce_scatter\w*|broadcast\w*|barrier|monitored_barrier)$",
     r"torch/distributed/"),
    ("checkpoint", r"(^|\.)_?(save|load)_checkpoint$", None),
    ("checkpoint", None, r"torch/distributed/checkpoint/|safetensors/|torch/serialization\.py$"),
    ("weight_sync", r"(^|\.)_?(async_)?(update_weights|sync_rollout_weights|sync_weights|send_weights|"
                    r"receive_weights|load_weights)$", None),
    ("weight_sync", None, r"verl/checkpoint_engine/|verl/workers/sharding_manager/|weight_transfer"),
    ("data_loading", r"(^|\.)(_fetch_one_gen_batch|__getitem__|_next_data|_get_data|_try_get_data)$",
     r"torch/utils/data/|torchdata/|verl/utils/dataset/|verl/trainer/"),
    ("reward", r"(^|\.)(_compute_reward\w*|compute_score|compute_reward\w*)$", None),
    ("reward", None, r"verl/experimental/reward_loop/|verl/workers/reward"),
    ("update", r"(^|\.)(_compute_old_log_prob|_compute_ref_log_prob|_compute_values|_compute_advantage|"
               r"_update_actor|_update_critic|update_actor|update_critic|update_policy|compute_log_prob|"
               r"compute_ref_log_prob)$", r"verl/"),
    ("update", None, r"torch/autograd/|torch/optim/"),
    ("rollout", r"(^|\.)(generate_sequences|generate|sample|_wait_for_next_poll)$",
     r"verl/(experimental/agent_loop|workers/rollout|trainer/ppo/v1/(replay_buffer|agent_loop_tq))"),
    ("rollout", None, r"^vllm/|/vllm/|verl/workers/rollout/|verl/experimental/agent_loop/"),
)
_COMPILED = tuple((cls, re.compile(fn) if fn else None, re.compile(path) if path else None) for cls, fn, path in RULES)
DRIVER = re.compile(r"(^|\.)(fit|_step_once|step)$")
DRIVER_FILE = re.compile(r"verl/trainer/")
RAY_METHOD = re.compile(r"^ray::\w+\.(\w+)")
ROLE_PREFIX = re.compile(r"^(actor_rollout_ref|actor_rollout|actor|critic|ref|rollout|reward)_")
IDLE_FILES = re.compile(r"^(threading|queue|selectors|concurrent/futures/thread|multiprocessing/(connection|queues))"
                        r"\.py$|ray/_private/(worker|gc_collect_manager|workers/default_worker)\.py$")


@dataclass(frozen=True)
class Verdict:
    """The class of a stall, why, and the frames that decided it (each `function (file:line)`, innermost first).

    `phase` is what verl's trainer loop itself waits in (its class and frame), which may differ from the class:
    a stopped vLLM engine (rollout) leaves the trainer waiting in its weight sync (weight_sync)."""

    kind: str
    why: str
    frames: list[str] = field(default_factory=list)
    process: str | None = None  # `pid name` of the process whose frames decided
    suspects: list[str] = field(default_factory=list)  # stopped / D-state processes, `pid name (state)`
    phase: str | None = None  # the trainer loop's class, when its stack was read and matched
    phase_frame: str | None = None

    def as_dict(self) -> dict:
        return {"class": self.kind, "why": self.why, "frames": self.frames, "process": self.process,
                "suspects": self.suspects, "phase": self.phase, "phase_frame": self.phase_frame}


def frame_text(frame: dict) -> str:
    """`Class.method (pkg/file.py:123)`, as py-spy prints a frame."""
    return f"{frame.get('name')} ({frame.get('short_filename') or frame.get('filename')}:{frame.get('line')})"


def frame_class(frame: dict) -> str | None:
    """The class one frame belongs to (the first rule that matches it), else None."""
    name, path = frame.get("name") or "", frame.get("short_filename") or frame.get("filename") or ""
    for cls, fn, pattern in _COMPILED:
        if (fn is None or fn.search(name)) and (pattern is None or pattern.search(path)):
            return cls
    return None


def process_label(proc: dict) -> str:
    return f"{proc.get('pid')} {proc.get('cmdline') or proc.get('comm') or '?'}".strip()[:80]


def title_class(proc: dict) -> tuple[str, str] | None:
    """(class, method) of the Ray actor method a process's title names (`ray::WorkerDict.actor_rollout_update_actor`:
    update), read as a verl worker method without its fused-role prefix; None when it names none that matches."""
    m = RAY_METHOD.match(proc.get("cmdline") or "")
    if not m:
        return None
    cls = frame_class({"name": ROLE_PREFIX.sub("", m.group(1)), "short_filename": "verl/workers/engine_workers.py"})
    return (cls, m.group(1)) if cls else None


def _threads(proc: dict) -> list[dict]:
    return [t for t in proc.get("threads") or [] if t.get("frames")]


def _main_thread(proc: dict) -> dict | None:
    threads = _threads(proc)
    main = [t for t in threads if t.get("thread_name") == "MainThread" or t.get("thread_id") == proc.get("pid")]
    return (main or threads or [None])[0]


def _innermost(threads: list[dict], only: set[str] | None = None) -> tuple[str, list[dict]] | None:
    """(class, frames from the matching one outwards, at most 4) of the innermost matching frame of any thread."""
    for thread in threads:
        frames = thread["frames"]
        for i, frame in enumerate(frames):
            cls = frame_class(frame)
            if cls and (only is None or cls in only):
                return cls, frames[i:i + 4]
    return None


def _is_driver(proc: dict) -> bool:
    main = _main_thread(proc)
    return bool(main) and any(DRIVER.search(f.get("name") or "") and DRIVER_FILE.search(f.get("short_filename") or "")
                              for f in main["frames"])


def _ordered(proc: dict) -> list[dict]:
    """The process's threads, its main thread first."""
    main = _main_thread(proc)
    return ([main] if main else []) + [t for t in _threads(proc) if t is not main]


def classify(pods: dict[str, dict]) -> Verdict:
    """The verdict for one stall from `{pod: capture_stacks(...) result}` (a pod whose capture failed: `{}`)."""
    procs = [p for capture in pods.values() for p in (capture or {}).get("processes") or []]
    suspects = [p for p in procs if p.get("state") in SUSPECT_STATES]
    suspect_names = [f"{process_label(p)} ({SUSPECT_STATES[p['state']]})" for p in suspects]
    read = [p for p in procs if _threads(p)]
    if not read:
        why = "no stacks could be read" + (f"; suspects: {', '.join(suspect_names)}" if suspect_names else "")
        return Verdict("unknown", why, suspects=suspect_names)
    # the driver: verl's trainer loop, not the DataLoader workers it forked (their stacks start with its frames)
    loops = [p for p in read if _is_driver(p)]
    driver = next((p for p in loops if p.get("ppid") not in {q.get("pid") for q in loops}), None)
    hit = _innermost([_main_thread(driver)]) if driver else None
    phase = (hit, driver) if hit else None  # ((class, frames), driver): what verl's trainer loop waits in
    phase_class, phase_frame = (phase[0][0], frame_text(phase[0][1][0])) if phase else (None, None)

    def verdict(cls: str, frames: list[dict], proc: dict, how: str) -> Verdict:
        waits = f"; the trainer loop waits in {phase_class} ({phase_frame})" if phase and proc is not phase[1] else ""
        return Verdict(cls, f"{how}: {process_label(proc)} in {frame_text(frames[0])}{waits}",
                       [frame_text(f) for f in frames], process_label(proc), suspect_names, phase_class, phase_frame)

    # 2. a collective wait anywhere (suspects first)
    for proc in [*suspects, *read]:
        hit = _innermost(_ordered(proc), only={"collective"})
        if hit:
            return verdict(hit[0], hit[1], proc, "a thread waits in a collective")
    # 3. a suspect's own frames (its main thread first), then the trainer loop's phase
    for proc in suspects:
        hit = _innermost(_ordered(proc))
        if hit:
            return verdict(hit[0], hit[1], proc, f"process {SUSPECT_STATES[proc['state']]}")
    for proc in suspects:
        titled = title_class(proc)
        if titled:
            title = {"name": titled[1], "short_filename": "Ray actor method, the process title", "line": "-"}
            return verdict(titled[0], [title], proc, f"process {SUSPECT_STATES[proc['state']]}")
    if phase:
        return verdict(phase[0][0], phase[0][1], phase[1], "the trainer loop waits")
    # 4. any busy thread's innermost matching frame
    for proc in read:
        hit = _innermost([t for t in _threads(proc) if not _idle(t)])
        if hit:
            return verdict(hit[0], hit[1], proc, "a busy thread")
    return Verdict("unknown", "no frame of any process matched a rule", suspects=suspect_names)


def _idle(thread: dict) -> bool:
    """A thread parked in a wait of the standard library or Ray's worker loop (its innermost frame)."""
    frames = thread.get("frames") or []
    return not frames or bool(IDLE_FILES.search(frames[0].get("short_filename") or ""))
