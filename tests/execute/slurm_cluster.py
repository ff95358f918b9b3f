"""A real Slurm cluster on this machine for the tests: munged, slurmctld and two slurmd (nodes n1, n2).

Debian's slurm-wlm (22.05) runs as root here. Each node has one fake GPU: a character device with
NVIDIA's major number 195 (a count-only gres.conf entry is rejected; a regular file leaves
CUDA_VISIBLE_DEVICES empty). Both slurmd run on this host with their own NodeName, port and spool,
which Slurm allows when NodeHostname is shared. Ports are picked free, every file lives under one
temporary folder, SLURM_CONF points the clients at it, and `stop()` ends everything it started.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

NODES = ("n1", "n2")


class ClusterUnavailable(RuntimeError):
    pass


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Cluster:
    base: Path
    env: dict
    procs: list[int] = field(default_factory=list)

    def sh(self, *cmd: str, check: bool = True, timeout: float = 60) -> subprocess.CompletedProcess:
        p = subprocess.run(list(cmd), capture_output=True, text=True, env=self.env, timeout=timeout)
        if check and p.returncode != 0:
            raise ClusterUnavailable(f"{' '.join(cmd)} exited {p.returncode}: {p.stderr.strip()[-800:]}")
        return p

    def node_states(self) -> dict[str, str]:
        out = self.sh("sinfo", "-h", "-N", "-o", "%N %T", check=False).stdout
        return dict(line.split() for line in out.splitlines() if len(line.split()) == 2)

    def stop(self) -> None:
        subprocess.run(["scontrol", "shutdown"], env=self.env, capture_output=True, timeout=30)
        deadline = time.monotonic() + 10
        for pid in self.procs:
            while time.monotonic() < deadline:
                try:
                    os.kill(pid, 0)
                except ProcessLookupError:
                    break
                time.sleep(0.1)
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for pidfile in self.base.glob("run/*.pid"):
            try:
                os.kill(int(pidfile.read_text().strip()), signal.SIGKILL)
            except (ValueError, ProcessLookupError, OSError):
                pass


def _pid(path: Path, timeout: float = 10) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.is_file() and path.read_text().strip():
            return int(path.read_text().strip())
        time.sleep(0.1)
    raise ClusterUnavailable(f"{path} did not appear")


def start_cluster(base: Path) -> Cluster:
    """Start munged, slurmctld and slurmd n1, n2 under base; raises ClusterUnavailable with the reason."""
    for tool in ("munged", "slurmctld", "slurmd", "sbatch", "scontrol", "sinfo"):
        if not shutil.which(tool) and not Path(f"/usr/sbin/{tool}").exists():
            raise ClusterUnavailable(f"{tool} is not installed (make slurm installs Debian's slurm-wlm and munge)")
    if os.geteuid() != 0:
        raise ClusterUnavailable("the test cluster runs its daemons as root")
    for d in ("etc", "state", "spool", "log", "run", "dev", "munge"):
        (base / d).mkdir(parents=True, exist_ok=True)
    os.chmod(base / "munge", 0o700)
    # munge: a key and a daemon of our own, on our own socket
    key = base / "munge" / "munge.key"
    key.write_bytes(os.urandom(1024))
    os.chmod(key, 0o400)
    sock = base / "munge" / "munge.socket"
    subprocess.run(["/usr/sbin/munged", "--force", f"--socket={sock}", f"--key-file={key}",
                    f"--pid-file={base / 'run' / 'munged.pid'}", f"--log-file={base / 'log' / 'munged.log'}",
                    f"--seed-file={base / 'munge' / 'seed'}"], check=True, capture_output=True, timeout=30)
    cluster = Cluster(base, env={**os.environ, "SLURM_CONF": str(base / "etc" / "slurm.conf")})
    cluster.procs.append(_pid(base / "run" / "munged.pid"))
    for i, _ in enumerate(NODES):
        dev = base / "dev" / f"nvidia{i}"
        if not dev.exists():
            os.mknod(dev, 0o666 | 0o020000, os.makedev(195, i))  # S_IFCHR
    host = socket.gethostname().split(".")[0]
    ctl, ports = _free_port(), [_free_port() for _ in NODES]
    nodes = "\n".join(f"NodeName={n} NodeHostname={host} NodeAddr=127.0.0.1 Port={p} CPUs=1 RealMemory=2000 "
                      f"Gres=gpu:h200:1 State=UNKNOWN" for n, p in zip(NODES, ports))
    (base / "etc" / "slurm.conf").write_text(f"""ClusterName=evtest
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={ctl}
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={sock}
SlurmUser=root
SlurmdUser=root
StateSaveLocation={base / 'state'}
SlurmdSpoolDir={base / 'spool'}/%n
SlurmctldPidFile={base / 'run'}/slurmctld.pid
SlurmdPidFile={base / 'run'}/slurmd-%n.pid
SlurmctldLogFile={base / 'log'}/slurmctld.log
SlurmdLogFile={base / 'log'}/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
GresTypes=gpu
MpiDefault=none
ReturnToService=2
MinJobAge=600
SlurmdTimeout=30
{nodes}
PartitionName=gpu Nodes={','.join(NODES)} Default=YES MaxTime=INFINITE State=UP OverSubscribe=EXCLUSIVE
""")
    (base / "etc" / "gres.conf").write_text("".join(
        f"NodeName={n} Name=gpu Type=h200 File={base / 'dev' / f'nvidia{i}'}\n" for i, n in enumerate(NODES)))
    (base / "etc" / "cgroup.conf").write_text("CgroupPlugin=cgroup/v1\n")
    try:
        cluster.sh("/usr/sbin/slurmctld", "-c", "-i")
        cluster.procs.append(_pid(base / "run" / "slurmctld.pid"))
        for n in NODES:
            cluster.sh("/usr/sbin/slurmd", "-N", n)
            cluster.procs.append(_pid(base / "run" / f"slurmd-{n}.pid"))
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            st = cluster.node_states()
            if all(st.get(n) == "idle" for n in NODES):
                return cluster
            time.sleep(0.5)
        raise ClusterUnavailable(f"nodes did not become idle: {cluster.node_states()}; slurmctld log: "
                                 + (base / "log" / "slurmctld.log").read_text()[-1500:])
    except BaseException:
        cluster.stop()
        raise
