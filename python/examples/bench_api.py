"""The loop of examples/bench_api.rs from Python: set a parameter by name, solve and
differentiate, K times; prints the same JSON (the binding's overhead, BENCHMARKS.md).

    python python/examples/bench_api.py examples/microactuator.toml thermal.k.polysilicon_layer 10
"""

import json
import sys
import time

import gradfem


def main(file, param, iterations):
    p = gradfem.Problem.from_toml(file)
    p.register(param)
    base = p.parameters[param]
    times, check = [], 0.0
    for i in range(iterations):
        t0 = time.perf_counter()
        p.set_parameters({param: base * (1.0 + 0.01 * (i % 2))})
        g = p.gradient()
        times.append(time.perf_counter() - t0)
        check += p.objective()
        assert param in g
    s = sorted(times)
    return {
        "side": "python",
        "file": file,
        "iterations": iterations,
        "min_s": s[0],
        "median_s": s[len(s) // 2],
        "sum_of_objectives": check,
    }


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1], sys.argv[2], int(sys.argv[3]))))
