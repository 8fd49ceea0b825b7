//! A mutated problem file never panics the reader or the set-up: the shipped examples with
//! characters replaced, inserted or deleted and lines dropped or doubled give a problem or a
//! typed error. Structure-aware in the small: the replacement characters are the ones TOML and
//! numbers are made of, so most mutants parse and reach the set-up with odd values.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::PathBuf;

use gradfem::problem::ProblemFile;
use proptest::prelude::*;
use proptest::test_runner::{Config, RngSeed, TestRunner};

/// The examples whose set-up is quick (generated meshes or small gmsh files).
const EXAMPLES: [&str; 8] = [
    "heat_sink.toml",
    "conductivity_field.toml",
    "nonlinear_conductivity.toml",
    "sensor_misfit.toml",
    "transient_slab.toml",
    "rubber_pad.toml",
    "hyperelastic_thermal.toml",
    "microactuator_builtin.toml",
];

/// Characters a mutation writes: digits, signs, exponents, TOML punctuation, a letter.
const ALPHABET: &[char] =
    &['0', '1', '9', '-', '+', '.', 'e', 'n', '"', '[', ']', '{', '}', '=', ',', ' ', '\n', 'x'];

#[derive(Clone, Debug)]
enum Mutation {
    Replace(usize, char),
    Insert(usize, char),
    Delete(usize),
    DropLine(usize),
    DoubleLine(usize),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    let at = any::<usize>();
    let ch = (0..ALPHABET.len()).prop_map(|i| ALPHABET[i]);
    prop_oneof![
        (at, ch.clone()).prop_map(|(i, c)| Mutation::Replace(i, c)),
        (at, ch).prop_map(|(i, c)| Mutation::Insert(i, c)),
        at.prop_map(Mutation::Delete),
        at.prop_map(Mutation::DropLine),
        at.prop_map(Mutation::DoubleLine),
    ]
}

fn apply(text: &str, m: &Mutation) -> String {
    let mut chars: Vec<char> = text.chars().collect();
    let mut lines: Vec<&str> = text.lines().collect();
    match *m {
        Mutation::Replace(i, c) => {
            let n = chars.len();
            chars[i % n] = c;
        }
        Mutation::Insert(i, c) => chars.insert(i % (chars.len() + 1), c),
        Mutation::Delete(i) => {
            chars.remove(i % chars.len());
        }
        Mutation::DropLine(i) => {
            lines.remove(i % lines.len());
            return lines.join("\n");
        }
        Mutation::DoubleLine(i) => {
            let k = i % lines.len();
            lines.insert(k, lines[k]);
            return lines.join("\n");
        }
    }
    chars.into_iter().collect()
}

/// Whether a parsed mutant asks for a mesh too large to set up in a unit test (a digit added
/// to `divisions` or `refine`); such a mesh is a valid request, tested elsewhere.
fn too_large(pf: &ProblemFile) -> bool {
    let mesh = &pf.spec.mesh;
    let boxed = mesh
        .generated
        .as_ref()
        .is_some_and(|b| b.divisions.iter().map(|&d| d as f64).product::<f64>() > 2e4);
    let refined = mesh.actuator.as_ref().is_some_and(|a| {
        a.refine.unwrap_or(1) > 2 || a.max_cell_size.is_some_and(|m| m.iter().any(|&v| v < 1e-6))
    });
    boxed || refined
}

#[test]
fn mutated_examples_give_a_problem_or_an_error_never_a_panic() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("examples");
    for name in EXAMPLES {
        let path = dir.join(name);
        let text = std::fs::read_to_string(&path).unwrap();
        // GRADFEM_MUTANTS=N runs N mutants per example (a longer search than the default).
        let cases =
            std::env::var("GRADFEM_MUTANTS").ok().and_then(|v| v.parse().ok()).unwrap_or(48);
        let config = Config {
            cases,
            failure_persistence: None,
            rng_seed: RngSeed::Fixed(name.len() as u64 * 7919),
            ..Config::default()
        };
        let mut runner = TestRunner::new(config);
        let strategy = proptest::collection::vec(mutation(), 1..4);
        let result = runner.run(&strategy, |ms| {
            let mutant = ms.iter().fold(text.clone(), |t, m| apply(&t, m));
            let outcome = catch_unwind(AssertUnwindSafe(|| {
                if let Ok(pf) = ProblemFile::parse(&path, mutant.clone())
                    && !too_large(&pf)
                {
                    let _ = gradfem::app::build_problem(&pf);
                }
            }));
            prop_assert!(outcome.is_ok(), "{name}: a panic on the mutant\n{mutant}");
            Ok(())
        });
        if let Err(e) = result {
            panic!("{name}: {e}");
        }
    }
}
