use super::*;
use crate::fields::vorticity;
use crate::solver::Solver;

/// A channel with an inflow from x_min, walls at y and a box in the stream, after some steps:
/// a flow with shear, walls and an obstacle next to the probed cells.
fn channel(extra: &str) -> Box<dyn Solver> {
    let text = format!(
        "[domain]\nsize = [48, 20]\n[boundaries]\nx_min = {{ type = \"inlet\", velocity = [0.05, 0.0] }}\nx_max = \"outlet\"\n\
         y_min = \"wall\"\ny_max = \"wall\"\n[fluid]\ntau = 0.6\n[initial]\nvelocity = [0.05, 0.0]\n\
         [[obstacles]]\nshape = \"box\"\nmin = [12, 7]\nmax = [15, 11]\n{extra}"
    );
    let ls = crate::scene::from_str(&text, "channel.toml", std::path::PathBuf::new(), &[]).unwrap_or_else(|e| panic!("{e}"));
    let mut s = crate::build::cpu(&ls).unwrap_or_else(|e| panic!("{e}"));
    s.step(150).unwrap();
    s
}

/// Cells of every kind: the bulk, next to the box, inside it, on a wall, at the inlet and the
/// outlet (the domain's edges, where the differences wrap).
const CELLS: [[usize; 3]; 7] = [[30, 10, 0], [16, 9, 0], [13, 9, 0], [20, 0, 0], [0, 5, 0], [47, 5, 0], [11, 12, 0]];

fn assert_matches_fields(s: &dyn Solver, cells: &[[usize; 3]]) {
    let f = s.fields();
    let w = vorticity(&f);
    let got = s.probe(cells).unwrap();
    assert_eq!(got.len(), cells.len());
    for (c, p) in cells.iter().zip(&got) {
        let i = c[0] + f.size[0] * (c[1] + f.size[1] * c[2]);
        assert_eq!(p.step, s.time_step());
        if f.solid[i] {
            assert_eq!((p.u, p.rho, p.vorticity, p.pressure()), ([0.0; 3], 1.0, 0.0, 0.0), "solid cell {c:?}");
            continue;
        }
        assert_eq!(p.u, f.u[i], "u at {c:?}");
        assert_eq!(p.rho, f.rho[i], "rho at {c:?}");
        let wi = (w[i][0] * w[i][0] + w[i][1] * w[i][1] + w[i][2] * w[i][2]).sqrt();
        assert_eq!(p.vorticity, wi, "vorticity at {c:?}");
    }
}

#[test]
fn a_cpu_probe_reads_the_fields_and_the_vorticity_field_at_its_cells() {
    let s = channel("");
    assert_matches_fields(s.as_ref(), &CELLS);
    // The sampled flow is a real one: moving fluid and a wake with vorticity.
    let p = s.probe(&[[30, 10, 0], [16, 6, 0]]).unwrap();
    assert!(p[0].speed() > 0.01 && p[1].vorticity > 1e-4, "{p:?}");
    // The override (single cells from the DDFs) equals the default (the whole fields).
    assert_eq!(s.probe(&CELLS).unwrap(), sample_fields(&s.fields(), s.time_step(), &CELLS));
    // A cell outside the grid is refused, not indexed.
    let e = s.probe(&[[48, 0, 0]]).unwrap_err().to_string();
    assert!(e.contains("(48, 0, 0)") && e.contains("48 x 20 x 1"), "{e}");
    assert!(s.probe(&[]).unwrap().is_empty());
}

#[test]
fn a_probe_in_3d_and_through_the_default_method_reads_the_fields() {
    let text = "[domain]\nsize = [16, 12, 10]\n[boundaries]\nx_min = { type = \"inlet\", velocity = [0.05, 0, 0] }\n\
                x_max = \"outlet\"\n[fluid]\ntau = 0.6\n[[obstacles]]\nshape = \"sphere\"\ncenter = [6, 6, 5]\nradius = 2.5\n";
    let ls = crate::scene::from_str(text, "ball.toml", std::path::PathBuf::new(), &[]).unwrap();
    let mut s = crate::build::cpu(&ls).unwrap();
    s.step(40).unwrap();
    assert_matches_fields(s.as_ref(), &[[9, 6, 5], [6, 6, 5], [6, 6, 8], [3, 0, 9], [15, 11, 0]]);
    // Adaptive blocks take the default (from their fields).
    let amr = "[domain]\nsize = [32, 16]\n[boundaries]\nx_min = { type = \"inlet\", velocity = [0.05, 0] }\nx_max = \"outlet\"\n\
               y_min = \"wall\"\ny_max = \"wall\"\n[fluid]\ntau = 0.6\n[amr]\nenabled = true\nmax_level = 0\n\
               [[obstacles]]\nshape = \"box\"\nmin = [8, 6]\nmax = [11, 9]\n";
    let ls = crate::scene::from_str(amr, "amr.toml", std::path::PathBuf::new(), &[]).unwrap();
    let mut s = crate::build::cpu(&ls).unwrap();
    s.step(30).unwrap();
    assert_matches_fields(s.as_ref(), &[[20, 8, 0], [12, 7, 0], [9, 7, 0], [0, 3, 0]]);
}

#[test]
fn probe_positions_are_checked_with_messages_that_say_what_is_valid() {
    let n2 = [400, 100, 1];
    assert_eq!(Probe::parse("100,50", n2, 2).unwrap(), Probe { name: String::new(), cell: [100, 50, 0] });
    assert_eq!(Probe::parse(" wake = 120, 50 ", n2, 2).unwrap(), Probe { name: "wake".into(), cell: [120, 50, 0] });
    assert_eq!(Probe::parse("1,2,0", n2, 2).unwrap().cell, [1, 2, 0], "z = 0 is accepted in 2D");
    let err = |t: &str, n: [usize; 3], d: usize| Probe::parse(t, n, d).unwrap_err();
    assert_eq!(err("500,20", n2, 2), "x = 500 is outside the domain (0 to 399)");
    assert_eq!(err("5,100", n2, 2), "y = 100 is outside the domain (0 to 99)");
    assert_eq!(err("-1,20", n2, 2), "x = -1 is outside the domain (0 to 399)");
    assert_eq!(err("1,2,3", n2, 2), "z = 3 is outside the domain (0 to 0)");
    assert!(err("1.5,2", n2, 2).contains("x = 1.5 is not a whole cell index; cells are numbered 0 to 399"));
    assert!(err("1", n2, 2).contains("give X,Y in cells (this domain is 2D)"));
    assert!(err("1,2", [16, 16, 16], 3).contains("give X,Y,Z in cells (this domain is 3D)"));
    assert!(err("a,2", n2, 2).contains("\"a\" is not a number"));
    assert!(err("nan,2", n2, 2).contains("not a whole cell index"));
}

#[test]
fn probes_get_unique_column_safe_names() {
    let p = |name: &str| Probe { name: name.into(), cell: [0; 3] };
    let mut ps = vec![p("wake"), p(""), p("wake"), p("a b,c"), p("")];
    name_probes(&mut ps);
    let names: Vec<&str> = ps.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(names, ["wake", "probe1", "wake_2", "a_b_c", "probe4"]);
    // Naming again (after more probes were added) keeps the names.
    ps.push(p(""));
    name_probes(&mut ps);
    assert_eq!(ps[2].name, "wake_2");
    assert_eq!(ps[5].name, "probe5");
}

fn sample(step: u64, k: usize) -> ProbeSample {
    let t = step as f32;
    ProbeSample { step, u: [0.05 + 1e-4 * t, -0.003 * k as f32, 1.0 / 3.0], rho: 1.0 + 1e-5 * t, vorticity: 0.1 / (1.0 + t) }
}

fn series(steps: &[u64]) -> ProbeSeries {
    let probes = vec![Probe { name: "wake".into(), cell: [120, 50, 0] }, Probe { name: "probe1".into(), cell: [3, 4, 0] }];
    let mut s = ProbeSeries::new(probes, 100);
    for &t in steps {
        s.push(&[sample(t, 0), sample(t, 1)]);
    }
    s
}

#[test]
fn probes_csv_round_trips_and_resumes_before_a_step() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("probes.csv");
    let s = series(&[0, 10, 20, 30]);
    s.write_csv(&path).unwrap();
    let text = std::fs::read_to_string(&path).unwrap();
    let mut lines = text.lines();
    assert_eq!(lines.next(), Some(PROBES_CSV_HEADER));
    assert_eq!(lines.next().unwrap().split(',').take(5).collect::<Vec<_>>(), ["0", "wake", "120", "50", "0"]);
    assert_eq!(text.lines().count(), 1 + 2 * 4);
    let row: Vec<&str> = text.lines().nth(4).unwrap().split(',').collect();
    let s10 = sample(10, 1);
    assert_eq!((row[0], row[1]), ("10", "probe1"));
    assert_eq!(row[8].parse::<f32>().unwrap(), s10.speed());
    assert_eq!(row[10].parse::<f32>().unwrap(), s10.pressure());
    // Read back: every number exact.
    let mut back = series(&[]);
    assert_eq!(back.resume_csv(&path, u64::MAX).unwrap(), 4);
    for k in 0..2 {
        assert_eq!(back.samples(k), s.samples(k));
    }
    // A resume keeps the steps before its own.
    let mut back = series(&[]);
    assert_eq!(back.resume_csv(&path, 20).unwrap(), 2);
    assert_eq!(back.samples(1).iter().map(|s| s.step).collect::<Vec<_>>(), [0, 10]);
    assert_eq!(series(&[]).resume_csv(&dir.path().join("none.csv"), 20), Ok(0));
    // Another run's file is refused with its line, and the series stays empty.
    let other = vec![Probe { name: "wake".into(), cell: [121, 50, 0] }, Probe { name: "probe1".into(), cell: [3, 4, 0] }];
    let mut o = ProbeSeries::new(other, 10);
    let e = o.resume_csv(&path, 20).unwrap_err();
    assert!(e.contains("probes.csv:2") && e.contains("(120,50,0)") && e.contains("(121,50,0)"), "{e}");
    assert!(o.is_empty());
    let mut o = ProbeSeries::new(vec![Probe { name: "x".into(), cell: [0; 3] }], 10);
    let e = o.resume_csv(&path, 20).unwrap_err();
    assert!(e.contains("probe \"wake\" is not one of this run's probes (x)"), "{e}");
    std::fs::write(&path, "step,mass\n").unwrap();
    assert!(series(&[]).resume_csv(&path, 20).unwrap_err().contains("probes.csv:1: the header is not"));
    std::fs::write(&path, format!("{PROBES_CSV_HEADER}\n0,wake,120,50,0,x,0,0,0,1,0,0\n")).unwrap();
    assert!(series(&[]).resume_csv(&path, 20).unwrap_err().contains("probes.csv:2: ux = \"x\" is not a number"));
}

#[test]
fn probes_csv_with_units_adds_si_columns_and_resumes() {
    use crate::units::{Reference, Units};
    // 1 cell = 5 mm, 1 step = 1 ms: 1 cell/step = 5 m/s; water: a lattice pressure of 1 is 25 kPa.
    let r = Reference { length: 0.1, cells: 20.0, velocity: 0.5, lattice_velocity: 0.1, density: 1000.0, lattice_density: 1.0 };
    let u = Units::new(r, 2).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("probes.csv");
    let s = series(&[0, 10, 20]).with_units(Some(u));
    s.write_csv(&path).unwrap();
    let text = std::fs::read_to_string(&path).unwrap();
    let header = text.lines().next().unwrap();
    assert_eq!(header, format!("{PROBES_CSV_HEADER},{PROBES_CSV_SI_COLUMNS}"));
    // The lattice columns are those of a run without units; the SI ones follow.
    let row: Vec<f64> =
        text.lines().nth(6).unwrap().split(',').enumerate().filter(|(i, _)| *i != 1).map(|(_, v)| v.parse().unwrap()).collect();
    let s20 = sample(20, 1);
    let (ux, speed, p) = (f64::from(s20.u[0]), f64::from(s20.speed()), f64::from(s20.pressure()));
    assert_eq!(row.len(), 11 + 8);
    let close = |a: f64, b: f64| (a - b).abs() <= 1e-5 * b.abs();
    assert!(close(row[11], 0.02), "time_s {}", row[11]);
    assert!(close(row[12], 5.0 * ux) && close(row[15], 5.0 * speed), "{row:?}");
    assert!(close(row[16], 1000.0 * f64::from(s20.rho)) && close(row[17], 25_000.0 * p), "{row:?}");
    assert!(close(row[18], 1000.0 * f64::from(s20.vorticity)), "{row:?}");
    // A resume with units reads its own file back exactly; one without refuses it (and the
    // reverse), as the columns differ.
    let mut back = series(&[]).with_units(Some(u));
    assert_eq!(back.resume_csv(&path, u64::MAX).unwrap(), 3);
    assert_eq!(back.samples(1), s.samples(1));
    assert!(series(&[]).resume_csv(&path, 20).unwrap_err().contains("probes.csv:1: the header is not"));
    series(&[0]).write_csv(&path).unwrap();
    assert!(series(&[]).with_units(Some(u)).resume_csv(&path, 20).unwrap_err().contains("time_s"));
    // Several series: the SI columns where units are given.
    write_csv_of(&[series(&[0])], Some(&u), &path).unwrap();
    assert!(std::fs::read_to_string(&path).unwrap().starts_with(&format!("{PROBES_CSV_HEADER},time_s,")));
}

#[test]
fn a_step_backwards_clears_and_the_ring_keeps_the_latest() {
    let mut s = series(&[0, 10, 20]);
    s.push(&[sample(20, 0), sample(20, 1)]);
    assert_eq!(s.len(), 3, "the same step again (a paused viewer) is not recorded twice");
    s.push(&[sample(0, 0)]);
    assert_eq!(s.len(), 3, "a set of another length is ignored");
    s.push(&[sample(10, 0), sample(10, 1)]);
    assert_eq!(s.samples(0).iter().map(|s| s.step).collect::<Vec<_>>(), [10], "a rollback starts again");
    let mut s = series(&[0, 10, 20, 30]);
    s.truncate_after(15);
    assert_eq!(s.samples(1).iter().map(|s| s.step).collect::<Vec<_>>(), [0, 10]);
    let steps: Vec<u64> = (0..150).map(|i| i * 10).collect();
    let s = series(&steps);
    assert_eq!((s.len(), s.dropped()), (100, 50));
    assert_eq!(s.samples(0).front().map(|s| s.step), Some(500));
}

#[test]
fn the_summary_finds_the_period_of_the_swinging_component() {
    let probes = vec![Probe { name: "wake".into(), cell: [0; 3] }];
    let mut s = ProbeSeries::new(probes, 10_000);
    for step in (0..=8000).step_by(10) {
        let t = step as f32;
        let uy = 0.02 * (2.0 * std::f32::consts::PI * t / 400.0).sin();
        let ux = 0.06 + 0.002 * (4.0 * std::f32::consts::PI * t / 400.0).cos();
        s.push(&[ProbeSample { step, u: [ux, uy, 0.0], rho: 1.0, vorticity: 0.0 }]);
    }
    let m = s.summary(0).unwrap();
    assert_eq!((m.from, m.to, m.samples), (4000, 8000, 401));
    let p = m.period.unwrap();
    assert_eq!(p.component, 1);
    assert!((p.period - 400.0).abs() < 1.0 && p.periods >= 9, "{p:?}");
    assert!(m.min_speed >= 0.058 && m.max_speed <= 0.066 && (m.mean_speed - 0.0616).abs() < 0.002, "{m:?}");
    // A steady flow has no period.
    let mut s = ProbeSeries::new(vec![Probe { name: "p".into(), cell: [0; 3] }], 100);
    for step in 0..50 {
        s.push(&[ProbeSample { step, u: [0.05, 0.0, 0.0], rho: 1.0, vorticity: 0.0 }]);
    }
    assert!(matches!(s.summary(0).unwrap().period, Err(NoShedding::Steady { .. })));
    assert!(ProbeSeries::new(Vec::new(), 4).summary(0).is_none());
}
