mod common;
use common::*;
use gradfem_dynamics::prelude::*;
use gradfem_solvers::params::ParamVector;
#[test]
fn dbg() {
    for (name, integ_id) in [("rk4", 0), ("euler", 1)] {
    let mut sys = two_body_system(1e-2);
    let x0 = two_body_x0();
    let (dt, n) = if integ_id == 0 { (2e-3, 150) } else { (5e-4, 600) };
    let obj = test_objective(n);
    let g = if integ_id == 0 { Simulation::new(&sys, Rk4, dt, n).gradient(&x0, &obj, Memory::StoreAll).unwrap() } else { Simulation::new(&sys, ExplicitEuler, dt, n).gradient(&x0, &obj, Memory::StoreAll).unwrap() };
    let pv = ParamVector::all(&sys.registry);
    let mut m = pv.gather(&sys.registry);
    m.extend(x0.to_flat());
    let gk = g.params.flatten(&pv);
    for i in [1usize, 2] {
        for d in [1e-2, 1e-3, 1e-4, 1e-5, 1e-6] {
            let mut mp = m.clone(); mp[i] += d;
            let jp = if integ_id == 0 { j_of(&mut sys, Rk4, dt, n, &obj, &mp) } else { j_of(&mut sys, ExplicitEuler, dt, n, &obj, &mp) };
            mp[i] -= 2.0*d;
            let jm = if integ_id == 0 { j_of(&mut sys, Rk4, dt, n, &obj, &mp) } else { j_of(&mut sys, ExplicitEuler, dt, n, &obj, &mp) };
            let fd = (jp-jm)/(2.0*d);
            eprintln!("{name} {} d={d:e} fd={fd:.12e} adj={:.12e} rel={:.2e} J={jp}", pv.entry_name(i), gk[i], (fd-gk[i]).abs()/gk[i].abs());
        }
    }
    }
}
