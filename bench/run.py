"""`make bench`: run every benchmark module's `run() -> dict`, print the results and write
them together to runs/bench/<stamp>/bench.json (keys are stable; scripts read them).

Add a benchmark by adding its module name to MODULES; its `run()` returns a flat dict of
JSON-serialisable values whose keys are unique across modules.
"""
from __future__ import annotations

import argparse
import importlib
import json
import sys
import time
import traceback
from pathlib import Path

from robots.run_files import stamped_dir

MODULES: tuple[str, ...] = (
    "bench.host_stalls",
    "bench.estimator",
    "bench.deploy",
    "bench.cpu_quota",
    "bench.bridge",
    "bench.gradients",
    "bench.contact_cost",
)

REPO_ROOT = Path(__file__).resolve().parents[1]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--only", nargs="*", default=None, help="module names (default: all of MODULES)")
    p.add_argument("--out", default=str(REPO_ROOT / "runs" / "bench"), help="parent folder of <stamp>/bench.json")
    ns = p.parse_args(argv)
    mods = tuple(ns.only) if ns.only else MODULES
    results: dict = {}
    failed = []
    for name in mods:
        t0 = time.perf_counter()
        print(f"[bench] {name} ...", flush=True)
        try:
            out = importlib.import_module(name).run()
        except Exception:  # noqa: BLE001 - one broken benchmark must not hide the others
            failed.append(name)
            traceback.print_exc()
            results.setdefault("errors", {})[name] = traceback.format_exc(limit=3)
            continue
        clash = sorted(set(out) & set(results))
        if clash:
            raise KeyError(f"{name}: keys {clash} already reported by another benchmark")
        results.update(out)
        print(f"[bench] {name}: {time.perf_counter() - t0:.1f} s", flush=True)
        for k, v in out.items():
            print(f"    {k:48s} {v:.4g}" if isinstance(v, float) else f"    {k:48s} {v}")
    out_dir = stamped_dir(ns.out, exist_ok=True)
    path = out_dir / "bench.json"
    path.write_text(json.dumps(results, indent=1, sort_keys=True, default=float))
    print(f"[bench] wrote {path}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
