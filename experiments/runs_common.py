"""What the experiments that evaluate and dry-run policies share (experiments/calibration_loop.py,
experiments/motion_table.py): a logged subprocess step, the resumability test of a results row, the
policy's ONNX hash, and the real-time dry run (`python -m deploy.cli --robot sim`) repeated when the
host, not the robot, ended it. Jax-free; nothing here starts a process on import.
"""
from __future__ import annotations

import hashlib
import json
import os
import shlex
import subprocess
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

REPO = Path(__file__).resolve().parents[1]
# safety events that say the machine stalled (loop behind its deadline, no fresh LowState), not the robot: a dry
# run ended by one is repeated (--dry-run-attempts); a shared 2-core machine running a JAX training has them
HOST_STALL_KINDS = ("deadline", "stale_state")


def save_row(path: Path, key: str, row: Mapping, method: str) -> dict:
    """Write `row` under `key` in the results file `path` (its other rows kept, `method` stated); the results."""
    results = json.loads(path.read_text()) if path.is_file() else {"rows": {}}
    results["rows"][key] = dict(row)
    results["method"] = method
    path.write_text(json.dumps(results, indent=2) + "\n")
    return results


def rel(p: Path | str) -> str:
    """p relative to the repository when it is inside it, else as given."""
    try:
        return str(Path(p).resolve().relative_to(REPO))
    except ValueError:
        return str(p)


def run_logged(cmd: list[str], log: Path, ok: Sequence[int] = (0,), error: type[Exception] = RuntimeError) -> int:
    """Run cmd in the repository with its output appended to log; an exit status outside ok raises `error`
    with the log's tail."""
    log.parent.mkdir(parents=True, exist_ok=True)
    print("  $", " ".join(shlex.quote(c) for c in cmd), f"> {rel(log)}", flush=True)
    with open(log, "a") as f:
        rc = subprocess.run(cmd, cwd=REPO, stdout=f, stderr=subprocess.STDOUT,
                            env={**os.environ, "PYTHONPATH": str(REPO)}).returncode
    if rc not in ok:
        tail = "".join(log.read_text(errors="replace").splitlines(True)[-15:])
        raise error(f"{cmd[2]} exited {rc}; see {rel(log)}:\n{tail}")
    return rc


def keep_row(old: Mapping | None, inputs: Mapping) -> bool:
    """A finished row is kept when it was made from the same inputs (a dry run the host stalled is not finished)."""
    return old is not None and old.get("inputs") == dict(inputs) and not old.get("host_stalled")


def host_stalled(summary: Mapping) -> bool:
    """Did a dry run end on a safety event of the host, not of the robot (the loop or the bridge stalled)?"""
    return any(str(e.get("kind")) in HOST_STALL_KINDS for e in summary.get("safety_events") or [])


def policy_sha(policy_dir: Path) -> str:
    """The artifact's onnx_sha256 (policy.yaml), else the ONNX file's sha256."""
    import yaml

    spec = yaml.safe_load((Path(policy_dir) / "policy.yaml").read_text()) or {}
    if spec.get("onnx_sha256"):
        return str(spec["onnx_sha256"])
    return onnx_file_sha(policy_dir)


def onnx_file_sha(policy_dir: Path) -> str:
    """sha256 of the policy.onnx file itself."""
    return hashlib.sha256((Path(policy_dir) / "policy.onnx").read_bytes()).hexdigest()


def dry_run_row(summary: Mapping, rc: int) -> dict:
    """The numbers a results row keeps from a deploy summary.json."""
    events = list(summary.get("safety_events") or [])
    return {"episodes": 1, "exit_code": rc, "final_state": summary.get("final_state"),
            "states_visited": summary.get("states_visited"), "fell": summary.get("fell"),
            "falls": int(bool(summary.get("fell"))), "safety_events": len(events),
            "safety_event_kinds": sorted({str(e.get("kind")) for e in events}),
            "first_safety_event": ({k: events[0].get(k) for k in ("time", "kind", "detail")} if events else None),
            "policy_started_s": next((t["time"] for t in summary.get("transitions") or [] if t.get("to") == "POLICY"), None),
            "gt_apex_pelvis_m": summary.get("gt_pelvis_max_m"), "gt_flight_s": summary.get("gt_flight_s"),
            "deadline_misses": summary.get("deadline_misses"), "compute_ms_p99": summary.get("compute_ms_p99"),
            "estimator_base_vel_rmse_mps": summary.get("estimator_base_vel_rmse_mps"),
            "estimator_base_height_rmse_m": summary.get("estimator_base_height_rmse_m")}


def rerun_host_stalls(run_once: Callable[[], tuple[Mapping | None, Path | None, Any]],
                      attempts: int) -> tuple[Any, list[dict]]:
    """Call `run_once` -> (a deploy run's summary.json content or None, its path, the caller's result) until a run
    is not ended by a host stall, at most `attempts` times. Returns the last run's result and the stalled runs,
    each {"summary": path, "safety_events"} (the last run among them when it stalled too)."""
    stalls: list[dict] = []
    for attempt in range(1, max(1, attempts) + 1):
        summary, path, result = run_once()
        if summary is None or not host_stalled(summary):
            break
        events = [f"{e.get('kind')}: {e.get('detail')}" for e in summary.get("safety_events") or []]
        stalls.append({"summary": rel(path), "safety_events": events})
        print(f"    attempt {attempt}: the host stalled ({'; '.join(events)}), not the robot"
              + ("; again" if attempt < attempts else "; giving up (row marked host_stalled, redone next run)"), flush=True)
    return result, stalls


def repeat_dry_run(cmd: list[str], out: Path, attempts: int, run: Callable[..., int],
                   error: type[Exception] = RuntimeError) -> dict:
    """Run the deploy command `cmd` (its --run-root is `out`) until a run is not ended by a host stall, at most
    `attempts` times (rerun_host_stalls); `run(cmd, log, ok=...)` runs one (run_logged or a module's wrapper of
    it). Returns the last run's dry_run_row plus its summary path, host_stalled and the stalled attempts."""

    def once():
        before = set(out.glob("*/summary.json"))
        rc = run(cmd, out / "deploy.log", ok=(0, 1))  # 1: the run ended in DAMPING (a fall, a safety trip): a result
        new = sorted(set(out.glob("*/summary.json")) - before)
        if not new:
            raise error(f"deploy exited {rc} without a summary.json under {rel(out)}; see {rel(out / 'deploy.log')}")
        summary = json.loads(new[-1].read_text())
        return summary, new[-1], {**dry_run_row(summary, rc), "summary": rel(new[-1]), "host_stalled": host_stalled(summary)}

    row, stalls = rerun_host_stalls(once, attempts)
    return {**row, "host_stall_attempts": stalls}
