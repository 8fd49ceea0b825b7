"""Particle and rigid-body dynamics with exact discrete adjoints.

A :class:`System` holds bodies (particles and rigid bodies), force laws (springs, dampers,
ground and sphere contact with friction) and gravity; any coefficient is a number or the name
of a registered parameter (dotted names such as ``material.youngs_modulus``). A state is a
dict of float64 arrays: ``position``, ``velocity``, ``angular_velocity`` (n, 3) and
``orientation`` (n, 4) unit quaternions (w, x, y, z); fields left out start at rest with the
identity orientation. :meth:`System.integrate` steps it with explicit Euler, RK4 or velocity
Verlet and returns the trajectory (each field an (N + 1, n, width) array);
:meth:`System.vjp` gives the gradient of ⟨cotangent, trajectory⟩ by every parameter and by the
initial state through the discrete adjoint of the steps (exact to rounding).
:func:`gradfem.torch.integrate` makes it a PyTorch function.

>>> import gradfem.dynamics as gd
>>> s = gd.System()
>>> s.param("spring.k", 4.0, lower=0.0)
>>> b = s.add_particle(1.0)
>>> s.add_spring(b, [0.0, 0.0, 0.0], k="spring.k", rest_length=0.5)
>>> traj = s.integrate({"position": [[1.2, 0.0, 0.0]]}, dt=0.01, steps=100)
>>> traj["position"].shape
(101, 1, 3)
"""

from __future__ import annotations

from typing import Dict, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

from ._gradfem import Dynamics as _Dynamics

__all__ = ["System", "METHODS", "FIELDS"]

#: The integrators by name.
METHODS = ("explicit_euler", "rk4", "velocity_verlet")
#: The fields of a state and their widths.
FIELDS = {"position": 3, "velocity": 3, "orientation": 4, "angular_velocity": 3}

Coefficient = Union[float, str]
Anchor = Union[int, Sequence[float]]


def _arrays(d: Optional[Mapping]) -> Dict[str, np.ndarray]:
    return {k: np.asarray(v, dtype=np.float64) for k, v in dict(d or {}).items()}


class System:
    """Bodies, force laws and registered parameters (see the module docs).

    ``gravity`` is the acceleration (x, y, z) added to every body [m/s²].
    """

    def __init__(self, gravity: Sequence[float] = (0.0, 0.0, 0.0)):
        self._s = _Dynamics(list(map(float, gravity)))

    def param(self, name: str, value: float, lower: Optional[float] = None, upper: Optional[float] = None) -> None:
        """Register the scalar parameter ``name`` (bounds optional); coefficients may name it."""
        self._s.param(name, float(value), lower, upper)

    def add_particle(self, mass: Coefficient) -> int:
        """A particle; returns its index."""
        return self._s.add_particle(mass)

    def add_rigid_body(self, mass: Coefficient, inertia: Sequence[Coefficient]) -> int:
        """A rigid body with principal moments of inertia (body axes = its orientation)."""
        return self._s.add_rigid_body(mass, list(inertia))

    def add_spring(self, a: Anchor, b: Anchor, k: Coefficient, rest_length: Coefficient) -> None:
        """A linear spring between bodies or fixed points: F_a = −k (ℓ − L) d/ℓ, d = r_a − r_b."""
        self._s.add_spring(a, b, k, rest_length)

    def add_damper(self, a: Anchor, b: Anchor, c: Coefficient) -> None:
        """A linear damper between bodies or points at rest: F_a = −c (v_a − v_b)."""
        self._s.add_damper(a, b, c)

    def add_ground(
        self,
        spheres: Sequence[Tuple[int, float]],
        normal: Sequence[float],
        height: float,
        stiffness: Coefficient,
        friction: Coefficient,
        smoothing: Coefficient,
        slip_velocity: float = 1e-3,
    ) -> None:
        """Soft contact of spheres (body, radius) with the plane n · r = height, with friction."""
        self._s.add_ground(list(spheres), list(normal), height, stiffness, friction, smoothing, slip_velocity)

    def add_sphere_contact(
        self,
        spheres: Sequence[Tuple[int, float]],
        stiffness: Coefficient,
        friction: Coefficient,
        smoothing: Coefficient,
        slip_velocity: float = 1e-3,
    ) -> None:
        """Soft contact between spheres (body, radius), with friction."""
        self._s.add_sphere_contact(list(spheres), stiffness, friction, smoothing, slip_velocity)

    @property
    def n_bodies(self) -> int:
        """Number of bodies."""
        return self._s.n_bodies

    @property
    def parameters(self) -> Dict[str, float]:
        """Registered parameters and their values."""
        return dict(self._s.parameters)

    def set_parameters(self, values: Mapping[str, float]) -> None:
        """Set registered parameters by name (within their bounds)."""
        self._s.set_parameters({k: float(v) for k, v in values.items()})

    def integrate(self, state0: Mapping, dt: float, steps: int, method: str = "rk4") -> Dict[str, np.ndarray]:
        """The trajectory from ``state0``: each field an (steps + 1, n, width) array."""
        return dict(self._s.integrate(_arrays(state0), float(dt), int(steps), method))

    def vjp(
        self,
        state0: Mapping,
        dt: float,
        steps: int,
        cotangent: Mapping,
        method: str = "rk4",
    ) -> Tuple[Dict[str, float], Dict[str, np.ndarray]]:
        """(d⟨w, trajectory⟩/dp by parameter, d⟨w, trajectory⟩/dstate0 by field) for a
        cotangent w on the trajectory (fields left out are zero)."""
        params, x0 = self._s.vjp(_arrays(state0), float(dt), int(steps), _arrays(cotangent), method)
        return dict(params), dict(x0)

    def __repr__(self) -> str:
        return repr(self._s)
