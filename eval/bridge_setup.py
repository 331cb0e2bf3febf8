"""Which bridge model an evaluation runs on: nominal (the default), a calibration's model, or a "robot"
with hidden perturbations.

    python -m eval --motion jump --calibration calibration/<id>.yaml
    python -m eval --motion jump --bridge-perturbation "armature_scale=1.5,frictionloss_scale=0.6,
        extra_joint_damping=0.5,cmd_latency_ms=6,state_latency_ms=4"

- calibration: the motor joints' armature, damping and friction loss set to the calibration's centre
  (robots.calibration.apply_to_model, the same function training uses), the eval's per-motor kp
  randomisation centred on its kp_scale, and its action delay (latency.action_delay_s) applied to the
  targets (the drive uses a target that long after the policy issued it).
- perturbation: the hidden robot, the bridge's own knobs: robots.model.BridgeModelConfig's
  armature_scale, damping_scale, frictionloss_scale, extra_joint_damping (and contact, a name in
  robots.model.BRIDGE_CONTACT), kp_scale (every drive's kp), cmd_latency_ms (target applied that much
  later) and state_latency_ms (the policy observes the state that old), as the sim bridge's faults, and
  torque_speed=1 (the drives bounded by the torque-speed envelope, the bridge's --torque-speed-envelope).

One or the other: the calibration is the model a policy believes in, the perturbation the robot it
meets. Invariant: `BridgeSetup()` is the nominal bridge, and EvalSim built from it is bit-identical to
the one before these options existed.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np

from eval.config import EvalError
from robots import calibration as C
from robots.model import BRIDGE_CONTACT, BridgeModelConfig

CALIBRATION_NEEDS = ("domain_randomization_centre.armature_scale", "domain_randomization_centre.damping",
                     "domain_randomization_centre.frictionloss_scale", "domain_randomization_centre.kp_scale",
                     "latency.action_delay_s")
MODEL_KEYS = ("armature_scale", "damping_scale", "frictionloss_scale", "extra_joint_damping")
PERTURBATION_KEYS = (*MODEL_KEYS, "kp_scale", "cmd_latency_ms", "state_latency_ms", "contact", "torque_speed")


@dataclasses.dataclass(frozen=True)
class BridgeSetup:
    model: BridgeModelConfig = BridgeModelConfig()
    calibration: Any = None  # parsed calibration mapping (robots.calibration.load), applied after the build
    kp_centre: Any = 1.0  # scalar or (29,): multiplies the eval's kp randomisation
    cmd_delay_s: float = 0.0  # target applied this long after it was issued
    state_delay_s: float = 0.0  # the policy observes the state this old
    torque_speed_envelope: bool = False  # the drives bounded by the torque-speed envelope (plant.config)
    label: str = "nominal"

    def record(self) -> dict:
        """What eval.json records about the bridge (absent for the nominal one)."""
        out = {"label": self.label, "cmd_delay_s": self.cmd_delay_s, "state_delay_s": self.state_delay_s,
               "torque_speed_envelope": self.torque_speed_envelope}
        blank = BridgeModelConfig()
        out["model"] = {f.name: getattr(self.model, f.name) for f in dataclasses.fields(blank)
                        if getattr(self.model, f.name) != getattr(blank, f.name)}
        kp = np.asarray(self.kp_centre, float)
        out["kp_centre"] = float(kp) if kp.ndim == 0 else [round(float(x), 6) for x in kp]
        if self.calibration is not None:
            out["calibration"] = C.provenance(self.calibration) | {"path": self.calibration.get("_path")}
        return out


def from_calibration(path: str) -> BridgeSetup:
    """The calibrated bridge of a calibration file; EvalError names the key and the fix."""
    try:
        calib = C.load(path)
        C.require(calib, CALIBRATION_NEEDS, "`make eval CALIB=...`")
    except C.CalibrationFileError as e:
        raise EvalError(f"calibration rejected: {e}") from None
    c = C.dr_centre(calib)
    return BridgeSetup(calibration=calib, kp_centre=c["kp_scale"], cmd_delay_s=c["action_delay_s"],
                       label=f"calibration {calib.get('robot_id')} ({calib.get('date')})")


def parse_perturbation(text: str) -> BridgeSetup:
    """"armature_scale=1.5,frictionloss_scale=0.6,...": the hidden robot (see the module doc)."""
    vals: dict[str, Any] = {}
    for item in filter(None, (x.strip() for x in text.split(","))):
        key, sep, val = item.partition("=")
        key = key.strip()
        if not sep or key not in PERTURBATION_KEYS:
            raise EvalError(f"--bridge-perturbation item {item!r}: expected KEY=VALUE with KEY one of "
                            f"{', '.join(PERTURBATION_KEYS)}")
        if key in vals:
            raise EvalError(f"--bridge-perturbation: {key} given twice")
        if key == "torque_speed":
            if val not in ("0", "1"):
                raise EvalError(f"--bridge-perturbation torque_speed={val!r}: use 1 (the envelope) or 0")
            vals[key] = val == "1"
            continue
        if key == "contact":
            if val not in BRIDGE_CONTACT:
                raise EvalError(f"--bridge-perturbation contact={val!r}: use one of {list(BRIDGE_CONTACT)}")
            vals[key] = val
            continue
        try:
            v = float(val)
        except ValueError:
            raise EvalError(f"--bridge-perturbation {key}={val!r} is not a number") from None
        if not math.isfinite(v) or v < 0 or (key.endswith("_scale") and v == 0):
            raise EvalError(f"--bridge-perturbation {key}={val}: must be finite and >= 0 (scales > 0)")
        if key.endswith("_ms") and v > 100:
            raise EvalError(f"--bridge-perturbation {key}={val}: more than 100 ms is not a robot's latency")
        vals[key] = v
    if not vals:
        raise EvalError("--bridge-perturbation is empty: give KEY=VALUE items, e.g. armature_scale=1.5")
    model = BridgeModelConfig(**{k: vals[k] for k in (*MODEL_KEYS, "contact") if k in vals})
    return BridgeSetup(model=model, kp_centre=vals.get("kp_scale", 1.0),
                       cmd_delay_s=vals.get("cmd_latency_ms", 0.0) * 1e-3,
                       state_delay_s=vals.get("state_latency_ms", 0.0) * 1e-3,
                       torque_speed_envelope=vals.get("torque_speed", False), label=f"perturbation {text}")
