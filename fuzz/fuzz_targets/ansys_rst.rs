//! Any byte string given to the MAPDL result reader gives `Ok` or a typed error, never a
//! panic, and a file that reads decodes (or cleanly refuses) each of its result sets.
#![no_main]

use std::path::Path;

use gradfem_io::ansys::RstFile;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(r) = RstFile::from_bytes(Path::new("fuzz.rst"), data.to_vec()) {
        for set in 0..=r.result_sets.len() + 1 {
            let _ = r.nodal_solution(set);
        }
        let _ = r.mesh.validate();
    }
});
