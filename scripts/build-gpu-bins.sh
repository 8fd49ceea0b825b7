#!/usr/bin/env bash
# Build the GPU backend's test binaries and the heat3d benchmark with the `cuda` feature, here
# (a machine with Rust, no GPU needed), and copy them, stripped, into gpu-bin/: the folder that
# scripts/gpu-check.sh runs on a GPU machine without a Rust toolchain.
#
# gpu-bin/ is ignored by git; hand it to the GPU machine with the working tree (about 30 MB):
#   twins            CPU twins against the CPU path (no GPU needed)
#   elastic_twins    the elastic kernels' twins against the CPU path (no GPU needed)
#   nvrtc_compile    every kernel source through NVRTC
#   gpu_device       device vs CPU path and vs twins (GRADFEM_REQUIRE_GPU=1 makes a missing
#                    device a failure)
#   bench_thermal    the heat3d benchmark (--device cuda --check)
#   bench_elastic    the elastic3d benchmark (--device cuda --check)
#   device           the library's device selection (problem files, Model::device, fields on
#                    the device solver)
#   gradfem          the CLI, for `gradfem run FILE --device cuda` against the CPU
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
cargo build --release --features cuda --example bench_thermal --example bench_elastic --bin gradfem
cargo test --release --no-run --features cuda --test device
rm -rf "$out"
mkdir -p "$out"
while read -r name exe; do
  case "$name" in
    twins | elastic_twins | nvrtc_compile | gpu_device) strip -o "$out/$name" "$exe" ;;
  esac
done < <(list)
for b in bench_thermal bench_elastic; do strip -o "$out/$b" "target/release/examples/$b"; done
strip -o "$out/gradfem" target/release/gradfem
device_test=$(cargo test --release --no-run --features cuda --test device --message-format=json 2>/dev/null |
  python3 -c '
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["name"] == "device":
        print(m["executable"])
')
strip -o "$out/device" "$device_test"
for f in twins elastic_twins nvrtc_compile gpu_device bench_thermal bench_elastic device gradfem; do
  [ -x "$out/$f" ] || { echo "build-gpu-bins.sh: $out/$f was not built" >&2; exit 1; }
done
git rev-parse HEAD > "$out/COMMIT"
ls -la "$out"
echo "build-gpu-bins.sh: $out/ is ready; on the GPU machine run: bash scripts/gpu-check.sh"
