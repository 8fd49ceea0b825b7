"""Ctrl-C stops a long solve or gradient promptly with KeyboardInterrupt, and the problem is
whole afterwards: the next solve and gradient equal those of a problem never interrupted."""

import _thread
import signal
import threading
import time

import numpy as np
import pytest

import gradfem
import gradfem.dynamics as gd
from problems import BLOCK

TRANSIENT = """
[transient]
dt = 0.01
steps = {steps}
scheme = "implicit_euler"
heat_capacity = [{{ group = "domain", rho_c = 3.6e6 }}]
checkpoints = 4
output_every = 1000000
"""


def transient(steps):
    return gradfem.Problem.from_string(BLOCK + TRANSIENT.format(steps=steps))


def interrupted(call, after):
    """Runs call() with a SIGINT delivered `after` seconds in; returns the seconds it took to
    raise KeyboardInterrupt. Python's own SIGINT handler is put in place for the call: a process
    started in the background of a shell without job control inherits SIGINT ignored, and then
    neither Ctrl-C nor `_thread.interrupt_main` reaches Python."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    timer = threading.Timer(after, _thread.interrupt_main)
    start = time.perf_counter()
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            call()
    finally:
        timer.cancel()
        signal.signal(signal.SIGINT, previous)
    return time.perf_counter() - start


def test_ctrl_c_stops_a_long_transient_solve_promptly():
    # 10⁶ steps take about a minute; the stop comes at the next step after the signal.
    p = transient(1_000_000)
    took = interrupted(p.solve, after=0.3)
    assert took < 5.0, took


def test_the_problem_is_whole_after_an_interrupted_gradient():
    # 6000 steps: the solve takes about 0.15 s, the checkpointed adjoint about 1 s more, so the
    # signal at 0.2 s stops the adjoint with a wide margin either way.
    p, fresh = transient(6000), transient(6000)
    interrupted(p.gradient, after=0.2)
    assert p.solve().quantities == fresh.solve().quantities
    g, g_fresh = p.gradient(), fresh.gradient()
    assert g.keys() == g_fresh.keys()
    for name in g:
        assert np.array_equal(np.asarray(g[name]), np.asarray(g_fresh[name])), name


def test_ctrl_c_stops_a_long_trajectory_and_the_next_one_runs():
    s = gd.System()
    s.param("spring.k", 4.0)
    b = s.add_particle(1.0)
    s.add_spring(b, [0.0, 0.0, 0.0], k="spring.k", rest_length=0.5)
    x0 = {"position": [[0.8, 0.0, 0.0]]}
    # 2·10⁶ states of one particle: about 3 s to integrate, a stop within one step.
    took = interrupted(lambda: s.integrate(x0, dt=1e-4, steps=2_000_000, method="rk4"), 0.2)
    assert took < 1.5, took
    traj = s.integrate(x0, dt=1e-3, steps=100, method="rk4")
    assert traj["position"].shape == (101, 1, 3)
