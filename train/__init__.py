"""Training side: MJX G1 environment, BCG, rollouts, SHAC, motions, export."""
import os

# XLA's CPU AOT loader logs an E-level "cpu_aot_loader ... could lead to execution errors such as SIGILL" line for
# every program loaded from the persistent compilation cache (.cache/jax): it compares the tuning flags stored
# with the program against the host's CPU features, and the programs load and run. XLA reads the level once, when
# jaxlib loads, so it is set here, before any train module imports jax (the Makefile and tests/conftest.py set it
# for processes that import jax first). TF_CPP_MIN_LOG_LEVEL=0 shows XLA's C++ log again.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

# mujoco.mjx prints "Failed to import warp: ..." and "Failed to import mujoco_warp: ..." when it is imported
# without NVIDIA Warp, an optional backend this package does not use (it runs MJX's JAX implementation): a false
# alarm at the top of every training. Those two lines are dropped; anything else the import prints is kept.
import contextlib  # noqa: E402
import io  # noqa: E402

with contextlib.redirect_stdout(io.StringIO()) as _out:
    import mujoco.mjx  # noqa: E402,F401
for _line in _out.getvalue().splitlines():
    if not _line.startswith(("Failed to import warp:", "Failed to import mujoco_warp:")):
        print(_line)
