//! Damaged ANSYS files never panic: every shared file truncated at random offsets and with
//! random bytes flipped gives `Ok` or a typed error.

use std::path::{Path, PathBuf};

use gradfem_io::ansys::{RstFile, read_cdb_bytes};
use proptest::prelude::*;

fn data(name: &str) -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../data/ansys")).join(name)
}

const RST: [&str; 4] = ["beam_static_bc.rst", "file.rth", "temp_v13.rst", "vm1.rst"];

fn damage(mut bytes: Vec<u8>, cut: f64, flips: &[(f64, u8)], header_bias: bool) -> Vec<u8> {
    let n = bytes.len();
    for &(pos, v) in flips {
        // half of the flips hit the headers and tables at the front, where pointers live
        let span = if header_bias { n.min(4096) } else { n };
        let i = ((pos * span as f64) as usize).min(n - 1);
        bytes[i] ^= v | 1;
    }
    bytes.truncate(((cut * n as f64) as usize).min(n));
    bytes
}

fn exercise_rst(name: &str, bytes: Vec<u8>) {
    if let Ok(r) = RstFile::from_bytes(Path::new(name), bytes) {
        for s in 1..=r.result_sets.len() + 1 {
            let _ = r.nodal_solution(s);
        }
        let _ = r.mesh.validate();
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn damaged_result_files_do_not_panic(
        file in 0usize..4,
        cut in prop_oneof![Just(1.0f64), 0.0f64..1.0],
        flips in prop::collection::vec((0.0f64..1.0, any::<u8>()), 0..8),
        header_bias in any::<bool>(),
    ) {
        let bytes = std::fs::read(data(RST[file])).unwrap();
        exercise_rst(RST[file], damage(bytes, cut, &flips, header_bias));
    }

    #[test]
    fn damaged_archives_do_not_panic(
        cut in prop_oneof![Just(1.0f64), 0.0f64..1.0],
        flips in prop::collection::vec((0.0f64..1.0, any::<u8>()), 0..8),
    ) {
        let bytes = std::fs::read(data("HexBeam.cdb")).unwrap();
        let _ = read_cdb_bytes(Path::new("HexBeam.cdb"), &damage(bytes, cut, &flips, false));
    }
}

/// Every truncation point of the front of each file (headers, tables) is an error, not a panic.
#[test]
fn every_short_prefix_is_an_error() {
    for name in RST {
        let bytes = std::fs::read(data(name)).unwrap();
        for cut in (0..bytes.len().min(3000)).step_by(7) {
            assert!(RstFile::from_bytes(Path::new(name), bytes[..cut].to_vec()).is_err());
        }
        // the whole file minus its last word still reads the mesh or fails cleanly
        exercise_rst(name, bytes[..bytes.len() - 4].to_vec());
    }
}

#[test]
fn errors_name_the_file_and_offset() {
    let mut bytes = std::fs::read(data("vm1.rst")).unwrap();
    // the standard header's trailing length word (byte 408) disagrees with its leading one
    bytes[408] = 99;
    let e = RstFile::from_bytes(Path::new("vm1.rst"), bytes).unwrap_err();
    let msg = e.to_string();
    assert!(msg.contains("vm1.rst") && msg.contains("byte 0"), "{msg}");
    // ptrGEO (result header word 15, byte 412 + 8 + 60) pointing past the end
    let mut bytes = std::fs::read(data("vm1.rst")).unwrap();
    let at = 103 * 4 + 8 + 15 * 4;
    bytes[at..at + 4].copy_from_slice(&0x0fff_ffffi32.to_le_bytes());
    match RstFile::from_bytes(Path::new("vm1.rst"), bytes) {
        Err(gradfem_io::ansys::AnsysError::PointerOutOfRange { offset, pointer, .. }) => {
            assert_eq!((offset, pointer), (at as u64, 0x0fff_ffff));
        }
        other => panic!("{other:?}"),
    }
    let e = read_cdb_bytes(Path::new("x.cdb"), b"NBLOCK,6,SOLID\n(3i9,6e21.13e3)\n    x\n")
        .unwrap_err();
    assert!(e.to_string().starts_with("x.cdb:3:"), "{e}");
    let e = gradfem_io::ansys::read_rst(Path::new("/nonexistent/a.rst")).unwrap_err();
    assert!(e.to_string().contains("/nonexistent/a.rst"));
}

/// An archive whose node block stops early (40 of the 321 nodes its header declares), or one
/// of whose node lines is cut inside a field, is an error at the block's or the line's line,
/// not a smaller mesh or a coordinate read as zero.
#[test]
fn a_truncated_node_block_is_an_error() {
    let text = std::fs::read_to_string(data("HexBeam.cdb")).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let header = lines.iter().position(|l| l.starts_with("NBLOCK")).unwrap();
    // Lines: the NBLOCK header, the format, then 321 node records and the terminator.
    let mut short: Vec<&str> = lines[..header + 2 + 40].to_vec();
    short.extend(&lines[header + 2 + 321..]);
    let e = read_cdb_bytes(Path::new("HexBeam.cdb"), short.join("\n").as_bytes()).unwrap_err();
    let msg = e.to_string();
    assert!(msg.starts_with(&format!("HexBeam.cdb:{}:", header + 1)), "{msg}");
    assert!(msg.contains("declares 321 nodes") && msg.contains("holds 40"), "{msg}");

    // A node record with y and z (the longest lines), cut 7 characters into its last field.
    let (k, full) = lines
        .iter()
        .enumerate()
        .skip(header + 2)
        .take(321)
        .max_by_key(|(_, l)| l.trim_end().len())
        .unwrap();
    let mut cut: Vec<String> = lines.iter().map(|l| l.to_string()).collect();
    cut[k] = full.trim_end()[..full.trim_end().len() - 14].to_string();
    let e = read_cdb_bytes(Path::new("HexBeam.cdb"), cut.join("\n").as_bytes()).unwrap_err();
    let msg = e.to_string();
    assert!(msg.starts_with(&format!("HexBeam.cdb:{}:", k + 1)), "{msg}");
    assert!(msg.contains("cut"), "{msg}");
    // The whole file still reads.
    assert_eq!(
        read_cdb_bytes(Path::new("HexBeam.cdb"), text.as_bytes()).unwrap().mesh.n_nodes(),
        321
    );
}

/// The standard header's word 27 is the file's length in words; MAPDL pads files past it to
/// whole blocks. A file cut before that length reads as far as its records are whole, with the
/// shortfall recorded (the CLI warns, or refuses with `--strict`); a record past the cut, and a
/// file whose opening records are cut, give an error that says the file is shorter than
/// declared. A file cut in the padding only reads as the whole file.
#[test]
fn a_file_shorter_than_its_declared_length_is_recorded() {
    use gradfem_io::ansys::{AnsysError, Shortfall};
    for name in RST {
        let bytes = std::fs::read(data(name)).unwrap();
        let word = |i: usize| i32::from_le_bytes(bytes[8 + 4 * i..12 + 4 * i].try_into().unwrap());
        let declared = 4 * word(26) as usize;
        assert!(declared > bytes.len() / 2 && declared <= bytes.len(), "{name}: {declared}");
        let whole = RstFile::from_bytes(Path::new(name), bytes.clone()).unwrap();
        assert_eq!(whole.shortfall, None);
        let padded_cut = RstFile::from_bytes(Path::new(name), bytes[..declared].to_vec()).unwrap();
        assert_eq!(padded_cut.shortfall, None);
        // Bit for bit (unset degrees of freedom are NaN).
        let bits = |r: &RstFile| -> Vec<u64> {
            r.nodal_solution(1).unwrap().values.iter().map(|v| v.to_bits()).collect()
        };
        assert_eq!(bits(&padded_cut), bits(&whole), "{name}");
        let says = |e: &AnsysError, cut: usize| {
            let msg = e.to_string();
            assert!(
                matches!(e, AnsysError::ShorterThanDeclared { .. })
                    && msg.contains(&format!("declares {declared} bytes"))
                    && msg.contains(&format!("the file has {cut}")),
                "{name} cut at {cut}: {msg}"
            );
        };
        // Cut inside the last word: everything before it is whole.
        let cut = declared - 4;
        let r = RstFile::from_bytes(Path::new(name), bytes[..cut].to_vec())
            .unwrap_or_else(|e| panic!("{name} cut at {cut}: {e}"));
        assert_eq!(r.shortfall, Some(Shortfall { declared: declared as u64, found: cut as u64 }));
        says(&r.check_length().unwrap_err(), cut);
        for cut in [declared * 99 / 100, declared / 2 + 3] {
            match RstFile::from_bytes(Path::new(name), bytes[..cut].to_vec()) {
                Ok(r) => {
                    assert_eq!(
                        r.shortfall,
                        Some(Shortfall { declared: declared as u64, found: cut as u64 })
                    );
                    says(&r.check_length().unwrap_err(), cut);
                    for set in 1..=r.result_sets.len() {
                        if let Err(e) = r.nodal_solution(set) {
                            says(&e, cut);
                        }
                    }
                }
                Err(e) => says(&e, cut),
            }
        }
    }
}
