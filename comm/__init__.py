"""The wire room: Unitree hg message layouts, CRC, encode/decode, remote bytes (pure functions),
DDS set-up, and the one module that touches private cyclonedds / unitree_sdk2py APIs
(`comm.dds_compat`). Shared by deploy/ and sim/; imports numpy, cyclonedds, unitree_sdk2py and
robots only (never jax)."""
