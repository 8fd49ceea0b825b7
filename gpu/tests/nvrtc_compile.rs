//! Every kernel source compiles with NVRTC (no GPU needed: NVRTC only makes PTX).
//!
//! Needs `libnvrtc.so.13` on the loader's path: scripts/test.sh installs PyPI's
//! `nvidia-cuda-nvrtc==13.0.*` into `.venv` and puts its lib folder on LD_LIBRARY_PATH. Where
//! NVRTC is missing the test fails, unless `GRADFEM_SKIP_NVRTC=1` says to skip it.
#![cfg(feature = "cuda")]

use gradfem_gpu::GpuError;
use gradfem_gpu::cuda::{compile, nvrtc_present};
use gradfem_gpu::kernels::{ALL, KernelSource};

fn nvrtc_or_skip() -> bool {
    if nvrtc_present() {
        return true;
    }
    if std::env::var("GRADFEM_SKIP_NVRTC").is_ok_and(|v| v == "1") {
        eprintln!("NVRTC not found; skipped (GRADFEM_SKIP_NVRTC=1)");
        return false;
    }
    panic!(
        "libnvrtc.so.13 not found: install nvidia-cuda-nvrtc==13.0.* and put its lib folder on \
         LD_LIBRARY_PATH (scripts/test.sh does), or set GRADFEM_SKIP_NVRTC=1"
    );
}

#[test]
fn every_kernel_source_compiles() {
    if !nvrtc_or_skip() {
        return;
    }
    let mut failures = Vec::new();
    for program in ALL {
        match compile(program) {
            Ok(ptx) => {
                let text = ptx.to_src();
                // compiled for double precision without fused multiply–adds
                assert!(text.contains(".f64"), "{}: no f64 instruction in the PTX", program.name);
                assert!(
                    !text.contains("fma.rn.f64"),
                    "{}: the PTX fuses multiply–adds",
                    program.name
                );
                eprintln!(
                    "{}: {} kernels, {} bytes of PTX",
                    program.name,
                    program.functions.len(),
                    text.len()
                );
            }
            Err(e) => failures.push(e.to_string()),
        }
    }
    assert!(failures.is_empty(), "kernels that do not compile:\n{}", failures.join("\n"));
}

#[test]
fn a_broken_source_is_reported_with_the_compiler_log() {
    if !nvrtc_or_skip() {
        return;
    }
    let broken = KernelSource {
        name: "broken.cu",
        source: "extern \"C\" __global__ void k(double* x) { x[0] = 1.0 }",
        functions: &["k"],
    };
    match compile(&broken) {
        Err(GpuError::Compile { program, log }) => {
            assert_eq!(program, "broken.cu");
            assert!(log.contains("error"), "log: {log}");
        }
        other => panic!("a syntax error compiled: {other:?}"),
    }
    let missing = KernelSource {
        name: "missing.cu",
        source: "extern \"C\" __global__ void k(double* x) { x[0] = 1.0; }",
        functions: &["k", "not_there"],
    };
    assert!(matches!(compile(&missing), Err(GpuError::Compile { .. })));
}
