import os

os.environ.setdefault("MPLBACKEND", "Agg")
os.environ.setdefault("JAX_COMPILATION_CACHE_DIR", os.path.join(os.path.dirname(__file__), "..", ".cache", "jax"))
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")


import pytest  # noqa: E402


@pytest.fixture(scope="session")
def dds_domain():
    """The DDS domain of this pytest process, initialised on `lo` (deploy.protocol.init_dds).

    unitree_sdk2py's ChannelFactory is a process-wide singleton, so all in-process DDS tests
    share one domain; it is derived from the pid so that test runs started in parallel on one
    machine do not cross-talk (override with G1_TEST_DDS_DOMAIN). Start bridges on this domain.
    """
    from deploy import protocol

    domain = int(os.environ.get("G1_TEST_DDS_DOMAIN", 100 + os.getpid() % 120))
    protocol.init_dds(domain, protocol.SIM_INTERFACE)
    return domain
