import os

os.environ.setdefault("MPLBACKEND", "Agg")
os.environ.setdefault("JAX_COMPILATION_CACHE_DIR", os.path.join(os.path.dirname(__file__), "..", ".cache", "jax"))
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")  # before jax loads: no false SIGILL alarms per cached program (train/__init__.py)
# Tests compile many small programs and run each a few times: XLA's LLVM backend at optimisation level 0
# compiles the gradient tests 21-38 % faster here (measured pinned to one core, cold cache:
# test_mjx_model's batched gradient 173 -> 137 s, test_contact's touch-down gradient 174 -> 107 s); it
# changes code generation, not the HLO or float semantics (no fast-math). Trainings and benches keep the
# default. Subprocesses started by tests inherit it.
if "xla_backend_optimization_level" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_backend_optimization_level=0").strip()
if "MUJOCO_GL" not in os.environ:  # as eval/__init__.py, before any test module imports mujoco (eval videos)
    import ctypes.util

    os.environ["MUJOCO_GL"] = "osmesa" if ctypes.util.find_library("OSMesa") else "egl"


import pytest  # noqa: E402


# DDS domains the tests use: 0 is the real robot's and 1 `make sim`'s; comm.dds.MAX_DOMAIN_ID is the highest.
TEST_DOMAINS = range(2, 233)


def _test_domains():
    """The domains of this pytest process: under pytest-xdist, worker k of W cycles through the k-th of W
    equal slices of TEST_DOMAINS (workers of one run never share a domain); each slice (all of TEST_DOMAINS
    without xdist) is walked once from a start derived from the pid (override with G1_TEST_DDS_DOMAIN), so
    that test runs started in parallel on one machine start far apart."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    worker = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0")[2:])
    n = len(TEST_DOMAINS) // workers
    lo = TEST_DOMAINS[0] + worker * n
    first = int(os.environ.get("G1_TEST_DDS_DOMAIN", lo + (os.getpid() * 97) % n))
    for k in range(n):
        yield lo + (first - lo + k) % n


_DOMAINS = _test_domains()
_SESSION_DOMAIN = next(_DOMAINS)


@pytest.fixture(scope="session")
def dds_domain():
    """The DDS domain of this pytest process, initialised on `lo` (comm.dds.init_dds).

    unitree_sdk2py's ChannelFactory is a process-wide singleton, so all in-process DDS tests
    share one domain. Start bridges on this domain when the test process itself talks to them.
    """
    from comm import dds

    dds.init_dds(_SESSION_DOMAIN, dds.SIM_INTERFACE)
    return _SESSION_DOMAIN


@pytest.fixture()
def fresh_domain():
    """A DDS domain no other test of this run uses, for processes the test starts (a deploy CLI with
    its own bridge, a soak) that the test process does not join. The one source of test domains:
    no test hard-codes one."""
    return next(_DOMAINS)


@pytest.fixture(autouse=True)
def _no_leftover_deploy_processes():
    """A deploy CLI a test started in the background (tests/test_deploy_support.start_cli) does not
    outlive the test, even when the test fails before waiting for it."""
    yield
    import sys

    support = sys.modules.get("tests.test_deploy_support")
    if support is not None:
        support.kill_started_clis()


def _child_processes(pid: int) -> list[tuple[int, str]]:
    """(pid, command line) of the live child processes of `pid` (Linux /proc; [] elsewhere)."""
    out = []
    try:
        entries = os.listdir("/proc")
    except OSError:
        return out
    for e in entries:
        if not e.isdigit():
            continue
        try:
            with open(f"/proc/{e}/stat") as f:
                stat = f.read()
            if int(stat.rsplit(")", 1)[1].split()[1]) != pid or stat.rsplit(")", 1)[1].split()[0] == "Z":
                continue
            with open(f"/proc/{e}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
        except (OSError, ValueError, IndexError):
            continue
        out.append((int(e), cmd))
    return out


def pytest_sessionfinish(session, exitstatus):
    """Safety net: no sim bridge or deploy process started by this run survives it. Any left is
    a fixture bug: it is reported and stopped (SIGTERM, then SIGKILL)."""
    import signal
    import time

    left = [(pid, cmd) for pid, cmd in _child_processes(os.getpid()) if "deploy." in cmd or "-m sim" in cmd]
    if not left:
        return
    for pid, _ in left:
        try:
            os.kill(pid, signal.SIGTERM)
        except OSError:
            pass
    time.sleep(1.0)
    for pid, _ in left:
        try:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        except OSError:
            pass
    tr = session.config.pluginmanager.get_plugin("terminalreporter")
    msg = "processes left running by the tests (stopped now): " + "; ".join(f"{p} {c}" for p, c in left)
    if tr is not None:
        tr.ensure_newline()
        tr.write_line(msg, red=True)
    else:
        print(msg)
