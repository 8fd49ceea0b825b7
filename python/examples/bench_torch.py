"""A torch forward + backward through gradfem against the plain gradient() call on the same
problem (the cost of the PyTorch bridge, BENCHMARKS.md): K iterations each, fastest and median.

    python python/examples/bench_torch.py examples/microactuator.toml thermal.k.polysilicon_layer tip_displacement.y 8
"""

import json
import sys
import time

import torch

import gradfem
import gradfem.torch as gt


def main(file, param, output, iterations):
    p = gradfem.Problem.from_toml(file)
    p.register(param)
    base = p.parameters[param]
    f = gt.function(p, inputs=[param], outputs=[output])
    torch_times, plain_times = [], []
    for i in range(iterations):
        value = base * (1.0 + 0.01 * (i % 2))
        t0 = time.perf_counter()
        x = torch.tensor(value, dtype=torch.float64, requires_grad=True)
        (y,) = f(x)
        y.backward()
        torch_times.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        p.set_parameters({param: value * (1.0 + 1e-3)})
        p.gradient()
        plain_times.append(time.perf_counter() - t0)
    ts, ps = sorted(torch_times), sorted(plain_times)
    return {
        "file": file,
        "iterations": iterations,
        "torch_min_s": ts[0],
        "torch_median_s": ts[len(ts) // 2],
        "gradient_min_s": ps[0],
        "gradient_median_s": ps[len(ps) // 2],
    }


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]))))
