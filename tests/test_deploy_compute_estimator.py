"""estimation/estimator.py's compiled update (the whole per-tick arithmetic as one numba kernel, estimation/kernel.py)
against `ReferenceEstimator` (estimation/reference.py), the same filter in numpy, step by step. On the same inputs (the four bench/estimator.py scenarios with
sensor noise, at 500 and 50 Hz, with and without joint torques, and with bad IMU / joint / torque samples injected)
both give the same contact decisions and flags at every tick and the same estimate to float rounding (the kernel,
measured: 7e-15 in the state and the outputs (6e-14 at 50 Hz), 1e-13 of max |P| in P, 7e-10 N of foot force: the
forces solve the damped normal equations of a near-straight leg, condition ~1e6-1e8, by LU of its own instead of
LAPACK's, so their last digits differ the most). Also: the kernel is compiled once, at construction, whatever
array types the caller passes, and a read-only install (no writable numba cache) compiles it in memory.
"""
from __future__ import annotations

import numpy as np
import pytest

from bench import estimator as B
from estimation.config import EstimatorConfig
from estimation.estimator import Estimator
from estimation.reference import ReferenceEstimator
from robots import g1
from robots import model as robot_model


@pytest.fixture(scope="module")
def model():
    return robot_model.build_bridge_model()


def _record(model, scenario, **kw):
    """The estimator inputs of one bench/estimator.py run (the sensors it simulates, as fed)."""
    rec = []

    def grab(k, s):
        rec.append(dict(s))
        return s

    B.simulate(scenario, model=model, inject=grab, **kw)
    return rec


def _bad(k, s):
    """Bad samples: NaN IMU (0.4-0.44 s), a frozen IMU (0.6-0.7 s), a NaN knee (0.8 s), NaN torques (1.0-1.1 s)."""
    s = dict(s)
    if 200 <= k < 220:
        s["gyro"] = np.array([np.nan, 0.0, 0.0])
    if 300 <= k < 350:
        s.update(quat=_bad.frozen["quat"], gyro=_bad.frozen["gyro"], accel=_bad.frozen["accel"])
    elif k == 299:
        _bad.frozen = {key: s[key].copy() for key in ("quat", "gyro", "accel")}
    if 400 <= k < 405:
        s["q"] = s["q"].copy()
        s["q"][3] = np.nan
    if 500 <= k < 550 and s["tau"] is not None:
        s["tau"] = np.full(29, np.nan)
    return s


CASES = [("stand", {}), ("push", {}), ("step", {}), ("jump", {}), ("jump", {"use_tau": False}),
         ("push", {"rate_hz": 50.0}), ("step", {"inject": _bad})]


@pytest.mark.parametrize("scenario,kw", CASES, ids=[f"{s}-{'-'.join(k) or 'base'}" for s, k in CASES])
def test_rewrite_matches_the_old_estimator(model, scenario, kw):
    kw = dict(kw)
    inject = kw.pop("inject", None)
    rate = kw.get("rate_hz", 500.0)
    samples = _record(model, scenario, **kw)
    if inject is not None:
        samples = [inject(k, s) for k, s in enumerate(samples)]
    cfg = EstimatorConfig(gyro_bias=B.SensorNoise().gyro_bias, accel_bias=B.SensorNoise().accel_bias)
    new, old = Estimator(cfg, model=model), ReferenceEstimator(cfg, model=model)
    for e in (new, old):
        e.reset(samples[0]["q"], samples[0]["quat"], 0.0)
    for k, s in enumerate(samples):
        args = (k / rate, s["q"], s["dq"], s["quat"], s["gyro"], s["accel"], s["tau"])
        a, b = new.update(*args), old.update(*args)
        assert tuple(a.flags) == tuple(b.flags), (k, a.flags, b.flags)
        assert a.foot_contact.tolist() == b.foot_contact.tolist(), k
        for f in ("quat", "gyro", "base_lin_vel", "base_lin_vel_world", "base_pos"):
            np.testing.assert_allclose(getattr(a, f), getattr(b, f), rtol=0, atol=1e-12, err_msg=f"{f} at {k}")
        assert a.base_height == pytest.approx(b.base_height, abs=1e-12)
        np.testing.assert_allclose(a.foot_force, b.foot_force, rtol=1e-12, atol=1e-9, err_msg=f"force at {k}")
        assert isinstance(a.base_lin_vel, np.ndarray) and a.foot_contact.dtype == bool
    np.testing.assert_allclose(new.x, old.x, rtol=0, atol=1e-12)
    np.testing.assert_allclose(new.P, old.P, rtol=0, atol=1e-15)


def test_rewrite_matches_without_torques_and_when_hanging(model):
    """No tau_est at all (kinematic contact only), then lifted with unloaded legs: the hang update after max_flight_s."""
    new, old = Estimator(model=model), ReferenceEstimator(model=model)
    for e in (new, old):
        e.reset(g1.DEFAULT_JOINT_POS, [1, 0, 0, 0])
        e.x[[2, 8, 11]] += 0.3
    rng = np.random.default_rng(0)
    for k in range(1, 800):
        gyro, acc = rng.normal(0, 0.01, 3), np.array([0.2, 0.0, 9.81]) + rng.normal(0, 0.1, 3)
        tau = np.zeros(29) if k > 100 else None
        a = new.update(k * 0.002, g1.DEFAULT_JOINT_POS, np.zeros(29), [1, 0, 0, 0], gyro, acc, tau)
        b = old.update(k * 0.002, g1.DEFAULT_JOINT_POS, np.zeros(29), [1, 0, 0, 0], gyro, acc, tau)
        assert tuple(a.flags) == tuple(b.flags) and a.foot_contact.tolist() == b.foot_contact.tolist(), k
        np.testing.assert_allclose(a.base_lin_vel, b.base_lin_vel, rtol=0, atol=1e-12)
    np.testing.assert_allclose(new.P, old.P, rtol=0, atol=1e-15)


def test_kernel_compiles_once_at_construction_whatever_the_inputs(model):
    """The kernels are typed on the estimator's own buffers only: lists, read-only, strided, float32 or int inputs
    never add a signature (a compile inside a tick)."""
    from estimation import kernel as K

    est = Estimator(model=model)
    n_tick, n_reset = len(K.tick.signatures), len(K.reset.signatures)
    assert n_tick == n_reset == 1
    q = g1.DEFAULT_JOINT_POS.copy()
    q.setflags(write=False)
    wide = np.zeros((29, 2))
    est.reset(q, [1, 0, 0, 0])
    inputs = [
        (q.tolist(), [0.0] * 29, [1, 0, 0, 0], [0, 0, 0], [0, 0, 9.81], None),
        (q, wide[:, 0], np.array([1, 0, 0, 0], np.float32), np.zeros(3, int), np.array([0.1, 0, 9.8]), np.zeros(29)),
        (q, np.zeros(29), (1.0, 0.0, 0.0, 0.0), (0.0, 0.0, 0.0), (0.0, 0.0, 9.8), list(range(29))),
    ]
    for k in range(30):
        e = est.update(0.002 * (k + 1), *inputs[k % 3])
        assert np.isfinite(e.base_lin_vel).all()
    assert (len(K.tick.signatures), len(K.reset.signatures)) == (n_tick, n_reset)


READ_ONLY_LOCATOR = """
import errno, os
from numba.core.caching import InTreeCacheLocator, UserWideCacheLocator


def _refuse(self):
    raise OSError(errno.EROFS, os.strerror(errno.EROFS), self.get_cache_path())


class ReadOnlyTree(InTreeCacheLocator):  # the package's __pycache__ on a read-only file system
    ensure_cache_path = _refuse


class ReadOnlyUser(UserWideCacheLocator):  # and no writable home either
    ensure_cache_path = _refuse
"""


def test_read_only_install_compiles_in_memory(tmp_path, model):
    """No writable cache directory (numba's locators refuse, as on a read-only file system): the kernels compile in
    memory at construction and give the same estimate as the cached ones here."""
    import json
    import os
    import subprocess
    import sys

    from tests.test_deploy_support import REPO

    (tmp_path / "rofs.py").write_text(READ_ONLY_LOCATOR)
    script = (
        "import json, numpy as np\n"
        "from estimation import kernel as K\n"
        "from estimation.estimator import Estimator\n"
        "from robots import g1\n"
        "est = Estimator()\n"
        "est.reset(g1.DEFAULT_JOINT_POS, [1, 0, 0, 0])\n"
        "for k in range(1, 50):\n"
        "    e = est.update(k * 0.002, g1.DEFAULT_JOINT_POS, np.zeros(29), [1, 0, 0, 0], [0.01, 0, 0], [0.1, 0, 9.81], np.zeros(29))\n"
        "print(json.dumps({'cache': type(K.tick._cache).__name__, 'x': est.x.tolist()}))\n"
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), str(REPO)]),
               NUMBA_CACHE_LOCATOR_CLASSES="rofs.ReadOnlyTree,rofs.ReadOnlyUser")
    env.pop("NUMBA_CACHE_DIR", None)
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, cwd=str(tmp_path),
                       timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    got = json.loads(r.stdout.strip().splitlines()[-1])
    assert got["cache"] == "NullCache"  # compiled in memory, nothing written
    est = Estimator(model=model)
    est.reset(g1.DEFAULT_JOINT_POS, [1, 0, 0, 0])
    for k in range(1, 50):
        est.update(k * 0.002, g1.DEFAULT_JOINT_POS, np.zeros(29), [1, 0, 0, 0], [0.01, 0, 0], [0.1, 0, 9.81], np.zeros(29))
    np.testing.assert_array_equal(np.array(got["x"]), est.x)
