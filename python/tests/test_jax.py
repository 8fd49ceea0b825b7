"""gradfem as a JAX function: reverse-mode derivatives equal the adjoint gradient and central
differences; composition with jax.jit and a JAX loss."""

import jax  # required: scripts/test.sh installs it
import jax.numpy as jnp
import numpy as np
import pytest

import gradfem
import gradfem.jax as gj


def test_jax_grad_is_the_adjoint_gradient(block):
    f = gj.function(block, inputs=["thermal.k.domain", "bc.zmax.h"], outputs=["mean_temperature"])
    k, h = jnp.float64(40.0), jnp.float64(150.0)
    gk, gh = jax.grad(lambda k, h: f(k, h)[0], argnums=(0, 1))(k, h)
    block.set_parameters({"thermal.k.domain": 40.0, "bc.zmax.h": 150.0})
    v = block.vjp({"mean_temperature": 1.0})
    assert abs(float(gk) - v["thermal.k.domain"]) <= 1e-12 * abs(v["thermal.k.domain"])
    assert abs(float(gh) - v["bc.zmax.h"]) <= 1e-12 * abs(v["bc.zmax.h"])
    # And central differences.
    eps = 1e-4 * 40.0
    fd = (float(f(k + eps, h)[0]) - float(f(k - eps, h)[0])) / (2 * eps)
    assert abs(float(gk) - fd) <= 1e-6 * abs(fd), (gk, fd)


def test_a_field_output_under_jit_with_a_jax_loss(block):
    f = gj.function(block, inputs=["thermal.k.domain"], outputs=["temperature"])
    target = 320.0

    @jax.jit
    def loss(k):
        (t,) = f(k)
        return jnp.mean((t - target) ** 2)

    k = jnp.float64(40.0)
    g = jax.grad(loss)(k)
    eps = 1e-3
    fd = (float(loss(k + eps)) - float(loss(k - eps))) / (2 * eps)
    assert abs(float(g) - fd) <= 1e-5 * abs(fd), (g, fd)


def test_unknown_outputs_and_wrong_arity_are_named(block):
    with pytest.raises(KeyError, match="'peak_temperature' is neither a field"):
        gj.function(block, inputs=["thermal.k.domain"], outputs=["peak_temperature"])
    f = gj.function(block, inputs=["thermal.k.domain"], outputs=["mean_temperature"])
    with pytest.raises(TypeError, match="expected 1 arrays"):
        f(1.0, 2.0)
    with pytest.raises(gradfem.ProblemError):
        gj.function(block, inputs=["thermal.k.nowhere"], outputs=["mean_temperature"])
