"""Deploy loop timing against the sim bridge over real DDS on loopback.

`run()` (the `make bench` entry) starts a sim bridge, runs the deploy loop as `make deploy ROBOT=sim`
does (its own process, --auto, stand policy or --motion) and reads its summary:
  deploy_compute_ms_p50/p99          per policy tick: estimator + observation + ONNX + safety
  deploy_compute_cpu_ms_p99          the same stages in the loop thread's CPU time (time.thread_time): what is
                                     left of the wall time without preemption and GIL waits
  deploy_estimator_ms_p50/p99, deploy_policy_ms_p50/p99 (observation + ONNX), deploy_safety_ms_p50/p99,
  deploy_policy_ticks                the policy ticks they are taken over (200 for the 4 s stand)
  deploy_pinned_*                    the same dry run with the loop on a core of its own (deploy --cpus N), the
                                     bridge and this process on the others (side by side with the keys above)
  deploy_stream_period_error_p50/p99 |LowCmd send interval - 2 ms| / 2 ms over the whole run
  deploy_deadline_misses, deploy_ticks, deploy_max_lateness_ms
then a second run in which the virtual remote presses Select during POLICY:
  deploy_estop_to_damping_ms         press sent (this process) -> first damping LowCmd heard here
  deploy_estop_internal_ms           LowState carrying the press received -> damping sent (loop log)
and a third dry run (the jump) under CPU contention: two busy processes (one per core here) at normal
priority while the loop runs at SCHED_FIFO (root here; rtprio on the robot, README "Robot computer"):
  deploy_contention_stream_period_error_p50/p99, deploy_contention_deadline_misses,
  deploy_contention_safety_events (a stale-state trip would show here), deploy_contention_compute_ms_p99

and, in process: deploy_tick_onnxruntime_compute_ms_p99 / deploy_tick_compiled_compute_ms_p99 and their ratio
(backends_side_by_side: the tick with onnxruntime and the Python observation vs the compiled tick, alternated).

`compute_ticks()` (`python -m bench.deploy --compute`) times the same stages in-process, without DDS: recorded
bench/estimator.py sensor samples replayed through Estimator.update, PolicyRuntime.step and SafetyMonitor.step,
one policy tick per sample, p50/p99 per stage.

    python -m bench.deploy [--motion stand] [--compute [--ticks N] [--sleep-ms 1.5] [--policy-backend onnxruntime]]
"""
from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

import numpy as np

from comm import dds
from deploy.log import read_log

T_POLICY = 3.5  # s from the first position command to POLICY (deploy.state_machine.AutoScript defaults)


def _domain() -> int:
    return int(os.environ.get("G1_BENCH_DDS_DOMAIN", 100 + (os.getpid() + 60) % 116))


def _cli(domain: int, run_root: str, motion: str, extra: tuple = ()):
    import subprocess
    import sys

    repo = Path(__file__).resolve().parents[1]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(repo), os.environ.get("PYTHONPATH")])))
    cmd = [sys.executable, "-u", "-m", "deploy.cli", "--robot", "sim", "--no-bridge", "--domain", str(domain),
           "--motion", motion, "--run-root", run_root, "--no-plot", "--quiet", *extra]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=str(repo),
                            stdin=subprocess.DEVNULL)


def _stage_p99(log: dict, prefix: str) -> dict:
    """p99 of each policy-tick stage (estimator, observation + ONNX, safety) from a run's log."""
    return {f"{prefix}{k}_ms_p99": float(np.percentile(log[col], 99))
            for k, col in (("estimator", "pol_est_ms"), ("policy", "pol_policy_ms"), ("safety", "pol_safety_ms"))}


def _summary(proc) -> dict:
    out, err = proc.communicate(timeout=120)
    for line in out.splitlines():
        if line.startswith("summary: "):
            return json.loads(Path(line[len("summary: "):]).read_text())
    raise RuntimeError(f"deploy run failed ({proc.returncode}):\n{out}\n{err}")


def run(motion: str = "stand") -> dict:
    from deploy.cli import BRIDGE_PRIORITY
    from deploy.link import LowCmdObserver
    from comm.sim_msgs import SimClient
    from comm.sim_process import launch_bridge_process
    from deploy.realtime import boost_process

    from contextlib import ExitStack

    from comm.sim_process import BridgeLaunchError

    out: dict = {}
    with tempfile.TemporaryDirectory() as tmp, ExitStack() as stack:
        # a free domain: another bridge (a parallel test run) may already hold the first choice
        for attempt in range(4):
            domain = _domain() + attempt
            try:
                bridge = stack.enter_context(launch_bridge_process(["--gt-decimation", "5"], domain=domain))
                break
            except BridgeLaunchError as e:
                if "another publisher of rt/lowstate" not in str(e) or attempt == 3:
                    raise
        dds.init_dds(domain, dds.SIM_INTERFACE)
        boost_process(bridge.proc.pid, BRIDGE_PRIORITY)
        sim = SimClient(domain, timeout=10.0)
        obs = LowCmdObserver(domain)
        try:
            # 1. the dry run
            s = _summary(_cli(domain, tmp, motion))
            if s["final_state"] != "HOLD" or s["safety_events"]:
                raise RuntimeError(f"dry run did not finish cleanly: {s['final_state']} {s['safety_events']}")
            log = read_log(s["run_dir"])
            out.update({
                "deploy_compute_ms_p50": s["compute_ms_p50"], "deploy_compute_ms_p99": s["compute_ms_p99"],
                "deploy_compute_cpu_ms_p99": s["compute_cpu_ms_p99"],
                "deploy_estimator_ms_p50": float(np.median(log["pol_est_ms"])),
                "deploy_policy_ms_p50": float(np.median(log["pol_policy_ms"])),
                "deploy_safety_ms_p50": float(np.median(log["pol_safety_ms"])),
                **_stage_p99(log, "deploy_"),
                "deploy_compute_target_ms_p99": 0.3,  # the target for deploy_compute_ms_p99
                "deploy_policy_ticks": int(len(log["pol_est_ms"])),  # the samples behind the p99s above
                "deploy_tick_work_ms_p50": float(np.percentile(log["work_ms"], 50)),
                "deploy_tick_work_ms_p99": float(np.percentile(log["work_ms"], 99)),
                "deploy_stream_period_error_p50": s["stream_period_error_p50"],
                "deploy_stream_period_error_p99": s["stream_period_error_p99"],
                "deploy_deadline_misses": s["deadline_misses"], "deploy_ticks": s["ticks"],
                "deploy_max_lateness_ms": s["max_lateness_ms"], "deploy_scheduling": s.get("scheduling"),
            })
            # 1b. the same dry run with the loop pinned to a core of its own (deploy --cpus), the bridge and this
            # process on the others: what an isolated core on the robot gives (warm caches between ticks)
            out.update(pinned_run(domain, tmp, motion, bridge.proc.pid, sim))
            if "deploy_pinned_compute_ms_p99" in out:
                out["deploy_pinned_compute_p99_ratio"] = out["deploy_pinned_compute_ms_p99"] / out["deploy_compute_ms_p99"]
            # 2. e-stop latency: Select pressed 1 s into POLICY
            sim.reset()
            t_start = time.monotonic()
            proc = _cli(domain, tmp, motion)
            t_p = _wait(lambda: obs.first("position", t_start), 40)
            time.sleep(max(0.0, t_p + T_POLICY + 1.0 - time.monotonic()))
            t0 = time.monotonic()
            sim.press("Select", hold_s=0.3, wait=False)
            t_d = _wait(lambda: obs.first("damping", t0), 5)
            s2 = _summary(proc)
            if [e["kind"] for e in s2["safety_events"]] != ["estop"]:
                raise RuntimeError(f"e-stop run: expected one estop event, got {s2['safety_events']} "
                                   f"(states {s2['states_visited']})")
            out["deploy_estop_to_damping_ms"] = (t_d - t0) * 1e3
            out["deploy_estop_internal_ms"] = (s2["estop_to_damping_s"] or float("nan")) * 1e3
            # 3. contention: two busy processes while the dry run runs (the trained jump: the zero-action stand
            # policy is not statically stable on the bridge model and, slowed by contention, tips over)
            sim.reset()
            out.update(contention_run(lambda: _summary(_cli(domain, tmp, CONTENTION_MOTION))))
        finally:
            obs.close()
            sim.close()
    out.update(backends_side_by_side())
    return out


def pinned_run(domain: int, tmp: str, motion: str, bridge_pid: int, sim) -> dict:
    """Dry run with `deploy --cpus <last core>`; the bridge and this process on the other cores, restored after."""
    from deploy.realtime import pin_process

    allowed = frozenset(os.sched_getaffinity(0))
    if len(allowed) < 2:
        return {"deploy_pinned": "skipped: one core"}
    loop_cpu = max(allowed)
    rest = allowed - {loop_cpu}
    sim.reset()
    pin_process(rest, bridge_pid)
    try:
        proc = _cli(domain, tmp, motion, ("--cpus", str(loop_cpu)))
        pin_process(rest)  # this process's DDS readers too, once the loop has started with the full set
        s = _summary(proc)
    finally:
        pin_process(allowed, bridge_pid)
        pin_process(allowed)
    if s["final_state"] != "HOLD" or s["safety_events"]:
        raise RuntimeError(f"pinned dry run did not finish cleanly: {s['final_state']} {s['safety_events']}")
    log = read_log(s["run_dir"])
    return {"deploy_pinned_cpus": s.get("cpus"),
            "deploy_pinned_compute_ms_p50": s["compute_ms_p50"], "deploy_pinned_compute_ms_p99": s["compute_ms_p99"],
            "deploy_pinned_compute_cpu_ms_p99": s["compute_cpu_ms_p99"],
            **_stage_p99(log, "deploy_pinned_"),
            "deploy_pinned_stream_period_error_p99": s["stream_period_error_p99"],
            "deploy_pinned_deadline_misses": s["deadline_misses"]}


BUSY = "import time\nwhile True:\n    pass\n"
CONTENTION_MOTION = "jump"


def contention_run(dry_run, busy: int = 2) -> dict:
    """`dry_run()` -> summary, with `busy` spinning processes (SCHED_OTHER) beside it."""
    import subprocess
    import sys

    procs = [subprocess.Popen([sys.executable, "-c", BUSY]) for _ in range(busy)]
    try:
        time.sleep(0.5)
        s = dry_run()
    finally:
        for p in procs:
            p.kill()
            p.wait()
    return {"deploy_contention_busy_processes": busy,
            "deploy_contention_stream_period_error_p50": s["stream_period_error_p50"],
            "deploy_contention_stream_period_error_p99": s["stream_period_error_p99"],
            "deploy_contention_deadline_misses": s["deadline_misses"],
            "deploy_contention_safety_events": len(s["safety_events"]),
            "deploy_contention_final_state": s["final_state"],
            "deploy_contention_compute_ms_p99": s["compute_ms_p99"],
            "deploy_contention_compute_cpu_ms_p99": s["compute_cpu_ms_p99"],
            "deploy_contention_max_lateness_ms": s["max_lateness_ms"]}


def compute_ticks(n: int = 5000, motion: str = "jump", sleep_s: float = 0.0, scenario: str = "step",
                  backend: str = "auto") -> dict:
    """p50/p99 (ms) of each policy-tick stage over `n` ticks: estimator, observation + ONNX, safety, and their sum.
    `sleep_s` idles before each tick, as the loop does between ticks (what runs meanwhile evicts the caches)."""
    from bench import estimator as B
    from control.tick import PolicyTick
    from estimation.estimator import Estimator, EstimatorConfig
    from policies.artifact import artifact_dir, load_artifact
    from policies.runtime import PolicyRuntime
    from robots import g1
    from robots import model as robot_model
    from safety import SafetyMonitor

    m = robot_model.build_bridge_model()
    samples = []
    B.simulate(scenario, duration=n / 500.0 + 0.01, model=m, inject=lambda k, s: samples.append(s) or s)
    samples = samples[:n]
    noise = B.SensorNoise()
    est = Estimator(EstimatorConfig(gyro_bias=noise.gyro_bias, accel_bias=noise.accel_bias), model=m)
    rt = PolicyRuntime(load_artifact(artifact_dir(motion)), backend=backend)
    mon = SafetyMonitor()
    tick = PolicyTick(est, rt, mon)  # the deploy loop's three stages, back to back
    tick.start(samples[0]["q"], samples[0]["quat"], 0.0)
    mon.reset_target(samples[0]["q"])
    wall, cpu = np.zeros((len(samples), 4)), np.zeros((len(samples), 4))
    clock, cpu_clock = time.perf_counter, time.thread_time
    for k, s in enumerate(samples):
        if sleep_s:
            time.sleep(sleep_s)
        step = k % rt.n_steps
        if step == 0:
            rt.reset()
        c0, t0 = cpu_clock(), clock()
        tick.sense(k * g1.COMMAND_DT, s["q"], s["dq"], s["quat"], s["gyro"], s["accel"], s["tau"])
        c1, t1 = cpu_clock(), clock()
        out = tick.act(step, s["q"], s["dq"], s["quat"])
        c2, t2 = cpu_clock(), clock()
        tick.gate(t2, s["q"], s["dq"], s["quat"], out.target, rx_time=t2, tick=k)
        c3, t3 = cpu_clock(), clock()
        wall[k], cpu[k] = (t0, t1, t2, t3), (c0, c1, c2, c3)
    if mon.latched:
        raise RuntimeError(f"compute bench: the safety monitor tripped: {mon.events}")
    res = {"ticks": len(wall), "sleep_ms": sleep_s * 1e3, "policy_backend": rt.backend}
    # wall time (what the loop logs) and the thread's CPU time (the same without preemption by other processes)
    for kind, a in (("", wall), ("cpu_", cpu)):
        ms = np.diff(a, axis=1) * 1e3
        for name, col in (("estimator", ms[:, 0]), ("policy", ms[:, 1]), ("safety", ms[:, 2]), ("compute", ms.sum(1))):
            res[f"{kind}{name}_ms_p50"] = float(np.percentile(col, 50))
            res[f"{kind}{name}_ms_p99"] = float(np.percentile(col, 99))
    return res


def backends_side_by_side(n: int = 2000, rounds: int = 3, motion: str = "jump") -> dict:
    """The policy tick in process (compute_ticks) with the graph run by onnxruntime (the observation built in Python)
    and by the compiled tick, alternating `rounds` times so both see the same machine; medians of the rounds' p99."""
    p99 = {"onnxruntime": [], "compiled": []}
    for _ in range(rounds):
        for backend in p99:
            p99[backend].append(compute_ticks(n, motion, backend=backend)["compute_ms_p99"])
    ort, comp = (float(np.median(p99[b])) for b in ("onnxruntime", "compiled"))
    return {"deploy_tick_onnxruntime_compute_ms_p99": ort, "deploy_tick_compiled_compute_ms_p99": comp,
            "deploy_tick_compiled_speedup_p99": ort / comp}


def _wait(pred, timeout: float):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        v = pred()
        if v:
            return v
        time.sleep(0.002)
    raise TimeoutError("deploy bench: timed out waiting on the loop")


def render_deploy_bench_table(results: dict) -> str:
    """One row per `make bench ARGS="--only bench.deploy bench.estimator --out results/bench_deploy"` run
    ({results/bench_deploy/<stamp>/bench.json: bench.json}): the policy tick and the command stream."""
    head = ["run", "compute p50 / p99", "CPU time p99", "estimator / policy / safety p99", "stream period error p99",
            "deadline misses", "pinned: compute p99", "beside two busy processes: stream p99, misses, safety events",
            "e-stop -> damping on the wire"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for path, b in results.items():
        lines.append("| " + " | ".join([
            f"`{path}`", f"{b['deploy_compute_ms_p50']:.3f} / {b['deploy_compute_ms_p99']:.3f} ms",
            f"{b['deploy_compute_cpu_ms_p99']:.3f} ms",
            f"{b['deploy_estimator_ms_p99']:.3f} / {b['deploy_policy_ms_p99']:.3f} / {b['deploy_safety_ms_p99']:.3f} ms",
            f"{b['deploy_stream_period_error_p99']:.3f}", f"{b['deploy_deadline_misses']} of {b['deploy_ticks']}",
            f"{b['deploy_pinned_compute_ms_p99']:.3f} ms",
            f"{b['deploy_contention_stream_period_error_p99']:.3f}, {b['deploy_contention_deadline_misses']}, "
            f"{b['deploy_contention_safety_events']}", f"{b['deploy_estop_to_damping_ms']:.1f} ms"]) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--motion", default=None, help="default: stand (dry runs), jump (--compute)")
    ap.add_argument("--compute", action="store_true", help="in-process policy-tick stage timing only (no DDS)")
    ap.add_argument("--ticks", type=int, default=5000)
    ap.add_argument("--sleep-ms", type=float, default=0.0)
    ap.add_argument("--policy-backend", default="auto", choices=("auto", "onnxruntime", "compiled"), help="--compute")
    a = ap.parse_args()
    res = (compute_ticks(a.ticks, a.motion or "jump", a.sleep_ms * 1e-3, backend=a.policy_backend) if a.compute
           else run(a.motion or "stand"))
    for k, v in res.items():
        print(f"{k:36s} {v:.4g}" if isinstance(v, float) else f"{k:36s} {v}")
