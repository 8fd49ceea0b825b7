//! The coupling graph: fields as nodes, transfers (one field's output feeding another's
//! residual) as directed edges.
//!
//! [`CouplingGraph::schedule`] orders the fields for the forward solve: the strongly connected
//! components of the graph (Tarjan's algorithm) in a topological order of the condensed
//! graph. A component of one field is solved alone; a component of several fields is a cycle
//! (φ ⇄ T through σ(T)) and is one strongly coupled group, solved together (monolithic Newton
//! or a staggered fixed point). The adjoint sweeps the same stages in reverse order, one
//! transposed solve per stage. Among stages that could go in either order, the one whose
//! first field was added first goes first, so the schedule is deterministic.
//!
//! Written by hand: it is a few dozen lines on graphs of a handful of nodes, and a graph crate
//! would add a dependency for one algorithm.

use std::fmt;

use thiserror::Error;

/// Errors in building a coupling graph.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum GraphError {
    #[error("coupling graph: field '{0}' is added twice")]
    DuplicateField(String),
    #[error("coupling graph: transfer '{transfer}' names the unknown field '{field}'; the fields are: {}", known.join(", "))]
    UnknownField { transfer: String, field: String, known: Vec<String> },
    #[error("coupling graph: transfer '{0}' goes from a field to itself")]
    SelfLoop(String),
    #[error("coupling graph: '{0}' is not a transfer; expected `from -> to`")]
    Syntax(String),
    #[error("coupling graph: transfer {from} -> {to} is given twice")]
    DuplicateTransfer { from: String, to: String },
}

/// A directed transfer between two fields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transfer {
    /// What is handed over (e.g. `joule_heat`, `resistivity`, `thermal_strain`).
    pub name: String,
    pub from: usize,
    pub to: usize,
}

/// Fields and transfers.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CouplingGraph {
    fields: Vec<String>,
    transfers: Vec<Transfer>,
}

/// One stage of the schedule: the fields solved together (one, or a cycle).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stage {
    /// Field indices, in the order they were added.
    pub fields: Vec<usize>,
}

impl Stage {
    /// True when the stage is a strongly coupled group (a cycle of several fields).
    pub fn is_coupled(&self) -> bool {
        self.fields.len() > 1
    }
}

impl CouplingGraph {
    /// An empty graph.
    pub fn new() -> Self {
        Self::default()
    }

    /// Add a field; returns its index.
    pub fn add_field(&mut self, name: &str) -> Result<usize, GraphError> {
        if self.fields.iter().any(|f| f == name) {
            return Err(GraphError::DuplicateField(name.into()));
        }
        self.fields.push(name.into());
        Ok(self.fields.len() - 1)
    }

    /// The index of a field.
    pub fn field(&self, name: &str) -> Option<usize> {
        self.fields.iter().position(|f| f == name)
    }

    /// Field names, in the order added.
    pub fn fields(&self) -> &[String] {
        &self.fields
    }

    /// Transfers, in the order added.
    pub fn transfers(&self) -> &[Transfer] {
        &self.transfers
    }

    /// Add the transfer `from -> to` named `name`.
    pub fn add_transfer(&mut self, name: &str, from: &str, to: &str) -> Result<(), GraphError> {
        let find = |f: &str| {
            self.field(f).ok_or_else(|| GraphError::UnknownField {
                transfer: name.into(),
                field: f.into(),
                known: self.fields.clone(),
            })
        };
        let (a, b) = (find(from)?, find(to)?);
        if a == b {
            return Err(GraphError::SelfLoop(name.into()));
        }
        if self.transfers.iter().any(|t| t.from == a && t.to == b) {
            return Err(GraphError::DuplicateTransfer { from: from.into(), to: to.into() });
        }
        self.transfers.push(Transfer { name: name.into(), from: a, to: b });
        Ok(())
    }

    /// Whether the transfer `from -> to` exists.
    pub fn has_transfer(&self, from: &str, to: &str) -> bool {
        match (self.field(from), self.field(to)) {
            (Some(a), Some(b)) => self.transfers.iter().any(|t| t.from == a && t.to == b),
            _ => false,
        }
    }

    /// The forward schedule: strongly connected components in topological order (module
    /// docs).
    pub fn schedule(&self) -> Vec<Stage> {
        let n = self.fields.len();
        let mut succ = vec![Vec::new(); n];
        for t in &self.transfers {
            succ[t.from].push(t.to);
        }
        let comp = tarjan(&succ);
        let n_comp = comp.iter().copied().max().map_or(0, |m| m + 1);
        // Condensed graph and in-degrees.
        let mut members = vec![Vec::new(); n_comp];
        for (v, &c) in comp.iter().enumerate() {
            members[c].push(v);
        }
        let mut indeg = vec![0usize; n_comp];
        let mut edges = vec![Vec::new(); n_comp];
        for t in &self.transfers {
            let (a, b) = (comp[t.from], comp[t.to]);
            if a != b && !edges[a].contains(&b) {
                edges[a].push(b);
                indeg[b] += 1;
            }
        }
        // Kahn's algorithm, always taking the ready component with the smallest first field.
        let mut order = Vec::with_capacity(n_comp);
        let mut ready: Vec<usize> = (0..n_comp).filter(|&c| indeg[c] == 0).collect();
        while !ready.is_empty() {
            ready.sort_by_key(|&c| std::cmp::Reverse(members[c][0]));
            let c = ready.pop().expect("non-empty");
            order.push(Stage { fields: members[c].clone() });
            for &d in &edges[c] {
                indeg[d] -= 1;
                if indeg[d] == 0 {
                    ready.push(d);
                }
            }
        }
        order
    }

    /// Parse `"from -> to"`.
    pub fn parse_transfer(s: &str) -> Result<(String, String), GraphError> {
        let (a, b) = s.split_once("->").ok_or_else(|| GraphError::Syntax(s.into()))?;
        let (a, b) = (a.trim(), b.trim());
        if a.is_empty() || b.is_empty() {
            return Err(GraphError::Syntax(s.into()));
        }
        Ok((a.into(), b.into()))
    }

    /// Field names of each stage, for reports.
    pub fn schedule_names(&self) -> Vec<Vec<String>> {
        self.schedule()
            .iter()
            .map(|s| s.fields.iter().map(|&f| self.fields[f].clone()).collect())
            .collect()
    }
}

/// The schedule as text: stages in order, a cycle in brackets (`[electrical ⇄ thermal]`), an
/// arrow before a stage that some earlier stage feeds and a comma before one that no earlier
/// stage feeds (`electrical → thermal → mechanical`, `thermal, hyperelastic`).
impl fmt::Display for CouplingGraph {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let schedule = self.schedule();
        for (k, stage) in schedule.iter().enumerate() {
            if k > 0 {
                let fed = self.transfers.iter().any(|t| {
                    stage.fields.contains(&t.to)
                        && schedule[..k].iter().any(|s| s.fields.contains(&t.from))
                });
                write!(f, "{}", if fed { " → " } else { ", " })?;
            }
            let names: Vec<&str> = stage.fields.iter().map(|&i| self.fields[i].as_str()).collect();
            if names.len() == 1 {
                write!(f, "{}", names[0])?;
            } else {
                write!(f, "[{}]", names.join(" ⇄ "))?;
            }
        }
        Ok(())
    }
}

/// Component index of every vertex (Tarjan's strongly connected components, iterative).
fn tarjan(succ: &[Vec<usize>]) -> Vec<usize> {
    let n = succ.len();
    const UNSEEN: usize = usize::MAX;
    let mut index = vec![UNSEEN; n];
    let mut low = vec![0; n];
    let mut on_stack = vec![false; n];
    let mut stack = Vec::new();
    let mut comp = vec![UNSEEN; n];
    let (mut next_index, mut next_comp) = (0, 0);
    for root in 0..n {
        if index[root] != UNSEEN {
            continue;
        }
        // (vertex, next successor position)
        let mut call: Vec<(usize, usize)> = vec![(root, 0)];
        index[root] = next_index;
        low[root] = next_index;
        next_index += 1;
        stack.push(root);
        on_stack[root] = true;
        while let Some(&mut (v, ref mut i)) = call.last_mut() {
            if *i < succ[v].len() {
                let w = succ[v][*i];
                *i += 1;
                if index[w] == UNSEEN {
                    index[w] = next_index;
                    low[w] = next_index;
                    next_index += 1;
                    stack.push(w);
                    on_stack[w] = true;
                    call.push((w, 0));
                } else if on_stack[w] {
                    low[v] = low[v].min(index[w]);
                }
            } else {
                call.pop();
                if let Some(&(u, _)) = call.last() {
                    low[u] = low[u].min(low[v]);
                }
                if low[v] == index[v] {
                    loop {
                        let w = stack.pop().expect("on the stack");
                        on_stack[w] = false;
                        comp[w] = next_comp;
                        if w == v {
                            break;
                        }
                    }
                    next_comp += 1;
                }
            }
        }
    }
    comp
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    fn graph(fields: &[&str], transfers: &[(&str, &str)]) -> CouplingGraph {
        let mut g = CouplingGraph::new();
        for f in fields {
            g.add_field(f).unwrap();
        }
        for (a, b) in transfers {
            g.add_transfer(&format!("{a}_{b}"), a, b).unwrap();
        }
        g
    }

    #[test]
    fn the_electro_thermo_mechanical_chain_is_ordered() {
        let g = graph(
            &["mechanical", "thermal", "electrical"],
            &[("electrical", "thermal"), ("thermal", "mechanical")],
        );
        assert_eq!(
            g.schedule_names(),
            vec![vec!["electrical"], vec!["thermal"], vec!["mechanical"]]
        );
        assert_eq!(g.to_string(), "electrical → thermal → mechanical");
    }

    #[test]
    fn a_cycle_is_one_coupled_stage() {
        let g = graph(
            &["electrical", "thermal", "mechanical"],
            &[("electrical", "thermal"), ("thermal", "electrical"), ("thermal", "mechanical")],
        );
        let s = g.schedule();
        assert_eq!(s.len(), 2);
        assert!(s[0].is_coupled() && !s[1].is_coupled());
        assert_eq!(g.schedule_names(), vec![vec!["electrical", "thermal"], vec!["mechanical"]]);
        assert_eq!(g.to_string(), "[electrical ⇄ thermal] → mechanical");
    }

    #[test]
    fn a_stage_no_earlier_stage_feeds_follows_a_comma() {
        let g = graph(&["thermal", "hyperelastic"], &[]);
        assert_eq!(g.to_string(), "thermal, hyperelastic");
        let g = graph(&["a", "b", "c"], &[("a", "c")]);
        assert_eq!(g.to_string(), "a, b → c");
    }

    #[rstest]
    #[case::independent(&[], vec![vec!["a"], vec!["b"], vec!["c"], vec!["d"]])]
    #[case::diamond(&[("a", "b"), ("a", "c"), ("b", "d"), ("c", "d")], vec![vec!["a"], vec!["b"], vec!["c"], vec!["d"]])]
    #[case::reversed(&[("d", "c"), ("c", "b"), ("b", "a")], vec![vec!["d"], vec!["c"], vec!["b"], vec!["a"]])]
    #[case::long_cycle(&[("a", "b"), ("b", "c"), ("c", "a"), ("c", "d")], vec![vec!["a", "b", "c"], vec!["d"]])]
    #[case::two_cycles(&[("d", "c"), ("c", "d"), ("b", "a"), ("a", "b"), ("c", "a")], vec![vec!["c", "d"], vec!["a", "b"]])]
    fn schedules_respect_every_transfer(
        #[case] transfers: &[(&str, &str)],
        #[case] want: Vec<Vec<&str>>,
    ) {
        let g = graph(&["a", "b", "c", "d"], transfers);
        assert_eq!(g.schedule_names(), want);
        // Every transfer goes forward or stays inside a stage.
        let s = g.schedule();
        let stage_of = |f: usize| s.iter().position(|st| st.fields.contains(&f)).unwrap();
        for t in g.transfers() {
            assert!(stage_of(t.from) <= stage_of(t.to));
        }
    }

    #[test]
    fn bad_graphs_are_errors() {
        let mut g = graph(&["a", "b"], &[]);
        assert_eq!(g.add_field("a"), Err(GraphError::DuplicateField("a".into())));
        assert!(matches!(g.add_transfer("x", "a", "z"), Err(GraphError::UnknownField { .. })));
        assert_eq!(g.add_transfer("x", "a", "a"), Err(GraphError::SelfLoop("x".into())));
        g.add_transfer("x", "a", "b").unwrap();
        assert!(matches!(g.add_transfer("y", "a", "b"), Err(GraphError::DuplicateTransfer { .. })));
        assert!(g.has_transfer("a", "b") && !g.has_transfer("b", "a"));
        assert_eq!(
            CouplingGraph::parse_transfer(" thermal ->mechanical "),
            Ok(("thermal".into(), "mechanical".into()))
        );
        assert!(CouplingGraph::parse_transfer("thermal mechanical").is_err());
        assert!(CouplingGraph::parse_transfer("-> b").is_err());
    }
}
