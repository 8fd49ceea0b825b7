//! Any byte string given to the gmsh reader (msh 2.2 and 4.1, ASCII and binary) gives a mesh
//! or a typed error, never a panic, an abort or a hang; a mesh that reads is validated.
#![no_main]

use gradfem_io::gmsh::read_msh_bytes;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(mesh) = read_msh_bytes("fuzz.msh", data) {
        let _ = mesh.validate();
    }
});
