//! Property tests: any truncation or byte corruption of a real gmsh file gives `Ok` or a
//! `GmshError`, never a panic, a hang or a huge allocation.

mod gmsh_common;

use std::sync::OnceLock;

use gmsh_common::{data_file, msh22_bytes};
use gradfem_io::gmsh::{read_msh, read_msh_bytes, write_msh41};
use proptest::prelude::*;

/// The files under test: shared ASCII and binary files plus binary 2.2 / 4.1 copies.
fn files() -> &'static [(String, Vec<u8>)] {
    static FILES: OnceLock<Vec<(String, Vec<u8>)>> = OnceLock::new();
    FILES.get_or_init(|| {
        let mut v: Vec<(String, Vec<u8>)> = [
            "beam_hex8_v22_ascii.msh",
            "beam_hex8_v41_ascii.msh",
            "beam_hex20_v41_ascii.msh",
            "cook_membrane_quad4_v41_ascii.msh",
            "lame_cylinder_hex8_v22_ascii.msh",
            "cube_hole_tet4_v41_binary.msh",
            "actuator_tet4_v41_binary.msh",
        ]
        .iter()
        .map(|n| (n.to_string(), std::fs::read(data_file(n)).unwrap()))
        .collect();
        let mesh = read_msh(&data_file("beam_hex8_v41_ascii.msh")).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("beam41b.msh");
        write_msh41(&path, &mesh, true).unwrap();
        v.push(("beam41b.msh".into(), std::fs::read(&path).unwrap()));
        v.push(("beam22b.msh".into(), msh22_bytes(&mesh, true, false)));
        v.push(("beam22be.msh".into(), msh22_bytes(&mesh, true, true)));
        for (name, bytes) in &v {
            read_msh_bytes(name, bytes).unwrap_or_else(|e| panic!("{e}"));
        }
        v
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    #[test]
    fn truncated_files_never_panic(file in 0usize..10, frac in 0.0f64..1.0) {
        let (name, bytes) = &files()[file];
        let cut = ((bytes.len() as f64) * frac) as usize;
        // Only a cut at the end of a section (a prefix ending in an `$End...` line) may parse.
        let prefix = bytes[..cut].trim_ascii_end();
        let last_line = prefix.rsplit(|&b| b == b'\n').next().unwrap_or_default();
        match read_msh_bytes(name, &bytes[..cut]) {
            Ok(mesh) => {
                prop_assert!(last_line.starts_with(b"$End"), "{name} cut at {cut} was accepted");
                prop_assert!(mesh.validate().is_ok());
            }
            Err(e) => prop_assert!(e.to_string().starts_with(name.as_str()), "{e}"),
        }
    }

    #[test]
    fn corrupted_files_never_panic(
        file in 0usize..10,
        flips in prop::collection::vec((0.0f64..1.0, any::<u8>()), 1..8),
    ) {
        let (name, bytes) = &files()[file];
        let mut bad = bytes.clone();
        for (frac, b) in flips {
            let i = ((bad.len() as f64) * frac) as usize;
            bad[i] = b;
        }
        if let Ok(mesh) = read_msh_bytes(name, &bad) {
            prop_assert!(mesh.validate().is_ok());
        }
    }

    #[test]
    fn flipped_header_bytes_never_panic(file in 0usize..10, at in 0usize..400, b in any::<u8>()) {
        let (name, bytes) = &files()[file];
        let mut bad = bytes.clone();
        let i = at.min(bad.len() - 1);
        bad[i] = b;
        if let Ok(mesh) = read_msh_bytes(name, &bad) {
            prop_assert!(mesh.validate().is_ok());
        }
    }
}
