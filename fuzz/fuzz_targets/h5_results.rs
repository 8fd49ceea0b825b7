//! Any byte string given to the reader of gradfem's HDF5 results files gives the file's
//! contents or a typed error, never a panic, an abort or a hang.
#![no_main]

use std::path::Path;

use gradfem_io::h5::read_results_bytes;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(r) = read_results_bytes(Path::new("fuzz.h5"), data.to_vec()) {
        let _ = r.mesh.validate();
    }
});
