"""The deploy state machine, pure (no clock, no I/O):

    PASSIVE --Start--> STAND_UP --(blend done)--> HOLD --A--> POLICY --(motion ends)--> HOLD
    any state --Select | L2+B | SIGINT | exception | safety trip--> DAMPING (latched)

PASSIVE sends zero torque, STAND_UP blends from the measured pose to the default pose, HOLD
holds the default pose, POLICY runs the ONNX policy, DAMPING sends kp = 0, kd = DAMPING_KD.
Buttons are edge-triggered (a press, not a held button, advances the machine). Buttons are named
as in comm.remote.BUTTONS; comm.remote.button_names turns LowState's bit field into those names.
"""
from __future__ import annotations

import dataclasses
import enum


class State(str, enum.Enum):
    PASSIVE = "PASSIVE"
    STAND_UP = "STAND_UP"
    HOLD = "HOLD"
    POLICY = "POLICY"
    DAMPING = "DAMPING"


STATES = [s.value for s in State]  # the log's state codes are indices into this list


def state_index(s: State) -> int:
    return STATES.index(s.value)


def estop_requested(held: frozenset[str], pressed: frozenset[str]) -> str | None:
    """Select, or L2 held with B pressed (either order of pressing)."""
    if "Select" in pressed:
        return "Select"
    if "L2" in held and "B" in held and ("B" in pressed or "L2" in pressed):
        return "L2+B"
    return None


@dataclasses.dataclass
class StateMachine:
    state: State = State.PASSIVE
    entered_at: float = 0.0
    visited: list = dataclasses.field(default_factory=lambda: [State.PASSIVE.value])
    transitions: list = dataclasses.field(default_factory=list)  # (time, from, to, reason)

    def go(self, new: State, now: float, reason: str) -> bool:
        if new == self.state or self.state == State.DAMPING:
            return False
        self.transitions.append((float(now), self.state.value, new.value, reason))
        self.state, self.entered_at = new, float(now)
        if new.value not in self.visited:
            self.visited.append(new.value)
        return True

    def damp(self, now: float, reason: str) -> bool:
        return self.go(State.DAMPING, now, reason)

    def on_buttons(self, now: float, held: frozenset[str], pressed: frozenset[str]) -> bool:
        """Apply remote presses; returns True when the state changed."""
        why = estop_requested(held, pressed)
        if why:
            return self.damp(now, f"remote {why}")
        if self.state == State.PASSIVE and "Start" in pressed:
            return self.go(State.STAND_UP, now, "remote Start")
        if self.state == State.HOLD and "A" in pressed:
            return self.go(State.POLICY, now, "remote A")
        return False

    def time_in_state(self, now: float) -> float:
        return now - self.entered_at


class ButtonEdges:
    """Turns the held-button bit field of consecutive LowStates into press events."""

    def __init__(self) -> None:
        self.prev = frozenset()

    def update(self, held: frozenset[str]) -> frozenset[str]:
        pressed = held - self.prev
        self.prev = held
        return pressed


@dataclasses.dataclass(frozen=True)
class AutoScript:
    """--auto: the presses an operator would make, by time in state (simulation dry runs)."""

    passive_s: float = 0.5  # zero torque before Start
    hold_s: float = 1.0  # in HOLD after stand-up before A (the sim's band is released 0.3 s into HOLD)
    hold_after_s: float = 0.5  # in HOLD after the motion, then the run ends
    # Short on purpose: holding the default pose on PD alone is not statically stable on the bridge model
    # (series stiffness of ankle, knee and hip ~90 Nm/rad < m g h ~230 Nm/rad): with the zero-action stand
    # policy the robot pitches forward ~5 deg within 5 s of the band release and falls after ~7 s.

    def presses(self, sm: StateMachine, now: float, motions_done: int) -> frozenset[str]:
        t = sm.time_in_state(now)
        if sm.state == State.PASSIVE and t >= self.passive_s:
            return frozenset({"Start"})
        if sm.state == State.HOLD and motions_done == 0 and t >= self.hold_s:
            return frozenset({"A"})
        return frozenset()

    def finished(self, sm: StateMachine, now: float, motions_done: int) -> bool:
        return sm.state == State.HOLD and motions_done > 0 and sm.time_in_state(now) >= self.hold_after_s
