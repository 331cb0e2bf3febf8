"""The sim bridge: a C MuJoCo G1 that is the robot on DDS (`python -m sim`, `make sim`).

Modules by concern: config (dataclasses, the one source of defaults), physics (BridgeSim: MuJoCo,
drive PD, IMU, band), faults (delay lines, drops, CRC corruption, noise, pushes), remote (virtual
remote), core (the DDS-free message pipeline), node (SimBridge: DDS and threads), cli.
Clients start it as a process through comm.sim_process and drive it with comm.sim_msgs.SimClient.
"""
