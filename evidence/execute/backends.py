"""Where a run executes: here (local, the default), in-process for debugging (debug), or on a
Slurm cluster (slurm), all through submitit so the three share one submission path.

A job runs `evidence run` as a child process on its node (engine start, pins, resume and exit codes
are the runner's own), so what a job does is exactly what the same command does by hand there.
"""

from __future__ import annotations

import os
import shlex
import socket
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

EXECUTORS = ("local", "debug", "slurm")


class ExecuteError(Exception):
    """A submission that cannot go ahead (one paragraph for the user)."""


@dataclass(frozen=True)
class Settings:
    """The executor and its resources (what `--executor slurm --partition ... --gres ...` says)."""

    kind: str = "local"
    partition: str | None = None
    gres: str | None = None  # e.g. gpu:h200:1
    time_min: int = 60
    exclusive: bool = True  # whole-node allocation: nothing else shares the measurement host
    cpus_per_task: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)  # further sbatch options, as submitit takes them

    def check(self) -> None:
        if self.kind not in EXECUTORS:
            raise ExecuteError(f"--executor must be one of {', '.join(EXECUTORS)}, not {self.kind!r}.")
        if self.time_min <= 0:
            raise ExecuteError("--time is a positive number of minutes.")
        if self.kind == "slurm":
            missing = [c for c in ("sbatch", "scontrol") if not _which(c)]
            if missing:
                raise ExecuteError(f"--executor slurm needs Slurm's {' and '.join(missing)} on PATH; none was found "
                                   "on this machine. Run from a login node of the cluster, or use --executor local.")

    def as_dict(self) -> dict:
        return asdict(self)


def _which(cmd: str) -> str | None:
    from shutil import which

    return which(cmd)


def make_executor(settings: Settings, folder: Path):
    """A submitit executor for the settings; its logs and pickles live under `folder`."""
    import submitit

    settings.check()
    folder.mkdir(parents=True, exist_ok=True)
    if settings.kind == "debug":
        return submitit.DebugExecutor(folder=folder)
    if settings.kind == "local":
        return submitit.LocalExecutor(folder=folder)
    # Without accounting storage sacct fails and submitit warns on every poll; job states come from
    # `scontrol show job` here instead (slurm_state), so those warnings say nothing useful.
    import logging

    logging.getLogger("submitit").setLevel(logging.ERROR)
    ex = submitit.SlurmExecutor(folder=folder, max_num_timeout=0)
    params: dict[str, Any] = {"time": settings.time_min, "job_name": "evidence"}
    if settings.partition:
        params["partition"] = settings.partition
    if settings.gres:
        params["gres"] = settings.gres
    if settings.exclusive:
        params["exclusive"] = True
    if settings.cpus_per_task:
        params["cpus_per_task"] = settings.cpus_per_task
    params.update(settings.extra)
    ex.update_parameters(**params)
    return ex


# --------------------------------------------------------------- the job ----


def node_identity() -> dict:
    """Which host a job ran on, as Slurm and the OS name it (recorded beside the run's own provenance)."""
    return {"hostname": socket.gethostname(), "slurm_node": os.environ.get("SLURMD_NODENAME"),
            "slurm_job_id": os.environ.get("SLURM_JOB_ID"), "slurm_array_task_id": os.environ.get("SLURM_ARRAY_TASK_ID"),
            "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES")}


def run_job(spec: str, runs_dir: str, run_id: str, cwd: str, args: list[str]) -> dict:
    """What one job does on its node: `evidence run SPEC --runs-dir D --run-id ID --json --no-progress`.

    Returns the outcome as data (exit code, the runner's JSON, the tail of its stderr, the node),
    so a failed host is a record, not a lost exception."""
    cmd = [sys.executable, "-m", "evidence.cli", "run", spec, "--runs-dir", runs_dir, "--run-id", run_id,
           "--json", "--no-progress", *args]
    p = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    outcome: dict[str, Any] = {"exit_code": p.returncode, "command": shlex.join(cmd), "node": node_identity(),
                               "stderr_tail": "\n".join(p.stderr.strip().splitlines()[-12:])}
    import json

    try:
        outcome["run"] = json.loads(p.stdout[p.stdout.index("{"):]) if "{" in p.stdout else None
    except ValueError:
        outcome["run"] = None
    return outcome


def slurm_state(job_id: str) -> dict:
    """JobState, Reason, NodeList and ExitCode from `scontrol show job` (works without accounting storage,
    for as long as slurmctld remembers the job: MinJobAge)."""
    try:
        out = subprocess.run(["scontrol", "show", "job", "-o", str(job_id)], capture_output=True, text=True,
                             timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return {}
    fields = dict(tok.split("=", 1) for tok in out.split() if "=" in tok)
    return {k: fields[k] for k in ("JobState", "Reason", "NodeList", "ExitCode", "Restarts") if k in fields}


#: File system types that only the machine they are mounted on can see (as the compute nodes would need).
LOCAL_FS = {"ext2", "ext3", "ext4", "xfs", "btrfs", "tmpfs", "overlay", "f2fs", "vfat", "ramfs"}


def _fs_type(path: Path) -> tuple[str, str]:
    """(type, mount point) of the file system holding `path`, from /proc/mounts (Linux)."""
    best = ("", "")
    try:
        lines = Path("/proc/mounts").read_text().splitlines()
    except OSError:
        return best
    p = str(Path(path).resolve())
    for line in lines:
        parts = line.split()
        if len(parts) >= 3:
            mnt = parts[1].replace("\\040", " ")
            if (p == mnt or p.startswith(mnt.rstrip("/") + "/")) and len(mnt) >= len(best[1]):
                best = (parts[2], mnt)
    return best


def node_hosts() -> list[str]:
    """The host names of the cluster's nodes (scontrol's NodeHostname), or [] when Slurm does not say."""
    try:
        out = subprocess.run(["scontrol", "show", "node", "-o"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return []
    hosts = []
    for line in out.splitlines():
        f = dict(tok.split("=", 1) for tok in line.split() if "=" in tok)
        if f.get("NodeHostname"):
            hosts.append(f["NodeHostname"])
    return sorted(set(hosts))


def folder_visibility_note(folder: Path) -> str | None:
    """Why the compute nodes may not see `folder` (said before submitting), or None.

    Every job writes its run folder there; a folder on this machine's own disk is invisible to other
    nodes, and each job would end without a result (LOST) on every rerun. Only a warning: the login
    node may itself export the disk to the nodes under the same path.
    """
    others = [h for h in node_hosts() if h.split(".")[0] != socket.gethostname().split(".")[0]]
    fs, mnt = _fs_type(folder)
    if not others or fs not in LOCAL_FS:
        return None
    return (f"{folder} is on a {fs} file system (mounted at {mnt}) of this machine, and the jobs run on "
            f"{', '.join(others[:5])}{' ...' if len(others) > 5 else ''}: unless the nodes mount it under the same "
            "path, they cannot write the run folders and every job ends LOST. Put --runs-dir on a shared file "
            "system (NFS, Lustre, GPFS, ...).")

