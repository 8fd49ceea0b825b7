"""The Python package against the CLI and against central differences."""

import json
import os
import subprocess

import numpy as np
import pytest

import gradfem


def gradfem_binary(root):
    exe = os.environ.get("GRADFEM_BIN", str(root / "target" / "release" / "gradfem"))
    assert os.path.exists(exe), f"{exe}: build gradfem first (bash scripts/test.sh does)"
    return exe


@pytest.mark.parametrize(
    "example",
    ["microactuator.toml", "microactuator_electrothermal.toml", "rubber_pad.toml", "heat_sink.toml"],
)
def test_the_gradient_is_the_cli_gradient(root, tmp_path, example):
    """gradients.json of `gradfem gradient` and Problem.gradient() agree to 1e-12: thermal,
    electro-thermal, the whole chain and finite strain."""
    toml = root / "examples" / example
    out = subprocess.run(
        [gradfem_binary(root), "--quiet", "gradient", str(toml), "-o", str(tmp_path), "--json"],
        check=True,
        capture_output=True,
        text=True,
    )
    cli = json.loads(out.stdout)
    p = gradfem.Problem.from_toml(toml)
    sol = p.solve()
    if "displacement" in sol.fields:
        assert sol.fields["displacement"].shape == (p.points.shape[0], 3)
    assert abs(sol.quantities["objective"] - cli["objective"]) <= 1e-12 * abs(cli["objective"])
    g = p.gradient()
    assert sorted(g) == sorted(cli["gradients"])
    for name, value in g.items():
        ref = np.asarray(cli["gradients"][name], dtype=np.float64)
        assert np.all(np.abs(value - ref) <= 1e-12 * np.abs(ref)), (name, value, ref)


@pytest.mark.parametrize("example", ["microactuator_electrothermal.toml", "rubber_pad.toml"])
def test_taylor_tests_from_python(root, example):
    """The Taylor test through the electro-thermal coupling and through finite-strain load
    steps, run from Python."""
    p = gradfem.Problem.from_toml(root / "examples" / example)
    t = p.taylor_test()
    assert t["passed"], t["table"]


def test_a_temperature_cotangent_matches_central_differences(block):
    sol = block.solve()
    n = block.points.shape[0]
    w = np.sin(np.arange(n))
    v = block.vjp({"temperature": w})
    x0 = block.parameters

    def pairing(name, value):
        block.set_parameters({name: value})
        t = block.solve().fields["temperature"]
        return float(np.nansum(w * t))

    for name, value in x0.items():
        h = 1e-5 * abs(value)
        fd = (pairing(name, value + h) - pairing(name, value - h)) / (2 * h)
        block.set_parameters({name: value})
        assert abs(v[name] - fd) <= 1e-6 * abs(fd), (name, v[name], fd)
    # the objective itself as a cotangent is the gradient
    g = block.gradient()
    j = block.vjp({"objective": 1.0})
    for name in g:
        assert abs(g[name] - j[name]) <= 1e-12 * abs(g[name])
    assert sol.quantities["mean_temperature"] == pytest.approx(block.objective(), rel=1e-12)


def test_a_region_is_scalar_or_per_element(block):
    with pytest.raises(gradfem.ProblemError, match="either one scalar"):
        block.register("thermal.k_elem.domain")


def test_per_element_values_round_trip(field_block):
    p = field_block
    k = p.parameters["thermal.k_elem.domain"]
    assert isinstance(k, np.ndarray) and np.all(k == 40.0)
    j1 = p.objective()
    p.set_parameters({"thermal.k_elem.domain": 2.0 * k})
    j2 = p.objective()
    assert j2 < j1
    g = p.gradient()["thermal.k_elem.domain"]
    assert g.shape == k.shape and np.all(g < 0)
    with pytest.raises(gradfem.ProblemError, match=f"takes {k.size} value"):
        p.set_parameters({"thermal.k_elem.domain": k[:3]})


def test_errors_name_the_file_and_line(root):
    bad = '[mesh]\nbox = { lengths = [1, 1, 1], divisions = [1, 1, 1], cell = "tet4" }\n\n[[thermal.material]]\ngroup = "nowhere"\nk = 1.0\n'
    with pytest.raises(gradfem.ProblemError, match=r"bad\.toml:5:9: unknown group 'nowhere'"):
        gradfem.Problem.from_string(bad, "bad.toml")
    ok = bad.replace("nowhere", "domain") + '\n[[thermal.bc]]\ngroup = "xmin"\nkind = "temperature"\nvalue = 300.0\n'
    p = gradfem.Problem.from_string(ok, "ok.toml")
    with pytest.raises(gradfem.ProblemError, match="it has: objective, mean_temperature"):
        p.vjp({"max_temperature": 1.0})


def test_the_taylor_test_passes(block):
    t = block.taylor_test()
    assert t["passed"], t["table"]
    assert min(t["rates"][:3]) > 1.9


def test_the_gil_is_released_while_gradfem_works(root):
    """Another Python thread runs while a Taylor test (several solves) is under way."""
    import threading
    import time

    result = {}

    def work():
        try:
            p = gradfem.Problem.from_toml(root / "examples" / "rubber_pad.toml")
            result["passed"] = p.taylor_test()["passed"]
        finally:
            done.set()

    done = threading.Event()
    worker = threading.Thread(target=work)
    ticks = 0
    worker.start()
    while not done.is_set() and ticks < 100_000:
        time.sleep(0.001)
        ticks += 1
    worker.join()
    assert result.get("passed"), result
    assert ticks > 20, ticks


def test_a_problem_is_shared_between_threads(block):
    """Calls from several threads are serialized and see one problem."""
    import threading

    j = block.objective()
    results, errors = [], []

    def use():
        try:
            results.append(block.objective())
            results.append(block.gradient()["thermal.k.domain"])
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=use) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    g = block.gradient()["thermal.k.domain"]
    assert sorted(set(results)) == sorted({j, g})
