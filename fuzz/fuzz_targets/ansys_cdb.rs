//! Any byte string given to the MAPDL archive reader gives `Ok` or a typed error, never a
//! panic.
#![no_main]

use std::path::Path;

use gradfem_io::ansys::read_cdb_bytes;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(a) = read_cdb_bytes(Path::new("fuzz.cdb"), data) {
        let _ = a.mesh.validate();
    }
});
