"""The simulated G1 that everything robot-facing runs against: C MuJoCo stepping the bridge model at 1 kHz, the drives'
PD, the pelvis IMU and encoders, the elastic band, pushes, and the faults a link adds (delay lines, drops, noise).

The sim bridge (sim/) puts it on DDS; eval (eval/) runs episodes on it in process. Nothing else steps C MuJoCo for
the robot.
"""
