//! Problem files, structure-aware: the seeds are the shipped examples, and the mutator works
//! on the TOML tree — it replaces a value by one of another type or an extreme one (0, −1,
//! 1e308, NaN, ±inf, huge integers, empty strings, arrays and tables), deletes a key, doubles
//! an element of an array of tables, renames a key or moves a value to another key — and
//! falls back to libFuzzer's byte mutations for text that is no longer TOML. Each input is
//! parsed and, unless it asks for a mesh too large for a fuzzing loop, set up as a problem
//! (meshes read, fields and transfers built, every value checked): the result is a problem or
//! a typed error, never a panic, an abort or a hang.
#![no_main]

use std::path::{Path, PathBuf};

use gradfem::problem::ProblemFile;
use libfuzzer_sys::{fuzz_mutator, fuzz_target, fuzzer_mutate};
use toml::{Table, Value};

/// The examples' directory, so that the examples' relative mesh paths resolve.
fn problem_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/fuzz.toml")
}

/// Whether a parsed problem asks for a mesh too large to set up many times a second (a
/// valid request: the memory estimate and `--allow-large` handle it, and tests cover it).
fn too_large(pf: &ProblemFile) -> bool {
    let mesh = &pf.spec.mesh;
    let boxed = mesh
        .generated
        .as_ref()
        .is_some_and(|b| b.divisions.iter().map(|&d| d as f64).product::<f64>() > 4e3);
    let refined = mesh.actuator.as_ref().is_some_and(|a| {
        a.refine.unwrap_or(1) > 1 || a.max_cell_size.is_some_and(|m| m.iter().any(|&v| v < 1e-5))
    });
    boxed || refined
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    if let Ok(pf) = ProblemFile::parse(&problem_path(), text.to_string())
        && !too_large(&pf)
    {
        let _ = gradfem::app::build_problem(&pf);
    }
});

/// xorshift64*: a small deterministic generator seeded by libFuzzer.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// A value of a kind a problem file may not expect.
fn odd_value(rng: &mut Rng, near: &Value) -> Value {
    let scaled = |f: f64| match near {
        Value::Float(x) => Value::Float(x * f),
        Value::Integer(i) => Value::Integer(i.saturating_mul(f as i64)),
        _ => Value::Float(f),
    };
    match rng.below(16) {
        0 => Value::Integer(0),
        1 => Value::Integer(-1),
        2 => Value::Integer(i64::MAX),
        3 => Value::Float(f64::NAN),
        4 => Value::Float(f64::INFINITY),
        5 => Value::Float(-f64::INFINITY),
        6 => Value::Float(1e308),
        7 => Value::Float(-1e-300),
        8 => Value::String(String::new()),
        9 => Value::String("domain".into()),
        10 => Value::Array(Vec::new()),
        11 => Value::Table(Table::new()),
        12 => Value::Boolean(true),
        13 => scaled(-1.0),
        14 => scaled(1000.0),
        _ => Value::Array(vec![near.clone(), near.clone()]),
    }
}

/// Every value's path in the tree: keys of tables, indices of arrays.
fn paths(v: &Value, prefix: &mut Vec<Step>, out: &mut Vec<Vec<Step>>) {
    match v {
        Value::Table(t) => {
            for (k, c) in t {
                prefix.push(Step::Key(k.clone()));
                out.push(prefix.clone());
                paths(c, prefix, out);
                prefix.pop();
            }
        }
        Value::Array(a) => {
            for (i, c) in a.iter().enumerate() {
                prefix.push(Step::Index(i));
                out.push(prefix.clone());
                paths(c, prefix, out);
                prefix.pop();
            }
        }
        _ => {}
    }
}

#[derive(Clone)]
enum Step {
    Key(String),
    Index(usize),
}

fn get_mut<'a>(v: &'a mut Value, path: &[Step]) -> Option<&'a mut Value> {
    let mut cur = v;
    for s in path {
        cur = match (s, cur) {
            (Step::Key(k), Value::Table(t)) => t.get_mut(k)?,
            (Step::Index(i), Value::Array(a)) => a.get_mut(*i)?,
            _ => return None,
        };
    }
    Some(cur)
}

/// Mutate the tree at one random place; false when there is nothing to mutate.
fn mutate_tree(root: &mut Value, rng: &mut Rng) -> bool {
    let mut all = Vec::new();
    paths(root, &mut Vec::new(), &mut all);
    if all.is_empty() {
        return false;
    }
    let path = all[rng.below(all.len())].clone();
    let (last, parent_path) = path.split_last().expect("non-empty");
    let donor = {
        let other = &all[rng.below(all.len())];
        get_mut(root, other).map(|v| v.clone())
    };
    let Some(parent) = get_mut(root, parent_path) else { return false };
    match (parent, last) {
        (Value::Table(t), Step::Key(k)) => match rng.below(6) {
            0 => {
                t.remove(k);
            }
            1 => {
                if let Some(v) = t.remove(k) {
                    t.insert(format!("{k}_"), v);
                }
            }
            2 => {
                if let Some(d) = donor {
                    t.insert(k.clone(), d);
                }
            }
            _ => {
                let near = t.get(k).cloned().unwrap_or(Value::Integer(1));
                t.insert(k.clone(), odd_value(rng, &near));
            }
        },
        (Value::Array(a), Step::Index(i)) => match rng.below(4) {
            0 => {
                a.remove(*i);
            }
            1 => {
                let v = a[*i].clone();
                a.insert(*i, v);
            }
            _ => {
                let near = a[*i].clone();
                a[*i] = odd_value(rng, &near);
            }
        },
        _ => return false,
    }
    true
}

fuzz_mutator!(|data: &mut [u8], size: usize, max_size: usize, seed: u32| {
    let mut rng = Rng(u64::from(seed) | 1 << 40);
    // One time in four, or when the input is not TOML, libFuzzer's own byte mutations.
    if rng.below(4) != 0
        && let Ok(text) = std::str::from_utf8(&data[..size])
        && let Ok(table) = text.parse::<Table>()
    {
        let mut root = Value::Table(table);
        let n = 1 + rng.below(3);
        let mut changed = false;
        for _ in 0..n {
            changed |= mutate_tree(&mut root, &mut rng);
        }
        if changed
            && let Value::Table(t) = root
            && let Ok(out) = toml::to_string(&t)
            && out.len() <= max_size
        {
            data[..out.len()].copy_from_slice(out.as_bytes());
            return out.len();
        }
    }
    fuzzer_mutate(data, size, max_size)
});
