"""A slower robot computer: the dry run with the deploy loop's process under a CPU quota.

`run()` (in `make bench`) starts a sim bridge on lo (outside any quota: it is the robot), then runs
`python -m deploy.cli --robot sim --no-bridge --motion stand` once without a quota and once per QUOTAS entry
in a cpu cgroup of its own: cgroup v2 `cpu.max` where the cpu controller is enabled, else cgroup v1's
`cpu.cfs_quota_us` / `cpu.cfs_period_us` (the same CFS bandwidth control). Per run:
  cpu_quota_<label>_compute_ms_p99 / _compute_cpu_ms_p99   policy-tick compute, wall and the loop thread's CPU time
  cpu_quota_<label>_deadline_misses, _max_lateness_ms, _stream_period_error_p99
  cpu_quota_<label>_final_state, _safety_events (kinds), _scheduling (what the loop got)
  cpu_quota_<label>_nr_throttled, _throttled_ms             the cgroup's own count of its throttled periods
(label `none`: no cgroup, the loop at SCHED_FIFO; `cgroup_no_quota`: in a cgroup, no quota: normal priority)
and cpu_quota_holds_deadline = the labels of the runs that ended in HOLD with no deadline miss.

What it models and what not: the CFS quota gives the process `quota` of CPU time in every `period`, then
stops it until the next period. A SCHED_FIFO thread is not subject to the CFS quota, and a cgroup's RT
budget (cpu.rt_runtime_us) is 0 unless granted, so the loop's SCHED_FIFO request is refused inside the
cgroup and it runs at normal priority (recorded in _scheduling). With the 100 ms period (cpu.max's default)
a 50 % quota is up to 50 ms stopped at a time; with a 4 ms period (two command periods; a CFS quota is at least
1 ms) the stops are short and the quota is closer to a core of that fraction of this one's speed. The `rt...`
rows instead give the cgroup an RT budget (cgroup v1 cpu.rt_runtime_us per cpu.rt_period_us): the loop keeps
SCHED_FIFO and its process's real-time threads share that fraction of every period. None of them models a slower core's caches, memory or
instruction timing.

    python -m bench.cpu_quota [--out results/cpu_quota.json]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "results" / "cpu_quota.json"
# (label, quota as a fraction of one core, period in us); None: no cgroup; 0: a cgroup without a quota (the loop
# at normal priority, as in the quota runs, without the quota: the two effects apart)
QUOTAS: tuple[tuple[str, float | None, int], ...] = (
    ("none", None, 100_000), ("cgroup_no_quota", 0.0, 100_000), ("50pct_100ms", 0.5, 100_000), ("25pct_100ms", 0.25, 100_000),
    ("50pct_4ms", 0.5, 4_000), ("25pct_4ms", 0.25, 4_000),  # cfs quota >= 1 ms: 4 ms periods
    # cgroup v1 with an RT budget (cpu.rt_runtime_us per cpu.rt_period_us): the loop keeps SCHED_FIFO, and the
    # process's real-time threads together get this fraction of each 10 ms
    ("rt50pct_10ms", 0.5, 10_000), ("rt25pct_10ms", 0.25, 10_000),
)
CG_V2 = Path("/sys/fs/cgroup")
CG_V1_CPU = Path("/sys/fs/cgroup/cpu")


class QuotaUnavailable(RuntimeError):
    """No cgroup CPU bandwidth control here (or no permission); the message says which."""


class CpuCgroup:
    """A cgroup of its own with a CPU quota; `wrap(argv)` runs argv inside it; `close()` removes it."""

    def __init__(self, name: str, fraction: float, period_us: int, rt: bool = False) -> None:
        quota_us = max(1000, int(round(fraction * period_us))) if fraction > 0 else -1  # -1: no quota
        v2 = CG_V2 / "cgroup.controllers"
        try:
            if rt:  # cgroup v1 RT group scheduling (cgroup v2 has no per-group RT budget)
                if not (CG_V1_CPU / "cpu.rt_runtime_us").exists():
                    raise QuotaUnavailable("no cgroup v1 cpu.rt_runtime_us (RT group scheduling) here")
                self.dir = CG_V1_CPU / name
                self.dir.mkdir()
                (self.dir / "cpu.rt_period_us").write_text(str(period_us))
                (self.dir / "cpu.rt_runtime_us").write_text(str(quota_us))
                self.kind = "cgroup v1 cpu.rt_runtime_us"
            elif v2.exists() and "cpu" in v2.read_text().split():
                self.dir = CG_V2 / name
                self.dir.mkdir()
                (self.dir / "cpu.max").write_text(f"{quota_us if quota_us > 0 else 'max'} {period_us}")
                self.kind = "cgroup v2 cpu.max"
            elif (CG_V1_CPU / "cpu.cfs_quota_us").exists():
                self.dir = CG_V1_CPU / name
                self.dir.mkdir()
                (self.dir / "cpu.cfs_period_us").write_text(str(period_us))
                (self.dir / "cpu.cfs_quota_us").write_text(str(quota_us))
                self.kind = "cgroup v1 cpu.cfs_quota_us"
            else:
                raise QuotaUnavailable("no cgroup cpu controller: neither cgroup v2 cpu.max nor cgroup v1 "
                                       "cpu.cfs_quota_us under /sys/fs/cgroup")
        except OSError as e:
            raise QuotaUnavailable(f"cannot make a cpu cgroup ({e}); root is needed") from e
        self.quota_us, self.period_us = quota_us, period_us

    def wrap(self, argv: list[str]) -> list[str]:
        return ["sh", "-c", f'echo $$ > {self.dir}/cgroup.procs && exec "$@"', "sh", *argv]

    def stat(self) -> dict:
        s = dict(line.split() for line in (self.dir / "cpu.stat").read_text().splitlines() if line.strip())
        throttled_ns = int(s.get("throttled_time", 0)) or int(s.get("throttled_usec", 0)) * 1000
        return {"nr_throttled": int(s.get("nr_throttled", 0)), "throttled_ms": throttled_ns / 1e6}

    def close(self) -> None:
        for _ in range(50):
            try:
                self.dir.rmdir()
                return
            except OSError:
                time.sleep(0.1)


def _domain() -> int:
    return int(os.environ.get("G1_BENCH_DDS_DOMAIN", 100 + (os.getpid() + 90) % 116))


def dry_run(domain: int, run_root: str, cg: CpuCgroup | None) -> dict:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    argv = [sys.executable, "-u", "-m", "deploy.cli", "--robot", "sim", "--no-bridge", "--domain", str(domain),
            "--motion", "stand", "--run-root", run_root, "--no-plot", "--quiet"]
    r = subprocess.run(cg.wrap(argv) if cg else argv, capture_output=True, text=True, env=env, cwd=REPO,
                       stdin=subprocess.DEVNULL, timeout=300)
    line = [ln for ln in r.stdout.splitlines() if ln.startswith("summary: ")]
    if not line:
        raise RuntimeError(f"dry run failed ({r.returncode}):\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}")
    return json.loads(Path(line[-1].split(" ", 1)[1]).read_text())


def run(labels: tuple[str, ...] | None = None) -> dict:
    from comm.sim_msgs import SimClient
    from comm.sim_process import launch_bridge_process
    from deploy.cli import BRIDGE_PRIORITY
    from deploy.realtime import boost_process

    from comm import dds

    out: dict = {}
    domain = _domain()
    holds = []
    with tempfile.TemporaryDirectory() as tmp, launch_bridge_process(["--gt-decimation", "5"], domain=domain) as b:
        boost_process(b.proc.pid, BRIDGE_PRIORITY)
        dds.init_dds(domain, dds.SIM_INTERFACE)
        sim = SimClient(domain, timeout=10.0)
        try:
            for label, fraction, period in QUOTAS:
                if labels is not None and label not in labels:
                    continue
                sim.reset()
                cg = None if fraction is None else CpuCgroup(f"g1quota{os.getpid()}_{label}", fraction, period,
                                                             rt=label.startswith("rt"))
                try:
                    s = dry_run(domain, tmp, cg)
                    st = cg.stat() if cg else {}
                finally:
                    if cg is not None:
                        cg.close()
                k = f"cpu_quota_{label}_"
                out.update({k + "compute_ms_p99": s["compute_ms_p99"], k + "compute_cpu_ms_p99": s["compute_cpu_ms_p99"],
                            k + "deadline_misses": s["deadline_misses"], k + "max_lateness_ms": s["max_lateness_ms"],
                            k + "stream_period_error_p99": s["stream_period_error_p99"],
                            k + "final_state": s["final_state"],
                            k + "safety_events": [e["kind"] for e in s["safety_events"]],
                            k + "scheduling": s.get("scheduling"), **{k + n: v for n, v in st.items()}})
                if cg is not None:
                    out[k + "cgroup"] = f"{cg.kind}: {cg.quota_us} us per {cg.period_us} us"
                if s["final_state"] == "HOLD" and s["deadline_misses"] == 0:
                    holds.append(label)
                print(f"  {label}: {s['final_state']} misses {s['deadline_misses']} compute p99 "
                      f"{s['compute_ms_p99']} ms, events {[e['kind'] for e in s['safety_events']]} {st}", flush=True)
        finally:
            sim.close()
    out["cpu_quota_holds_deadline"] = holds  # of the runs made by this call
    return out


def _f(x, spec: str) -> str:
    return "-" if x is None else format(x, spec)


def render_cpu_quota_table(results: dict) -> str:
    """Markdown: one row per quota."""
    r = results["bench"]
    lines = ["| quota (of one core) / period | loop scheduling | compute p99 (CPU time p99) | deadline misses | "
             "max lateness | stream period error p99 | throttled periods | final state, safety events |",
             "|---|---|---|---|---|---|---|---|"]
    for label, fraction, period in QUOTAS:
        k = f"cpu_quota_{label}_"
        if k + "final_state" not in r:
            continue
        q = ("none" if fraction is None else "cgroup, no quota" if fraction == 0
             else f"{'RT budget ' if label.startswith('rt') else ''}{fraction * 100:.0f} % / {period / 1000:g} ms")
        sched = str(r.get(k + "scheduling") or "-")
        lines.append(f"| {q} | {sched} | {_f(r[k + 'compute_ms_p99'], '.2f')} ms "
                     f"({_f(r[k + 'compute_cpu_ms_p99'], '.2f')}) | {r[k + 'deadline_misses']} | "
                     f"{_f(r[k + 'max_lateness_ms'], '.1f')} ms | {_f(r[k + 'stream_period_error_p99'], '.3f')} | "
                     f"{r.get(k + 'nr_throttled', '-')} | "
                     f"{r[k + 'final_state']}, {', '.join(r[k + 'safety_events']) or 'none'} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.cpu_quota", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default=str(OUT))
    p.add_argument("--labels", default=None, help="comma-separated labels to run again (kept: the others in --out)")
    args = p.parse_args(argv)
    labels = tuple(args.labels.split(",")) if args.labels else None
    old = json.loads(Path(args.out).read_text())["bench"] if labels and Path(args.out).exists() else {}
    new = run(labels)
    merged = {**old, **new}
    merged["cpu_quota_holds_deadline"] = [lb for lb, _, _ in QUOTAS if merged.get(f"cpu_quota_{lb}_final_state") == "HOLD"
                                          and merged.get(f"cpu_quota_{lb}_deadline_misses") == 0]
    res = {"command": "python -m bench.cpu_quota", "bench": merged}
    Path(args.out).write_text(json.dumps(res, indent=1, default=str) + "\n")
    print(render_cpu_quota_table(res))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
