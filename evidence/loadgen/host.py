"""Host telemetry, read at each /metrics sample on the same trial clock (evidence.loadgen.telemetry).

On the H200 both effects that decided the verdicts lived on the host: vLLM's engine core at 0.84-0.99 of one
core while the GPU was 51-84% busy, and the API server busy at about one token per SSE chunk. So every
sample also carries (keys absent where the platform cannot show them; `HostReader.meta()` says why):

    proc_<role>_cpu_s   user + system CPU seconds of the engine's processes of that role, cumulative (summed
                        over the role's live processes; a rate is the difference of two samples over their time)
    proc_<role>_n       how many processes had that role at the sample
    proc_<role>_state   their states (psutil: running, sleeping, disk-sleep, ...), comma-joined in pid order
    proc_client_cpu_s   the load generator's own process (this one), the same way
    host_cpu_<f>_s      /proc/stat, cumulative seconds over all CPUs, f in user nice system idle iowait irq
                        softirq steal (psutil.cpu_times)
    host_psi_<r>_<k>_us /proc/pressure/<r> total stall time in microseconds, cumulative (r cpu memory io,
                        k some full; cpu "full" is not kept: it is undefined system-wide)
    host_load1          1-minute load average
    host_ctx_switches   context switches since boot, cumulative
    host_cpu_freq_mhz   current CPU frequency (mean over CPUs) where the platform shows it

Roles come from the process tree the engine adapter started (`ProcessRoles` in evidence.engines.base): the
launched process has the root role (vLLM: the API server), its descendants the role their process title
declares (vLLM: `VLLM::EngineCore`, `VLLM::Worker...`), any other descendant `other`. The tree is walked
when the reader is made, before the trial's t0 (a walk reads every process on the machine: ~60 ms on a busy
host, too long for the load generator's event loop mid-trial); with `refresh_s` it is walked again that often.
A process that exits is dropped; one started during the trial is not counted unless refresh_s asks for walks.

The speed probe (`probe_ms`): a fixed pure-Python loop timed on the client; a shared host's per-core speed
moves without any steal (on the H200 the same loop took 11.7-23.1 ms, p10-p90, on an idle vCPU), and this
makes it visible beside the throughput it may explain. The trial runs it outside its measured window.
"""

from __future__ import annotations

import os
import time
from typing import Any

CPU_FIELDS = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")
PSI = (("cpu", ("some",)), ("memory", ("some", "full")), ("io", ("some", "full")))
PSI_DIR = "/proc/pressure"
CLIENT_ROLE = "client"

#: The speed probe: this many iterations of `x += i * i` in pure Python, timed with perf_counter.
PROBE_LOOP_N = 200_000
PROBE_REPEATS = 5
PROBE_HOW = (
    f"{PROBE_REPEATS} timings of a fixed pure-Python loop (x += i * i for {PROBE_LOOP_N:,} integers) in "
    "the load generator's process, before t0 and after the last request (outside the measured window)"
)


def probe_ms(n: int = PROBE_LOOP_N) -> float:
    """Milliseconds one run of the fixed loop took."""
    pc = time.perf_counter
    t = pc()
    x = 0
    for i in range(n):
        x += i * i
    return (pc() - t) * 1000.0


def run_probe(repeats: int = PROBE_REPEATS) -> list[float]:
    return [probe_ms() for _ in range(repeats)]


def read_psi(base: str = PSI_DIR) -> tuple[dict[str, float], dict[str, str]]:
    """The PSI totals (µs) that exist, and for each resource that does not, why."""
    out: dict[str, float] = {}
    absent: dict[str, str] = {}
    for res, kinds in PSI:
        path = os.path.join(base, res)
        try:
            with open(path) as f:
                text = f.read()
        except OSError as e:
            absent[res] = (
                f"{path} cannot be read ({type(e).__name__}: {e.strerror or e}): no pressure stall "
                "information (kernel without CONFIG_PSI, or psi=0)"
            )
            continue
        for line in text.splitlines():
            parts = line.split()
            if not parts or parts[0] not in kinds:
                continue
            for p in parts[1:]:
                if p.startswith("total="):
                    out[f"host_psi_{res}_{parts[0]}_us"] = float(p[len("total=") :])
    return out, absent


class HostReader:
    """Reads the engine's processes (by role), the client process and the host; `read()` gives one sample."""

    def __init__(self, processes: Any = None, *, refresh_s: float | None = None, psi_dir: str = PSI_DIR):
        self.reason: str | None = None  # why nothing at all can be read
        self.roles = None  # evidence.engines.base.ProcessRoles
        self.processes_reason: str | None = None
        self.absent: dict[str, str] = {}  # group of keys -> why it is absent
        self.refresh_s = refresh_s
        self.psi_dir = psi_dir
        self.seen: dict[int, dict[str, Any]] = {}  # every engine process identified: pid -> role, title
        self.errors = 0
        self.probe: dict[str, list[float]] = {}
        self._procs: dict[int, tuple[Any, str]] = {}
        self._last_refresh: float | None = None
        try:
            import psutil
        except ImportError:
            self.reason = "psutil is not installed here: no host telemetry"
            self._psutil = None
            return
        self._psutil = psutil
        self._client = psutil.Process()
        if processes is None:
            self.processes_reason = "the caller named no engine processes"
        elif isinstance(processes, str):
            self.processes_reason = processes
        else:
            self.roles = processes
            try:
                self._root = psutil.Process(processes.root_pid)
            except psutil.Error as e:
                self.roles = None
                self.processes_reason = f"the engine's process {processes.root_pid} cannot be read ({type(e).__name__})"
            else:
                self._refresh(time.monotonic())  # here, before t0: never a full walk inside the measured window
        _, psi_absent = read_psi(psi_dir)
        for res, why in psi_absent.items():
            self.absent[f"host_psi_{res}"] = why
        if self._freq() is None:
            self.absent["host_cpu_freq_mhz"] = "the platform shows no CPU frequency (psutil.cpu_freq() has none)"
        if self._loadavg() is None:
            self.absent["host_load1"] = "no load average on this platform"

    def _freq(self) -> float | None:
        try:
            f = self._psutil.cpu_freq()
        except Exception:
            return None
        return float(f.current) if f is not None and f.current else None

    def _loadavg(self) -> float | None:
        try:
            return float(os.getloadavg()[0])
        except (OSError, AttributeError):
            return None

    def _refresh(self, now: float) -> None:
        """Find the engine's processes again (a full walk of the tree: done once per refresh_s, not per sample)."""
        psutil = self._psutil
        self._last_refresh = now
        try:
            kids = self._root.children(recursive=True)
        except psutil.Error:
            kids = []
        found: dict[int, tuple[Any, str]] = {}
        try:
            if self._root.is_running():
                found[self._root.pid] = (self._root, self.roles.root_role)
        except psutil.Error:
            pass
        for p in kids:
            if p.pid in self._procs:
                found[p.pid] = self._procs[p.pid]
                continue
            try:
                cmd = " ".join(p.cmdline())
                comm = p.name()
            except psutil.Error:
                continue
            role = self.roles.role_of(cmd, comm)
            found[p.pid] = (p, role)
            self.seen.setdefault(p.pid, {"role": role, "title": (cmd.strip() or comm)[:120]})
        if self._root.pid in found:
            self.seen.setdefault(self._root.pid, {"role": self.roles.root_role, "title": _title(self._root)})
        self._procs = found

    def read(self) -> dict[str, Any]:
        """One sample; {} when nothing can be read."""
        if self.reason is not None:
            return {}
        psutil = self._psutil
        out: dict[str, Any] = {}
        if self.roles is not None:
            now = time.monotonic()
            if self.refresh_s is not None and (
                self._last_refresh is None or now - self._last_refresh >= self.refresh_s
            ):
                self._refresh(now)
            cpu: dict[str, float] = {}
            n: dict[str, int] = {}
            states: dict[str, list[str]] = {}
            for pid in sorted(self._procs):
                p, role = self._procs[pid]
                try:
                    with p.oneshot():
                        ct = p.cpu_times()
                        st = p.status()
                except psutil.Error:
                    self._procs.pop(pid, None)  # exited: not read again
                    continue
                if st == psutil.STATUS_ZOMBIE:
                    continue
                cpu[role] = cpu.get(role, 0.0) + ct.user + ct.system
                n[role] = n.get(role, 0) + 1
                states.setdefault(role, []).append(str(st))
            for role in sorted(cpu):
                out[f"proc_{role}_cpu_s"] = cpu[role]
                out[f"proc_{role}_n"] = n[role]
                out[f"proc_{role}_state"] = ",".join(states[role])
        try:
            ct = self._client.cpu_times()
            out[f"proc_{CLIENT_ROLE}_cpu_s"] = ct.user + ct.system
            t = psutil.cpu_times()
            for f in CPU_FIELDS:
                if hasattr(t, f):
                    out[f"host_cpu_{f}_s"] = float(getattr(t, f))
            out["host_ctx_switches"] = float(psutil.cpu_stats().ctx_switches)
        except (psutil.Error, OSError):
            self.errors += 1
        psi, _ = read_psi(self.psi_dir)
        out.update(psi)
        load = self._loadavg()
        if load is not None:
            out["host_load1"] = load
        if "host_cpu_freq_mhz" not in self.absent:
            f = self._freq()
            if f is not None:
                out["host_cpu_freq_mhz"] = f
        return out

    def run_probe(self, when: str) -> None:
        """Time the fixed loop (before / after the trial); recorded in meta()."""
        self.probe[when] = run_probe()

    def meta(self) -> dict[str, Any]:
        if self.reason is not None:
            return {"enabled": False, "reason": self.reason}
        return {
            "enabled": True,
            "reason": None,
            "processes": {
                "enabled": self.roles is not None,
                "reason": self.processes_reason,
                "roles": self.roles.as_dict() if self.roles is not None else None,
                "seen": {str(pid): self.seen[pid] for pid in sorted(self.seen)},
                "tree_read": "before t0" if self.refresh_s is None else f"before t0 and every {self.refresh_s:g} s",
            },
            "absent": dict(sorted(self.absent.items())),
            "errors": self.errors,
            "cpu_count": os.cpu_count(),
            "probe": {"how": PROBE_HOW, "ms": {k: [round(v, 4) for v in vs] for k, vs in sorted(self.probe.items())}},
            "how": "psutil at each /metrics sample: per role the user + system CPU seconds (cumulative) and state of "
            "the engine's processes found through the tree the adapter started; the client's own process; "
            "/proc/stat CPU seconds, context switches, load average, CPU frequency; PSI totals from "
            "/proc/pressure",
        }


def _title(p: Any) -> str:
    try:
        return (" ".join(p.cmdline()).strip() or p.name())[:120]
    except Exception:
        return "(unreadable)"
