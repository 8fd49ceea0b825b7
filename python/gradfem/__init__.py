"""gradfem from Python: differentiable multiphysics finite elements.

A :class:`Problem` is set up from a problem file (``docs/problem-file.md``) or its text; it
solves, reads fields and quantities, changes any registered parameter by name and solves
again, and differentiates: the gradient of the objective, the vector-Jacobian product of any
output field or quantity, and the Taylor test. :mod:`gradfem.torch` makes a problem a PyTorch
function whose backward is gradfem's adjoint.

>>> import gradfem
>>> p = gradfem.Problem.from_toml("examples/microactuator.toml")
>>> sol = p.solve()
>>> sol.quantities["tip_displacement.y"]           # doctest: +SKIP
-1.454275e-06
>>> g = p.gradient()                                # registered name -> float or array
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

from ._gradfem import Error, MeshError, ProblemError, SolverError
from ._gradfem import Problem as _Problem

__all__ = ["Problem", "Solution", "Error", "ProblemError", "MeshError", "SolverError"]

Value = Union[float, np.ndarray]


@dataclass(frozen=True)
class Solution:
    """The outputs of a solve: quantities (SI units) and nodal fields (float64 arrays)."""

    quantities: Dict[str, float]
    fields: Dict[str, np.ndarray]


class Problem:
    """A problem set up and ready to solve and differentiate.

    Parameters are the registered names of ``[parameters] register`` (e.g.
    ``thermal.k.polysilicon_layer``); setting one that is not registered registers it.
    """

    def __init__(self, inner: _Problem):
        self._p = inner

    @classmethod
    def from_toml(cls, path: Union[str, Path]) -> "Problem":
        """Read and set up a problem file."""
        return cls(_Problem.from_toml(Path(path)))

    @classmethod
    def from_string(cls, text: str, path: Union[str, Path] = "problem.toml") -> "Problem":
        """Set up problem-file text; ``path`` names it in errors and anchors relative paths."""
        return cls(_Problem.from_string(text, Path(path)))

    @classmethod
    def from_dict(
        cls,
        tables: Mapping,
        *,
        mesh: Optional[Mapping] = None,
        name: str = "model",
        base_dir: Union[str, Path] = ".",
    ) -> "Problem":
        """Set up a problem built in code: ``tables`` are the tables of a problem file as a
        dict (the keys and values of ``docs/problem-file.md``), and ``mesh``, instead of a
        ``[mesh]`` table, a mesh from arrays::

            mesh = {
                "points": points,                       # (n, 3) float, metres
                "cells": {"tet4": tets, "tri3": tris},  # (m, nodes per cell) int, 0-based
                "groups": {"domain": ("tet4", range(len(tets))), "base": ("tri3", [0, 1])},
            }

        Errors name the key (``tables.thermal.material[0].k``) or the array and its shape.
        """
        kwargs = {}
        if mesh is not None:
            unknown = set(mesh) - {"points", "cells", "groups"}
            if unknown:
                raise ProblemError(f"mesh: unknown keys {sorted(unknown)}; expected points, cells, groups")
            groups = {k: (t, [int(i) for i in idx]) for k, (t, idx) in dict(mesh.get("groups", {})).items()}
            kwargs = dict(points=mesh.get("points"), cells=dict(mesh.get("cells", {})), groups=groups)
        return cls(_Problem.from_dict(dict(tables), name, Path(base_dir), **kwargs))

    def solve(self) -> Solution:
        """Solve the forward problem (all fields, load or time steps)."""
        q, f = self._p.solve()
        return Solution(quantities=dict(q), fields=dict(f))

    def objective(self) -> float:
        """The objective J at the current parameters."""
        return self._p.objective()

    @property
    def parameters(self) -> Dict[str, Value]:
        """Registered parameters: name -> float (scalar) or float64 array."""
        return dict(self._p.parameters)

    @property
    def parameter_bounds(self) -> Dict[str, Tuple[Optional[float], Optional[float]]]:
        """(lower, upper) of every registered parameter, None where unbounded."""
        return dict(self._p.parameter_bounds)

    @property
    def available_parameters(self) -> list:
        """Every parameter name the problem can register."""
        return list(self._p.available_parameters)

    @property
    def field_names(self) -> list:
        """The nodal fields of the problem (``temperature``, ``potential``, ``displacement``)."""
        return list(self._p.field_names)

    @property
    def differentiable_quantities(self) -> list:
        """The quantities a cotangent of :meth:`vjp` may weigh."""
        return list(self._p.differentiable_quantities)

    @property
    def points(self) -> np.ndarray:
        """Node coordinates, (n_nodes, 3) [m]."""
        return self._p.points

    def register(self, name: str) -> None:
        """Differentiate by the parameter ``name`` from now on."""
        self._p.register(name)

    def set_parameters(self, values: Mapping[str, Value]) -> None:
        """Set parameters by name; the next output solves again on the same set-up."""
        self._p.set_parameters(dict(values))

    def gradient(self) -> Dict[str, Value]:
        """dJ/dp by every registered parameter (one adjoint solve), like gradients.json."""
        return dict(self._p.gradient())

    def vjp(self, cotangent: Mapping[str, Value]) -> Dict[str, Value]:
        """d<w, outputs>/dp for a cotangent on nodal fields (arrays) and quantities (floats)."""
        return dict(self._p.vjp(dict(cotangent)))

    def hvp(self, direction: Mapping[str, Value]) -> Dict[str, Value]:
        """H·δp: the Hessian of the objective applied to ``direction`` (name -> float or
        array; names left out are zero), exact by one tangent-linear and one second-order
        adjoint solves; a dict like ``gradient``. So far for steady thermal, electro-thermal
        and linear thermo-elastic problems (others raise ``gradfem.SolverError`` saying
        so)."""
        return dict(self._p.hvp(dict(direction)))

    def hessian(self) -> np.ndarray:
        """The dense Hessian, an (n, n) array over every registered entry in the order of
        ``parameters`` flattened (one ``hvp`` per entry: for up to a few hundred)."""
        return self._p.hessian()

    def scipy_objective(self, names: Optional[Sequence[str]] = None):
        """``(fun, jac, x0, bounds)`` for ``scipy.optimize.minimize`` over the parameters
        ``names`` (default: every registered one), flattened in that order; ``fun`` and
        ``jac`` solve at x (one forward and one adjoint solve per new x).

        >>> fun, jac, x0, bounds = p.scipy_objective(["thermal.k.domain"])   # doctest: +SKIP
        >>> scipy.optimize.minimize(fun, x0, jac=jac, bounds=bounds, method="L-BFGS-B")
        """
        fun, jac, _, x0, bounds = self.scipy_objective_with_hessp(names)
        return fun, jac, x0, bounds

    def scipy_objective_with_hessp(self, names: Optional[Sequence[str]] = None):
        """``(fun, jac, hessp, x0, bounds)``: ``scipy_objective`` and the exact Hessian-vector
        product ``hessp(x, v)`` (second-order adjoint, see ``hvp``) for SciPy's second-order
        methods (``Newton-CG``, ``trust-krylov``, ``trust-constr``); all three share the solve
        at x.

        >>> fun, jac, hessp, x0, _ = p.scipy_objective_with_hessp()   # doctest: +SKIP
        >>> scipy.optimize.minimize(fun, x0, jac=jac, hessp=hessp, method="trust-krylov")
        """
        names = list(names) if names is not None else list(self.parameters)
        for n in names:
            self.register(n)
        start = self.parameters
        sizes = [np.size(start[n]) for n in names]
        scalar = [np.ndim(start[n]) == 0 for n in names]
        shapes = [np.shape(start[n]) for n in names]
        x0 = np.concatenate([np.ravel(np.asarray(start[n], dtype=np.float64)) for n in names])
        all_bounds = self.parameter_bounds
        bounds = [all_bounds[n] for n, k in zip(names, sizes) for _ in range(k)]
        cache: Dict[str, object] = {}

        def split(x):
            values, i = {}, 0
            for n, k, sc, sh in zip(names, sizes, scalar, shapes):
                values[n] = float(x[i]) if sc else x[i : i + k].reshape(sh)
                i += k
            return values

        def flat(d):
            return np.concatenate([np.ravel(np.asarray(d[n], dtype=np.float64)) for n in names])

        def at(x):
            x = np.asarray(x, dtype=np.float64)
            key = x.tobytes()
            if cache.get("x") != key:
                self.set_parameters(split(x))
                g = self.gradient()
                cache["x"] = key
                cache["f"] = self.objective()
                cache["g"] = flat(g)
            return cache

        def hessp(x, v):
            at(x)
            return flat(self.hvp(split(np.asarray(v, dtype=np.float64))))

        return (lambda x: at(x)["f"]), (lambda x: at(x)["g"].copy()), hessp, x0, bounds

    def taylor_test(self) -> dict:
        """The Taylor test over every registered parameter (rates, ``passed``, the table)."""
        return dict(self._p.taylor_test())

    def write_results(self, directory: Union[str, Path]) -> Path:
        """Write results.xdmf and results.h5 into ``directory``."""
        return Path(self._p.write_results(Path(directory)))

    def __repr__(self) -> str:
        return repr(self._p)
