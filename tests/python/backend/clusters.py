"""Real clusters for the backend tests, started inside the test run.

SlurmCluster: Debian's slurm-wlm (slurmctld + slurmd, one node "localhost") and a private munged,
all as root, configured in a temporary folder with free ports (docs: shared/reference/debian-deps.md).
RayHead: a single-node Ray head (`ray start --head`) from .venv-ray on loopback, its dashboard
serving the Jobs REST API.

Every process is stopped by the id it was started with (or, for Ray's daemons, the ids of the
processes that name this head's own temporary folder): nothing else on the machine is touched.
A part that is missing FAILS the test with what to install (tools/setup installs all of them).
"""
from __future__ import annotations

import json
import os
import pathlib
import shutil
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request

import pytest


def free_port(avoid=range(10002, 20000)) -> int:
    """A free TCP port on loopback, outside `avoid` (Ray's default worker port range)."""
    for _ in range(200):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port not in avoid:
            return port
    raise RuntimeError("no free port outside Ray's worker range")


def _require(binary: str, package: str) -> str:
    path = shutil.which(binary) or (f"/usr/sbin/{binary}" if os.path.exists(f"/usr/sbin/{binary}") else None)
    if not path:
        pytest.fail(f"{binary} not found: install Debian's {package} (tools/setup does)")
    return path


def _stop_pid(pid: int, grace: float = 10.0) -> None:
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.time() + grace
    while time.time() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        try:
            if os.waitpid(pid, os.WNOHANG)[0] == pid:
                return
        except ChildProcessError:
            pass
        time.sleep(0.1)
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


class SlurmCluster:
    def __init__(self, root: pathlib.Path, conf: pathlib.Path, procs: list[subprocess.Popen]):
        self.root = root
        self.conf = conf
        self.procs = procs
        self.env = {**os.environ, "SLURM_CONF": str(conf)}

    @classmethod
    def start(cls, root: pathlib.Path, gpus: int = 0) -> "SlurmCluster":
        """`gpus`: the node declares that many devices as a generic gres named 'accel', counted
        alone (slurmd refuses a 'gpu' gres without device files), so jobs can be allocated devices
        on a machine that has no GPU: trainerd's Slurm backend is told `gresName: accel`."""
        if os.geteuid() != 0:
            pytest.fail("the Slurm tests start slurmd, which must run as root")
        munged = _require("munged", "munge")
        slurmctld = _require("slurmctld", "slurmctld (slurm-wlm)")
        slurmd = _require("slurmd", "slurmd (slurm-wlm)")
        _require("sbatch", "slurm-client (slurm-wlm)")
        for d in ("state", "spool", "log", "munge"):
            (root / d).mkdir(parents=True, exist_ok=True)
        # A private munged: its own key and socket, so a system munged (if any) is left alone.
        munge_dir = root / "munge"
        key = munge_dir / "munge.key"
        key.write_bytes(os.urandom(1024))
        os.chmod(key, 0o600)
        os.chmod(munge_dir, 0o700)
        socket_path = munge_dir / "munge.socket"
        procs = []
        log = open(root / "log" / "daemons.log", "ab")
        procs.append(subprocess.Popen(
            [munged, "--foreground", "--force", f"--key-file={key}", f"--socket={socket_path}",
             f"--pid-file={munge_dir / 'munged.pid'}", f"--log-file={munge_dir / 'munged.log'}",
             f"--seed-file={munge_dir / 'munged.seed'}"], stdout=log, stderr=subprocess.STDOUT))
        cls._wait_for(lambda: socket_path.exists(), procs, "munged's socket", root)
        ctld_port, d_port = free_port(), free_port()
        cpus = os.cpu_count() or 2
        conf = root / "slurm.conf"
        gres = f" Gres=accel:{gpus}" if gpus else ""
        if gpus:
            (root / "gres.conf").write_text(f"NodeName=localhost Name=accel Count={gpus}\n")
        conf.write_text("\n".join([
            *(["GresTypes=accel"] if gpus else []),
            "ClusterName=trainertest",
            "SlurmctldHost=localhost",
            "SlurmUser=root",
            "AuthType=auth/munge",
            f"AuthInfo=socket={socket_path}",
            "CredType=cred/munge",
            "MpiDefault=none",
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "JobAcctGatherType=jobacct_gather/none",
            "AccountingStorageType=accounting_storage/none",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_Core",
            "ReturnToService=2",
            "MailProg=/bin/true",
            "MinJobAge=600",
            "KillWait=10",
            "SchedulerParameters=sched_interval=1",
            f"StateSaveLocation={root / 'state'}",
            f"SlurmdSpoolDir={root / 'spool'}",
            f"SlurmctldPidFile={root / 'slurmctld.pid'}",
            f"SlurmdPidFile={root / 'slurmd.pid'}",
            f"SlurmctldLogFile={root / 'log' / 'slurmctld.log'}",
            f"SlurmdLogFile={root / 'log' / 'slurmd.log'}",
            f"SlurmctldPort={ctld_port}",
            f"SlurmdPort={d_port}",
            f"NodeName=localhost NodeAddr=127.0.0.1 CPUs={cpus} RealMemory=2000{gres} State=UNKNOWN",
            "PartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE State=UP",
        ]) + "\n")
        env = {**os.environ, "SLURM_CONF": str(conf)}
        procs.append(subprocess.Popen([slurmctld, "-D", "-f", str(conf)], stdout=log, stderr=subprocess.STDOUT,
                                      env=env))
        procs.append(subprocess.Popen([slurmd, "-D", "-N", "localhost", "-f", str(conf)], stdout=log,
                                      stderr=subprocess.STDOUT, env=env))
        cluster = cls(root, conf, procs)

        def node_up():
            out = subprocess.run(["sinfo", "-h", "-N", "-o", "%T"], capture_output=True, text=True, env=env)
            return out.returncode == 0 and out.stdout.strip() in ("idle", "mixed", "allocated")
        cls._wait_for(node_up, procs, "the Slurm node to be idle", root)
        return cluster

    @staticmethod
    def _wait_for(predicate, procs, what, root, timeout=60.0):
        deadline = time.time() + timeout
        while time.time() < deadline:
            if predicate():
                return
            for p in procs:
                if p.poll() is not None:
                    break
            time.sleep(0.2)
        logs = "".join(f"\n--- {f.name}\n{f.read_text(errors='replace')[-3000:]}"
                       for f in sorted((root / "log").glob("*.log")))
        for p in procs:
            _stop_pid(p.pid, 2)
        pytest.fail(f"Slurm did not come up (waiting for {what}):{logs}")

    def run(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run(list(args), capture_output=True, text=True, env=self.env, timeout=30)

    def job(self, job_id: str) -> dict:
        """scontrol's fields of one job (JobName, JobState, ExitCode, ...)."""
        out = self.run("scontrol", "show", "job", "-o", job_id)
        assert out.returncode == 0, out.stderr
        fields = {}
        for item in out.stdout.split():
            if "=" in item:
                k, v = item.split("=", 1)
                fields.setdefault(k, v)
        return fields

    def stop(self) -> None:
        # Jobs first (scancel), then the daemons by the ids they were started with.
        self.run("scancel", "--user=root")
        for p in reversed(self.procs):
            _stop_pid(p.pid)
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass


class RayHead:
    def __init__(self, venv: pathlib.Path, temp_dir: pathlib.Path, address: str, env: dict):
        self.venv = venv
        self.temp_dir = temp_dir
        self.address = address  # the dashboard's URL (Jobs REST API)
        self.env = env

    @classmethod
    def start(cls, repo: pathlib.Path, temp_dir: pathlib.Path, ports: tuple[int, int] | None = None,
              cpus: int = 2) -> "RayHead":
        """A head on 127.0.0.1 with `cpus` CPUs (0: it runs no job that asks for one, so such jobs go
        to nodes joined with add_node)."""
        venv = repo / ".venv-ray"
        ray = venv / "bin" / "ray"
        if not ray.exists():
            pytest.fail(f"{ray} not found: tools/setup creates .venv-ray (ray[default]==2.60.0)")
        temp_dir.mkdir(parents=True, exist_ok=True)
        gcs_port, dash_port = ports or (free_port(), free_port())
        # Ray's stop is SIGTERM, then SIGKILL after this wait: long enough for a job to stop at a step boundary.
        env = {**os.environ, "RAY_JOB_STOP_WAIT_TIME_S": "60", "RAY_USAGE_STATS_ENABLED": "0",
               "PYTHONPATH": ""}
        out = subprocess.run(
            [str(ray), "start", "--head", "--node-ip-address=127.0.0.1", f"--port={gcs_port}",
             f"--dashboard-port={dash_port}", "--dashboard-host=127.0.0.1", "--include-dashboard=true",
             f"--num-cpus={cpus}", "--num-gpus=0", f"--temp-dir={temp_dir}", "--disable-usage-stats",
             # Ports of their own, not Ray's fixed defaults (10001, 52365): another head on the
             # machine must not keep this one's client server or job agent from starting.
             f"--ray-client-server-port={free_port()}", f"--dashboard-agent-listen-port={free_port()}"],
            capture_output=True, text=True, env=env, timeout=180)
        head = cls(venv, temp_dir, f"http://127.0.0.1:{dash_port}", env)
        head.ports = (gcs_port, dash_port)
        if out.returncode != 0:
            head.stop()
            pytest.fail(f"ray start failed:\n{out.stdout}\n{out.stderr}")
        # Ready when a probe job went through: the dashboard answers and its job agent is up.
        deadline = time.time() + 180
        probe = f"probe-{os.getpid()}-{int(time.time() * 1000)}"
        submitted = False
        while time.time() < deadline:
            try:
                if not submitted:
                    req = urllib.request.Request(
                        head.address + "/api/jobs/", method="POST", headers={"Content-Type": "application/json"},
                        data=json.dumps({"entrypoint": "true", "submission_id": probe}).encode())
                    with urllib.request.urlopen(req, timeout=60) as r:
                        json.load(r)
                    submitted = True
                if head.job(probe)["status"] == "SUCCEEDED":
                    return head
            except (urllib.error.URLError, ConnectionError, json.JSONDecodeError, OSError):
                pass
            time.sleep(0.5)
        head.stop()
        pytest.fail("Ray's head did not run a probe job within 180 s")

    def add_node(self, ip: str, cpus: int = 1) -> None:
        """Joins a second node to this head, on this machine at another loopback address (`ip`,
        e.g. 127.0.0.2), in the head's temporary folder (so stop() stops it too); returns once
        the head lists it alive."""
        ray = self.venv / "bin" / "ray"
        out = subprocess.run(
            [str(ray), "start", f"--address=127.0.0.1:{self.ports[0]}", f"--node-ip-address={ip}",
             f"--num-cpus={cpus}", "--num-gpus=0", f"--temp-dir={self.temp_dir}", "--disable-usage-stats",
             f"--dashboard-agent-listen-port={free_port()}"],
            capture_output=True, text=True, env=self.env, timeout=180)
        if out.returncode != 0:
            pytest.fail(f"ray start of a node at {ip} failed:\n{out.stdout}\n{out.stderr}")
        deadline = time.time() + 120
        while time.time() < deadline:
            if ip in self.alive_node_names():
                return
            time.sleep(0.5)
        pytest.fail(f"the node at {ip} did not show as alive within 120 s")

    def alive_node_names(self) -> list[str]:
        with urllib.request.urlopen(self.address + "/nodes?view=summary", timeout=30) as r:
            return [n["raylet"]["nodeName"] for n in json.load(r)["data"]["summary"] if n["raylet"]["state"] == "ALIVE"]

    def pids(self) -> list[int]:
        """The processes of this head: those whose command line names its own temporary folder, and
        their descendants (Ray's workers and agents rename themselves, e.g. ray::JobSupervisor, and
        the jobs they run)."""
        marker = str(self.temp_dir).encode()
        found, parent = set(), {}
        for entry in pathlib.Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                if marker in (entry / "cmdline").read_bytes():
                    found.add(int(entry.name))
                # The parent is the 2nd field after the command name, which is in parentheses.
                parent[int(entry.name)] = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
        grew = True
        while grew:
            more = {pid for pid, ppid in parent.items() if ppid in found and pid not in found}
            found |= more
            grew = bool(more)
        return sorted(found)

    def job(self, submission_id: str) -> dict:
        with urllib.request.urlopen(f"{self.address}/api/jobs/{submission_id}", timeout=10) as r:
            return json.load(r)

    def delete_job(self, submission_id: str) -> None:
        """Deletes an ended job's record from the cluster (Ray's DELETE /api/jobs/ID): from then on
        the cluster answers 404 for it, as a head that restarted would."""
        req = urllib.request.Request(f"{self.address}/api/jobs/{submission_id}", method="DELETE")
        with urllib.request.urlopen(req, timeout=10) as r:
            assert r.status == 200, r.status

    def stop(self) -> None:
        for pid in self.pids():
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        deadline = time.time() + 15
        while time.time() < deadline and self.pids():
            time.sleep(0.2)
        for pid in self.pids():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        shutil.rmtree(self.temp_dir, ignore_errors=True)
