#!/usr/bin/env python3
"""Compare J and every gradient of the shipped problem files between two gradfem binaries.

    python3 scripts/compare_gradients.py OLD_BINARY NEW_BINARY [PROBLEM.toml ...]

Runs `gradfem gradient FILE -o DIR --quiet` with both binaries on every problem file given
(default: every examples/*.toml that registers a parameter), reads both gradients.json and
prints a Markdown table: J of each, the largest relative difference of J and of any gradient
entry (relative to the largest magnitude of that parameter's gradient), and the parameter
where it occurs. Exits 1 when a difference exceeds --tol (default 1e-10). A refactoring that
must not change results runs it against the build before the change.
"""

import argparse
import json
import pathlib
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parent.parent


def gradients(binary, problem, out):
    subprocess.run(
        [binary, "gradient", str(problem), "-o", str(out), "--quiet"],
        check=True,
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
    )
    return json.loads((out / "gradients.json").read_text())


def flat(v):
    return v if isinstance(v, list) else [v]


def compare(old, new):
    j0, j1 = old["objective"], new["objective"]
    dj = abs(j0 - j1) / max(abs(j0), 1e-300)
    worst, where = 0.0, ""
    for name, g0 in old["gradients"].items():
        g0 = flat(g0)
        g1 = flat(new["gradients"].get(name, []))
        if len(g0) != len(g1):
            return dj, float("inf"), f"{name} (length {len(g0)} vs {len(g1)})"
        scale = max((abs(x) for x in g0), default=0.0)
        if scale == 0.0:
            d = max((abs(y) for y in g1), default=0.0)
        else:
            d = max(abs(x - y) for x, y in zip(g0, g1)) / scale
        if d > worst:
            worst, where = d, name
    return dj, worst, where


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("old")
    ap.add_argument("new")
    ap.add_argument("problems", nargs="*")
    ap.add_argument("--tol", type=float, default=1e-10)
    args = ap.parse_args()
    problems = [pathlib.Path(p) for p in args.problems] or [
        p for p in sorted((ROOT / "examples").glob("*.toml")) if "register" in p.read_text()
        and "[[experiment]]" not in p.read_text() and "[model]" not in p.read_text()
    ]
    print("| problem | J before | J after | rel. diff. J | max rel. diff. of a gradient | where |")
    print("|---|---|---|---|---|---|")
    bad = False
    for p in problems:
        with tempfile.TemporaryDirectory() as d:
            d = pathlib.Path(d)
            try:
                old = gradients(args.old, p, d / "old")
                new = gradients(args.new, p, d / "new")
            except subprocess.CalledProcessError as e:
                print(f"| {p.name} | failed: {e} | | | | |")
                bad = True
                continue
        dj, dg, where = compare(old, new)
        bad |= dj > args.tol or dg > args.tol
        print(
            f"| {p.name} | {old['objective']:.12g} | {new['objective']:.12g} | {dj:.1e} "
            f"| {dg:.1e} | {where} |"
        )
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
