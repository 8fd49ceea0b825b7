//! gradfem under `mpirun` (cargo feature `mpi`): the ranks share the samples of
//! `gradfem uq` and the experiments of `gradfem identify`.
//!
//! **uq.** The chunks go round-robin: in round k rank r computes chunk kR + r (unless it is written
//! already: a rerun resumes) and sends its bytes to rank 0, which writes them to `parts/`.
//! After each round rank 0 tests the stopping rule on the samples in index order and
//! broadcasts whether to go on; at the end it computes the gradient at the means and reduces
//! exactly as an unsharded run does ([`crate::uq::reduce`]), so `uq.json` holds the same bytes
//! for any number of ranks. Each rank logs its samples to `logs/rank-<r>-of-<R>.log`. A failed
//! sample is recorded like any other; an error of rank 0 (writing parts) stops every rank at
//! the end of the round.
//!
//! The ranks read `parts/` to skip written chunks; on a cluster the output directory should
//! be on a shared file system (as it must be for the result anyway).
//!
//! **identify.** Rank r solves the FEM experiments e with e mod R = r; after every forward
//! run or Jacobian the per-experiment blocks are gathered on rank 0 and broadcast back as raw
//! f64 bytes ([`MpiSplit`]), so every rank takes the same Levenberg–Marquardt steps and rank
//! 0 writes the report. Each rank logs the experiments it solved at every exchange to
//! `logs/rank-<r>-of-<R>.log`. A failed experiment stops every rank with the same error.

use std::path::Path;

use mpi::topology::SimpleCommunicator;
use mpi::traits::*;

use crate::identify_fem::ExperimentSplit;
use crate::progress::{Progress, ProgressMode};
use crate::uq::{Log, Parts, Reduced, SampleRecord, Study, UqError, reduce, sample_line, stop_met};

/// Whether this process was started by `mpirun`/`mpiexec` (OpenMPI, MPICH or a PMIx
/// launcher set these variables).
pub fn launched_by_mpirun() -> bool {
    ["OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "MPI_LOCALNRANKS"]
        .iter()
        .any(|v| std::env::var_os(v).is_some())
}

/// The round's outcome rank 0 broadcasts.
const GO_ON: u8 = 0;
const DONE: u8 = 1;
const FAILED: u8 = 2;

/// The MPI environment of this process (MPI is finalized when it is dropped).
pub struct Ranks {
    _universe: mpi::environment::Universe,
    /// This process's rank.
    pub rank: usize,
    /// The number of ranks.
    pub size: usize,
}

impl Ranks {
    /// Initialize MPI (once per process).
    pub fn init() -> Result<Self, String> {
        let universe = mpi::initialize().ok_or("MPI was initialized already in this process")?;
        let world = universe.world();
        let (rank, size) = (world.rank() as usize, world.size() as usize);
        Ok(Ranks { _universe: universe, rank, size })
    }

    /// The experiments of an identification shared among the ranks.
    pub fn split(&self) -> Box<dyn ExperimentSplit> {
        Box::new(MpiSplit {
            world: SimpleCommunicator::world(),
            rank: self.rank,
            size: self.size,
            log: None,
        })
    }

    /// [`split`](Self::split), each rank logging the experiments it solves to
    /// `<out>/logs/rank-<r>-of-<R>.log` (appended to; kept beside the report's output set).
    pub fn split_logged(&self, out: &Path) -> Box<dyn ExperimentSplit> {
        let name = format!("rank-{}-of-{}", self.rank, self.size);
        Box::new(MpiSplit {
            world: SimpleCommunicator::world(),
            rank: self.rank,
            size: self.size,
            log: Some(std::sync::Mutex::new((Log::open(out, &name), 0))),
        })
    }

    /// Wait until every rank is here.
    pub fn barrier(&self) {
        SimpleCommunicator::world().barrier();
    }
}

/// Experiments round-robin over the ranks of `MPI_COMM_WORLD`.
pub struct MpiSplit {
    world: SimpleCommunicator,
    rank: usize,
    size: usize,
    /// This rank's log and the number of exchanges so far.
    log: Option<std::sync::Mutex<(Log, usize)>>,
}

/// Blocks as bytes: per entry the experiment (u64), a flag (1 ok, 0 error), a length (u64),
/// then the f64s (little-endian) or the error's UTF-8.
fn encode(blocks: &[(usize, Result<Vec<f64>, String>)]) -> Vec<u8> {
    let mut out = Vec::new();
    for (e, b) in blocks {
        out.extend_from_slice(&(*e as u64).to_le_bytes());
        match b {
            Ok(v) => {
                out.push(1);
                out.extend_from_slice(&(v.len() as u64).to_le_bytes());
                v.iter().for_each(|x| out.extend_from_slice(&x.to_le_bytes()));
            }
            Err(m) => {
                out.push(0);
                out.extend_from_slice(&(m.len() as u64).to_le_bytes());
                out.extend_from_slice(m.as_bytes());
            }
        }
    }
    out
}

fn decode(bytes: &[u8]) -> Vec<(usize, Result<Vec<f64>, String>)> {
    let u64_at =
        |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes")) as usize;
    let mut out = Vec::new();
    let mut at = 0;
    // The bytes were made by `encode`: a truncated tail is the only thing to guard against.
    while at + 17 <= bytes.len() {
        let e = u64_at(at);
        let ok = bytes[at + 8] == 1;
        let len = u64_at(at + 9);
        at += 17;
        if ok {
            let end = (at + 8 * len).min(bytes.len());
            let v = bytes[at..end]
                .chunks_exact(8)
                .map(|c| f64::from_le_bytes(c.try_into().expect("8 bytes")))
                .collect();
            out.push((e, Ok(v)));
            at = end;
        } else {
            let end = (at + len).min(bytes.len());
            out.push((e, Err(String::from_utf8_lossy(&bytes[at..end]).into_owned())));
            at = end;
        }
    }
    out
}

impl ExperimentSplit for MpiSplit {
    fn owns(&self, e: usize) -> bool {
        e % self.size == self.rank
    }

    fn exchange(
        &self,
        mine: Vec<(usize, Result<Vec<f64>, String>)>,
        experiments: usize,
    ) -> Vec<Result<Vec<f64>, String>> {
        if let Some(log) = &self.log {
            let mut guard = log.lock().unwrap_or_else(|e| e.into_inner());
            let (log, count) = &mut *guard;
            *count += 1;
            for (e, block) in &mine {
                log.line(&match block {
                    Ok(v) => format!("exchange {count}: experiment {e}: ok ({} values)", v.len()),
                    Err(msg) => format!("exchange {count}: experiment {e}: failed: {msg}"),
                });
            }
        }
        let root = self.world.process_at_rank(0);
        let mut all = if self.rank == 0 {
            let mut all = encode(&mine);
            for r in 1..self.size {
                let (msg, _) = self.world.process_at_rank(r as i32).receive_vec::<u8>();
                all.extend_from_slice(&msg);
            }
            all
        } else {
            root.send(&encode(&mine)[..]);
            Vec::new()
        };
        let mut len = [all.len() as u64];
        root.broadcast_into(&mut len[..]);
        all.resize(len[0] as usize, 0);
        root.broadcast_into(&mut all[..]);
        let mut blocks: Vec<Result<Vec<f64>, String>> =
            vec![Err("no rank sent this experiment".to_string()); experiments];
        for (e, b) in decode(&all) {
            if e < experiments {
                blocks[e] = b;
            }
        }
        blocks
    }
}

/// Run the study across the ranks; rank 0 returns the reduced result, the others `None`.
pub fn run_uq(study: &mut Study, out: &Path, quiet: bool) -> Result<Option<Reduced>, UqError> {
    let world = SimpleCommunicator::world();
    let rank = world.rank() as usize;
    let size = world.size() as usize;
    let root = world.process_at_rank(0);
    let parts = Parts::of(out);
    let plan = study.plan.clone();

    // Rank 0 starts (or checks) the parts; every rank learns whether it could.
    let mut error: Option<UqError> = None;
    let mut flag = [GO_ON];
    if rank == 0
        && let Err(e) = parts.start(&plan)
    {
        error = Some(e);
        flag[0] = FAILED;
    }
    root.broadcast_into(&mut flag[..]);
    if flag[0] == FAILED {
        return match error {
            Some(e) => Err(e),
            None => Ok(None),
        };
    }

    let mut log = Log::open(out, &format!("rank-{rank}-of-{size}"));
    let chunks = plan.chunks();
    let total = plan.max_samples() as u64;
    let pb = if rank == 0 {
        Progress::bar(ProgressMode::detect(quiet), &format!("uq samples ({size} ranks)"), total)
    } else {
        Progress::hidden()
    };
    let mut received: u64 = 0;
    let mut so_far: Vec<SampleRecord> = Vec::new();
    for round in 0..chunks.div_ceil(size) {
        let mine = round * size + rank;
        let bytes = if mine < chunks && !parts.has_chunk(mine) {
            let chunk = study.chunk(mine, |r| log.line(&sample_line(r)));
            log.line(&format!("chunk {mine}: computed"));
            Parts::chunk_bytes(&chunk)
        } else {
            Vec::new()
        };
        if rank == 0 {
            let mut incoming = vec![bytes];
            for r in 1..size {
                let (msg, _) = world.process_at_rank(r as i32).receive_vec::<u8>();
                incoming.push(msg);
            }
            flag[0] = GO_ON;
            for (r, msg) in incoming.iter().enumerate() {
                let c = round * size + r;
                if c >= chunks {
                    break;
                }
                if !msg.is_empty()
                    && let Err(e) = parts.write_chunk_bytes(c, msg)
                {
                    error = Some(e);
                    flag[0] = FAILED;
                    break;
                }
                match parts.read_chunk(&plan, c) {
                    Ok(chunk) => {
                        received += chunk.samples.len() as u64;
                        for s in chunk.samples.iter().filter(|s| s.error.is_some()) {
                            pb.log(format!(
                                "sample {} failed: {}",
                                s.index,
                                s.error.as_deref().unwrap_or("")
                            ));
                        }
                        so_far.extend(chunk.samples);
                    }
                    Err(e) => {
                        error = Some(e);
                        flag[0] = FAILED;
                        break;
                    }
                }
                if stop_met(&plan, &so_far) {
                    flag[0] = DONE;
                    break;
                }
            }
            pb.set_position(received.min(total));
        } else {
            root.send(&bytes[..]);
        }
        root.broadcast_into(&mut flag[..]);
        match flag[0] {
            DONE => break,
            FAILED => {
                return match error {
                    Some(e) => Err(e),
                    None => Ok(None),
                };
            }
            _ => {}
        }
    }
    pb.finish();
    if rank != 0 {
        return Ok(None);
    }
    if plan.sensitivities && !parts.has_mean() {
        let m = study.mean_part()?;
        parts.write_mean(&m)?;
        log.line("mean.json: written (gradient at the means)");
    }
    reduce(out).map(Some)
}
