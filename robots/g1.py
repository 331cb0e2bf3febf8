"""Unitree G1 29-DoF (rev 1.0) constants.

Sources: Menagerie `unitree_g1/g1.xml` (joint ranges, actuatorfrcrange, actuator order),
Unitree's public G1 motor table (velocity limits), unitree_rl_gym (leg gains, default
leg pose), unitree_sdk2 G1 low-level example (waist/arm gains). `tests/test_robot_model.py`
checks the joint order, joint and torque limits and the mass against the compiled models, and the
limits against a hand-copied reference table.
"""
from __future__ import annotations

import numpy as np

NUM_MOTORS = 29
NUM_MOTOR_SLOTS = 35  # hg LowCmd_/LowState_ carry 35 motor entries; the G1 uses the first 29
MODE_MACHINE_29DOF_REV1 = 5  # hg mode_machine of a 29-DoF rev 1.0 robot
MODE_PR = 0  # pitch/roll ankle and waist mode

# Motor index order == Menagerie actuator order.
JOINT_NAMES: tuple[str, ...] = (
    "left_hip_pitch_joint", "left_hip_roll_joint", "left_hip_yaw_joint",
    "left_knee_joint", "left_ankle_pitch_joint", "left_ankle_roll_joint",
    "right_hip_pitch_joint", "right_hip_roll_joint", "right_hip_yaw_joint",
    "right_knee_joint", "right_ankle_pitch_joint", "right_ankle_roll_joint",
    "waist_yaw_joint", "waist_roll_joint", "waist_pitch_joint",
    "left_shoulder_pitch_joint", "left_shoulder_roll_joint", "left_shoulder_yaw_joint",
    "left_elbow_joint", "left_wrist_roll_joint", "left_wrist_pitch_joint",
    "left_wrist_yaw_joint",
    "right_shoulder_pitch_joint", "right_shoulder_roll_joint", "right_shoulder_yaw_joint",
    "right_elbow_joint", "right_wrist_roll_joint", "right_wrist_pitch_joint",
    "right_wrist_yaw_joint",
)

LEG_L = slice(0, 6)
LEG_R = slice(6, 12)
WAIST = slice(12, 15)
ARM_L = slice(15, 22)
ARM_R = slice(22, 29)

_arm = lambda sign: [  # noqa: E731  (rad) shoulder roll is mirrored between arms
    (-3.0892, 2.6704),
    (-1.5882, 2.2515) if sign > 0 else (-2.2515, 1.5882),
    (-2.618, 2.618), (-1.0472, 2.0944),
    (-1.97222, 1.97222), (-1.61443, 1.61443), (-1.61443, 1.61443),
]
_leg = lambda sign: [  # noqa: E731
    (-2.5307, 2.8798),
    (-0.5236, 2.9671) if sign > 0 else (-2.9671, 0.5236),
    (-2.7576, 2.7576), (-0.087267, 2.8798), (-0.87267, 0.5236), (-0.2618, 0.2618),
]
_range = np.array(
    _leg(+1) + _leg(-1) + [(-2.618, 2.618), (-0.52, 0.52), (-0.52, 0.52)] + _arm(+1) + _arm(-1)
)
JOINT_POS_MIN = _range[:, 0].copy()
JOINT_POS_MAX = _range[:, 1].copy()

_leg_tau = [88, 139, 88, 139, 50, 50]
_arm_tau = [25, 25, 25, 25, 25, 5, 5]
TORQUE_LIMIT = np.array(_leg_tau * 2 + [88, 50, 50] + _arm_tau * 2, dtype=float)  # Nm

_leg_vel = [32, 20, 32, 20, 37, 37]
_arm_vel = [37, 37, 37, 37, 37, 22, 22]
VELOCITY_LIMIT = np.array(_leg_vel * 2 + [32, 37, 37] + _arm_vel * 2, dtype=float)  # rad/s

# Default standing pose: legs from unitree_rl_gym, arms from Menagerie/playground "home".
_leg_pose = [-0.1, 0.0, 0.0, 0.3, -0.2, 0.0]
DEFAULT_JOINT_POS = np.array(
    _leg_pose * 2 + [0.0, 0.0, 0.0]
    + [0.2, 0.2, 0.0, 1.28, 0.0, 0.0, 0.0]
    + [0.2, -0.2, 0.0, 1.28, 0.0, 0.0, 0.0]
)
DEFAULT_BASE_HEIGHT = 0.785  # m, pelvis height with feet flat in the default pose

# PD gains applied by the drives: legs from unitree_rl_gym, waist and arms from the SDK example,
# except ankle pitch: 40 Nm/rad (rl_gym) is below the ankle's gravitational stiffness
# m g h ~ 33 kg * 9.81 * 0.7 m ~ 230 Nm/rad shared by two ankles, so the robot falls over
# in ~1.5 s holding the default pose (measured on the bridge). 200 Nm/rad each holds it.
KP = np.array(
    [100, 100, 100, 150, 200, 40] * 2 + [60, 40, 40] + [40, 40, 40, 40, 40, 20, 20] * 2, dtype=float
)
KD = np.array([2, 2, 2, 4, 4, 2] * 2 + [1, 1, 1] + [1, 1, 1, 1, 1, 0.5, 0.5] * 2, dtype=float)
DAMPING_KD = 8.0  # kd on every motor in the damping state (kp = 0), as Unitree's examples

# Menagerie joint parameters, the centre of domain randomisation until calibrated.
ARMATURE = 0.01
FRICTION_LOSS = 0.3

# Rates.
CONTROL_DT = 0.02  # policy, 50 Hz
COMMAND_DT = 0.002  # LowCmd stream, 500 Hz
TRAIN_PHYSICS_DT = 0.005  # MJX substep, 200 Hz (4 substeps per control step)
BRIDGE_PHYSICS_DT = 0.001  # sim bridge, 1 kHz PD
LOWSTATE_DT = 0.002  # robot publishes LowState at 500 Hz

TOTAL_MASS = 33.34  # kg, Menagerie rev 1.0 model

# Sites and bodies used by estimation, training and the bridge.
IMU_SITE = "imu_in_pelvis"
FOOT_SITES = ("left_foot", "right_foot")
FOOT_BODIES = ("left_ankle_roll_link", "right_ankle_roll_link")
BASE_BODY = "pelvis"


def joint_index(name: str) -> int:
    return JOINT_NAMES.index(name)
