"""Render every results table of the documentation from results/*.json.

A page (README.md, docs/*.md) holds a table between two markers:

    <!-- BEGIN TABLE motions -->
    | ... the rendered table ... |
    <!-- END TABLE motions -->

TABLES maps each name to the results file(s) it is rendered from and the `render_<name>_table(results: dict)
-> str` function beside the code that writes that JSON ("module:function"; imported only when the table is
rendered). With one file the function gets its JSON; with several, {path as listed: JSON}. Adding a table is one line
here plus the markers on a page.

    python docs/tables.py            rewrite every table in place (make docs-tables)
    python docs/tables.py --check    exit 1 naming each page and table that differs from its render
"""
from __future__ import annotations

import argparse
import importlib
import json
import re
import sys
from pathlib import Path
from typing import Callable, NamedTuple

REPO = Path(__file__).resolve().parents[1]


class Table(NamedTuple):
    render: str  # "module:function"
    files: tuple[str, ...]  # paths under the repository root


TABLES: dict[str, Table] = {
    "motions": Table("experiments.motion_table:render_motions_table", ("results/motions.json",)),
    "motions_headline": Table("experiments.motion_table:render_motions_headline_table", ("results/motions.json",)),
    "gradients_sigmoid_h32": Table("bench.gradients:render_gradients_sigmoid_h32_table", ("results/gradients_sigmoid_h32.json",)),
    "gradients_sigmoid_h8": Table("bench.gradients:render_gradients_sigmoid_h8_table", ("results/gradients_sigmoid_h8.json",)),
    "step_jacobians": Table("bench.step_jacobians:render_step_jacobians_table", ("results/step_jacobians.json",)),
    "contact_models": Table("bench.contact_figure:render_contact_models_table", ("results/contact_models.json",)),
    "stiffness_transfer": Table("experiments.stiffness:render_stiffness_transfer_table", ("results/stiffness_transfer.json",)),
    "calibration_loop": Table("experiments.calibration_loop:render_calibration_loop_table", ("results/calibration_loop.json",)),
    "calibration_recovery": Table("experiments.calibration_loop:render_calibration_recovery_table",
                                  ("results/calibration_loop.json",)),
    "bridge_creep": Table("sim.creep:render_bridge_creep_table", ("results/bridge_creep.json",)),
    "deploy_bench": Table("bench.deploy:render_deploy_bench_table",
                          ("results/bench_deploy/20261203-075955/bench.json", "results/bench_deploy/20261203-081321/bench.json")),
    "estimator": Table("bench.estimator:render_estimator_table", ("results/estimator.json",)),
    "soak_hours": Table("deploy.soak:render_soak_hours_table",
                        tuple(f"results/{s}.json" for s in ("soak_60min", "soak_60min_quiet", "soak_60min_quiet2"))),
    "reference_searches": Table("experiments.landing_search:render_reference_searches_table",
                                tuple(f"results/{s}.json" for s in ("landing_search", "toe_jump_search",
                                                                    "forward_jump_search_tau", "forward_jump_search_far"))),
    "tracking_policies": Table("experiments.tracking_policies:render_tracking_policies_table",
                               ("results/tracking_policies.json",)),
    "eval_inputs": Table("experiments.eval_inputs:render_eval_inputs_table", ("results/eval_inputs.json",)),
    "tracking": Table("experiments.tracking:render_tracking_table", ("results/tracking.json",)),
    "tracking_summary": Table("experiments.tracking:render_tracking_summary", ("results/tracking.json",)),
    "link_faults": Table("experiments.link_faults:render_link_faults_table", ("results/link_faults.json",)),
    "cpu_quota": Table("bench.cpu_quota:render_cpu_quota_table", ("results/cpu_quota.json",)),
    "bundle_drift": Table("bench.bundle_drift:render_bundle_drift_table", ("results/bundle_drift.json",)),
    "gradients_touchdown": Table("bench.gradients_touchdown:render_gradients_touchdown_table",
                                 ("results/gradients_touchdown.json",)),
    "gradients_touchdown_headline": Table("bench.gradients_touchdown:render_gradients_touchdown_headline",
                                          ("results/gradients_touchdown.json",)),
    "gradients_jump": Table("bench.gradients_jump:render_gradients_jump_table", ("results/gradients_jump.json",)),
    "contact_cost": Table("bench.contact_cost:render_contact_cost_table", ("results/contact_cost.json",)),
    "impulse_training": Table("experiments.impulse_training:render_impulse_training_table",
                              ("results/impulse_training.json",)),
    "bundle_activity": Table("experiments.impulse_training:render_bundle_activity_table",
                             ("results/impulse_training.json",)),
    "impulse_training_summary": Table("experiments.impulse_training:render_impulse_training_summary",
                                      ("results/impulse_training.json",)),
}

BLOCK = re.compile(r"(<!-- BEGIN TABLE (?P<name>[\w-]+) -->\n)(?P<body>.*?)(<!-- END TABLE (?P=name) -->)", re.S)
BEGIN = re.compile(r"<!-- BEGIN TABLE ([\w-]+) -->")


class TableError(Exception):
    pass


def pages(root: Path) -> list[Path]:
    """The pages that may hold tables: README.md and every docs/*.md."""
    return [p for p in [root / "README.md", *sorted((root / "docs").glob("*.md"))] if p.is_file()]


def _function(spec: str) -> Callable[[dict], str]:
    module, name = spec.split(":")
    return getattr(importlib.import_module(module), name)


def render(name: str, root: Path = REPO) -> str:
    """The markdown of table `name`, from its results file(s) under `root`."""
    if name not in TABLES:
        raise TableError(f"unknown table {name!r}: add it to TABLES in docs/tables.py (known: {', '.join(TABLES)})")
    t = TABLES[name]
    missing = [f for f in t.files if not (root / f).is_file()]
    if missing:
        raise TableError(f"table {name!r}: {', '.join(missing)} missing (its make target writes it)")
    data = [json.loads((root / f).read_text()) for f in t.files]
    results = data[0] if len(data) == 1 else dict(zip(t.files, data))
    return _function(t.render)(results).rstrip("\n") + "\n"


def rendered_page(text: str, root: Path = REPO, cache: dict | None = None) -> str:
    """`text` with every marked table replaced by its render. Unclosed markers are a TableError."""
    cache = {} if cache is None else cache
    opened = BEGIN.findall(text)
    closed = [m.group("name") for m in BLOCK.finditer(text)]
    if opened != closed:
        raise TableError(f"table markers without a matching END: {sorted(set(opened) - set(closed)) or opened}")

    def repl(m: re.Match) -> str:
        name = m.group("name")
        if name not in cache:
            cache[name] = render(name, root)
        return m.group(1) + cache[name] + m.group(4)

    return BLOCK.sub(repl, text)


def differences(root: Path = REPO) -> list[str]:
    """One line per page and table whose text differs from the render ([] when all agree)."""
    out, cache = [], {}
    for page in pages(root):
        text = page.read_text()
        try:
            new = rendered_page(text, root, cache)
        except TableError as e:
            out.append(f"{page.relative_to(root)}: {e}")
            continue
        old_blocks = {m.group("name"): m.group("body") for m in BLOCK.finditer(text)}
        for m in BLOCK.finditer(new):
            if old_blocks[m.group("name")] != m.group("body"):
                out.append(f"{page.relative_to(root)}: table {m.group('name')!r} differs from what "
                           f"{TABLES[m.group('name')].render} renders from {', '.join(TABLES[m.group('name')].files)} "
                           "(run `make docs-tables`)")
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--check", action="store_true", help="do not write; exit 1 when a page's table differs")
    p.add_argument("--root", type=Path, default=REPO, help="repository root holding the pages and results/")
    a = p.parse_args(argv)
    if a.check:
        diff = differences(a.root)
        for line in diff:
            print(line, file=sys.stderr)
        return 1 if diff else 0
    cache, n = {}, 0
    for page in pages(a.root):
        text = page.read_text()
        try:
            new = rendered_page(text, a.root, cache)
        except TableError as e:
            print(f"{page.relative_to(a.root)}: {e}", file=sys.stderr)
            return 2
        n += len(BLOCK.findall(text))
        if new != text:
            page.write_text(new)
            print(f"rewrote {page.relative_to(a.root)}")
    print(f"{n} tables in {len(pages(a.root))} pages")
    return 0


if __name__ == "__main__":
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    raise SystemExit(main())
