"""The shared latency models against hand-worked values."""

import jax
import jax.numpy as jnp
import numpy as np

from fedjax_sel.envs import latency
from fedjax_sel.envs.dfl_delay import path_gain_from_distance
from fedjax_sel.envs.wireless_latency import snr_db


def test_path_loss_by_hand_in_numpy_and_jax():
    # 128.1 dB at 1 km, 37.6 dB less per decade closer.
    want = np.array([128.1, 90.5, 165.7])
    got = latency.path_loss_db(np.array([1.0, 0.1, 10.0]))
    assert isinstance(got, np.ndarray) and got.dtype == np.float64
    np.testing.assert_allclose(got, want, rtol=1e-12)
    traced = jax.jit(latency.path_loss_db)(jnp.array([1.0, 0.1, 10.0]))
    assert isinstance(traced, jax.Array) and traced.dtype == jnp.float32
    np.testing.assert_allclose(traced, want, rtol=1e-6)


def test_both_papers_use_the_shared_model():
    # Xia's mean SNR (§V.A) and Chen's path gain (Sec. 7.1) at 500 m.
    np.testing.assert_allclose(snr_db(0.5), 23.0 + 107.0 - latency.path_loss_db(0.5), rtol=1e-12)
    gain = path_gain_from_distance(jnp.float32(500.0))
    np.testing.assert_allclose(gain, 10.0 ** (-latency.path_loss_db(0.5) / 10.0), rtol=1e-5)
