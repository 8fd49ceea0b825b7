"""A gradfem problem as a PyTorch function whose backward is gradfem's adjoint.

>>> import torch, gradfem, gradfem.torch
>>> p = gradfem.Problem.from_toml("examples/heat_sink.toml")
>>> f = gradfem.torch.function(p, inputs=["thermal.k.domain"], outputs=["mean_temperature"])
>>> k = torch.tensor(150.0, dtype=torch.float64, requires_grad=True)
>>> (t_mean,) = f(k)
>>> t_mean.backward()          # k.grad = d(mean T)/dk by one adjoint solve

Inputs are registered parameter names (scalars as 0-d tensors, per-element fields and node
coordinates as 1-d or (n, 3) tensors); outputs are quantity names (0-d tensors) or nodal
fields (``temperature``, ``displacement``). Every call solves at the inputs' values; every
backward is one vector-Jacobian product (no finite differences). Tensors are float64.
"""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np
import torch as _torch

from . import Problem

__all__ = ["function", "integrate"]


def function(problem: Problem, inputs: Sequence[str], outputs: Sequence[str]) -> Callable:
    """A callable ``f(*tensors) -> tuple of tensors`` differentiable by torch.autograd."""
    inputs = list(inputs)
    outputs = list(outputs)
    for name in inputs:
        problem.register(name)
    fields = set(problem.field_names)

    class _Fn(_torch.autograd.Function):
        @staticmethod
        def forward(ctx, *xs):
            problem.set_parameters(
                {n: x.detach().cpu().numpy().astype(np.float64) if x.dim() else float(x) for n, x in zip(inputs, xs)}
            )
            sol = problem.solve()
            ctx.shapes = [tuple(x.shape) for x in xs]
            ctx.values = [x.detach().clone() for x in xs]
            out = []
            for name in outputs:
                if name in fields:
                    out.append(_torch.as_tensor(np.array(sol.fields[name]), dtype=_torch.float64))
                elif name in sol.quantities:
                    out.append(_torch.tensor(sol.quantities[name], dtype=_torch.float64))
                else:
                    raise KeyError(
                        f"'{name}' is neither a field ({sorted(fields)}) nor a quantity "
                        f"({sorted(sol.quantities)}) of this problem"
                    )
            return tuple(out)

        @staticmethod
        def backward(ctx, *grads):
            # The adjoint at the parameters of this forward call (another call may have
            # changed them since).
            problem.set_parameters(
                {n: v.cpu().numpy().astype(np.float64) if v.dim() else float(v) for n, v in zip(inputs, ctx.values)}
            )
            cot = {}
            for name, g in zip(outputs, grads):
                if g is None:
                    continue
                cot[name] = g.detach().cpu().numpy().astype(np.float64) if name in fields else float(g)
            if not cot:
                return tuple(None for _ in inputs)
            v = problem.vjp(cot)
            result = []
            for name, shape in zip(inputs, ctx.shapes):
                d = np.asarray(v[name], dtype=np.float64).reshape(shape)
                result.append(_torch.as_tensor(d, dtype=_torch.float64))
            return tuple(result)

    def call(*xs):
        if len(xs) != len(inputs):
            raise TypeError(f"expected {len(inputs)} tensors ({', '.join(inputs)}), got {len(xs)}")
        return _Fn.apply(*xs)

    return call


def integrate(system, params, state0, dt: float, steps: int, method: str = "rk4"):
    """The trajectory of a :class:`gradfem.dynamics.System` as torch tensors, differentiable by
    the parameters in ``params`` (name -> 0-d tensor) and the initial state ``state0`` (field ->
    (n, width) tensor; fields left out start at rest): the backward is the discrete adjoint of
    the steps (one reverse sweep, no finite differences). Returns a dict of (steps + 1, n,
    width) float64 tensors: position, velocity, orientation, angular_velocity.

    >>> k = torch.tensor(1.0, dtype=torch.float64, requires_grad=True)
    >>> traj = gradfem.torch.integrate(s, {"spring.k": k}, {"position": r0}, 0.01, 300)
    >>> ((traj["position"] - observed) ** 2).sum().backward()     # k.grad
    """
    from .dynamics import FIELDS

    names = list(params)
    fields = [f for f in FIELDS if f in state0]
    unknown = set(state0) - set(FIELDS)
    if unknown:
        raise KeyError(f"state0: unknown fields {sorted(unknown)}; a state has {list(FIELDS)}")

    def numpy_state(xs):
        return {f: x.detach().cpu().numpy().astype(np.float64) for f, x in zip(fields, xs)}

    class _Fn(_torch.autograd.Function):
        @staticmethod
        def forward(ctx, *xs):
            p, s = xs[: len(names)], xs[len(names) :]
            values = {n: float(v) for n, v in zip(names, p)}
            system.set_parameters(values)
            x0 = numpy_state(s)
            traj = system.integrate(x0, dt, steps, method)
            ctx.values, ctx.x0 = values, x0
            return tuple(_torch.as_tensor(traj[f], dtype=_torch.float64) for f in FIELDS)

        @staticmethod
        def backward(ctx, *grads):
            # The adjoint at the parameters of this forward call (another may have changed them).
            system.set_parameters(ctx.values)
            cot = {f: g.detach().cpu().numpy().astype(np.float64) for f, g in zip(FIELDS, grads) if g is not None}
            dp, dx0 = system.vjp(ctx.x0, dt, steps, cot, method)
            out = [_torch.tensor(dp[n], dtype=_torch.float64) for n in names]
            out += [_torch.as_tensor(dx0[f], dtype=_torch.float64) for f in fields]
            return tuple(out)

    tensors = [params[n] for n in names] + [state0[f] for f in fields]
    return dict(zip(FIELDS, _Fn.apply(*tensors)))
