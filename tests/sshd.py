"""A throwaway OpenSSH server on a loopback port, for the tests that launch through ssh.

Debian's `openssh-server` (`.ci/run` installs it) runs as `/usr/sbin/sshd -D -e -f CONFIG` with a
host key and a client key made by ssh-keygen in a temporary folder. The client side is an
ssh_config in the same folder: one Host alias, that key only (no password, no agent), its own
known_hosts, batch mode. `ssh -F` reads no other configuration, so the user's own ~/.ssh is
neither read nor written.
"""

from __future__ import annotations

import dataclasses
import getpass
import hashlib
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import psutil

from specgate.serving.launch import free_port

SSHD = Path("/usr/sbin/sshd")
ALIAS = "specgate-gpu-box"
# sshd's privilege separation directory (compiled into Debian's sshd); its service creates it.
PRIVSEP_DIR = Path("/run/sshd")


def unavailable() -> str | None:
    """Why a test sshd cannot run on this machine, or None when it can."""
    if not SSHD.exists():
        return (f"{SSHD} is not installed: apt-get install openssh-server (as root; .ci/run "
                "does this)")
    for tool in ("ssh", "ssh-keygen"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (Debian: openssh-client)"
    if os.geteuid() != 0:
        return ("sshd must run as root here (privilege separation in /run/sshd and logging a "
                "session in); run the remote tests as root, as CI does")
    return None


def _keygen(path: Path, comment: str) -> str:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f",
                    str(path)], check=True, stdin=subprocess.DEVNULL)
    return path.with_suffix(".pub").read_text(encoding="utf-8").strip()


@dataclasses.dataclass
class SSHServer:
    """One running sshd and the client configuration that reaches it."""

    folder: Path
    port: int
    proc: subprocess.Popen[bytes]
    client_config: Path
    log: Path

    def prefix(self) -> list[str]:
        """The launcher prefix a profile would hold: `ssh -F CONFIG ALIAS`."""
        return ["ssh", "-F", str(self.client_config), ALIAS]

    def run(self, command: str, timeout_s: float = 30.0) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*self.prefix(), command], capture_output=True, text=True,
                              stdin=subprocess.DEVNULL, timeout=timeout_s, check=False)

    def sessions(self) -> list[psutil.Process]:
        """The per-connection sshd processes (privileged monitor and user session)."""
        try:
            root = psutil.Process(self.proc.pid)
            return [p for p in root.children(recursive=True) if p.exe() == str(SSHD)]
        except psutil.Error:
            return []

    def drop_connections(self) -> list[int]:
        """SIGKILL every session process: the connections drop as on a network failure."""
        killed = []
        for proc in self.sessions():
            try:
                proc.kill()
                killed.append(proc.pid)
            except psutil.Error:
                pass
        return killed

    def log_text(self) -> str:
        return self.log.read_text(encoding="utf-8", errors="replace")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)


def start(folder: Path, *, timeout_s: float = 30.0) -> SSHServer:
    """Keys, configurations and a running sshd in folder; raises RuntimeError with its log when
    it does not accept a login within timeout_s."""
    folder.mkdir(parents=True, exist_ok=True)
    os.chmod(folder, 0o700)
    host_pub = _keygen(folder / "host_ed25519", "specgate-test-host")
    client_pub = _keygen(folder / "client_ed25519", "specgate-test-client")
    (folder / "authorized_keys").write_text(client_pub + "\n", encoding="utf-8")
    (folder / "known_hosts").write_text(f"{ALIAS} {host_pub}\n", encoding="utf-8")
    port = free_port()
    user = getpass.getuser()
    server_config = folder / "sshd_config"
    server_config.write_text("\n".join([
        f"Port {port}",
        "ListenAddress 127.0.0.1",
        f"HostKey {folder / 'host_ed25519'}",
        f"PidFile {folder / 'sshd.pid'}",
        f"AuthorizedKeysFile {folder / 'authorized_keys'}",
        "AuthenticationMethods publickey",
        "PubkeyAuthentication yes",
        "PasswordAuthentication no",
        "KbdInteractiveAuthentication no",
        "PermitRootLogin prohibit-password",
        f"AllowUsers {user}",
        "UsePAM no",
        "StrictModes no",
        "PermitUserEnvironment no",
        "X11Forwarding no",
        "AllowAgentForwarding no",
        "PrintMotd no",
        "PrintLastLog no",
        "MaxStartups 64:30:128",
        "MaxSessions 64",
        "LogLevel VERBOSE",
        "",
    ]), encoding="utf-8")
    client_config = folder / "ssh_config"
    client_config.write_text("\n".join([
        f"Host {ALIAS}",
        "  HostName 127.0.0.1",
        f"  Port {port}",
        f"  User {user}",
        f"  IdentityFile {folder / 'client_ed25519'}",
        "  IdentitiesOnly yes",
        "  IdentityAgent none",
        "  BatchMode yes",
        "  PasswordAuthentication no",
        "  KbdInteractiveAuthentication no",
        f"  UserKnownHostsFile {folder / 'known_hosts'}",
        "  GlobalKnownHostsFile /dev/null",
        f"  HostKeyAlias {ALIAS}",
        "  StrictHostKeyChecking yes",
        "  UpdateHostKeys no",
        "  ControlMaster no",
        "  ControlPath none",
        "  ConnectTimeout 20",
        "  LogLevel ERROR",
        "",
    ]), encoding="utf-8")
    PRIVSEP_DIR.mkdir(mode=0o755, exist_ok=True)
    log = folder / "sshd.log"
    with log.open("wb") as out:
        proc = subprocess.Popen([str(SSHD), "-D", "-e", "-f", str(server_config)],
                                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)
    server = SSHServer(folder, port, proc, client_config, log)
    deadline = time.monotonic() + timeout_s
    last = ""
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            break
        done = server.run("echo ready", timeout_s=max(1.0, deadline - time.monotonic()))
        if done.returncode == 0 and done.stdout.strip() == "ready":
            return server
        last = done.stderr.strip()
        time.sleep(0.2)
    server.stop()
    raise RuntimeError(f"sshd on port {port} did not accept a login within {timeout_s:g} s "
                       f"(ssh said: {last or 'nothing'}); its log:\n{server.log_text()[-2000:]}")


def home_ssh_state() -> dict[str, str] | None:
    """The user's own ~/.ssh (from the password database, as ssh finds it): each file's digest
    and mode, or None when the folder does not exist."""
    import pwd

    home = Path(pwd.getpwuid(os.getuid()).pw_dir) / ".ssh"
    if not home.exists():
        return None
    state = {}
    for path in sorted(home.rglob("*")):
        stat = path.lstat()
        digest = (hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file()
                  and not path.is_symlink() else "")
        state[str(path.relative_to(home))] = f"{stat.st_mode:o} {stat.st_mtime_ns} {digest}"
    return state
