//! `mpirun -n R gradfem uq FILE` (cargo feature `mpi`): the ranks share the samples.
//!
//! The chunks go round-robin: in round k rank r computes chunk kR + r (unless it is written
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

use std::path::Path;

use mpi::traits::*;

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

/// Run the study across the ranks; rank 0 returns the reduced result, the others `None`.
pub fn run(study: &mut Study, out: &Path, quiet: bool) -> Result<Option<Reduced>, UqError> {
    let universe = mpi::initialize()
        .ok_or_else(|| UqError::Parts("MPI was initialized already in this process".into()))?;
    let world = universe.world();
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
