#!/usr/bin/env bash
# Build the GPU backend's test binaries and the heat3d benchmark with the `cuda` feature, here
# (a machine with Rust, no GPU needed), and copy them, stripped, into gpu-bin/: the folder that
# scripts/gpu-check.sh runs on a GPU machine without a Rust toolchain.
#
# gpu-bin/ is ignored by git; hand it to the GPU machine with the working tree (about 30 MB):
#   twins            CPU twins against the CPU path (no GPU needed)
#   nvrtc_compile    every kernel source through NVRTC
#   gpu_device       device vs CPU path and vs twins (GRADFEM_REQUIRE_GPU=1 makes a missing
#                    device a failure)
#   bench_thermal    the heat3d benchmark (--device cuda --check)
# Binaries are x86-64 Linux, linked against glibc only (libcuda and libnvrtc are loaded at run
# time).
set -euo pipefail
cd "$(dirname "$0")/.."
out=gpu-bin
list() { # the test executables cargo reports for a --no-run build
  cargo test --release --no-run --features cuda -p gradfem-gpu --message-format=json 2>/dev/null |
    python3 -c '
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["profile"]["test"]:
        print(m["target"]["name"], m["executable"])
'
}
cargo test --release --no-run --features cuda -p gradfem-gpu
cargo build --release --features cuda --example bench_thermal
rm -rf "$out"
mkdir -p "$out"
while read -r name exe; do
  case "$name" in
    twins | nvrtc_compile | gpu_device) strip -o "$out/$name" "$exe" ;;
  esac
done < <(list)
strip -o "$out/bench_thermal" target/release/examples/bench_thermal
for f in twins nvrtc_compile gpu_device bench_thermal; do
  [ -x "$out/$f" ] || { echo "build-gpu-bins.sh: $out/$f was not built" >&2; exit 1; }
done
git rev-parse HEAD > "$out/COMMIT"
ls -la "$out"
echo "build-gpu-bins.sh: $out/ is ready; on the GPU machine run: bash scripts/gpu-check.sh"
