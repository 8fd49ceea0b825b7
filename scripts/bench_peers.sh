#!/usr/bin/env bash
# gradfem beside its peers on the three benchmark problems, in one run, and the side-by-side
# table written into BENCHMARKS.md (between the `peers:begin` and `peers:end` markers).
#
#   scripts/bench_peers.sh VENV [CASES...]
#     VENV   the peers' Python environment (created and filled by the peers' run.sh when it does
#            not exist: torch is a few GB, keep it outside the repository)
#     CASES  BENCH:N (default: heat3d:46 heat3d:79 elastic3d:31 elastic3d:54 ogden3d:14 ogden3d:31)
#   PEERS_DIR (environment) the peers' scripts, default ../shared/peers beside the repository.
#   NO_WRITE=1 prints the table without touching BENCHMARKS.md.
#
# gradfem's examples bench_thermal, bench_elastic and bench_ogden solve exactly the peers'
# problems (the Kuhn-split unit cube, _common.py); each is run twice and the faster
# forward + gradient is kept, as the peers keep the faster of their two repetitions. Set-up
# (mesh, model, pattern) is excluded on both sides. Compare ratios from one run, not absolute
# times: the machine is shared.
set -euo pipefail
cd "$(dirname "$0")/.."
venv="${1:?usage: scripts/bench_peers.sh VENV [BENCH:N ...]}"
shift
cases=("$@")
[ ${#cases[@]} -gt 0 ] || cases=(heat3d:46 heat3d:79 elastic3d:31 elastic3d:54 ogden3d:14 ogden3d:31)
peers="${PEERS_DIR:-$(pwd)/../shared/peers}"
[ -x "$peers/run.sh" ] || { echo "no peers' run.sh in $peers (set PEERS_DIR)" >&2; exit 1; }

cargo build --release --quiet --example bench_thermal --example bench_elastic --example bench_ogden
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
for c in "${cases[@]}"; do
  bench="${c%%:*}"
  n="${c##*:}"
  case "$bench" in
    heat3d) example=bench_thermal ;;
    elastic3d) example=bench_elastic ;;
    ogden3d) example=bench_ogden ;;
    *) echo "unknown benchmark $bench (heat3d, elastic3d, ogden3d)" >&2; exit 1 ;;
  esac
  echo "== $bench N=$n" >&2
  for r in 1 2; do
    ./target/release/examples/$example --n "$n" | sed "s/^/{\"gradfem_bench\": \"$bench\", /; s/^\({[^{]*\){/\1/" \
      >> "$out/gradfem.jsonl"
  done
  "$peers/run.sh" "$venv" "$bench" "$n" | grep '^{' | sed "s/^{/{\"peer_bench\": \"$bench\", \"peer_n\": $n, /" \
    >> "$out/peers.jsonl" || echo "peers failed on $bench N=$n" >&2
done

python3 - "$out" <<'PY'
import datetime, json, os, platform, re, sys

out = sys.argv[1]
def lines(name):
    path = os.path.join(out, name)
    return [json.loads(l) for l in open(path)] if os.path.exists(path) else []

ours = {}
for d in lines("gradfem.jsonl"):
    bench = d["gradfem_bench"]
    total = d.get("forward_gradient_s") if bench == "ogden3d" else d["forward_s"] + d["gradient_s"]
    d["total"] = total
    key = (bench, d["n"])
    if key not in ours or total < ours[key]["total"]:
        ours[key] = d
peers = {}
for d in lines("peers.jsonl"):
    peers.setdefault((d["peer_bench"], d["peer_n"]), []).append(d)

objective = {"heat3d": ("J", "J"), "elastic3d": ("J", "compliance"), "ogden3d": ("L", "L")}
rows = []
for (bench, n), g in ours.items():
    ps = [p for p in peers.get((bench, n), []) if "total_s" in p]
    best = min(ps, key=lambda p: p["total_s"]) if ps else None
    ours_key, peer_key = objective[bench]
    j, pj = g[ours_key], (best or {}).get(peer_key)
    forward = g["forward_s"]
    gradient = g["gradient_s"]
    others = ", ".join(f"{p['peer']} {p['total_s']:.3g} s" for p in ps if p is not best)
    rows.append(
        f"| {bench} | {n} | {g['unknowns']:,} | {g.get('linear_solver', 'cholesky/amg-cg (Newton)')} "
        f"| {g['total']:.3g} s | {gradient / forward:.2f} | {g['peak_rss_mb']:.0f} MB "
        + (f"| {best['peer']} {best['total_s']:.3g} s | {best['peak_rss_mb']:.0f} MB "
           f"| **{best['total_s'] / g['total']:.1f}×** | {abs(j - pj) / abs(pj):.1e} | {others or '—'} |"
           if best else "| — | — | — | — | — |"))
rows.sort()
load = os.getloadavg()
table = "\n".join([
    f"Measured {datetime.date.today().isoformat()} by `scripts/bench_peers.sh VENV` in one run "
    f"(load average at the end {load[0]:.1f}; {platform.node()}). Forward + gradient seconds, "
    "set-up excluded, the faster of two repetitions on both sides; ratio = fastest peer / "
    "gradfem; ΔJ = |J − J_peer| / |J_peer| (the peers print 6 significant digits).",
    "",
    "| problem | N | unknowns | gradfem solver | gradfem forward + gradient | gradient / forward "
    "| gradfem peak RSS | fastest peer | peer peak RSS | ratio | ΔJ | other peers |",
    "|---|---|---|---|---|---|---|---|---|---|---|---|",
    *rows,
])
print(table)
if os.environ.get("NO_WRITE") != "1":
    text = open("BENCHMARKS.md").read()
    begin, end = "<!-- peers:begin -->", "<!-- peers:end -->"
    block = f"{begin}\n{table}\n{end}"
    if begin in text and end in text:
        text = re.sub(re.escape(begin) + ".*?" + re.escape(end), lambda _: block, text, flags=re.S)
    else:
        text = text.replace("# Benchmarks\n", "# Benchmarks\n", 1)
        head, sep, rest = text.partition("\n## ")
        text = head + "\n## Side by side with the peers\n\n" + block + "\n" + sep + rest
    open("BENCHMARKS.md", "w").write(text)
    print("BENCHMARKS.md updated", file=sys.stderr)
PY
