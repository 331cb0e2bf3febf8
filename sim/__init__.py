"""The sim bridge: a C MuJoCo G1 that is the robot on DDS (`python -m sim`, `make sim`).

The simulated robot itself (MuJoCo, drive PD, IMU, band, pushes, delay lines, noise) is plant/; this room puts it
on the wire. Modules by concern: config (dataclasses, the one source of defaults), remote (virtual remote), core
(the DDS-free message pipeline), node (SimBridge: DDS and threads), creep (the contact creep study), cli.
Clients start it as a process through comm.sim_process and drive it with comm.sim_msgs.SimClient.
"""
