"""A real single-node Slurm for the tests: Debian's ``munged``, ``slurmctld`` and ``slurmd``
(apt-get install slurmd slurmctld munge), configured in a temporary directory and started as root
without systemd. :func:`start_slurm` raises :class:`SlurmUnavailable` with the reason (and the
daemons' log tails) where they cannot start; the ``slurm`` fixture turns that into a skip.

By hand (as root): ``python tests/slurm_fixture.py /tmp/slurm`` starts it, prints the
``SLURM_CONF`` to export and waits for Ctrl-C.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

DAEMONS = ("munged", "slurmctld", "slurmd")
COMMANDS = ("sinfo", "sbatch", "squeue", "scancel")


class SlurmUnavailable(RuntimeError):
    """Slurm cannot run here; the message says why."""


@dataclass
class Slurm:
    root: Path
    conf: Path
    node: str
    procs: dict[str, subprocess.Popen] = field(default_factory=dict)

    @property
    def env(self) -> dict[str, str]:
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    def run(self, *args: str, timeout: float = 20) -> str:
        """A Slurm client command against this cluster (``squeue``, ``scancel``, ...); its stdout."""
        out = subprocess.run(args, env=self.env, capture_output=True, text=True, timeout=timeout, check=False)
        if out.returncode:
            raise RuntimeError(f"{' '.join(args)}: {out.stderr.strip() or out.stdout.strip()}")
        return out.stdout

    def logs(self, lines: int = 15) -> str:
        parts = []
        for name in DAEMONS:
            log = self.root / "log" / f"{name}.log"
            if log.exists():
                tail = log.read_text(errors="replace").splitlines()[-lines:]
                parts.append(f"--- {name}.log\n" + "\n".join(tail))
        return "\n".join(parts)

    def stop(self) -> None:
        if self.procs.get("slurmctld") is not None and self.procs["slurmctld"].poll() is None:
            try:  # no job outlives the cluster (slurmd leaves running steps behind)
                self.run("scancel", "--full", "--user=root", timeout=10)
                time.sleep(1)
            except (RuntimeError, OSError, subprocess.SubprocessError):
                pass
        for name in reversed(DAEMONS):
            p = self.procs.get(name)
            if p is not None and p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait(timeout=5)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _real_memory_mb() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            return int(int(line.split()[1]) / 1024 * 0.9)
    return 1024


SLURM_CONF = """\
ClusterName=evtest
SlurmctldHost={node}(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={socket}
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool
SlurmctldPidFile={root}/run/slurmctld.pid
SlurmdPidFile={root}/run/slurmd.pid
SlurmctldLogFile={root}/log/slurmctld.log
SlurmdLogFile={root}/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SwitchType=switch/none
MpiDefault=none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
ReturnToService=2
SchedulerType=sched/backfill
SlurmdTimeout=30
InactiveLimit=0
KillWait=5
MinJobAge=30
NodeName={node} NodeAddr=127.0.0.1 CPUs={cpus} RealMemory={memory} State=UNKNOWN
PartitionName=debug Nodes={node} Default=YES MaxTime=INFINITE State=UP
"""


def start_slurm(root: Path, *, cpus: int = 2, timeout: float = 60) -> Slurm:
    """Start munged, slurmctld and slurmd with their state in ``root``; wait for the node to be idle."""
    if os.geteuid() != 0:
        raise SlurmUnavailable("starting slurmctld/slurmd/munged needs root")
    missing = [d for d in (*DAEMONS, *COMMANDS) if shutil.which(d) is None and not Path("/usr/sbin", d).exists()]
    if missing:
        raise SlurmUnavailable(
            f"{', '.join(missing)} not installed (apt-get install -y slurmd slurmctld slurm-client munge)"
        )
    root = Path(root)
    for sub in ("state", "spool", "run", "log", "munge"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    os.chmod(root, 0o755)
    node = socket.gethostname().split(".")[0]
    sock = root / "munge" / "munge.socket"
    conf = root / "slurm.conf"
    conf.write_text(
        SLURM_CONF.format(
            node=node,
            root=root,
            socket=sock,
            ctld_port=_free_port(),
            slurmd_port=_free_port(),
            cpus=cpus,
            memory=_real_memory_mb(),
        )
    )
    key = root / "munge" / "munge.key"
    key.write_bytes(os.urandom(1024))
    os.chmod(key, 0o400)
    os.chmod(root / "munge", 0o700)
    slurm = Slurm(root=root, conf=conf, node=node)

    def daemon(name: str, args: list[str]) -> None:
        exe = shutil.which(name) or f"/usr/sbin/{name}"
        out = (root / "log" / f"{name}.out").open("w")
        slurm.procs[name] = subprocess.Popen(
            [exe, *args], stdout=out, stderr=subprocess.STDOUT, env=slurm.env, start_new_session=True
        )

    try:
        daemon(
            "munged",
            [
                "--foreground",
                "--force",
                f"--socket={sock}",
                f"--key-file={key}",
                f"--pid-file={root / 'run' / 'munged.pid'}",
                f"--log-file={root / 'log' / 'munged.log'}",
                f"--seed-file={root / 'munge' / 'munged.seed'}",
            ],
        )
        deadline = time.time() + 10
        while not sock.exists():
            _check_alive(slurm)
            if time.time() > deadline:
                raise SlurmUnavailable("munged did not create its socket in 10 s")
            time.sleep(0.1)
        daemon("slurmctld", ["-D", "-i", "-f", str(conf)])  # -i: ignore state left by an earlier run
        daemon("slurmd", ["-D", "-f", str(conf)])
        deadline = time.time() + timeout
        state = ""
        while True:
            _check_alive(slurm)
            out = subprocess.run(
                ["sinfo", "-h", "-N", "-o", "%T"], env=slurm.env, capture_output=True, text=True, timeout=10
            )
            state = (out.stdout or out.stderr).strip()
            if out.returncode == 0 and state == "idle":
                return slurm
            if time.time() > deadline:
                raise SlurmUnavailable(f"the node is not idle after {timeout:.0f} s (sinfo: {state!r})")
            time.sleep(0.5)
    except SlurmUnavailable as exc:
        slurm.stop()
        raise SlurmUnavailable(f"{exc}\n{slurm.logs()}") from None
    except (OSError, subprocess.SubprocessError) as exc:
        slurm.stop()
        raise SlurmUnavailable(f"{type(exc).__name__}: {exc}\n{slurm.logs()}") from None


def _check_alive(slurm: Slurm) -> None:
    for name, p in slurm.procs.items():
        if p.poll() is not None:
            out = slurm.root / "log" / f"{name}.out"
            text = out.read_text(errors="replace")[-1500:] if out.exists() else ""
            raise SlurmUnavailable(f"{name} exited with status {p.returncode}: {text}")


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # stop the daemons on kill as on Ctrl-C
    s = start_slurm(Path(sys.argv[1] if len(sys.argv) > 1 else "/tmp/evolution-slurm"))
    print(f"export SLURM_CONF={s.conf}", flush=True)
    try:
        signal.pause()
    finally:
        s.stop()
