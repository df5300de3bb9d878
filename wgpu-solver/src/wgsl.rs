//! The WGSL source of the kernels: a generated prelude of constants and structs, then
//! `shaders/lbm.wgsl`. The prelude is written from sim-core's tables (velocities, weights,
//! opposite directions, flag kinds, collision operators) and from the `#[repr(C)]` parameter
//! struct below, so the CPU reference, the CUDA kernels and these kernels read the same numbers.

use sim_core::collision::Collision;
use sim_core::domain::{direction, kind, NEAR, SPONGE_STRENGTH};
use sim_core::lattice::{opposite, Lat, Lattice, D2Q9, D3Q19, D3Q27};
use sim_core::precision::{Precision, FP16S_SCALE};
use std::fmt::Write as _;
use std::mem::offset_of;

/// The kernels' own source (everything but the generated prelude).
pub const LBM_WGSL: &str = include_str!("../shaders/lbm.wgsl");

/// Threads per workgroup of every kernel.
pub const WORKGROUP: u32 = 64;

/// Moving-wall velocities the parameters hold (flag ids are four bits).
pub const MAX_WALLS: usize = 16;

/// Inlets and outlets the parameters hold of each (a box has six faces).
pub const MAX_FACES: usize = 8;

/// Obstacle ids a flag can name (id 0 is the domain's walls).
pub const MAX_OBSTACLE_IDS: usize = 16;

/// The codes the step kernel's pipeline constant `COLLISION` takes: a collision's code is its
/// place in this table, and the prelude defines every name.
pub const COLLISIONS: [(Collision, &str); 4] = [
    (Collision::Bgk, "COLLISION_BGK"),
    (Collision::Trt, "COLLISION_TRT"),
    (Collision::Smagorinsky, "COLLISION_SMAGORINSKY"),
    (Collision::Regularized, "COLLISION_REGULARIZED"),
];

/// The code of a collision operator (see [`COLLISIONS`]).
#[must_use]
pub fn collision_code(c: Collision) -> u32 {
    COLLISIONS.iter().position(|&(k, _)| k == c).expect("every operator has a code") as u32
}

/// The flag kinds the kernels test, by name.
pub const KINDS: [(u8, &str); 7] = [
    (kind::FLUID, "KIND_FLUID"),
    (kind::SOLID, "KIND_SOLID"),
    (kind::MOVING, "KIND_MOVING"),
    (kind::INLET, "KIND_INLET"),
    (kind::OUTLET, "KIND_OUTLET"),
    (kind::SPONGE, "KIND_SPONGE"),
    (kind::SLIP, "KIND_SLIP"),
];

/// A velocity inlet as the kernels read it.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, bytemuck::Pod, bytemuck::Zeroable)]
pub struct GpuInlet {
    /// Axis of the normal, inward direction (+1/-1), profile (0 uniform, 1 parabolic), cells of
    /// the absorbing layer.
    pub shape: [i32; 4],
    /// The face's layer on its axis, then unused.
    pub layer: [i32; 4],
    /// Velocity (centre value of a parabolic profile), then unused.
    pub u: [f32; 4],
    /// First open cell of the face per axis (parabolic profile), then unused.
    pub lo: [i32; 4],
    /// Last open cell of the face per axis, then unused.
    pub hi: [i32; 4],
}

/// A density outlet as the kernels read it.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, bytemuck::Pod, bytemuck::Zeroable)]
pub struct GpuOutlet {
    /// Axis of the normal, inward direction, cells of the absorbing layer, the face's layer.
    pub shape: [i32; 4],
    /// The inlet on the opposite face (-1: none), then unused.
    pub inflow: [i32; 4],
    /// Density, then unused.
    pub density: [f32; 4],
}

/// Everything a kernel reads besides the state and the flags: one uniform struct.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, bytemuck::Pod, bytemuck::Zeroable)]
pub struct GpuParams {
    /// Cells along x, y, z and in all.
    pub n: [u32; 4],
    /// Parity of the step (1: odd), workgroups per row of a dispatch, workgroups covering the
    /// grid, then unused.
    pub ctl: [u32; 4],
    /// The statistics' first float in the scratch buffer, the obstacle forces' first float
    /// there, whether a body force is applied (1), then unused.
    pub opt: [u32; 4],
    /// tau, Smagorinsky constant, 1/tau, TRT's odd rate 1/tau-.
    pub coll: [f32; 4],
    /// Body force (Guo), then unused.
    pub force: [f32; 4],
    /// Moving-wall velocities by wall id.
    pub walls: [[f32; 4]; MAX_WALLS],
    /// Inlets by id.
    pub inlets: [GpuInlet; MAX_FACES],
    /// Outlets by id.
    pub outlets: [GpuOutlet; MAX_FACES],
}

impl Default for GpuParams {
    fn default() -> Self {
        bytemuck::Zeroable::zeroed()
    }
}

/// One member of a struct the prelude declares: name, WGSL type, byte offset and size in the
/// Rust struct.
type Member = (&'static str, &'static str, usize, usize);

/// The members of [`GpuInlet`].
#[must_use]
pub fn inlet_members() -> Vec<Member> {
    vec![
        ("shape", "vec4<i32>", offset_of!(GpuInlet, shape), 16),
        ("layer", "vec4<i32>", offset_of!(GpuInlet, layer), 16),
        ("u", "vec4<f32>", offset_of!(GpuInlet, u), 16),
        ("lo", "vec4<i32>", offset_of!(GpuInlet, lo), 16),
        ("hi", "vec4<i32>", offset_of!(GpuInlet, hi), 16),
    ]
}

/// The members of [`GpuOutlet`].
#[must_use]
pub fn outlet_members() -> Vec<Member> {
    vec![
        ("shape", "vec4<i32>", offset_of!(GpuOutlet, shape), 16),
        ("inflow", "vec4<i32>", offset_of!(GpuOutlet, inflow), 16),
        ("density", "vec4<f32>", offset_of!(GpuOutlet, density), 16),
    ]
}

/// The members of [`GpuParams`].
#[must_use]
pub fn params_members() -> Vec<Member> {
    let inl = std::mem::size_of::<GpuInlet>();
    let out = std::mem::size_of::<GpuOutlet>();
    vec![
        ("n", "vec4<u32>", offset_of!(GpuParams, n), 16),
        ("ctl", "vec4<u32>", offset_of!(GpuParams, ctl), 16),
        ("opt", "vec4<u32>", offset_of!(GpuParams, opt), 16),
        ("coll", "vec4<f32>", offset_of!(GpuParams, coll), 16),
        ("force", "vec4<f32>", offset_of!(GpuParams, force), 16),
        ("walls", "array<vec4<f32>, MAX_WALLS>", offset_of!(GpuParams, walls), 16 * MAX_WALLS),
        ("inlets", "array<Inlet, MAX_FACES>", offset_of!(GpuParams, inlets), inl * MAX_FACES),
        ("outlets", "array<Outlet, MAX_FACES>", offset_of!(GpuParams, outlets), out * MAX_FACES),
    ]
}

fn write_struct(out: &mut String, name: &str, members: &[Member]) {
    let _ = writeln!(out, "struct {name} {{");
    for (m, ty, off, size) in members {
        let _ = writeln!(out, "    {m}: {ty}, // bytes {off}..{}", off + size);
    }
    out.push_str("}\n");
}

/// A WGSL f32 literal that parses back to exactly `v` (shortest round-trip digits).
fn f32_lit(v: f32) -> String {
    format!("{v:e}f")
}

fn array<T>(name: &str, ty: &str, v: impl ExactSizeIterator<Item = T>, lit: impl Fn(T) -> String) -> String {
    let n = v.len();
    let items: Vec<String> = v.map(lit).collect();
    format!("const {name} = array<{ty}, {n}>({});\n", items.join(", "))
}

/// The free-slip tables of a velocity set, for wall normal axis `a` and direction `i` at index
/// `a * Q + i`: the directions of the wall cell `b`, of the cell `x_s` the reflected DDF left and
/// of its mirror image `m` (see `sim_core::domain::slip_source`), or -1 where the DDF bounces back
/// whatever the neighbours are (no component along the normal, struck head-on, or a velocity the
/// set lacks).
#[must_use]
pub fn slip_tables<L: Lat>() -> [Vec<i32>; 3] {
    let mut t = [vec![-1; 3 * L::Q], vec![-1; 3 * L::Q], vec![-1; 3 * L::Q]];
    for a in 0..3 {
        for i in 0..L::Q {
            let c = L::C[i];
            if c[a] == 0 {
                continue;
            }
            let mut cb = [0i32; 3];
            cb[a] = -c[a];
            let mut ct = [-c[0], -c[1], -c[2]];
            ct[a] = 0;
            if ct == [0; 3] {
                continue;
            }
            let mut cm = c;
            cm[a] = -c[a];
            if let (Some(b), Some(s), Some(m)) = (direction::<L>(cb), direction::<L>(ct), direction::<L>(cm)) {
                t[0][a * L::Q + i] = b as i32;
                t[1][a * L::Q + i] = s as i32;
                t[2][a * L::Q + i] = m as i32;
            }
        }
    }
    t
}

fn lattice_consts<L: Lat>(out: &mut String) {
    let _ = writeln!(out, "const D: u32 = {}u;\nconst Q: u32 = {}u;", L::D, L::Q);
    out.push_str(&array("CX", "i32", L::C.iter().map(|c| c[0]), |v| v.to_string()));
    out.push_str(&array("CY", "i32", L::C.iter().map(|c| c[1]), |v| v.to_string()));
    out.push_str(&array("CZ", "i32", L::C.iter().map(|c| c[2]), |v| v.to_string()));
    out.push_str(&array("W", "f32", L::W.iter().copied(), f32_lit));
    out.push_str(&array("OPP", "u32", (0..L::Q).map(opposite), |v| format!("{v}u")));
    let [b, s, m] = slip_tables::<L>();
    out.push_str(&array("SLIP_B", "i32", b.into_iter(), |v| v.to_string()));
    out.push_str(&array("SLIP_S", "i32", s.into_iter(), |v| v.to_string()));
    out.push_str(&array("SLIP_M", "i32", m.into_iter(), |v| v.to_string()));
}

/// The generated prelude for one velocity set.
#[must_use]
pub fn prelude(lattice: Lattice) -> String {
    let mut out = String::from("// Generated by wgpu-solver/src/wgsl.rs from sim-core's tables; do not edit.\n");
    match lattice {
        Lattice::D2Q9 => lattice_consts::<D2Q9>(&mut out),
        Lattice::D3Q19 => lattice_consts::<D3Q19>(&mut out),
        Lattice::D3Q27 => lattice_consts::<D3Q27>(&mut out),
    }
    for (i, (_, name)) in COLLISIONS.iter().enumerate() {
        let _ = writeln!(out, "const {name}: u32 = {i}u;");
    }
    for (k, name) in KINDS {
        let _ = writeln!(out, "const {name}: u32 = {k}u;");
    }
    let _ = writeln!(out, "const FLAG_NEAR: u32 = {NEAR}u;");
    let _ = writeln!(out, "const SPONGE_STRENGTH: f32 = {};", f32_lit(SPONGE_STRENGTH));
    let _ = writeln!(out, "const SQRT_2: f32 = {};", f32_lit(std::f32::consts::SQRT_2));
    let _ = writeln!(out, "const CS2: f32 = {};", f32_lit(1.0f32 / 3.0));
    let _ = writeln!(out, "const WG: u32 = {WORKGROUP}u;");
    let _ = writeln!(out, "const MAX_WALLS: u32 = {MAX_WALLS}u;\nconst MAX_FACES: u32 = {MAX_FACES}u;");
    let _ = writeln!(out, "const MAX_OBSTACLE_IDS: u32 = {MAX_OBSTACLE_IDS}u;");
    write_struct(&mut out, "Inlet", &inlet_members());
    write_struct(&mut out, "Outlet", &outlet_members());
    write_struct(&mut out, "Params", &params_members());
    out
}

/// The text that marks a loop to unroll: it ends the loop's header line.
const UNROLL: &str = "{ // unroll\n";

/// Unroll the loops of `src` marked [`UNROLL`]: `for (var i = A; i < B; i++) { // unroll` (or
/// `i += S`), with literal bounds or `Q`, becomes one block per iteration, `{ let i = Ku; body }`.
/// Direction loops then index the lattice tables and the per-cell arrays with constants, which
/// every shader compiler folds into registers (a loop over `Q` with a run-time index leaves the
/// arrays in memory on some, lavapipe among them, many times slower). What CUDA's
/// `#pragma unroll` does for `kernels/common.cuh`.
///
/// # Errors
/// A marked loop of another form, or without its closing brace.
pub fn unroll(src: &str, q: usize) -> Result<String, String> {
    let mut out = String::with_capacity(src.len() * 4);
    let mut rest = src;
    while let Some(mark) = rest.find(UNROLL) {
        let line = rest[..mark].rfind('\n').map_or(0, |p| p + 1);
        let header = &rest[line..mark];
        let indent = &header[..header.len() - header.trim_start().len()];
        let (var, range) =
            parse_loop(header.trim(), q).ok_or_else(|| format!("a loop marked to unroll has an unknown form: {}", header.trim()))?;
        let body_start = mark + UNROLL.len();
        let body_end =
            closing_brace(&rest[body_start..]).ok_or_else(|| format!("no closing brace for the loop {}", header.trim()))? + body_start;
        let body = unroll(&rest[body_start..body_end], q)?;
        out.push_str(&rest[..line]);
        for k in range {
            out.push_str(&format!("{indent}{{\n{indent}    let {var} = {k}u;\n{body}"));
            // The body ends with the closing brace's indentation: the block closes there.
            out.push_str("}\n");
        }
        // Past the closing brace and the rest of its line.
        let after = &rest[body_end + 1..];
        rest = after.find('\n').map_or("", |p| &after[p + 1..]);
    }
    out.push_str(rest);
    Ok(out)
}

/// The variable and iterations of `for (var i = A; i < B; i++)` or `... i += S)`.
fn parse_loop(h: &str, q: usize) -> Option<(String, std::iter::StepBy<std::ops::Range<usize>>)> {
    let inner = h.strip_prefix("for (")?.strip_suffix(')')?.trim_end();
    let parts: Vec<&str> = inner.split(';').map(str::trim).collect();
    let [init, cond, inc] = parts.as_slice() else { return None };
    let (var, start) = init.strip_prefix("var ")?.split_once('=')?;
    let var = var.trim();
    let num = |t: &str| -> Option<usize> {
        let t = t.trim();
        if t == "Q" {
            Some(q)
        } else {
            t.trim_end_matches('u').parse().ok()
        }
    };
    let (cv, end) = cond.split_once('<')?;
    if cv.trim() != var {
        return None;
    }
    let step = if *inc == format!("{var}++") { 1 } else { num(inc.strip_prefix(var)?.trim().strip_prefix("+=")?)? };
    Some((var.to_string(), (num(start)?..num(end)?).step_by(step.max(1))))
}

/// Byte offset of the `}` that closes a block whose body starts at `s[0]` (comments skipped).
fn closing_brace(s: &str) -> Option<usize> {
    let mut depth = 0usize;
    let mut comment = false;
    let b = s.as_bytes();
    for (i, &c) in b.iter().enumerate() {
        if comment {
            comment = c != b'\n';
            continue;
        }
        match c {
            b'/' if b.get(i + 1) == Some(&b'/') => comment = true,
            b'{' => depth += 1,
            b'}' if depth == 0 => return Some(i),
            b'}' => depth -= 1,
            _ => {}
        }
    }
    None
}

/// The storage of the DDFs for a precision: the type `Ddf` of the DDF buffer's elements and
/// `dec`/`enc` between it and the shifted DDF in f32, as sim-core's `precision::Store` does
/// (FP16S: IEEE half of the DDF times [`FP16S_SCALE`]). FP16C has no WGSL form yet.
#[must_use]
pub fn storage(precision: Precision) -> String {
    match precision {
        Precision::Fp16s => format!(
            "alias Ddf = f16;\nfn dec(v: Ddf) -> f32 {{\n    return f32(v) * {};\n}}\nfn enc(x: f32) -> Ddf {{\n    return Ddf(x * {});\n}}\n",
            f32_lit(1.0 / FP16S_SCALE),
            f32_lit(FP16S_SCALE)
        ),
        Precision::Fp32 | Precision::Fp16c => {
            "alias Ddf = f32;\nfn dec(v: Ddf) -> f32 {\n    return v;\n}\nfn enc(x: f32) -> Ddf {\n    return x;\n}\n".to_string()
        }
    }
}

/// Whether the kernels of a precision need the adapter's `shader-f16` feature.
#[must_use]
pub fn needs_f16(precision: Precision) -> bool {
    precision == Precision::Fp16s
}

/// The whole source of the kernels for one velocity set and DDF precision.
#[must_use]
pub fn source(lattice: Lattice, precision: Precision) -> String {
    let body = unroll(LBM_WGSL, lattice.q()).unwrap_or_else(|e| panic!("shaders/lbm.wgsl: {e}"));
    let enable = if needs_f16(precision) { "enable f16;\n" } else { "" };
    format!("{enable}{}\n{}\n{body}", prelude(lattice), storage(precision))
}

#[cfg(test)]
mod tests {
    use super::*;
    use naga::{Expression, Literal, Module, TypeInner};

    fn parse(lattice: Lattice) -> Module {
        parse_as(lattice, Precision::Fp32)
    }

    fn parse_as(lattice: Lattice, precision: Precision) -> Module {
        let src = source(lattice, precision);
        let module = naga::front::wgsl::parse_str(&src).unwrap_or_else(|e| panic!("{lattice}: {}", e.emit_to_string(&src)));
        let caps = if needs_f16(precision) { naga::valid::Capabilities::SHADER_FLOAT16 } else { naga::valid::Capabilities::empty() };
        let mut v = naga::valid::Validator::new(naga::valid::ValidationFlags::all(), caps);
        v.validate(&module).unwrap_or_else(|e| panic!("{lattice}: the kernels do not validate: {}", e.emit_to_string(&src)));
        module
    }

    /// The literal values of a module-scope constant (an array or a scalar).
    fn values(m: &Module, name: &str) -> Vec<Literal> {
        let c = m.constants.iter().find(|(_, c)| c.name.as_deref() == Some(name)).unwrap_or_else(|| panic!("no constant {name}")).1;
        let lit = |h: naga::Handle<Expression>| match m.global_expressions[h] {
            Expression::Literal(l) => l,
            ref e => panic!("{name}: not a literal: {e:?}"),
        };
        match &m.global_expressions[c.init] {
            Expression::Compose { components, .. } => components.iter().map(|&h| lit(h)).collect(),
            Expression::Literal(l) => vec![*l],
            e => panic!("{name}: unexpected {e:?}"),
        }
    }

    fn ints(m: &Module, name: &str) -> Vec<i64> {
        values(m, name)
            .into_iter()
            .map(|l| match l {
                Literal::I32(v) => i64::from(v),
                Literal::U32(v) => i64::from(v),
                l => panic!("{name}: not an integer: {l:?}"),
            })
            .collect()
    }

    fn floats(m: &Module, name: &str) -> Vec<u32> {
        values(m, name)
            .into_iter()
            .map(|l| match l {
                Literal::F32(v) => v.to_bits(),
                l => panic!("{name}: not an f32: {l:?}"),
            })
            .collect()
    }

    fn check_lattice<L: Lat>() {
        let m = parse(L::KIND);
        assert_eq!(ints(&m, "Q"), vec![L::Q as i64]);
        assert_eq!(ints(&m, "D"), vec![L::D as i64]);
        for (a, name) in ["CX", "CY", "CZ"].iter().enumerate() {
            let want: Vec<i64> = L::C.iter().map(|c| i64::from(c[a])).collect();
            assert_eq!(ints(&m, name), want, "{}: {name}", L::KIND);
        }
        let w: Vec<u32> = L::W.iter().map(|w| w.to_bits()).collect();
        assert_eq!(floats(&m, "W"), w, "{}: weights (bit for bit)", L::KIND);
        let opp: Vec<i64> = (0..L::Q).map(|i| opposite(i) as i64).collect();
        assert_eq!(ints(&m, "OPP"), opp, "{}: opposite directions", L::KIND);
        let [b, s, mm] = slip_tables::<L>();
        for (name, t) in [("SLIP_B", b), ("SLIP_S", s), ("SLIP_M", mm)] {
            assert_eq!(ints(&m, name), t.iter().map(|&v| i64::from(v)).collect::<Vec<_>>(), "{}: {name}", L::KIND);
        }
        for (i, (_, name)) in COLLISIONS.iter().enumerate() {
            assert_eq!(ints(&m, name), vec![i as i64], "{name}");
        }
        for (k, name) in KINDS {
            assert_eq!(ints(&m, name), vec![i64::from(k)], "{name}");
        }
        assert_eq!(ints(&m, "FLAG_NEAR"), vec![i64::from(NEAR)]);
        assert_eq!(floats(&m, "SPONGE_STRENGTH"), vec![SPONGE_STRENGTH.to_bits()]);
        assert_eq!(floats(&m, "SQRT_2"), vec![std::f32::consts::SQRT_2.to_bits()]);
        assert_eq!(floats(&m, "CS2"), vec![(1.0f32 / 3.0).to_bits()]);
        // The structs: every member where the Rust struct has it, and the same size.
        for (name, members, size) in [
            ("Params", params_members(), std::mem::size_of::<GpuParams>()),
            ("Inlet", inlet_members(), std::mem::size_of::<GpuInlet>()),
            ("Outlet", outlet_members(), std::mem::size_of::<GpuOutlet>()),
        ] {
            let ty = m.types.iter().find(|(_, t)| t.name.as_deref() == Some(name)).unwrap_or_else(|| panic!("no struct {name}")).1;
            let TypeInner::Struct { members: got, span } = &ty.inner else { panic!("{name} is not a struct") };
            assert_eq!(*span as usize, size, "{name}: size in WGSL and in Rust");
            assert_eq!(got.len(), members.len(), "{name}: members");
            let mut covered = 0;
            for (g, (mname, _, off, msize)) in got.iter().zip(&members) {
                assert_eq!(g.name.as_deref(), Some(*mname), "{name}: member order");
                assert_eq!(g.offset as usize, *off, "{name}.{mname}: offset in WGSL and in Rust");
                covered += msize;
            }
            assert_eq!(covered, size, "{name}: the members cover the Rust struct");
        }
    }

    #[test]
    fn generated_tables_and_structs_match_the_rust_ones() {
        check_lattice::<D2Q9>();
        check_lattice::<D3Q19>();
        check_lattice::<D3Q27>();
    }

    #[test]
    fn marked_loops_unroll_into_blocks() {
        let src = "fn f() {\n    var s = 0u;\n    for (var i = 1u; i < Q; i += 2u) { // unroll\n        s += i; // a comment with }\n        for (var k = 0u; k < 2u; k++) { // unroll\n            s += k;\n        }\n    }\n}\n";
        let out = unroll(src, 5).unwrap();
        let want = "fn f() {\n    var s = 0u;\n    {\n        let i = 1u;\n        s += i; // a comment with }\n        {\n            let k = 0u;\n            s += k;\n        }\n        {\n            let k = 1u;\n            s += k;\n        }\n    }\n    {\n        let i = 3u;\n        s += i; // a comment with }\n        {\n            let k = 0u;\n            s += k;\n        }\n        {\n            let k = 1u;\n            s += k;\n        }\n    }\n}\n";
        assert_eq!(out, want);
        assert!(unroll("    for (var i = 0u; i <= Q; i++) { // unroll\n    }\n", 3).is_err());
        // Every marked loop of the kernels unrolls, and none is left marked.
        for l in Lattice::ALL {
            let s = source(l, Precision::Fp32);
            assert!(!s.contains("// unroll"), "{l}");
            // The FP16S kernels parse and validate with half floats.
            parse_as(l, Precision::Fp16s);
        }
    }

    #[test]
    fn collision_codes_follow_the_table() {
        for (i, &(c, _)) in COLLISIONS.iter().enumerate() {
            assert_eq!(collision_code(c), i as u32);
        }
        assert_eq!(COLLISIONS.len(), Collision::ALL.len());
    }

    /// The slip tables agree with `slip_source` on a wall it reflects from.
    #[test]
    fn slip_tables_give_the_cells_slip_source_names() {
        use sim_core::domain::{make_flag, slip_source, Domain};
        let mut d = Domain::periodic(Lattice::D3Q19, [5, 5, 5]);
        let wall = make_flag(kind::SLIP, 1);
        for x in 0..5 {
            for z in 0..5 {
                let i = d.index(x, 0, z);
                d.flags[i] = wall;
            }
        }
        d.mark_near();
        let n = d.index(2, 1, 2);
        let p = d.coords(n);
        let nbr: [usize; sim_core::lattice::MAX_Q] = std::array::from_fn(|i| if i < D3Q19::Q { d.neighbour(p, D3Q19::C[i]) } else { 0 });
        let [b, s, m] = slip_tables::<D3Q19>();
        for i in 1..D3Q19::Q {
            let src = nbr[opposite(i)];
            if !sim_core::domain::is_solid(d.flags[src]) {
                continue;
            }
            let want = slip_source::<D3Q19>(i, d.flags[src], &nbr, &d.flags);
            let k = D3Q19::Q + i;
            let got = (b[k] >= 0).then(|| (nbr[s[k] as usize], m[k] as usize, nbr[b[k] as usize]));
            assert_eq!(got, want, "direction {i}");
        }
    }
}
