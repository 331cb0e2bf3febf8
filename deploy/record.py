"""What one deploy run leaves behind, fixed when the loop stops: `ControlLoop.record()` builds a `RunRecord` and
deploy.summary turns it into the run's files; nothing downstream reads the loop itself.

The tick and policy columns are the ones the summary needs (deploy.summary.SUMMARY_*_FIELDS), read back from the
closed log.mcap of a real run, or the loop's in-memory columns when its ticks were driven directly (tests): then
`log` is None and `ticks` holds every tick field.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Mapping

import numpy as np


@dataclasses.dataclass(frozen=True)
class PolicyFacts:
    """What ran: the artifact and how the runtime ran it."""

    motion: str
    policy_dir: str
    format: str
    kind: str
    source: Any
    backend: str | None
    backend_reason: str | None
    tracking_frames: int | None  # the tracking reference's length (tracking policies)
    # a tracking reference's pelvis per frame (policies.tracking.TrackingTerms.pelvis_tilt / pelvis_height): what
    # bounds `fell` in POLICY (robots.physics.fallen's ref_tilt / ref_height); None for motions
    reference_tilt: np.ndarray | None = None
    reference_height: np.ndarray | None = None


@dataclasses.dataclass(frozen=True)
class LogFacts:
    """The streamed log (deploy.log.StreamLog) after it was closed."""

    file: str
    bytes: int
    chunks: int
    dropped_chunks: int
    error: str | None


@dataclasses.dataclass(frozen=True)
class RunRecord:
    run_dir: Path
    final_state: str
    end_t: float  # s since t0_monotonic
    t0_monotonic: float  # the run's clock origin (time.monotonic())
    auto: bool
    plot: bool
    states_visited: tuple[str, ...]
    transitions: tuple[tuple[float, str, str, str], ...]  # (time, from, to, reason)
    events: tuple[dict, ...]  # the loop's own notes (start, states, sim, exceptions, end)
    safety_events: tuple[dict, ...]  # the safety monitor's trips
    deadline_misses: int
    estop_to_damping_s: float | None  # remote e-stop press to the first damping command on the wire
    n_ticks: int
    n_policy_ticks: int
    ticks: Mapping[str, np.ndarray]
    policy: Mapping[str, np.ndarray]
    velocity_commands: Mapping[str, np.ndarray]  # velocity policies: t, cmd of each policy step
    tracking_steps: Mapping[str, np.ndarray]  # tracking policies: t, step, joint_sq, anchor_err per step
    domain: int
    interface: str | None
    lowstate_crc_errors: int
    scheduling: Any
    policy_facts: PolicyFacts
    log: LogFacts | None

    @property
    def tilt_tripped(self) -> bool:
        """Did the safety monitor's tilt limit trip (its own criterion, not a fall)?"""
        return any(e["kind"] == "tilt" for e in self.safety_events)
