"""A robot on a wire: two network namespaces joined by a veth pair, the robot's side at the G1's
address (comm.dds.ROBOT_IP on ROBOT_NETWORK) and the user's computer at 192.168.123.222, with the link
faults this kernel can make (no netem here): nftables drops (random loss, timed bursts), `ip link set
down/up`, and tc's token bucket for a bandwidth cap.

    with Wire() as w:
        bridge = w.popen(w.robot_ns, [python, "-m", "sim", "--domain", "0", "--interface", w.robot_if])
        w.loss(5)  ...  w.clear_faults()

Everything is created by `Wire.__enter__` and removed by `close()` (also when entering fails, and at
interpreter exit); deleting a namespace deletes its veth end and the peer with it, and its nftables
tables and qdiscs. Nothing is added to the host's own interfaces. Needs root and iproute2 (`ip`);
the faults also `nft` (Debian: apt-get install nftables). `require()` says what is missing.
"""
from __future__ import annotations

import atexit
import os
import shutil
import signal
import subprocess
import time
from typing import Sequence

from comm import dds

USER_IP = "192.168.123.222"  # the user's computer (any free 192.168.123.x)
PREFIX = dds.ROBOT_NETWORK.prefixlen
NAME_PREFIX = "g1w"  # namespaces g1w<pid>-<n>r / g1w<pid>-<n>u; veth ends the same names (<= 15 characters)
NFT_TABLE = "wire"


class WireUnavailable(RuntimeError):
    """This machine cannot make the wire (not root, no iproute2 / nft); the message says what is missing."""


def require(nft: bool = False) -> None:
    """Raise WireUnavailable unless the harness can run here (root, `ip`, `nft` when asked)."""
    if os.geteuid() != 0:
        raise WireUnavailable("network namespaces need root (CI runs as root)")
    if shutil.which("ip") is None:
        raise WireUnavailable("`ip` (iproute2) is not installed: apt-get install iproute2")
    if nft and shutil.which("nft") is None:
        raise WireUnavailable("`nft` (nftables) is not installed: apt-get install nftables")


def _run(*argv: str, check: bool = True) -> subprocess.CompletedProcess:
    r = subprocess.run(list(argv), capture_output=True, text=True)
    if check and r.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed ({r.returncode}): {r.stderr.strip()}")
    return r


def remove_stale() -> list[str]:
    """Delete namespaces left by a harness whose process is gone (killed before its clean-up)."""
    gone = []
    for line in _run("ip", "netns", "list", check=False).stdout.splitlines():
        name = line.split()[0] if line.split() else ""
        pid_s = name[len(NAME_PREFIX):-1].split("-")[0]
        if not name.startswith(NAME_PREFIX) or not pid_s.isdigit():
            continue
        pid = int(pid_s)
        try:
            os.kill(pid, 0)
            continue  # its harness still runs
        except ProcessLookupError:
            pass
        except PermissionError:
            continue
        _run("ip", "netns", "del", name, check=False)
        gone.append(name)
    return gone


class Wire:
    """The two namespaces and the veth pair between them (see the module docstring)."""

    _count = 0

    def __init__(self) -> None:
        Wire._count += 1
        tag = f"{os.getpid()}-{Wire._count % 10}"
        self.robot_ns = self.robot_if = f"{NAME_PREFIX}{tag}r"
        self.user_ns = self.user_if = f"{NAME_PREFIX}{tag}u"
        self.robot_ip, self.user_ip = str(dds.ROBOT_IP), USER_IP
        self._procs: list[subprocess.Popen] = []
        self._nft = False
        self._open = False

    # ------------------------------------------------------------------ set-up and clean-up
    def __enter__(self) -> "Wire":
        require()
        remove_stale()
        atexit.register(self.close)
        self._open = True
        try:
            for ns in (self.robot_ns, self.user_ns):
                _run("ip", "netns", "add", ns)
                _run("ip", "-n", ns, "link", "set", "lo", "up")
            _run("ip", "link", "add", self.robot_if, "netns", self.robot_ns, "type", "veth",
                 "peer", "name", self.user_if, "netns", self.user_ns)
            for ns, ifname, ip in ((self.robot_ns, self.robot_if, self.robot_ip),
                                   (self.user_ns, self.user_if, self.user_ip)):
                _run("ip", "-n", ns, "addr", "add", f"{ip}/{PREFIX}", "dev", ifname)
                _run("ip", "-n", ns, "link", "set", ifname, "multicast", "on", "up")
            self.wait_carrier()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        """Stop the processes started with popen, then delete both namespaces (idempotent)."""
        while self._procs:
            stop_process(self._procs.pop())
        if self._open:
            self._open = False
            for ns in (self.robot_ns, self.user_ns):
                _run("ip", "netns", "del", ns, check=False)

    def wait_carrier(self, timeout: float = 5.0) -> None:
        """Until both ends report LOWER_UP (a veth has its carrier once both ends are up)."""
        end = time.monotonic() + timeout
        while True:
            shown = [_run("ip", "-n", ns, "-o", "link", "show", "dev", i).stdout
                     for ns, i in ((self.robot_ns, self.robot_if), (self.user_ns, self.user_if))]
            if all("LOWER_UP" in s for s in shown):
                return
            if time.monotonic() > end:
                raise RuntimeError(f"the veth pair has no carrier after {timeout:g} s: {shown}")
            time.sleep(0.02)

    # ------------------------------------------------------------------ processes
    def argv(self, ns: str, argv: Sequence[str]) -> list[str]:
        return ["ip", "netns", "exec", ns, *map(str, argv)]

    def run(self, ns: str, argv: Sequence[str], **kw) -> subprocess.CompletedProcess:
        return subprocess.run(self.argv(ns, argv), **kw)

    def popen(self, ns: str, argv: Sequence[str], **kw) -> subprocess.Popen:
        """A process in namespace `ns` (`ip netns exec` execs it: the pid is the process's own); stopped by
        close() if still running."""
        from comm.sim_process import die_with_parent

        p = subprocess.Popen(self.argv(ns, argv), preexec_fn=die_with_parent, **kw)
        self._procs.append(p)
        return p

    def ip(self, ns: str, *args: str) -> None:
        _run("ip", "-n", ns, *args)

    # ------------------------------------------------------------------ link faults (the user's side)
    def _nft_table(self) -> None:
        if self._nft:
            return
        require(nft=True)
        i = self.user_if
        self.nft(f"""table inet {NFT_TABLE} {{
  set burst {{ type ifname; flags timeout; }}
  chain input {{ type filter hook input priority 0; policy accept; iifname @burst drop; }}
  chain output {{ type filter hook output priority 0; policy accept; oifname @burst drop; }}
  chain loss_in {{ }}
  chain loss_out {{ }}
}}
add rule inet {NFT_TABLE} input iifname "{i}" jump loss_in
add rule inet {NFT_TABLE} output oifname "{i}" jump loss_out
""")
        self._nft = True

    def nft(self, script: str) -> None:
        r = subprocess.run(self.argv(self.user_ns, ["nft", "-f", "-"]), input=script, capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError(f"nft in {self.user_ns} failed: {r.stderr.strip()}\n{script}")

    def loss(self, percent: float) -> None:
        """Drop each packet crossing the link, either way, with probability percent / 100 (nft numgen)."""
        self._nft_table()
        n = int(round(percent))
        self.nft(f"flush chain inet {NFT_TABLE} loss_in\nflush chain inet {NFT_TABLE} loss_out\n"
                 + (f"add rule inet {NFT_TABLE} loss_in numgen random mod 100 < {n} drop\n"
                    f"add rule inet {NFT_TABLE} loss_out numgen random mod 100 < {n} drop\n" if n > 0 else ""))

    def burst(self, seconds: float) -> float:
        """Drop every packet either way for `seconds`, timed by the kernel (an nft set element with a timeout);
        returns time.monotonic() when the element was added (the burst's start to within the nft call)."""
        self._nft_table()
        ms = max(1, int(round(seconds * 1e3)))
        t0 = time.monotonic()
        self.nft(f'add element inet {NFT_TABLE} burst {{ "{self.user_if}" timeout {ms}ms }}\n')
        return (t0 + time.monotonic()) / 2

    def link(self, up: bool) -> None:
        """The user's end of the cable: `ip link set <user_if> down|up` (the robot's end loses its carrier)."""
        self.ip(self.user_ns, "link", "set", self.user_if, "up" if up else "down")
        if up:
            self.wait_carrier()

    def rate_limit(self, rate: str | None, burst: str = "32kbit", latency_ms: float = 50.0) -> None:
        """A token-bucket cap (tc tbf) on both ends' egress, e.g. "8mbit"; None removes it."""
        for ns, ifname in ((self.robot_ns, self.robot_if), (self.user_ns, self.user_if)):
            _run("ip", "netns", "exec", ns, "tc", "qdisc", "del", "dev", ifname, "root", check=False)
            if rate is not None:
                _run("ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", ifname, "root", "tbf", "rate", rate,
                     "burst", burst, "latency", f"{latency_ms:g}ms")

    def clear_faults(self) -> None:
        if self._nft:
            self.loss(0)
            self.nft(f"flush set inet {NFT_TABLE} burst\n")
        self.rate_limit(None)
        self.link(True)


def stop_process(p: subprocess.Popen, timeout: float = 10.0) -> int | None:
    """SIGINT, then SIGKILL after `timeout`; returns the exit code."""
    if p.poll() is None:
        p.send_signal(signal.SIGINT)
        try:
            p.wait(timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(5)
    return p.returncode
