"""The robot computer's install: deploy, safety, policies and the sim bridge run without jax.

- `test_dry_run_with_jax_imports_blocked` (default suite, fast): the real dry run (deploy CLI + the bridge
  it starts, two processes) under a meta-path finder that makes every import of jax, jaxlib, optax,
  jax2onnx, flax (and so mujoco.mjx) fail and records the attempt. Proves no code on the deploy or bridge
  path imports the training stack, not even optionally; it does not prove requirements-deploy.lock is
  complete (jax is still installed in .venv, only unimportable).
- `test_deploy_venv_from_the_lock_runs_the_dry_run`: builds a fresh venv from requirements-deploy.lock
  alone (pip, skipped when no index or wheel cache is reachable; 25 s install from this machine's pip cache,
  40 s in all, so it is in the default suite) and runs the same dry run from it. Proves the lock is complete
  and jax-free (jax is not installed there at all).
- `test_every_deploy_pin_has_an_aarch64_wheel`: pip download --no-deps --only-binary=:all: for the Jetson
  (manylinux aarch64, CPython 3.11) for every pin; names the pins that lack one and the version that has one.
"""
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.test_deploy_support import REPO, assert_played_whole, summary_of

DEPLOY_LOCK = REPO / "requirements-deploy.lock"
BLOCKED = ("jax", "jaxlib", "optax", "jax2onnx", "flax", "chex", "equinox", "orbax")
BLOCKER = f'''"""Test-only: imports of the training stack fail (tests/test_deploy_install.py)."""
import os
import sys

_BLOCKED = {BLOCKED!r}
_LOG = os.environ.get("G1_IMPORT_BLOCK_LOG")


def _log(line):
    if _LOG:
        with open(_LOG, "a") as f:
            f.write(line + "\\n")


class _Blocker:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in _BLOCKED:
            _log(f"blocked {{os.getpid()}} {{name}}")
            raise ImportError(f"{{name}} is blocked: the robot computer has no training stack")
        return None


sys.meta_path.insert(0, _Blocker())
_log(f"loaded {{os.getpid()}}")
'''
# The Jetson Orin NX (JetPack 6: Ubuntu 22.04, glibc 2.35) takes manylinux_2_17 ... 2_35 aarch64 wheels; pip
# matches only the tags it is given, so every one is listed (numpy 2.4's are tagged 2_27/2_28, onnx's 2_26/2_28)
AARCH64_PLATFORMS = tuple(f"manylinux_2_{v}_aarch64" for v in range(17, 36)) + ("manylinux2014_aarch64",)
ROBOT_PYTHON = "3.11"
# Pins known to have no aarch64 wheel, with what the robot install does instead (README "Robot computer").
# The test fails when another pin lacks one, and when one of these gains a wheel (then drop it from here).
NO_AARCH64_WHEEL = {
    "cyclonedds==11.0.1": "no aarch64 wheel for any cyclonedds release (11.0.1, 0.10.x, 0.9.x): build from the "
                          "sdist against Cyclone DDS C 11.0.x (CYCLONEDDS_HOME)",
}


def deploy_pins() -> list[str]:
    return [ln.strip() for ln in DEPLOY_LOCK.read_text().splitlines() if ln.strip() and not ln.startswith("#")]


def _blocked_env(tmp_path) -> tuple[dict, Path]:
    d = tmp_path / "blocker"
    d.mkdir()
    (d / "sitecustomize.py").write_text(BLOCKER)
    log = tmp_path / "imports.log"
    env = dict(os.environ, G1_IMPORT_BLOCK_LOG=str(log), MPLBACKEND="Agg",
               PYTHONPATH=os.pathsep.join([str(d), str(REPO)]))
    return env, log


def _dry_run(python: str, env: dict, domain: int, run_root, timeout: float = 240) -> subprocess.CompletedProcess:
    return subprocess.run([python, "-u", "-m", "deploy.cli", "--robot", "sim", "--motion", "jump", "--domain",
                           str(domain), "--run-root", str(run_root), "--no-plot"], capture_output=True, text=True,
                          timeout=timeout, env=env, cwd=str(REPO), stdin=subprocess.DEVNULL)


def _assert_clean_jump(r: subprocess.CompletedProcess) -> dict:
    assert r.returncode == 0, f"{r.stdout}\n{r.stderr}"
    s = summary_of(r.stdout)
    assert s["final_state"] == "HOLD" and s["safety_events"] == [], s
    ended = [x["reason"] for x in s["transitions"] if x["to"] == "HOLD" and x["from"] == "POLICY"]
    assert ended == ["motion ended after 211 policy steps"], s["transitions"]  # the 4.22 s jump at 50 Hz
    assert_played_whole(s, 211)
    return s


def test_the_blocker_blocks(tmp_path):
    env, log = _blocked_env(tmp_path)
    r = subprocess.run([sys.executable, "-c", "import mujoco.mjx"], capture_output=True, text=True, env=env)
    assert r.returncode != 0 and "jax is blocked" in r.stderr, r.stderr
    assert "blocked" in log.read_text() and "loaded" in log.read_text()


@pytest.mark.dds
@pytest.mark.realtime
def test_dry_run_with_jax_imports_blocked(tmp_path, fresh_domain):
    env, log = _blocked_env(tmp_path)
    r = _dry_run(sys.executable, env, fresh_domain, tmp_path / "runs")
    s = _assert_clean_jump(r)
    lines = log.read_text().splitlines()
    assert [ln for ln in lines if ln.startswith("blocked")] == []  # nothing even tried (no optional import)
    assert len({ln for ln in lines if ln.startswith("loaded")}) >= 2  # deploy and the bridge it started
    assert s["gt_flight_s"] > 0.08  # the jump really flew in the bridge


def _pip_reachable(python: str, tmp_path) -> str | None:
    """None when pip can fetch a pinned wheel (index or local wheel store), else why not."""
    numpy_pin = next(p for p in deploy_pins() if p.startswith("numpy=="))
    r = subprocess.run([python, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:", numpy_pin,
                        "-d", str(tmp_path / "probe")], capture_output=True, text=True, timeout=300)
    return None if r.returncode == 0 else (r.stderr.strip().splitlines() or ["pip failed"])[-1]


@pytest.mark.dds
@pytest.mark.realtime
@pytest.mark.network
def test_deploy_venv_from_the_lock_runs_the_dry_run(tmp_path, fresh_domain):
    why = _pip_reachable(sys.executable, tmp_path)
    if why:
        pytest.skip(f"pip cannot fetch the deploy pins here: {why}")
    venv = tmp_path / "venv-deploy"
    t0 = time.monotonic()
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    py = str(venv / "bin" / "python")
    r = subprocess.run([py, "-m", "pip", "install", "-q", "-r", str(DEPLOY_LOCK)], capture_output=True, text=True,
                       timeout=1500)
    assert r.returncode == 0, r.stderr[-3000:]
    install_s = time.monotonic() - t0
    r = subprocess.run([py, "-c", "import jax"], capture_output=True, text=True)
    assert r.returncode != 0 and "No module named 'jax'" in r.stderr  # not installed at all
    # its own numba cache, as a robot's install has: the checkout's __pycache__ kernels were written by the
    # development venv, and this venv reusing them cost policy ticks here (215-228 of 230, 3 of 3 runs; 230 once
    # they were moved away)
    env = dict(os.environ, PYTHONPATH=str(REPO), MPLBACKEND="Agg", NUMBA_CACHE_DIR=str(tmp_path / "numba-cache"))
    s = _assert_clean_jump(_dry_run(py, env, fresh_domain, tmp_path / "runs"))
    print(f"deploy venv: install {install_s:.0f} s, dry run compute p99 {s['compute_ms_p99']:.2f} ms")


def _aarch64_download(pin: str, dest: Path) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:", "-d", str(dest),
           "--python-version", ROBOT_PYTHON, "--implementation", "cp", "--abi", "cp311", "--abi", "abi3",
           "--abi", "none"]
    for p in AARCH64_PLATFORMS:
        cmd += ["--platform", p]
    return subprocess.run(cmd + [pin], capture_output=True, text=True, timeout=600)


@pytest.mark.network
def test_every_deploy_pin_has_an_aarch64_wheel(tmp_path):
    probe = _aarch64_download("numpy", tmp_path / "probe")  # numpy has aarch64 wheels: failing = no index
    if probe.returncode != 0:
        pytest.skip(f"pip cannot fetch aarch64 wheels here: {(probe.stderr.strip().splitlines() or ['?'])[-1]}")
    dest = REPO / ".cache" / "aarch64-wheels"  # kept: pip download skips files already there
    dest.mkdir(parents=True, exist_ok=True)
    missing = {}
    for pin in deploy_pins():
        if _aarch64_download(pin, dest).returncode != 0:
            name = pin.split("==")[0]
            alt = _aarch64_download(name, tmp_path / "alt")
            got = re.findall(rf"{re.escape(name).replace('-', '[-_]')}-([0-9][^-]*)-", " ".join(
                p.name for p in (tmp_path / "alt").glob("*.whl")), re.I) if alt.returncode == 0 else []
            missing[pin] = f"latest with an aarch64 wheel: {got[0] if got else 'none found'}"
    wheels = sorted(p.name for p in dest.glob("*.whl"))
    print(f"aarch64 (cp311, manylinux): {len(deploy_pins()) - len(missing)}/{len(deploy_pins())} pins have a wheel; "
          f"without: {missing}")
    assert set(missing) == set(NO_AARCH64_WHEEL), (
        f"deploy pins without an aarch64 wheel for CPython {ROBOT_PYTHON}: {missing} (known: {NO_AARCH64_WHEEL})")
    assert any("aarch64" in w for w in wheels)  # the binary ones really are aarch64 builds
