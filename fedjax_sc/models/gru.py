"""The GRU recurrence with a hand-written backward pass (the hot loop of every client step).

``gru_recurrence(proj, mask, w, b)`` runs D independent GRU chains (the library uses D = 2: the
forward and the time-reversed backward direction of a BiGRU) over T steps. Autodiff of a plain
``lax.scan`` makes XLA keep many small per-step operations and accumulate the recurrent-weight
gradient inside the loop; here the backward pass

1. recomputes all gate activations at once with one ``[T*D*B, H] x [H, 3H]`` matmul,
2. runs one reverse ``lax.scan`` whose step is a single small matmul and one fused update,
3. forms the recurrent-weight gradient after the loop as one large matmul,

which is what makes a whole round of 16 clients x 200 steps fast on CPU. The gradient is tested
against autodiff of the plain scan (``tests/models/test_gru.py``).

Gate equations (PyTorch ``nn.GRU``): with ``x = proj[t]`` (input projection incl. bias) and
``g = h @ w + b``: ``r = s(x_r + g_r)``, ``z = s(x_z + g_z)``, ``n = tanh(x_n + r * g_n)``,
``h' = h + m (1 - z)(n - h)`` where ``m`` is 1 on real tokens and 0 on padding (state held).

Mixed precision: with bfloat16 inputs the matmuls take bfloat16 operands, and the state h
(forward) and its cotangent (backward) are carried through the T steps in float32; only the
returned states are rounded to the inputs' dtype. For float32 inputs every cast is a no-op.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp


def _sigmoid(x):
    # One tanh instead of exp + divide: XLA's CPU tanh is a vectorised rational approximation.
    return 0.5 * jnp.tanh(0.5 * x) + 0.5


def _gates(x, g, h):
    del h
    xr, xz, xn = jnp.split(x, 3, axis=-1)
    gr, gz, gn = jnp.split(g, 3, axis=-1)
    r = _sigmoid(xr + gr)
    z = _sigmoid(xz + gz)
    n = jnp.tanh(xn + r * gn)
    return r, z, n, gn


def _matmul(spec, a, w):
    """``einsum(spec, a, w)`` on operands in ``w``'s dtype, returned in float32 (XLA's CPU
    backend has no bfloat16 dot with a float32 result, so the product is rounded to ``w``'s
    dtype first)."""
    return jnp.einsum(spec, a.astype(w.dtype), w).astype(jnp.float32)


def _forward(proj, mask, w, b):
    """The states ``[T, D, B, H]`` in float32 (the carry's dtype)."""
    def step(h, inputs):
        x, m = inputs
        g = _matmul("dbh,dhg->dbg", h, w) + b[:, None, :]
        _, z, n, _ = _gates(x, g, h)
        h = h + m * (1.0 - z) * (n - h)
        return h, h

    h0 = jnp.zeros(proj.shape[1:-1] + (w.shape[1],), jnp.float32)
    return jax.lax.scan(step, h0, (proj, mask))[1]


@jax.custom_vjp
def gru_recurrence(proj: jax.Array, mask: jax.Array, w: jax.Array, b: jax.Array) -> jax.Array:
    """Runs D GRU chains over time.

    Args:
      proj: float ``[T, D, B, 3H]`` input projections ``x_t W_in + b_in`` (gates r, z, n).
      mask: float ``[T, D, B, 1]``: 1 on real steps, 0 where the state must be held.
      w: float ``[D, H, 3H]`` recurrent kernels.
      b: float ``[D, 3H]`` recurrent biases.

    Returns:
      ``[T, D, B, H]`` in ``proj``'s dtype: the state after every step (zero initial state).
    """
    return _forward(proj, mask, w, b).astype(proj.dtype)


def _fwd(proj, mask, w, b):
    states = _forward(proj, mask, w, b)  # float32, kept for the backward pass
    return states.astype(proj.dtype), (proj, mask, w, b, states)


def _bwd(residuals, d_states):
    proj, mask, w, b, states = residuals
    prev = jnp.concatenate([jnp.zeros_like(states[:1]), states[:-1]], axis=0)  # h_{t-1}
    g = _matmul("tdbh,dhg->tdbg", prev, w) + b[None, :, None, :]
    r, z, n, gn = _gates(proj, g, prev)

    def step(dh, inputs):
        d_out, r, z, n, gn, prev, m = inputs
        dh = dh + d_out                        # dL/dh_t
        dn = dh * m * (1.0 - z)
        dz = dh * m * (prev - n)
        da_n = dn * (1.0 - n * n)
        da_z = dz * z * (1.0 - z)
        da_r = da_n * gn * r * (1.0 - r)
        dg = jnp.concatenate([da_r, da_z, da_n * r], axis=-1)   # dL/d(h_{t-1} w + b)
        dx = jnp.concatenate([da_r, da_z, da_n], axis=-1)       # dL/d proj_t
        dh_prev = dh * (1.0 - m * (1.0 - z)) + _matmul("dbg,dhg->dbh", dg, w)
        return dh_prev, dx

    inputs = (d_states.astype(jnp.float32), r, z, n, gn, prev, mask)
    _, d_proj = jax.lax.scan(step, jnp.zeros_like(states[0]), inputs, reverse=True)
    hidden = w.shape[1]
    d_g = jnp.concatenate([d_proj[..., :2 * hidden], d_proj[..., 2 * hidden:] * r], axis=-1)
    d_w = _matmul("tdbh,tdbg->dhg", prev, d_g.astype(w.dtype))
    d_b = jnp.sum(d_g, axis=(0, 2))
    return (d_proj.astype(proj.dtype), jnp.zeros_like(mask), d_w.astype(w.dtype),
            d_b.astype(b.dtype))


gru_recurrence.defvjp(_fwd, _bwd)
