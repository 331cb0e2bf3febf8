"""Calibration: measure the robot (or the sim bridge) over the deploy DDS link; feed train/ and deploy/.

Routines (calibration.routines, `make calibrate ROBOT=sim|g1`): IMU bias and gravity alignment at
standstill (imu), joint offset check against a held pose (joints), command -> state latency
(latency), actuator identification per joint group (sysid). Output: calibration/<robot-id>.yaml
(calibration.store: writer, loader, consumers), raw logs and plots under runs/calibration/<stamp>/.
No jax: deploy imports the loaders.
"""
