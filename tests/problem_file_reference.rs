//! `docs/problem-file.md` documents every key that the problem-file and identification-file
//! parsers accept, and nothing else.
//!
//! The keys are not listed here by hand. A recording serde `Deserializer` ([`Walker`]) walks
//! the types [`ProblemSpec`] and [`IdentifySpec`]: serde's derived `Deserialize` of a struct
//! announces its field names (renames applied) in `deserialize_struct(name, fields, visitor)`;
//! the walker records them under the current table path (`mesh.box`, `thermal.material`, …),
//! then feeds the visitor a map that holds every field, each value deserialized by the walker
//! one level deeper (options are `Some`, sequences hold one element, tuples their length,
//! numbers, strings and booleans a plausible value). `toml::Spanned<T>` deserializes as a
//! struct with a reserved name and three reserved fields; the walker recognises the name and
//! hands the value field the current path, so a spanned key is recorded like a plain one.
//!
//! Types that serde deserializes through `deserialize_any` (internally tagged or untagged
//! enums, flattened structs) do not announce their keys. Those met today are listed in
//! [`any_sites`] with one sample per variant, built from real values of the type (a `match`
//! without a wildcard makes a new variant a compile error here, and the struct literals make a
//! new field one) and serialized, so their keys come from the type as well. A
//! `deserialize_any` site the list does not name, a free-form map not in [`FREE_MAPS`] or an
//! externally tagged enum fails the test with the path where it was met.
//!
//! Then, for every table path, the section of the reference whose heading names the table
//! (`` `[mesh.box]` ``, `` `[[thermal.material]]` ``; the root is the section "Top level")
//! must have a row `` | `key` | … `` in a table whose header starts with `key`, for every key
//! the parser accepts; every such row must name an accepted key; every table heading must
//! name a table the parser has; every TOML example block may use accepted keys only, and one
//! with a `[mesh]` (or `[[experiment]]`) table must parse as a whole problem (identification)
//! file. The enumerated string values (kinds, schemes, solver names, cell types, …) are matched
//! in code, not by serde: they are read from the parsers' own "expected a, b or c" error
//! messages, and each must appear in backticks in its table's section.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::{Path, PathBuf};

use gradfem::identify::IdentifySpec;
use gradfem::identify_report::StartValues;
use gradfem::problem::{ProblemFile, ProblemSpec};
use serde::Deserialize;
use serde::de::value::BorrowedStrDeserializer;
use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn reference() -> String {
    std::fs::read_to_string(root().join("docs/problem-file.md"))
        .expect("docs/problem-file.md exists")
}

// ---------------------------------------------------------------------------------------------
// The recording deserializer.

/// The name `toml::Spanned` gives itself in `deserialize_struct` (serde_spanned's `NAME`), and
/// the field that holds the value; the other two fields are the span's start and end.
const SPANNED_NAME: &str = "$__serde_spanned_private_Spanned";
const SPANNED_VALUE: &str = "$__serde_spanned_private_value";

/// Table paths whose value is a map with free keys (a parameter name → bounds); paths of
/// identification files start with `identify:`.
const FREE_MAPS: &[&str] = &["parameters.bounds"];

#[derive(Debug)]
struct WalkError(String);

impl fmt::Display for WalkError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for WalkError {}

impl de::Error for WalkError {
    fn custom<T: fmt::Display>(msg: T) -> Self {
        WalkError(msg.to_string())
    }
}

/// A value serde reads through `deserialize_any`, at a table path: what it is, the key that
/// tags its variants (if any) and one sample per variant.
struct AnySite {
    path: &'static str,
    what: &'static str,
    tag: Option<&'static str>,
    samples: Vec<toml::Value>,
}

fn to_value<T: serde::Serialize>(v: &T) -> toml::Value {
    toml::Value::try_from(v).expect("serializable")
}

/// Every `deserialize_any` site of the two file types, with samples of every variant.
fn any_sites() -> Vec<AnySite> {
    use gradfem_electrical::ResistivityLaw as R;
    use gradfem_thermal::ConductivityLaw as C;
    let conductivity = [
        C::Constant,
        C::Polynomial { t_ref: 300.0, coefficients: vec![-1e-3] },
        C::Table { temperatures: vec![300.0, 400.0], values: vec![1.0, 0.8] },
    ];
    for c in &conductivity {
        // A new variant fails to compile here: give it a sample above.
        match c {
            C::Constant | C::Polynomial { .. } | C::Table { .. } => {}
        }
    }
    let resistivity = [
        R::Constant,
        R::Linear { alpha_r: 1e-3 },
        R::Table { temperatures: vec![300.0, 400.0], multipliers: vec![1.0, 1.2] },
    ];
    for r in &resistivity {
        match r {
            R::Constant | R::Linear { .. } | R::Table { .. } => {}
        }
    }
    let starts = [StartValues::One(1.0), StartValues::Many(vec![1.0, 2.0])];
    let start_samples = starts
        .iter()
        .map(|s| match s {
            StartValues::One(v) => toml::Value::Float(*v),
            StartValues::Many(v) => {
                toml::Value::Array(v.iter().copied().map(toml::Value::Float).collect::<Vec<_>>())
            }
        })
        .collect();
    // A material constant: a number, or a file of values per element (every key in one
    // sample, so that the walk sees them all).
    let element_values = || {
        let mut file = toml::Table::new();
        file.insert("file".into(), toml::Value::String("results.h5".into()));
        file.insert("dataset".into(), toml::Value::String("/steps/0/conductivity".into()));
        file.insert("field".into(), toml::Value::String("conductivity".into()));
        file.insert("step".into(), toml::Value::Integer(0));
        vec![toml::Value::Float(34.0), toml::Value::Table(file)]
    };
    let element_site = |path: &'static str| AnySite {
        path,
        what: "gradfem::element_values::ElementValues (a number or a table of values per element)",
        tag: None,
        samples: element_values(),
    };
    vec![
        element_site("thermal.material.k"),
        element_site("electrical.conductor.sigma"),
        element_site("mechanical.material.young"),
        AnySite {
            path: "thermal.material.law",
            what: "gradfem_thermal::ConductivityLaw (internally tagged by `kind`)",
            tag: Some("kind"),
            samples: conductivity.iter().map(to_value).collect(),
        },
        AnySite {
            path: "electrical.conductor.law",
            what: "gradfem_electrical::ResistivityLaw (internally tagged by `kind`)",
            tag: Some("kind"),
            samples: resistivity.iter().map(to_value).collect(),
        },
        AnySite {
            path: "identify:parameter.start",
            what: "gradfem::identify_report::StartValues (untagged: a number or a list)",
            tag: None,
            samples: start_samples,
        },
    ]
}

/// What a walk found.
#[derive(Debug, Default)]
struct Tree {
    /// Table path → the keys the parser accepts there.
    tables: BTreeMap<String, BTreeSet<String>>,
    /// Table path → the values its tag key takes (`kind` of a law).
    tag_values: BTreeMap<String, BTreeSet<String>>,
    /// Free-form maps (full keys, with the prefix) and `deserialize_any` sites met.
    maps_met: BTreeSet<String>,
    any_met: BTreeSet<String>,
    /// The free-form maps, as table paths.
    maps: BTreeSet<String>,
    /// Sites the walker cannot see through.
    problems: Vec<String>,
}

struct Walker<'a> {
    /// `prefix` + the table path (`identify:` for identification files).
    prefix: &'static str,
    path: String,
    tree: &'a RefCell<Tree>,
    any: &'a [AnySite],
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() { key.to_string() } else { format!("{path}.{key}") }
}

fn shown(path: &str) -> String {
    if path.is_empty() { "the top level".into() } else { format!("[{path}]") }
}

impl<'a> Walker<'a> {
    fn at(&self, path: String) -> Walker<'a> {
        Walker { prefix: self.prefix, path, tree: self.tree, any: self.any }
    }

    fn key(&self) -> String {
        format!("{}{}", self.prefix, self.path)
    }

    fn fail<T>(&self, message: String) -> Result<T, WalkError> {
        self.tree.borrow_mut().problems.push(message.clone());
        Err(WalkError(message))
    }
}

struct Fields<'a> {
    walker: Walker<'a>,
    fields: std::slice::Iter<'static, &'static str>,
    current: Option<&'static str>,
    spanned: bool,
}

impl<'de> MapAccess<'de> for Fields<'_> {
    type Error = WalkError;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, WalkError> {
        let Some(&field) = self.fields.next() else { return Ok(None) };
        self.current = Some(field);
        seed.deserialize(BorrowedStrDeserializer::new(field)).map(Some)
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, WalkError> {
        let field = self.current.take().expect("a key first");
        let path = if self.spanned {
            // The value of a spanned key lives at the key's own path; start and end are
            // numbers.
            self.walker.path.clone()
        } else {
            join(&self.walker.path, field)
        };
        seed.deserialize(self.walker.at(path))
    }
}

struct Seq<'a> {
    walker: Walker<'a>,
    remaining: usize,
}

impl<'de> SeqAccess<'de> for Seq<'_> {
    type Error = WalkError;

    fn next_element_seed<T: DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, WalkError> {
        if self.remaining == 0 {
            return Ok(None);
        }
        self.remaining -= 1;
        seed.deserialize(self.walker.at(self.walker.path.clone())).map(Some)
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.remaining)
    }
}

struct EmptyMap;

impl<'de> MapAccess<'de> for EmptyMap {
    type Error = WalkError;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        _: K,
    ) -> Result<Option<K::Value>, WalkError> {
        Ok(None)
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, _: V) -> Result<V::Value, WalkError> {
        Err(WalkError("no values in an empty map".into()))
    }
}

impl<'de> Deserializer<'de> for Walker<'_> {
    type Error = WalkError;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, WalkError> {
        let key = self.key();
        let Some(site) = self.any.iter().find(|s| s.path == key) else {
            return self.fail(format!(
                "{} of {} files deserializes through `deserialize_any` (an untagged or \
                 internally tagged enum, a flattened struct, …), whose keys serde does not \
                 announce: add it to any_sites() in tests/problem_file_reference.rs with a sample \
                 of every variant, and document its keys",
                shown(&self.path),
                if self.prefix.is_empty() { "problem" } else { "identification" }
            ));
        };
        {
            let mut tree = self.tree.borrow_mut();
            tree.any_met.insert(key.clone());
            for sample in &site.samples {
                if let toml::Value::Table(t) = sample {
                    tree.tables.entry(key.clone()).or_default().extend(t.keys().cloned());
                    if let Some(toml::Value::String(v)) = site.tag.and_then(|tag| t.get(tag)) {
                        tree.tag_values.entry(key.clone()).or_default().insert(v.clone());
                    }
                }
            }
        }
        site.samples[0]
            .clone()
            .deserialize_any(visitor)
            .map_err(|e| WalkError(format!("{key} ({}): {e}", site.what)))
    }

    fn deserialize_bool<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, WalkError> {
        visitor.visit_bool(false)
    }
    fn deserialize_i8<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, WalkError> {
        visitor.visit_i64(1)
    }
    fn deserialize_i16<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, WalkError> {
        visitor.visit_i64(1)
    }
    fn deserialize_i32<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, WalkError> {
        visitor.visit_i64(1)
    }
    fn deserialize_i64<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, WalkError> {
        visitor.visit_i64(1)
    }
    fn deserialize_u8<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, WalkError> {
        visitor.visit_u64(1)
    }
    fn deserialize_u16<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, WalkError> {
        visitor.visit_u64(1)
    }
    fn deserialize_u32<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, WalkError> {
        visitor.visit_u64(1)
    }
    fn deserialize_u64<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, WalkError> {
        visitor.visit_u64(1)
    }
    fn deserialize_f32<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, WalkError> {
        visitor.visit_f64(1.0)
    }
    fn deserialize_f64<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, WalkError> {
        visitor.visit_f64(1.0)
    }
    fn deserialize_char<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, WalkError> {
        visitor.visit_char('x')
    }
    fn deserialize_str<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, WalkError> {
        visitor.visit_str("x")
    }
    fn deserialize_string<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, WalkError> {
        visitor.visit_str("x")
    }
    fn deserialize_bytes<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, WalkError> {
        visitor.visit_bytes(b"x")
    }
    fn deserialize_byte_buf<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, WalkError> {
        visitor.visit_bytes(b"x")
    }
    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, WalkError> {
        visitor.visit_some(self)
    }
    fn deserialize_unit<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, WalkError> {
        visitor.visit_unit()
    }
    fn deserialize_unit_struct<V: Visitor<'de>>(
        self,
        _: &'static str,
        visitor: V,
    ) -> Result<V::Value, WalkError> {
        visitor.visit_unit()
    }
    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _: &'static str,
        visitor: V,
    ) -> Result<V::Value, WalkError> {
        visitor.visit_newtype_struct(self)
    }
    fn deserialize_seq<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, WalkError> {
        visitor.visit_seq(Seq { walker: self, remaining: 1 })
    }
    fn deserialize_tuple<V: Visitor<'de>>(
        self,
        len: usize,
        visitor: V,
    ) -> Result<V::Value, WalkError> {
        visitor.visit_seq(Seq { walker: self, remaining: len })
    }
    fn deserialize_tuple_struct<V: Visitor<'de>>(
        self,
        _: &'static str,
        len: usize,
        visitor: V,
    ) -> Result<V::Value, WalkError> {
        visitor.visit_seq(Seq { walker: self, remaining: len })
    }
    fn deserialize_map<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, WalkError> {
        if !FREE_MAPS.contains(&self.key().as_str()) {
            return self.fail(format!(
                "{} is a map (a map type, or a struct with a flattened field), whose keys serde \
                 does not announce: if its keys are free, add it to FREE_MAPS in \
                 tests/problem_file_reference.rs, else walk it like any_sites()",
                shown(&self.path)
            ));
        }
        self.tree.borrow_mut().maps_met.insert(self.key());
        visitor.visit_map(EmptyMap)
    }
    fn deserialize_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, WalkError> {
        let spanned = name == SPANNED_NAME;
        if spanned {
            assert!(
                fields.contains(&SPANNED_VALUE),
                "toml::Spanned changed its fields: {fields:?}"
            );
        } else {
            let mut tree = self.tree.borrow_mut();
            tree.tables.entry(self.key()).or_default().extend(fields.iter().map(|f| f.to_string()));
        }
        visitor.visit_map(Fields { walker: self, fields: fields.iter(), current: None, spanned })
    }
    fn deserialize_enum<V: Visitor<'de>>(
        self,
        name: &'static str,
        variants: &'static [&'static str],
        _: V,
    ) -> Result<V::Value, WalkError> {
        self.fail(format!(
            "{} is the externally tagged enum {name} (variants {variants:?}): teach the walker in \
             tests/problem_file_reference.rs to record its variants as allowed values",
            shown(&self.path)
        ))
    }
    fn deserialize_identifier<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, WalkError> {
        visitor.visit_str("x")
    }
    fn deserialize_ignored_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, WalkError> {
        visitor.visit_unit()
    }
}

/// The keys of `T`, walked from the top level with table paths prefixed by `prefix`.
fn walk<T: for<'de> Deserialize<'de>>(prefix: &'static str, any: &[AnySite]) -> Tree {
    let tree = RefCell::new(Tree::default());
    let walker = Walker { prefix, path: String::new(), tree: &tree, any };
    let result = T::deserialize(walker);
    let mut tree = tree.into_inner();
    if let Err(e) = result
        && tree.problems.is_empty()
    {
        tree.problems.push(format!("the walk of {} failed: {e}", std::any::type_name::<T>()));
    }
    // Back to plain table paths within the file kind.
    let strip = |m: BTreeMap<String, BTreeSet<String>>| {
        m.into_iter()
            .filter_map(|(k, v)| k.strip_prefix(prefix).map(|k| (k.to_string(), v)))
            .collect()
    };
    tree.tables = strip(tree.tables);
    tree.tag_values = strip(tree.tag_values);
    tree.maps =
        tree.maps_met.iter().filter_map(|m| m.strip_prefix(prefix)).map(str::to_string).collect();
    tree
}

/// Problem files and identification files, and the sites the walks met.
struct Walked {
    problem: Tree,
    identify: Tree,
}

fn walked() -> Walked {
    let any = any_sites();
    let problem = walk::<ProblemSpec>("", &any);
    let identify = walk::<IdentifySpec>("identify:", &any);
    let mut problems: Vec<String> =
        problem.problems.iter().chain(&identify.problems).cloned().collect();
    // A walk that stopped at a site it cannot see through met only part of the types; the
    // lists are checked against complete walks.
    let complete = problems.is_empty();
    let met: BTreeSet<&String> = problem.any_met.iter().chain(&identify.any_met).collect();
    for site in any.iter().filter(|_| complete) {
        if !met.contains(&site.path.to_string()) {
            problems.push(format!(
                "any_sites() lists {} ({}), which the walk never met: remove or move it",
                site.path, site.what
            ));
        }
    }
    let maps: BTreeSet<&String> = problem.maps_met.iter().chain(&identify.maps_met).collect();
    for m in FREE_MAPS.iter().filter(|_| complete) {
        if !maps.contains(&m.to_string()) {
            problems.push(format!("FREE_MAPS lists {m}, which the walk never met"));
        }
    }
    assert!(problems.is_empty(), "the walker cannot enumerate every key:\n{}", problems.join("\n"));
    Walked { problem, identify }
}

// ---------------------------------------------------------------------------------------------
// The reference, read as sections, key tables and example blocks.

#[derive(Clone, Copy, Debug, PartialEq)]
enum Part {
    Problem,
    Identify,
}

#[derive(Debug)]
struct Section {
    part: Part,
    level: usize,
    heading: String,
    /// The table the heading names (`Some("")` for a "Top level" heading).
    table: Option<String>,
    /// Lines up to the next heading of the same or a higher level, or the next heading that
    /// names a table.
    body: Vec<String>,
}

/// `[a.b]` or `[[a.b]]` in backticks in a heading: the table path.
fn table_of_heading(heading: &str) -> Option<String> {
    if heading.trim() == "Top level" {
        return Some(String::new());
    }
    heading.split('`').skip(1).step_by(2).find_map(|span| {
        let inner = span
            .strip_prefix("[[")
            .and_then(|s| s.strip_suffix("]]"))
            .or_else(|| span.strip_prefix('[').and_then(|s| s.strip_suffix(']')))?;
        inner
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '.')
            .then(|| inner.to_string())
    })
}

/// Lines of the reference outside code blocks, with a flag per line: inside a code block.
fn lines_with_fences(doc: &str) -> Vec<(bool, &str)> {
    let mut inside = false;
    doc.lines()
        .map(|l| {
            if l.trim_start().starts_with("```") {
                inside = !inside;
                (true, l)
            } else {
                (inside, l)
            }
        })
        .collect()
}

fn heading(line: &str) -> Option<(usize, String)> {
    let level = line.chars().take_while(|&c| c == '#').count();
    (level > 0 && line[level..].starts_with(' ')).then(|| (level, line[level..].trim().to_string()))
}

fn sections(doc: &str) -> Vec<Section> {
    let lines = lines_with_fences(doc);
    let mut heads = Vec::new();
    let mut part = Part::Problem;
    for (i, (code, l)) in lines.iter().enumerate() {
        if *code {
            continue;
        }
        if let Some((level, text)) = heading(l) {
            if level == 2 && text.starts_with("Identification files") {
                part = Part::Identify;
            }
            heads.push((i, level, text, part));
        }
    }
    heads
        .iter()
        .enumerate()
        .map(|(h, (i, level, text, part))| {
            let end = heads[h + 1..]
                .iter()
                .find(|(_, l, t, _)| l <= level || table_of_heading(t).is_some())
                .map_or(lines.len(), |(j, ..)| *j);
            Section {
                part: *part,
                level: *level,
                heading: text.clone(),
                table: table_of_heading(text),
                body: lines[i + 1..end].iter().map(|(_, l)| l.to_string()).collect(),
            }
        })
        .collect()
}

fn cells(row: &str) -> Vec<String> {
    let row = row.trim().trim_start_matches('|').trim_end_matches('|');
    row.split('|').map(|c| c.trim().to_string()).collect()
}

/// The keys of the key tables (header cell `key`) of a section body: the first backticked
/// word of each row's first cell.
fn key_rows(body: &[String]) -> Vec<String> {
    let mut keys = Vec::new();
    let mut in_key_table = false;
    let mut previous_was_table = false;
    for line in body {
        let is_row = line.trim_start().starts_with('|');
        if !is_row {
            in_key_table = false;
            previous_was_table = false;
            continue;
        }
        let c = cells(line);
        if !previous_was_table {
            in_key_table = c.first().is_some_and(|h| h == "key");
        } else if in_key_table
            && !c[0].starts_with("---")
            && let Some(k) = c[0].split('`').nth(1)
        {
            keys.push(k.to_string());
        }
        previous_was_table = true;
    }
    keys
}

/// The TOML blocks of the reference, with the part they are in.
fn toml_blocks(doc: &str) -> Vec<(Part, usize, String)> {
    let mut out = Vec::new();
    let mut part = Part::Problem;
    let mut current: Option<(usize, String)> = None;
    for (i, line) in doc.lines().enumerate() {
        if current.is_none()
            && let Some((2, text)) = heading(line)
            && text.starts_with("Identification files")
        {
            part = Part::Identify;
        }
        let fence = line.trim_start().starts_with("```");
        match (&mut current, fence) {
            (None, true) if line.trim_start() == "```toml" => {
                current = Some((i + 1, String::new()))
            }
            (None, true) => {
                // Another language: skip to its end.
                current = Some((0, String::new()));
            }
            (Some((start, text)), true) => {
                if *start > 0 {
                    out.push((part, *start, std::mem::take(text)));
                }
                current = None;
            }
            (Some((_, text)), false) => {
                text.push_str(line);
                text.push('\n');
            }
            (None, false) => {}
        }
    }
    out
}

fn section_of<'s>(sections: &'s [Section], part: Part, path: &str) -> Vec<&'s Section> {
    sections.iter().filter(|s| s.part == part && s.table.as_deref() == Some(path)).collect()
}

/// Check a TOML example's keys against the accepted ones.
fn check_example_keys(tree: &Tree, table: &toml::Table, path: &str, out: &mut Vec<String>) {
    if tree.maps.contains(path) {
        return;
    }
    let Some(accepted) = tree.tables.get(path) else {
        out.push(format!("{} is not a table the parser reads", shown(path)));
        return;
    };
    for (k, v) in table {
        if !accepted.contains(k) {
            out.push(format!("{} has no key `{k}`", shown(path)));
            continue;
        }
        let child = join(path, k);
        match v {
            toml::Value::Table(t) => check_example_keys(tree, t, &child, out),
            toml::Value::Array(items) => {
                for item in items {
                    if let toml::Value::Table(t) = item {
                        check_example_keys(tree, t, &child, out);
                    }
                }
            }
            _ => {}
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The tests.

/// The walker sees the structure it should: a few keys any problem file has, spanned keys,
/// renamed keys, keys of arrays of tables, of inline tables and of tagged laws.
#[test]
fn the_walker_finds_the_keys_of_the_file_types() {
    let w = walked();
    let has = |tree: &Tree, path: &str, key: &str| {
        assert!(
            tree.tables.get(path).is_some_and(|k| k.contains(key)),
            "{path}: no `{key}` in {:?}",
            tree.tables.get(path)
        );
    };
    has(&w.problem, "", "mesh");
    has(&w.problem, "", "morph");
    has(&w.problem, "mesh", "box");
    has(&w.problem, "mesh.box", "divisions");
    has(&w.problem, "mesh.plane_group", "axis");
    has(&w.problem, "thermal.material", "group");
    has(&w.problem, "thermal.material.law", "coefficients");
    has(&w.problem, "electrical.conductor.law", "multipliers");
    has(&w.problem, "coupling", "transfers");
    has(&w.problem, "hyperelastic.bc", "components");
    has(&w.problem, "optimize.constraint", "upper");
    has(&w.problem, "transient.heat_capacity", "rho_c");
    has(&w.identify, "", "experiment");
    has(&w.identify, "parameter", "start");
    has(&w.identify, "fit", "step_tol");
    assert!(w.problem.tag_values["thermal.material.law"].contains("polynomial"));
    // No key of a spanned value is a reserved name.
    for keys in w.problem.tables.values().chain(w.identify.tables.values()) {
        assert!(keys.iter().all(|k| !k.starts_with('$')), "{keys:?}");
    }
}

#[test]
fn every_key_the_parsers_accept_is_documented() {
    let w = walked();
    let doc = reference();
    let sections = sections(&doc);
    let mut missing = Vec::new();
    for (part, tree, what) in [
        (Part::Problem, &w.problem, "problem files"),
        (Part::Identify, &w.identify, "identification files"),
    ] {
        for (path, keys) in &tree.tables {
            let found = section_of(&sections, part, path);
            let [section] = found.as_slice() else {
                missing.push(format!(
                    "{what}: {} has {} section(s) in docs/problem-file.md; it needs one whose \
                     heading names it (`[{path}]` or `[[{path}]]` in backticks{})",
                    shown(path),
                    found.len(),
                    if path.is_empty() { ", or \"Top level\"" } else { "" }
                ));
                continue;
            };
            let rows = key_rows(&section.body);
            for key in keys {
                if !rows.contains(key) {
                    missing.push(format!(
                        "{what}: key `{key}` of {} is accepted by the parser but not documented \
                         (no row | `{key}` | … in the key table of the section \"{}\")",
                        shown(path),
                        section.heading
                    ));
                }
            }
            for row in &rows {
                if !keys.contains(row) {
                    missing.push(format!(
                        "{what}: the section \"{}\" documents `{row}`, which {} does not accept",
                        section.heading,
                        shown(path)
                    ));
                }
            }
            let text = section.body.join("\n");
            for value in tree.tag_values.get(path).into_iter().flatten() {
                if !text.contains(&format!("`{value}`")) {
                    missing.push(format!(
                        "{what}: {} takes the variant `{value}`, which its section does not name",
                        shown(path)
                    ));
                }
            }
        }
    }
    for s in &sections {
        let tree = if s.part == Part::Problem { &w.problem } else { &w.identify };
        if let Some(t) = &s.table
            && !tree.tables.contains_key(t)
        {
            missing.push(format!(
                "the section \"{}\" (level {}) names {}, which the parser does not read",
                s.heading,
                s.level,
                shown(t)
            ));
        }
    }
    assert!(missing.is_empty(), "docs/problem-file.md is out of date:\n{}", missing.join("\n"));
}

#[test]
fn the_reference_examples_use_accepted_keys_and_parse() {
    let w = walked();
    let doc = reference();
    let blocks = toml_blocks(&doc);
    assert!(blocks.len() > 20, "only {} TOML examples in the reference", blocks.len());
    let mut failures = Vec::new();
    for (part, line, text) in &blocks {
        let at = format!("docs/problem-file.md, the TOML block at line {line}");
        let table: toml::Table = match toml::from_str(text) {
            Ok(t) => t,
            Err(e) => {
                failures.push(format!("{at}: not TOML: {e}"));
                continue;
            }
        };
        let tree = if *part == Part::Problem { &w.problem } else { &w.identify };
        let mut wrong = Vec::new();
        check_example_keys(tree, &table, "", &mut wrong);
        failures.extend(wrong.into_iter().map(|m| format!("{at}: {m}")));
        match part {
            Part::Problem if table.contains_key("mesh") => {
                if let Err(e) = ProblemFile::parse(Path::new("example.toml"), text.clone()) {
                    failures.push(format!("{at}: a whole problem file, but: {e}"));
                }
            }
            Part::Identify if table.contains_key("experiment") => {
                if let Err(e) = toml::from_str::<IdentifySpec>(text) {
                    failures.push(format!("{at}: a whole identification file, but: {e}"));
                }
            }
            _ => {}
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Where the parsers list the values a string key takes: (source file, the text just before
/// the list in the error message, the table whose section must name every value).
const ENUMERATIONS: &[(&str, &str, &str)] = &[
    ("src/problem.rs", "box `cell` = '{}': expected ", "mesh.box"),
    ("src/problem.rs", "mesh.actuator.cell = '{c}': expected ", "mesh.actuator"),
    ("src/problem.rs", "': `axis` = '{other}': expected ", "mesh.plane_group"),
    ("src/problem.rs", "unknown boundary condition kind '{other}'; expected ", "thermal.bc"),
    ("src/problem.rs", "component '{other}': expected ", "mechanical.bc"),
    ("src/problem.rs", "component '{other}': expected ", "hyperelastic.bc"),
    ("src/problem.rs", "unknown mechanical condition kind '{other}'; expected ", "mechanical.bc"),
    ("src/problem.rs", "unknown mechanical condition kind '{other}'; expected ", "hyperelastic.bc"),
    ("src/app.rs", "unknown terminal kind '{other}'; expected ", "electrical.terminal"),
    ("src/app.rs", "unknown objective kind '{other}'; expected ", "objective"),
    ("src/app.rs", "unknown objective kind '{other}'; expected ", "optimize.constraint"),
    ("coupling/src/problem.rs", "unknown coupling scheme '{other}'; expected ", "coupling"),
    ("coupling/src/error.rs", "unknown linear solver '{other}'; expected ", "solver"),
    ("src/hyperelastic_file.rs", "volumetric '{other}': expected ", "hyperelastic.material"),
    ("src/hyperelastic_file.rs", "law '{other}': expected ", "hyperelastic.material"),
    ("src/hyperelastic_file.rs", "is not one of a hyperelastic problem's: ", "objective"),
    ("src/transient_file.rs", "[transient] scheme '{other}': expected ", "transient"),
    ("src/transient_file.rs", "[transient] mass '{other}': expected ", "transient"),
    ("src/transient_file.rs", "[transient] objective '{other}': expected ", "transient"),
    ("coupling/src/shape.rs", "axis '{other}': expected ", "morph"),
    ("src/uq.rs", "distribution '{other}': expected ", "uq.input"),
    ("src/uq.rs", "design '{}': expected ", "uq"),
    ("src/uq.rs", "rule '{other}': expected ", "uq.stop"),
    ("src/identify.rs", "experiment mode '{}': expected ", "identify:experiment"),
    ("src/identify.rs", "model.kind '{other}': expected ", "identify:model"),
];

/// The values of a message's list: "a, b or c" up to the end of the string literal.
fn listed_values(source: &str, anchor: &str) -> Option<Vec<String>> {
    let at = source.find(anchor)? + anchor.len();
    let rest = &source[at..];
    let list = &rest[..rest.find('"')?];
    Some(
        list.split(", ")
            .flat_map(|p| p.split(" or "))
            .map(|v| v.trim().trim_end_matches(['.', ')', ';']).to_string())
            .filter(|v| !v.is_empty())
            .collect(),
    )
}

#[test]
fn every_enumerated_value_is_documented() {
    let doc = reference();
    let sections = sections(&doc);
    let mut failures = Vec::new();
    for (file, anchor, path) in ENUMERATIONS {
        let source = std::fs::read_to_string(root().join(file)).expect("source file");
        let Some(values) = listed_values(&source, anchor) else {
            failures.push(format!(
                "{file} no longer has the message \"{anchor}…\": update ENUMERATIONS in \
                 tests/problem_file_reference.rs"
            ));
            continue;
        };
        let (part, table) = match path.strip_prefix("identify:") {
            Some(t) => (Part::Identify, t),
            None => (Part::Problem, *path),
        };
        let found = section_of(&sections, part, table);
        let [section] = found.as_slice() else {
            failures.push(format!("no single section for {}", shown(table)));
            continue;
        };
        let text = section.body.join("\n");
        for v in values {
            if !text.contains(&format!("`{v}`")) {
                failures.push(format!(
                    "{file} accepts `{v}` for a key of {}, which the section \"{}\" does not name",
                    shown(table),
                    section.heading
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Every shipped example parses: problem files as problems, identification files (an
/// `[[experiment]]` table) as identification files. (tests/examples.rs builds, solves and
/// Taylor-tests the problems; this only parses, so it also covers the identification files.)
#[test]
fn every_shipped_example_parses() {
    let mut files: Vec<PathBuf> = std::fs::read_dir(root().join("examples"))
        .expect("examples/")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "toml"))
        .collect();
    files.sort();
    assert!(files.len() >= 10, "{files:?}");
    let mut failures = Vec::new();
    for path in &files {
        let text = std::fs::read_to_string(path).expect("readable");
        let table: toml::Table = toml::from_str(&text).unwrap_or_else(|e| panic!("{e}"));
        let result = if table.contains_key("experiment") {
            toml::from_str::<IdentifySpec>(&text).map(|_| ()).map_err(|e| e.to_string())
        } else {
            ProblemFile::parse(path, text).map(|_| ()).map_err(|e| e.to_string())
        };
        if let Err(e) = result {
            failures.push(format!("{}: {e}", path.display()));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
