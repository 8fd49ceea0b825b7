//! Parameter registry: registration errors, lookups with suggestions, glob selection,
//! ParamVector layout and gather/scatter, Gradient shapes.

use gradfem_solvers::params::{
    Gradient, ParamError, ParamKind, ParamRegistry, ParamSpec, ParamVector,
};
use rstest::rstest;

fn registry() -> ParamRegistry {
    let mut reg = ParamRegistry::new();
    reg.register(ParamSpec::scalar("thermal.k.silicon", 148.0).with_bounds(Some(0.0), None))
        .unwrap();
    reg.register(ParamSpec::scalar("thermal.k.oxide", 1.4).with_bounds(Some(0.0), None)).unwrap();
    reg.register(ParamSpec::scalar("bc.anchor.h", 1e4).with_doc("film coefficient", "W/(m2 K)"))
        .unwrap();
    reg.register(ParamSpec::scalar("load.terminal.current", 0.02)).unwrap();
    reg.register(ParamSpec::scalar("ogden.mu1", 1.2e5).with_bounds(Some(0.0), Some(1e7))).unwrap();
    reg.register(
        ParamSpec::vector(
            "thermal.kappa.domain",
            ParamKind::PerElement { group: "domain".into() },
            vec![0.5; 20],
        )
        .with_bounds(Some(0.0), Some(1.0)),
    )
    .unwrap();
    reg.register(ParamSpec::vector("mesh.x", ParamKind::NodeCoordinates, vec![0.0, 1.0, 2.0]))
        .unwrap();
    reg.register(ParamSpec::scalar("body.3.mass", 2.5)).unwrap();
    reg
}

#[test]
fn unknown_name_lists_known_and_suggests_closest() {
    let reg = registry();
    let err = reg.id("thermal.k.silicn").unwrap_err();
    match &err {
        ParamError::Unknown { name, known, suggestion } => {
            assert_eq!(name, "thermal.k.silicn");
            assert_eq!(known.len(), reg.len());
            assert_eq!(suggestion.as_deref(), Some("thermal.k.silicon"));
        }
        other => panic!("expected Unknown, got {other:?}"),
    }
    let msg = err.to_string();
    for n in reg.names() {
        assert!(msg.contains(n), "message lacks {n}: {msg}");
    }
    assert!(msg.contains("did you mean `thermal.k.silicon`"), "{msg}");
}

#[rstest]
#[case("ogden.mu2", Some("ogden.mu1"))]
#[case("bc.anchr.h", Some("bc.anchor.h"))]
#[case("completely.unrelated.name.here", None)]
fn suggestions(#[case] asked: &str, #[case] expected: Option<&str>) {
    let reg = registry();
    let Err(ParamError::Unknown { suggestion, .. }) = reg.id(asked) else { panic!("not unknown") };
    assert_eq!(suggestion.as_deref(), expected);
}

#[test]
fn empty_registry_unknown_message() {
    let reg = ParamRegistry::new();
    let msg = reg.id("a.b").unwrap_err().to_string();
    assert!(msg.contains("no parameters are registered"), "{msg}");
}

#[rstest]
#[case::duplicate(ParamSpec::scalar("bc.anchor.h", 1.0), "Duplicate")]
#[case::empty_segment(ParamSpec::scalar("bc..h", 1.0), "InvalidName")]
#[case::whitespace(ParamSpec::scalar("bc.anchor h", 1.0), "InvalidName")]
#[case::nan(ParamSpec::scalar("a.nan", f64::NAN), "NotFinite")]
#[case::below(ParamSpec::scalar("a.low", -1.0).with_bounds(Some(0.0), None), "OutOfBounds")]
#[case::above(ParamSpec::vector("a.v", ParamKind::Field, vec![0.0, 2.0]).with_bounds(None, Some(1.0)), "OutOfBounds")]
#[case::bounds(ParamSpec::scalar("a.b", 1.0).with_bounds(Some(2.0), Some(0.0)), "InvalidBounds")]
#[case::scalar_len(ParamSpec { values: vec![1.0, 2.0], ..ParamSpec::scalar("a.s", 0.0) }, "LengthMismatch")]
#[case::empty(ParamSpec::vector("a.e", ParamKind::Field, vec![]), "LengthMismatch")]
#[case::coords(ParamSpec::vector("a.c", ParamKind::NodeCoordinates, vec![0.0; 4]), "LengthMismatch")]
fn registration_errors(#[case] spec: ParamSpec, #[case] kind: &str) {
    let mut reg = registry();
    let n = reg.len();
    let err = reg.register(spec).unwrap_err();
    assert!(format!("{err:?}").starts_with(kind), "expected {kind}, got {err:?}");
    assert_eq!(reg.len(), n, "a failed registration must not register");
}

#[test]
fn out_of_bounds_error_names_entry() {
    let mut reg = registry();
    let id = reg.id("thermal.kappa.domain").unwrap();
    let mut v = vec![0.5; 20];
    v[7] = 1.5;
    let err = reg.set_values(id, &v).unwrap_err();
    assert_eq!(
        err,
        ParamError::OutOfBounds {
            name: "thermal.kappa.domain".into(),
            index: 7,
            value: 1.5,
            lower: Some(0.0),
            upper: Some(1.0)
        }
    );
    assert!(err.to_string().contains("entry 7"));
    assert_eq!(reg.values(id), &[0.5; 20][..], "nothing written on error");
    assert!(matches!(
        reg.set_values(id, &[0.5; 3]),
        Err(ParamError::LengthMismatch { expected: 20, got: 3, .. })
    ));
}

#[rstest]
#[case("*", 8)]
#[case("thermal.*", 3)]
#[case("thermal.k.*", 2)]
#[case("*.mu1", 1)]
#[case("body.*.mass", 1)]
#[case("nothing.*", 0)]
fn matching_patterns(#[case] pattern: &str, #[case] count: usize) {
    let reg = registry();
    let ids = reg.matching(pattern);
    assert_eq!(ids.len(), count, "{pattern}: {ids:?}");
    for id in ids {
        assert!(gradfem_solvers::params::name_matches(pattern, &reg.get(id).name));
    }
}

#[test]
fn try_matching_errors_on_empty() {
    let reg = registry();
    assert!(matches!(reg.try_matching("thermo.*"), Err(ParamError::Unknown { .. })));
    assert_eq!(reg.try_matching("bc.*").unwrap().len(), 1);
}

#[test]
fn param_vector_round_trip_and_layout() {
    let mut reg = registry();
    let ids = vec![
        reg.id("thermal.kappa.domain").unwrap(),
        reg.id("ogden.mu1").unwrap(),
        reg.id("mesh.x").unwrap(),
    ];
    let pv = ParamVector::new(&reg, &ids);
    assert_eq!(pv.len(), 24);
    let x0 = pv.gather(&reg);
    assert_eq!(x0[..20], [0.5; 20]);
    assert_eq!(x0[20], 1.2e5);
    assert_eq!(x0[21..], [0.0, 1.0, 2.0]);

    let x1: Vec<f64> =
        (0..24).map(|i| if i < 20 { i as f64 / 40.0 } else { 3.0 + i as f64 }).collect();
    pv.scatter(&mut reg, &x1).unwrap();
    assert_eq!(pv.gather(&reg), x1);
    assert_eq!(reg.values(ids[1]), &[23.0]);
    assert_eq!(pv.slice(ids[2], &x1), &[24.0, 25.0, 26.0]);
    assert_eq!(pv.range(ids[1]), Some(20..21));

    let (lo, hi) = pv.bounds();
    assert_eq!(lo[0], 0.0);
    assert_eq!(hi[19], 1.0);
    assert_eq!(hi[20], 1e7);
    assert_eq!(lo[21], f64::NEG_INFINITY);
    assert_eq!(hi[23], f64::INFINITY);
    assert_eq!(pv.entry_name(17), "thermal.kappa.domain[17]");
    assert_eq!(pv.entry_name(20), "ogden.mu1");
    assert_eq!(pv.entry_name(22), "mesh.x[1]");

    // A bad entry anywhere: nothing written at all.
    let mut bad = x0.clone();
    bad[22] = f64::INFINITY;
    assert!(matches!(pv.scatter(&mut reg, &bad), Err(ParamError::NotFinite { index: 1, .. })));
    assert_eq!(pv.gather(&reg), x1);
}

#[test]
fn gradient_shapes_and_flatten() {
    let reg = registry();
    let mut g = Gradient::zeros(&reg);
    let kappa = reg.id("thermal.kappa.domain").unwrap();
    let h = reg.id("bc.anchor.h").unwrap();
    assert_eq!(g.get(kappa).len(), 20);
    g.get_mut(kappa)[3] = 2.0;
    g.get_mut(h)[0] = -1.0;
    assert_eq!(g.by_name(&reg, "bc.anchor.h").unwrap(), &[-1.0]);
    assert!(g.by_name(&reg, "bc.anchor.hh").is_err());
    let pv = ParamVector::new(&reg, &[h, kappa]);
    let flat = g.flatten(&pv);
    assert_eq!(flat.len(), 21);
    assert_eq!(flat[0], -1.0);
    assert_eq!(flat[4], 2.0);
    assert_eq!(g.norm_inf(), 2.0);
    let mut g2 = g.clone();
    g2.add_scaled(2.0, &g);
    assert_eq!(g2.get(kappa)[3], 6.0);
    let entries = g.to_entries(&reg);
    assert_eq!(entries.len(), reg.len());
    assert_eq!(entries[2].name, "bc.anchor.h");
    assert_eq!(entries[2].units, "W/(m2 K)");
    assert_eq!(entries[5].kind, ParamKind::PerElement { group: "domain".into() });
}
