"""The sim bridge as a separate process: start `python -m sim`, wait for its ready line, stop it.

Lives in the wire room (not in sim/) so that deploy/ can start a bridge for its dry runs without
importing sim/: this module only runs `sys.executable -m sim` and reads its output. The handshake
is `READY_LINE`, printed by sim.node once LowState is being published.

    with launch_bridge_process(["--lockstep"], domain=7) as bridge: ...
    bridge.stop() -> exit code (0 on a clean stop); bridge.output: what it printed
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator, Sequence

from comm.dds import SIM_DOMAIN, SIM_INTERFACE

READY_LINE = "sim bridge ready"
REPO_ROOT = Path(__file__).resolve().parents[1]
BRIDGE_MODULE = "sim"


class BridgeLaunchError(RuntimeError):
    """The sim bridge did not start (exited, or not ready in time); the message has its output."""


class BridgeProcess:
    """A sim bridge running in its own process (see `launch_bridge_process`)."""

    def __init__(self, proc: subprocess.Popen, domain: int, interface: str | None):
        self.proc = proc
        self.domain = domain
        self.interface = interface
        self.lines: list[str] = []
        self._ready = threading.Event()
        self._reader = threading.Thread(target=self._read, name="sim-bridge-output", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))
            if line.startswith(READY_LINE):
                self._ready.set()

    @property
    def output(self) -> str:
        return "\n".join(self.lines)

    def wait_ready(self, timeout: float) -> None:
        end = time.monotonic() + timeout
        while not self._ready.wait(0.05):
            if self.proc.poll() is not None:
                self._reader.join(2.0)
                raise BridgeLaunchError(f"sim bridge exited with code {self.proc.returncode}:\n{self.output}")
            if time.monotonic() > end:
                raise BridgeLaunchError(f"sim bridge not ready after {timeout} s:\n{self.output}")

    def stop(self, timeout: float = 15.0) -> int:
        """Ctrl-C (SIGINT) and wait; kill if it does not stop. Returns the exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self._reader.join(2.0)
        return self.proc.returncode


def _resolve_prctl() -> Callable[..., int] | None:
    if not sys.platform.startswith("linux"):
        return None
    import ctypes

    return ctypes.CDLL(None).prctl


# Looked up here, in the parent: the preexec_fn below runs in a forked copy of a multithreaded
# process (DDS, JAX threads), where an import or dlopen could wait on a lock another thread held.
_PRCTL = _resolve_prctl()
_PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """In the child (Popen preexec_fn): SIGTERM when the launching thread's process dies (Linux),
    so a killed test run leaves no bridge behind holding its DDS domain. One foreign call."""
    if _PRCTL is not None:
        _PRCTL(_PR_SET_PDEATHSIG, int(signal.SIGTERM))


@contextmanager
def launch_bridge_process(
    args: Sequence[str] = (), *, domain: int = SIM_DOMAIN,
    interface: str | None = SIM_INTERFACE, ready_timeout: float = 90.0,
    python: str = sys.executable, env: dict[str, str] | None = None,
) -> Iterator[BridgeProcess]:
    """Run `python -m sim --domain D --interface I *args` in a subprocess, wait until it
    publishes LowState, yield it, and stop it with SIGINT on exit."""
    cmd = [python, "-u", "-m", BRIDGE_MODULE, "--domain", str(domain), *args]
    if interface is not None:
        cmd += ["--interface", interface]
    full_env = dict(os.environ if env is None else env)
    full_env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), full_env.get("PYTHONPATH")]))
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1,
                            env=full_env, cwd=str(REPO_ROOT), preexec_fn=die_with_parent)
    bridge = BridgeProcess(proc, domain, interface)
    try:
        bridge.wait_ready(ready_timeout)
        yield bridge
    finally:
        bridge.stop()
