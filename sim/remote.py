"""The bridge's virtual wireless remote: driven by a script (config) and by rt/sim/remote messages,
encoded into every LowState's wireless_remote bytes (comm.remote)."""
from __future__ import annotations

from typing import Sequence

from comm.remote import RemoteState, encode_remote
from sim.config import RemoteEvent
from plant.faults import EPS


class VirtualRemote:
    """The wireless remote's state. Buttons pressed with a hold are released `hold` s later (bridge
    clock); sticks persist until changed. `encode()` is cached until the state changes."""

    def __init__(self, script: Sequence[RemoteEvent] = ()):
        self.buttons = 0
        self.sticks = {"lx": 0.0, "rx": 0.0, "ry": 0.0, "l2": 0.0, "ly": 0.0}
        self._releases: list[tuple[float, int]] = []
        self._script = sorted(script, key=lambda e: e.time)
        self._bytes: bytes | None = None

    def press(self, now: float, buttons: int, hold: float, sticks: Sequence[tuple[str, float]] = ()) -> None:
        self.buttons |= buttons
        if buttons and hold > 0:
            self._releases.append((now + hold, buttons))
        for k, v in sticks:
            self.sticks[k] = float(v)
        self._bytes = None

    def set(self, now: float, buttons: int, hold: float, **sticks: float) -> None:
        """Replace the whole remote state (a rt/sim/remote message)."""
        self.buttons = 0
        self._releases.clear()
        self.press(now, buttons, hold, tuple(sticks.items()))

    def update(self, now: float) -> None:
        while self._script and self._script[0].time <= now + EPS:
            e = self._script.pop(0)
            self.press(now, e.buttons, e.hold, e.sticks)
        if self._releases:
            due = [r for r in self._releases if r[0] <= now + EPS]
            if due:
                self._releases = [r for r in self._releases if r[0] > now + EPS]
                for _, mask in due:
                    self.buttons &= ~mask
                self._bytes = None

    def encode(self) -> bytes:
        if self._bytes is None:
            self._bytes = encode_remote(RemoteState(self.buttons, **self.sticks))
        return self._bytes
