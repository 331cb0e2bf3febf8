"""Configuration of the sim bridge: frozen dataclasses, the one source of every default.

`sim.cli` builds its argparse defaults from these fields (never repeats a number), so the CLI, the
in-process `SimBridge(BridgeConfig())` and calibration's in-process bridge start from the same values.
Times are on the bridge clock (physics steps x dt since start, monotonic across resets).
"""
from __future__ import annotations

import dataclasses

from comm.dds import SIM_DOMAIN, SIM_INTERFACE
from plant.config import BandConfig, NoiseConfig, PlantConfig, Push
from robots.model import BridgeModelConfig

__all__ = ["BandConfig", "BridgeConfig", "FaultConfig", "NoiseConfig", "Push", "RemoteEvent"]


@dataclasses.dataclass(frozen=True)
class RemoteEvent:
    """Scripted remote input at `time` (bridge clock, s): press buttons for `hold` s, set sticks."""

    time: float
    buttons: int = 0
    hold: float = 0.2
    sticks: tuple[tuple[str, float], ...] = ()


@dataclasses.dataclass(frozen=True)
class FaultConfig:
    state_latency_ms: float = 0.0  # LowState published this much bridge time after it was measured
    cmd_latency_ms: float = 0.0  # LowCmd applied this much bridge time after it was received
    state_drop: float = 0.0  # probability a LowState is not published
    cmd_drop: float = 0.0  # probability a received LowCmd is discarded
    crc_corrupt: float = 0.0  # probability a published LowState carries a wrong CRC
    jitter_ms: float = 0.0  # LowState and LowCmd each delayed a further uniform [0, jitter_ms], kept in order

    def any(self) -> bool:
        return any(v != 0 for v in dataclasses.astuple(self))


@dataclasses.dataclass(frozen=True)
class BridgeConfig:
    domain: int = SIM_DOMAIN
    interface: str | None = SIM_INTERFACE
    lockstep: bool = False
    steps_per_cmd: int = 2  # lockstep: physics steps per received LowCmd
    duration: float | None = None  # stop after this many seconds of bridge clock
    seed: int = 0
    viewer: bool = False
    model: BridgeModelConfig = BridgeModelConfig()
    torque_speed_envelope: bool = False  # plant.config.PlantConfig's
    band: BandConfig = BandConfig()
    noise: NoiseConfig = NoiseConfig()
    faults: FaultConfig = FaultConfig()
    pushes: tuple[Push, ...] = ()
    remote_script: tuple[RemoteEvent, ...] = ()
    gt_decimation: int = 1  # ground truth with every n-th LowState
    status_period: float = 0.1  # s (wall) between SimStatus_ messages
    busy_check_s: float = 0.5  # look this long for another rt/lowstate publisher (0: skip)
    allow_busy_domain: bool = False
    max_lag_s: float = 0.02  # real time: re-base the schedule beyond this lag
    lockstep_idle_s: float = 0.1  # lockstep: re-publish the latest LowState this often when idle
    verbose: bool = True

    def plant(self) -> PlantConfig:
        """The simulated robot this bridge runs (model, band, scheduled pushes)."""
        return PlantConfig(model=self.model, band=self.band, pushes=self.pushes,
                           torque_speed_envelope=self.torque_speed_envelope)
