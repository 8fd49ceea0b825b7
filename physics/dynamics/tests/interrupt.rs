//! A stop request ends a run at the next step, forward or back, names that step, and leaves the
//! next run unaffected once it is withdrawn. (Its own test binary: the request is process-wide.)

use gradfem_dynamics::prelude::*;
use gradfem_solvers::interrupt;
use gradfem_solvers::params::ParamSpec;

/// One particle on a spring; a user force that requests a stop while computing step
/// `forward_stop` (forward) or the VJP of step `adjoint_stop` (reverse).
fn system(forward_stop: Option<usize>, adjoint_stop: Option<usize>) -> System {
    let mut sys = System::new();
    let k = sys.param(ParamSpec::scalar("spring.k", 3.0)).unwrap();
    let a = sys.add_body(1.0);
    sys.add_force(Spring {
        a: Anchor::Body(a),
        b: Anchor::Fixed([0.0; 3]),
        k,
        rest_length: 1.0.into(),
    });
    let step_of = |t: f64| (t / 0.01).round() as usize;
    sys.add_force(UserForce::new(
        move |_x, ctx, _f| {
            if forward_stop == Some(step_of(ctx.t)) {
                interrupt::request();
            }
        },
        move |_x, ctx, _fb, _xb, _pb| {
            if adjoint_stop == Some(step_of(ctx.t)) {
                interrupt::request();
            }
        },
    ));
    sys
}

fn x0() -> State {
    let mut s = State::at_rest(1);
    s.position = vec![[1.5, 0.0, 0.0]];
    s
}

fn objective() -> FinalState {
    let mut w = State::zeros(1);
    w.position = vec![[1.0; 3]];
    FinalState { target: State::zeros(1), weight: w }
}

#[test]
fn a_stop_request_ends_the_run_at_the_next_step_and_is_withdrawn() {
    interrupt::clear();
    // Forward: requested during step 7, seen before step 8.
    let sys = system(Some(7), None);
    let sim = Simulation::new(&sys, ExplicitEuler, 0.01, 20);
    let err = sim.run(&x0()).unwrap_err();
    assert!(matches!(err, DynamicsError::Interrupted { sweep: "forward", step: 8 }), "{err}");
    assert_eq!(err.to_string(), "dynamics: interrupted at forward step 8");
    interrupt::clear();

    // Back: requested in the VJP of step 12, seen before the adjoint step 11.
    let sys = system(None, Some(12));
    let sim = Simulation::new(&sys, ExplicitEuler, 0.01, 20);
    let err = sim.gradient(&x0(), &objective(), Memory::StoreAll).unwrap_err();
    assert!(matches!(err, DynamicsError::Interrupted { sweep: "adjoint", step: 11 }), "{err}");
    interrupt::clear();

    // Withdrawn, the same runs complete and agree with a system that never asked.
    let quiet = system(None, None);
    let reference = Simulation::new(&quiet, ExplicitEuler, 0.01, 20)
        .gradient(&x0(), &objective(), Memory::StoreAll)
        .unwrap();
    let again = Simulation::new(&quiet, ExplicitEuler, 0.01, 20)
        .gradient(&x0(), &objective(), Memory::StoreAll)
        .unwrap();
    assert_eq!(reference.value, again.value);
    assert!(Simulation::new(&quiet, ExplicitEuler, 0.01, 20).run(&x0()).is_ok());
}
