"""The G1's state estimator (base orientation, velocity, height, foot contact from IMU and joint encoders):
one room below deploy and eval, so the robot's loop and sim-to-sim evaluation run the same filter."""
