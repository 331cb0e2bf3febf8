"""Pre-flight checks: everything that must hold before the first LowCmd leaves this process.

Order (each failure raises PreflightError with the fix in the message, and no command is sent;
the LowCmd writer does not even exist until all of them pass):
  1. the policy artifact loads and matches robots/ (joints, gains within robots/gains.py's bounds,
     default pose, observation terms the runtime builds, ONNX sizes); any supported format
     (policies.adapters.load_policy: native, mjlab / BeyondMimic, holosoma, unitree_rl_lab)
  2. the network interface exists                             (comm.dds.check_interface); on the robot
     also up with a carrier, on 192.168.123.0/24, multicast      (comm.dds.check_robot_interface)
  3. DDS initialises on (domain, interface)                   (comm.dds.init_dds)
  4. LowState arrives within a timeout, with a valid CRC
  5. mode_machine is known and is the robot the artifact is for (29-DoF rev 1.0)
  6. the measured state is finite
  7. nobody else publishes rt/lowcmd (matched writers + a brief listen)
Before 2 (deploy.cli): the calibration for this run (`check_calibration`): the file parses and is in
range (robots.calibration), and it matches the one the policy was trained with (the artifact's
provenance["calibration"] = {robot_id, date, sha256}): another robot id is refused unless
allow_other_robot; another calibration of the same robot is a warning naming both dates.
"""
from __future__ import annotations

from comm import dds, hg
from deploy.link import Link
from policies.adapters import load_policy
from policies.artifact import Artifact, ArtifactError
from robots import g1

MODE_MACHINE_NAMES = {1: "23dof", 2: "29dof", 3: "29dof lock-waist", 4: "23dof rev1.0", 5: "29dof rev1.0",
                      6: "29dof lock-waist rev1.0", 9: "dual-arm"}


class PreflightError(RuntimeError):
    """A pre-flight check failed: nothing was commanded. The message says what to do."""


def check_artifact(policy_dir) -> Artifact:
    try:
        return load_policy(policy_dir)
    except ArtifactError as e:
        raise PreflightError(f"policy artifact rejected: {e}") from e


def check_interface(interface: str | None, robot: bool = False) -> None:
    """The interface exists; for the robot (`robot`) also: up with a carrier, an address on the robot's
    network, multicast (comm.dds.check_robot_interface)."""
    try:
        if robot:
            dds.check_robot_interface(interface)
        else:
            dds.check_interface(interface)
    except dds.DDSInitError as e:
        raise PreflightError(str(e)) from e


def open_link(domain: int, interface: str | None) -> Link:
    check_interface(interface)
    try:
        return Link(domain, interface)
    except dds.DDSInitError as e:
        raise PreflightError(str(e)) from e


def wait_lowstate(link: Link, timeout: float):
    s = link.wait_state(timeout)
    if s is None:
        iface = link.interface or "(auto)"
        extra = ""
        if link.crc_errors or link.parse_errors:
            extra = (f" {link.crc_errors} samples had a bad CRC and {link.parse_errors} were unreadable: "
                     "is this a G1 (unitree_hg messages)?")
        note = dds.multicast_note(link.interface) if link.interface else None
        raise PreflightError(
            f"no LowState on {hg.TOPIC_LOWSTATE} within {timeout:g} s (DDS domain {link.domain}, "
            f"interface {iface}).{extra} Check that the robot is on and wired to this interface "
            f"(real G1: domain 0 on the interface with a 192.168.123.x address) or that the sim bridge "
            f"runs on this domain (`make sim`); DDS on loopback needs `sudo ip link set lo multicast on`."
            + (f" Note: {note}" if note else "")
        )
    return s


def check_mode_machine(mode_machine: int) -> None:
    if mode_machine == 0:
        raise PreflightError("LowState.mode_machine is 0 (unknown): the robot has not reported its hardware "
                             "variant; wait for it to finish booting and retry")
    if mode_machine != g1.MODE_MACHINE_29DOF_REV1:
        name = MODE_MACHINE_NAMES.get(mode_machine, "unknown variant")
        raise PreflightError(
            f"LowState.mode_machine is {mode_machine} ({name}); this deploy drives a G1 29-DoF rev 1.0 "
            f"(mode_machine {g1.MODE_MACHINE_29DOF_REV1}) and its policies were trained for that model")


def check_no_other_commander(link: Link, listen_s: float) -> None:
    writers, heard = link.other_lowcmd_publishers(listen_s)
    if writers or heard:
        raise PreflightError(
            f"another process publishes {hg.TOPIC_LOWCMD} ({writers} matched writers, {heard} commands heard "
            f"in {listen_s:g} s): on the real G1 release the locomotion service first (remote: L2+R2 for debug "
            f"mode, or MotionSwitcherClient ReleaseMode); otherwise stop the other deploy/controller")


def run_preflight(link: Link, state_timeout: float, listen_s: float = 0.5):
    """Checks 4-7 on an open link. Returns the first good StateSample."""
    s = wait_lowstate(link, state_timeout)
    check_mode_machine(s.state.mode_machine)
    import numpy as np

    st = s.state
    if not (np.all(np.isfinite(st.q)) and np.all(np.isfinite(st.dq)) and np.all(np.isfinite(st.quat))):
        raise PreflightError("LowState carries non-finite joint or IMU values: check the robot's sensors")
    check_no_other_commander(link, listen_s)
    return s


def check_calibration(art: Artifact, path, allow_other_robot: bool = False) -> tuple[dict | None, list[str]]:
    """The run's calibration (None without one) checked against the artifact's; returns (calib, warnings).
    Raises PreflightError for a bad file or another robot's calibration (unless allow_other_robot)."""
    from robots import calibration as C

    trained = (art.spec.provenance or {}).get("calibration") or None
    if path is None:
        if trained:
            return None, [f"the policy was trained with the calibration of robot {trained.get('robot_id')!r} "
                          f"({trained.get('date')}); none given for this run (--calibration): joint offsets and "
                          "IMU biases are not applied"]
        return None, []
    try:
        calib = C.load(path)
        C.require(calib, ("robot_id", "date"), "deploy (the pre-flight comparison with the policy's calibration)")
        here = C.provenance(calib)
        run_date = C.date_of(calib)
        if not trained:
            return calib, []
        if not isinstance(trained, dict) or not trained.get("robot_id"):
            raise PreflightError(f"policy artifact {art.path}: provenance.calibration {trained!r} lacks robot_id "
                                 "(re-export it with `make export`)")
        if trained["robot_id"] != here["robot_id"]:
            msg = (f"the policy was trained with the calibration of robot {trained['robot_id']!r} "
                   f"({trained.get('date')}), this run's calibration {calib['_path']} is of robot "
                   f"{here['robot_id']!r} ({here['date']})")
            if not allow_other_robot:
                raise PreflightError(msg + ": deploy it on that robot, retrain with this robot's calibration "
                                           "(`make train CALIB=...`), or pass --allow-other-robot-calibration")
            return calib, [msg + " (allowed by --allow-other-robot-calibration)"]
        if trained.get("sha256") and trained["sha256"] == here["sha256"]:
            return calib, []
        t_date = C.date_of({"date": trained.get("date"), "_path": "the policy's provenance.calibration"})
        if t_date is not None and run_date is not None and run_date < t_date:
            return calib, [f"this run's calibration of robot {here['robot_id']!r} ({here['date']}) is OLDER than "
                           f"the one the policy was trained with ({trained.get('date')}): use the newer file"]
        return calib, [f"this run's calibration of robot {here['robot_id']!r} ({here['date']}) differs from the one "
                       f"the policy was trained with ({trained.get('date')}); consider retraining with it"]
    except C.CalibrationFileError as e:
        raise PreflightError(f"calibration rejected: {e}") from e
