"""A gradfem problem as a JAX function whose reverse-mode derivative is gradfem's adjoint.

>>> import jax, jax.numpy as jnp, gradfem, gradfem.jax
>>> p = gradfem.Problem.from_toml("examples/heat_sink.toml")
>>> f = gradfem.jax.function(p, inputs=["thermal.k.domain"], outputs=["mean_temperature"])
>>> jax.grad(lambda k: f(k)[0])(jnp.float64(150.0))     # one adjoint solve

The forward pass and the vector-Jacobian product run on the host through
``jax.pure_callback`` (gradfem's solvers are not JAX primitives), so ``f`` composes with
``jax.grad``, ``jax.vjp`` and optimizers, and inside ``jax.jit`` it calls back to the host; it
is not batched by ``jax.vmap`` (use a loop) and has no forward-mode derivative (``jax.jvp``).
Inputs and outputs are as in :func:`gradfem.torch.function`. gradfem computes in float64:
importing this module turns on JAX's 64-bit mode (``jax_enable_x64``).
"""

from __future__ import annotations

from typing import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from . import Problem

jax.config.update("jax_enable_x64", True)

__all__ = ["function"]


def function(problem: Problem, inputs: Sequence[str], outputs: Sequence[str]) -> Callable:
    """A JAX-differentiable ``f(*arrays) -> tuple of arrays`` (reverse mode by the adjoint)."""
    inputs = list(inputs)
    outputs = list(outputs)
    for name in inputs:
        problem.register(name)
    fields = set(problem.field_names)
    n_nodes = len(problem.points)
    quantities = set(problem.solve().quantities)
    for name in outputs:
        if name not in fields and name not in quantities:
            raise KeyError(
                f"'{name}' is neither a field ({sorted(fields)}) nor a quantity ({sorted(quantities)}) of this problem"
            )

    def shape_of(name):
        if name == "displacement":
            return (n_nodes, 3)
        return (n_nodes,) if name in fields else ()

    out_specs = tuple(jax.ShapeDtypeStruct(shape_of(n), jnp.float64) for n in outputs)

    def set_inputs(xs):
        problem.set_parameters(
            {n: float(x) if np.ndim(x) == 0 else np.asarray(x, dtype=np.float64) for n, x in zip(inputs, xs)}
        )

    def host_forward(*xs):
        set_inputs(xs)
        sol = problem.solve()
        return tuple(
            np.asarray(sol.fields[n] if n in fields else sol.quantities[n], dtype=np.float64).reshape(shape_of(n))
            for n in outputs
        )

    def host_vjp(*args):
        xs, gs = args[: len(inputs)], args[len(inputs) :]
        set_inputs(xs)
        cot = {n: np.asarray(g, dtype=np.float64) if n in fields else float(g) for n, g in zip(outputs, gs)}
        v = problem.vjp(cot)
        return tuple(np.asarray(v[n], dtype=np.float64).reshape(np.shape(x)) for n, x in zip(inputs, xs))

    @jax.custom_vjp
    def f(*xs):
        return jax.pure_callback(host_forward, out_specs, *xs)

    def f_fwd(*xs):
        return f(*xs), xs

    def f_bwd(xs, gs):
        specs = tuple(jax.ShapeDtypeStruct(jnp.shape(x), jnp.float64) for x in xs)
        return jax.pure_callback(host_vjp, specs, *xs, *gs)

    f.defvjp(f_fwd, f_bwd)

    def call(*xs):
        if len(xs) != len(inputs):
            raise TypeError(f"expected {len(inputs)} arrays ({', '.join(inputs)}), got {len(xs)}")
        return f(*(jnp.asarray(x, dtype=jnp.float64) for x in xs))

    return call
