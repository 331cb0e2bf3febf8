"""Helpers shared by the deploy DDS tests (no tests here): run the deploy CLI as a subprocess
(one DDS participant per process, as on the robot), fake artifacts, waiting on LowCmds."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from comm.sim_process import die_with_parent
from policies import artifact as A
from policies.action import ACTION_SCALE
from policies.observation import MOTION_OBS_TERMS, obs_size, term_specs
from policies.stand import STAND_DURATION
from robots import g1

REPO = Path(__file__).resolve().parents[1]

# Timeline of an --auto run (deploy.state_machine.AutoScript + LoopConfig defaults), from the first
# position command (= STAND_UP entry): HOLD at +2.5 s, band released at +2.8 s, POLICY at +3.5 s,
# motion (stand, 4 s) ends at +7.5 s, run ends at +8.0 s.
T_HOLD, T_BAND, T_POLICY, T_POLICY_END = 2.5, 2.8, 3.5, 7.5


def cli_env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    env.setdefault("MPLBACKEND", "Agg")
    return env


def cli_cmd(*args) -> list[str]:
    return [sys.executable, "-u", "-m", "deploy.cli", *[str(a) for a in args]]


def run_cli(*args, timeout: float = 120.0) -> subprocess.CompletedProcess:
    return subprocess.run(cli_cmd(*args), capture_output=True, text=True, timeout=timeout, env=cli_env(),
                          cwd=str(REPO), stdin=subprocess.DEVNULL, preexec_fn=die_with_parent)


_STARTED: list[subprocess.Popen] = []


def start_cli(*args) -> subprocess.Popen:
    """The deploy CLI in the background; killed after the test if still running (tests/conftest.py
    calls kill_started_clis), and with the test process if that dies (PR_SET_PDEATHSIG)."""
    proc = subprocess.Popen(cli_cmd(*args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=cli_env(), cwd=str(REPO), stdin=subprocess.DEVNULL, preexec_fn=die_with_parent)
    _STARTED.append(proc)
    return proc


def kill_started_clis() -> list[int]:
    """Kill the start_cli processes still running (a test failed before finish()); their pids."""
    killed = []
    while _STARTED:
        proc = _STARTED.pop()
        if proc.poll() is None:
            proc.kill()
            killed.append(proc.pid)
        try:
            proc.communicate(timeout=10)
        except (subprocess.TimeoutExpired, ValueError):
            pass
    return killed


def assert_played_whole(s: dict, n_steps: int) -> None:
    """A deploy summary whose motion ran all its n_steps policy steps: each computed, but for at most one that a
    stall of a shared host skipped whole (its 10 command ticks, 20 ms: one of 211 on CI once). A dry run on a core
    of its own keeps the exact count (test_deploy_dryrun)."""
    missed = s["policy_steps_missed"]
    assert s["policy_ticks"] + missed == n_steps and missed <= 1, \
        {k: s.get(k) for k in ("policy_ticks", "policy_steps_missed", "deadline_misses", "max_send_gap_ms",
                               "max_lateness_ms", "cpus")}


def summary_of(stdout: str) -> dict:
    m = re.search(r"^summary: (.+summary\.json)$", stdout, re.M)
    assert m, f"no summary path printed:\n{stdout}"
    return json.loads(Path(m.group(1)).read_text())


def sim_args(domain: int, run_root, *extra) -> list:
    return ["--robot", "sim", "--no-bridge", "--domain", domain, "--run-root", run_root, "--no-plot", *extra]


def nan_policy_artifact(out_dir) -> Path:
    """A valid artifact whose ONNX outputs NaN for every input (actions = obs @ 0 + NaN)."""
    obs = term_specs(MOTION_OBS_TERMS)
    n_obs = obs_size(obs)
    w = numpy_helper.from_array(np.zeros((n_obs, g1.NUM_MOTORS), np.float32), "w")
    b = numpy_helper.from_array(np.full((1, g1.NUM_MOTORS), np.nan, np.float32), "b")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["obs", "w"], ["m"]), helper.make_node("Add", ["m", "b"], ["actions"])],
        "nan_policy",
        [helper.make_tensor_value_info("obs", TensorProto.FLOAT, ["batch", n_obs])],
        [helper.make_tensor_value_info("actions", TensorProto.FLOAT, ["batch", g1.NUM_MOTORS])],
        initializer=[w, b],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
    T = int(round(STAND_DURATION / g1.CONTROL_DT))
    spec = A.PolicySpec(**A.robot_spec_fields(), action_scale=ACTION_SCALE, observation=obs,
                        motion=A.MotionSpec("nan", STAND_DURATION),
                        provenance=A.provenance("test: NaN output", seed=0, iterations=0))
    return A.write_artifact(out_dir, model, spec, np.tile(g1.DEFAULT_JOINT_POS, (T, 1)),
                            np.full(T, g1.DEFAULT_BASE_HEIGHT))


def wait_until(pred, timeout: float, what: str, poll: float = 0.002, proc: subprocess.Popen | None = None):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        v = pred()
        if v:
            return v
        if proc is not None and proc.poll() is not None:
            out, err = proc.communicate()
            raise AssertionError(f"deploy exited ({proc.returncode}) while waiting for {what}:\n{out}\n{err}")
        time.sleep(poll)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def finish(proc: subprocess.Popen, timeout: float = 60.0) -> tuple[int, str, str]:
    out, err = proc.communicate(timeout=timeout)
    return proc.returncode, out, err


def start_and_wait_stand_up(domain, run_root, observer, *extra):
    t_start = time.monotonic()
    proc = start_cli(*sim_args(domain, run_root, *extra))
    t_p = wait_until(lambda: observer.first("position", t_start), 40, "the first position command", proc=proc)
    return proc, t_p


def sleep_until(t):
    time.sleep(max(0.0, t - time.monotonic()))


def assert_damping_run(code, out, err, kind):
    s = summary_of(out)
    assert code == 1, f"exit code {code}\n{out}\n{err}"
    assert s["final_state"] == "DAMPING"
    assert [e["kind"] for e in s["safety_events"]] == [kind], s["safety_events"]
    return s
