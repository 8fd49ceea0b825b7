//! Every CSV reader of gradfem on the same bytes: sensors (x, y, z, value), measured curves
//! (load factor, value), measured time series (time, value), morphs (node tag, dx, dy, dz),
//! per-element values (one value per cell, or element_tag,value) and the identification's
//! homogeneous experiments (stretch, nominal stress). Each gives its rows or a typed error,
//! never a panic, an abort or a hang. The readers take a path, so the bytes are written to a
//! file of this process's own in the system's temporary directory first.
#![no_main]

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use gradfem::element_values::{ElementFile, read_element_values};
use gradfem::mesh::cell::CellType;
use gradfem::mesh::generate::{BoxSpec, box_mesh};
use gradfem::mesh::mesh::Mesh;
use gradfem::problem::ProblemFile;
use gradfem_mechanical::homogeneous::{Mode, read_experiment_csv};
use libfuzzer_sys::fuzz_target;

struct Fixture {
    dir: PathBuf,
    mesh: Mesh,
    node_tags: Vec<u64>,
    cell_tags: Vec<u64>,
    problem: ProblemFile,
}

fn fixture() -> &'static Fixture {
    static F: OnceLock<Fixture> = OnceLock::new();
    F.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("gradfem-fuzz-csv-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let spec = BoxSpec {
            origin: [0.0; 3],
            lengths: [1.0; 3],
            divisions: [2, 1, 1],
            cell_type: CellType::Hex8,
        };
        let mesh = box_mesh(&spec);
        let node_tags = mesh.node_tags.clone();
        let cell_tags = (0..mesh.blocks.len())
            .flat_map(|b| (0..mesh.blocks[b].len()).map(move |i| (b, i)))
            .map(|(b, i)| mesh.cell_tag(gradfem::mesh::mesh::CellId { block: b, index: i }))
            .collect();
        let text = "[mesh]\nbox = { lengths = [1, 1, 1], divisions = [2, 1, 1], cell = \"hex8\" }\n";
        let problem = ProblemFile::parse(&dir.join("p.toml"), text.into()).unwrap();
        Fixture { dir, mesh, node_tags, cell_tags, problem }
    })
}

fn read_all(f: &Fixture, path: &Path) {
    let _ = gradfem::problem::read_sensors(path);
    let _ = gradfem::transient_file::read_time_series(path);
    let _ = gradfem::hyperelastic_file::read_curve(&f.problem, "data.csv", &[0.5, 1.0]);
    let _ = gradfem::shape::read_morph_csv(path, &f.node_tags);
    let source = ElementFile { file: "data.csv".into(), dataset: None, field: None, step: None };
    let _ = read_element_values(&source, &f.dir, &f.mesh, &f.cell_tags);
    let _ = read_experiment_csv(path, Mode::Uniaxial);
}

fuzz_target!(|data: &[u8]| {
    let f = fixture();
    let path = f.dir.join("data.csv");
    std::fs::write(&path, data).unwrap();
    read_all(f, &path);
});
