//! The adjoint tape: coarse blocks recorded in forward order and walked in reverse.
//!
//! After pyadjoint's design, with coarse blocks: one block per field solve (or per strongly
//! coupled group solved monolithically), per transfer between fields (Joule heat, thermal
//! strain) and per functional. A block keeps what it needs from the forward pass (for a solve:
//! the factorization at the converged state, held by the problem it belongs to). The reverse
//! pass hands each block the adjoints of its outputs; the block adds the adjoints of its inputs
//! and its contribution to the parameter gradient. The tape is passed explicitly; there is no
//! global state.
//!
//! Memory: the tape stores one adjoint vector per variable and one gradient entry per
//! registered parameter entry; nothing of size (parameters × unknowns) is ever formed.

use crate::error::SolverError;
use crate::params::{Gradient, ParamRegistry};

/// Index of a variable (a nodal field or any vector) on the tape.
pub type VarId = usize;

/// Time spent in one block's adjoint.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct BlockTiming {
    pub block: String,
    /// Transposed linear solve(s).
    pub solve_s: f64,
    /// Element-wise vector-Jacobian products.
    pub accumulate_s: f64,
}

/// Adjoint state of a reverse pass: one adjoint vector per tape variable and the gradient with
/// respect to every registered parameter.
#[derive(Clone, Debug)]
pub struct Adjoints {
    pub vars: Vec<Vec<f64>>,
    pub grad: Gradient,
}

impl Adjoints {
    /// Zero adjoints for variables of the given lengths and a zero gradient.
    pub fn new(registry: &ParamRegistry, var_lens: &[usize]) -> Self {
        Adjoints {
            vars: var_lens.iter().map(|&n| vec![0.0; n]).collect(),
            grad: Gradient::zeros(registry),
        }
    }
}

/// One coarse operation of the forward computation, differentiable in reverse. `C` is the
/// context the block works in (the problem that owns models, solvers and parameters).
pub trait Block<C>: Send {
    /// A short name for timings and logs.
    fn name(&self) -> &str;
    /// Reverse step: read the adjoints of this block's outputs from `adj.vars`, add the adjoints
    /// of its inputs and its parameter derivatives.
    fn adjoint(&mut self, ctx: &mut C, adj: &mut Adjoints) -> Result<BlockTiming, SolverError>;
}

/// The tape: variables and blocks in forward order.
pub struct Tape<C> {
    names: Vec<String>,
    lens: Vec<usize>,
    blocks: Vec<Box<dyn Block<C>>>,
}

impl<C> Default for Tape<C> {
    fn default() -> Self {
        Tape { names: Vec::new(), lens: Vec::new(), blocks: Vec::new() }
    }
}

impl<C> Tape<C> {
    /// An empty tape.
    pub fn new() -> Self {
        Self::default()
    }

    /// Declare a variable of `len` entries; returns its id.
    pub fn add_variable(&mut self, name: &str, len: usize) -> VarId {
        self.names.push(name.to_string());
        self.lens.push(len);
        self.lens.len() - 1
    }

    /// Lengths of the variables, by id.
    pub fn variable_lens(&self) -> &[usize] {
        &self.lens
    }

    /// Names of the variables, by id.
    pub fn variable_names(&self) -> &[String] {
        &self.names
    }

    /// Record a block (in forward order).
    pub fn push(&mut self, block: Box<dyn Block<C>>) {
        self.blocks.push(block);
    }

    /// Number of blocks.
    pub fn len(&self) -> usize {
        self.blocks.len()
    }

    /// True when no block is recorded.
    pub fn is_empty(&self) -> bool {
        self.blocks.is_empty()
    }

    /// Walk the blocks in reverse order, each adding to `adj`; returns their timings in the
    /// order they ran.
    pub fn reverse(
        &mut self,
        ctx: &mut C,
        adj: &mut Adjoints,
    ) -> Result<Vec<BlockTiming>, SolverError> {
        assert_eq!(
            adj.vars.len(),
            self.lens.len(),
            "adjoints hold {} variables, the tape {}",
            adj.vars.len(),
            self.lens.len()
        );
        let mut timings = Vec::with_capacity(self.blocks.len());
        for block in self.blocks.iter_mut().rev() {
            let t = block.adjoint(ctx, adj)?;
            tracing::debug!(
                block = block.name(),
                solve_s = t.solve_s,
                accumulate_s = t.accumulate_s,
                "adjoint block"
            );
            timings.push(t);
        }
        Ok(timings)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::params::ParamSpec;

    /// y = a·x with x a tape variable and a a parameter; the block keeps its forward input.
    /// Reverse: x̄ += a ȳ, ā += x ȳ.
    struct Scale {
        x: VarId,
        y: VarId,
        x_value: f64,
    }
    struct Ctx {
        a: f64,
        reg: ParamRegistry,
    }
    impl Block<Ctx> for Scale {
        fn name(&self) -> &str {
            "scale"
        }
        fn adjoint(
            &mut self,
            ctx: &mut Ctx,
            adj: &mut Adjoints,
        ) -> Result<BlockTiming, SolverError> {
            let yb = adj.vars[self.y][0];
            adj.vars[self.x][0] += ctx.a * yb;
            let id = ctx.reg.id("a").unwrap();
            adj.grad.get_mut(id)[0] += self.x_value * yb;
            Ok(BlockTiming { block: "scale".into(), ..Default::default() })
        }
    }

    #[test]
    fn reverse_walks_blocks_backwards_and_chains_adjoints() {
        let mut reg = ParamRegistry::new();
        reg.register(ParamSpec::scalar("a", 3.0)).unwrap();
        let mut ctx = Ctx { a: 3.0, reg };
        let mut tape: Tape<Ctx> = Tape::new();
        let x = tape.add_variable("x", 1);
        let y = tape.add_variable("y", 1);
        let z = tape.add_variable("z", 1);
        // Forward with x = 2: y = a x = 6, z = a y = 18 = a² x.
        tape.push(Box::new(Scale { x, y, x_value: 2.0 }));
        tape.push(Box::new(Scale { x: y, y: z, x_value: 6.0 }));
        let mut adj = Adjoints::new(&ctx.reg, tape.variable_lens());
        adj.vars[z][0] = 1.0;
        let timings = tape.reverse(&mut ctx, &mut adj).unwrap();
        assert_eq!(timings.len(), 2);
        // dz/dx = a² = 9, dz/da = 2 a x = 12.
        assert_eq!(adj.vars[x][0], 9.0);
        assert_eq!(adj.grad.get(ctx.reg.id("a").unwrap())[0], 12.0);
        assert_eq!(tape.len(), 2);
    }
}
