// Marching cubes on the GPU: the isosurface of a scalar field (|vorticity| or Q) at a threshold,
// or the surface of the solid obstacles (cells whose mask is 2), into a vertex buffer of capped
// size, with the draw's vertex count written for an indirect draw (no trip to the CPU).
//
// Samples sit at cell centres: the cube (x, y, z) joins the centres of cells x..x+1, y..y+1,
// z..z+1, so (nx-1)(ny-1)(nz-1) cubes (with stride s > 1: cubes of edge s cells from the
// cells s*(x, y, z), ((n-1)/s)^3 of them). World space as in field.wgsl: cell (x, y, z) fills
// [x, x+1] x [y, y+1] x [z, z+1].
//
// Solid obstacles (`emit`, one pass): every cube looks up its triangle count; a workgroup sums
// its counts in shared memory and reserves room for all of them with one atomic add on the
// global counter; each cube then writes the triangles that fit under the capacity, three
// vertices each. The counter keeps the full count, so the CPU can read it later
// (asynchronously) to tell that triangles were capped.
//
// Isosurfaces (an indexed mesh: each vertex is made once, not once per triangle that uses it,
// about a sixth as many; a GPU with few graphics units, such as the H100, draws it faster):
// `iso_vertices` gives every lattice edge the surface crosses a vertex and records its number
// per edge; `iso_triangles` then writes three vertex numbers per triangle (the draw's index
// buffer), looked up by edge. Both reserve room per workgroup as `emit` does.
//
// Then `finish` (one thread) writes the indirect draw's arguments (drawn indexed or not: the
// five words are the same).
//
// The field and the velocity magnitude are read straight from storage buffers (x fastest, rows
// of `pitch` / `speed_pitch` floats, then y, then z), as the solver wrote them. Each isosurface
// vertex carries the speed there (trilinear between cell centres), so that the draw's vertex
// shader reads nothing else.
//
// Case table and corner/edge numbering: app/src/viewer/mc.rs (keep in sync); `McParams` is
// `gpu_data::McParams` in app/src/viewer/render.rs.

struct McParams {
    // nx, ny, nz, mode (0: the field, 1: the obstacle mask, mask == 2 inside)
    size: vec4<u32>,
    // threshold (mode 0), capacity in vertices (a multiple of 3), cube edge in cells (1, or 2
    // and more to march a large grid on coarser cubes: fewer triangles), floats from one row of
    // the field to the next
    threshold: f32,
    capacity: u32,
    stride: u32,
    pitch: u32,
    // floats from one row of the speed to the next (mode 0); unused
    speed_pitch: u32,
    pad0: u32,
    pad1: u32,
    pad2: u32,
};

@group(0) @binding(0) var<uniform> params: McParams;
// Per case: word 0 bits 0-3 = triangle count; then 4-bit edge numbers, three per triangle.
@group(0) @binding(1) var<uniform> table: array<vec4<u32>, 256>;
@group(0) @binding(2) var<storage, read> field: array<f32>;
@group(0) @binding(3) var mask: texture_3d<u32>;
// Five words per vertex: x, y, z (f32 bits), normal (pack4x8snorm), speed (f32 bits).
@group(0) @binding(4) var<storage, read_write> vertices: array<u32>;
// [0]: triangle corners wanted (vertices of `emit`, indices of `iso_triangles`); [1]: vertices
// wanted by `iso_vertices`.
@group(0) @binding(5) var<storage, read_write> counter: array<atomic<u32>, 2>;
// count, instance_count, first, then base_vertex and first_instance (indexed) or first_instance
// and an unused word
@group(0) @binding(6) var<storage, read_write> draw_args: array<u32, 5>;
// The velocity magnitude (mode 0), laid out as the field with rows of `speed_pitch` floats.
@group(0) @binding(7) var<storage, read> speed: array<f32>;
// Isosurfaces: words 0..capacity the triangles' vertex numbers (the index buffer), then three
// words per lattice point (x fastest): the vertex on its edge along +x, +y, +z (written only for
// edges the surface crosses).
@group(0) @binding(8) var<storage, read_write> mesh: array<u32>;

var<workgroup> wg_count: atomic<u32>;
var<workgroup> wg_base: u32;

fn value_at(p: vec3<i32>) -> f32 {
    let q = clamp(p, vec3<i32>(0), vec3<i32>(params.size.xyz) - vec3<i32>(1));
    if params.size.w == 1u {
        return select(0.0, 1.0, textureLoad(mask, q, 0).r == 2u);
    }
    let c = vec3<u32>(q);
    return field[(c.z * params.size.y + c.y) * params.pitch + c.x];
}

// The largest multiple of the stride in the grid along each axis: the far corner of the
// lattice the cubes join (with stride s > 1 only cells at multiples of s are read, so that the
// solver may write just those: a sampled frame).
fn lattice_max() -> vec3<i32> {
    let st = max(params.stride, 1u);
    return vec3<i32>((max(params.size.xyz, vec3<u32>(1u)) - vec3<u32>(1u)) / st * st);
}

// Velocity magnitude at a world point: trilinear between the lattice points (cell centres at
// multiples of the stride).
fn speed_at(p: vec3<f32>) -> f32 {
    let st = i32(max(params.stride, 1u));
    let lmax = lattice_max() / st;
    let q = clamp((p - vec3<f32>(0.5)) / f32(st), vec3<f32>(0.0), vec3<f32>(lmax));
    let i0 = vec3<i32>(floor(q));
    let f = q - vec3<f32>(i0);
    var s = 0.0;
    for (var c = 0u; c < 8u; c++) {
        let o = vec3<i32>(i32(c & 1u), i32((c >> 1u) & 1u), i32((c >> 2u) & 1u));
        let w = mix(vec3<f32>(1.0) - f, f, vec3<f32>(o));
        let k = vec3<u32>(min(i0 + o, lmax) * st);
        s += w.x * w.y * w.z * speed[(k.z * params.size.y + k.y) * params.speed_pitch + k.x];
    }
    return s;
}

// Gradient by differences of neighbouring samples (one-sided at the domain's edges; with stride
// s > 1 of the lattice points s cells apart). The
// obstacle mask is binary: there the differences are summed over the 3x3 neighbours across
// (Sobel weights), which gives curved obstacles smooth normals instead of voxel facets.
fn gradient(p: vec3<i32>) -> vec3<f32> {
    if params.size.w == 1u {
        var g = vec3<f32>(0.0);
        for (var a = -1; a <= 1; a++) {
            for (var b = -1; b <= 1; b++) {
                let w = f32((2 - abs(a)) * (2 - abs(b)));
                g.x += w * (value_at(p + vec3<i32>(1, a, b)) - value_at(p + vec3<i32>(-1, a, b)));
                g.y += w * (value_at(p + vec3<i32>(a, 1, b)) - value_at(p + vec3<i32>(a, -1, b)));
                g.z += w * (value_at(p + vec3<i32>(a, b, 1)) - value_at(p + vec3<i32>(a, b, -1)));
            }
        }
        return g;
    }
    // Differences between lattice points (stride s apart), clamped to the lattice.
    let st = i32(max(params.stride, 1u));
    let lmax = lattice_max();
    let at = vec3<i32>(0);
    var g = vec3<f32>(0.0);
    for (var a = 0; a < 3; a++) {
        var d = vec3<i32>(0);
        d[a] = st;
        g[a] = value_at(min(p + d, lmax)) - value_at(max(p - d, at));
    }
    return g;
}

fn corner_offset(c: u32) -> vec3<i32> {
    return vec3<i32>(i32(c & 1u), i32((c >> 1u) & 1u), i32((c >> 2u) & 1u));
}

// 4-bit entry i of case `c`.
fn entry(c: u32, i: u32) -> u32 {
    return (table[c][i / 8u] >> (4u * (i % 8u))) & 15u;
}

fn is_finite(v: f32) -> bool {
    return abs(v) <= 3.0e38;
}

// The cube with its lower corner at lattice point gid: its corners' values (s cells apart), its
// case and its triangle count (none outside the grid, none with a NaN or infinite corner: a
// blown-up state draws nothing).
struct Cube {
    v: array<f32, 8>,
    case_index: u32,
    ntri: u32,
};

fn cube_at(gid: vec3<u32>) -> Cube {
    var c: Cube;
    c.case_index = 0u;
    c.ntri = 0u;
    if !all(gid < cube_counts()) {
        return c;
    }
    let sti = i32(max(params.stride, 1u));
    let p = vec3<i32>(gid) * sti;
    var finite = true;
    for (var k = 0u; k < 8u; k++) {
        let s = value_at(p + corner_offset(k) * sti);
        c.v[k] = s;
        finite = finite && is_finite(s);
        if s > params.threshold {
            c.case_index |= 1u << k;
        }
    }
    if finite {
        c.ntri = entry(c.case_index, 0u);
    }
    return c;
}

// Room for `n` words counted on `counter[k]`: every thread of the workgroup calls it once; the
// workgroup sums its needs in shared memory and reserves them with one atomic add. Returns
// where this thread's words begin.
fn reserve(li: u32, n: u32, k: u32) -> u32 {
    if li == 0u {
        atomicStore(&wg_count, 0u);
    }
    workgroupBarrier();
    var local = 0u;
    if n > 0u {
        local = atomicAdd(&wg_count, n);
    }
    workgroupBarrier();
    if li == 0u {
        wg_base = atomicAdd(&counter[k], atomicLoad(&wg_count));
    }
    workgroupBarrier();
    return wg_base + local;
}

@compute @workgroup_size(4, 4, 4)
fn emit(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    let cube = cube_at(gid);
    let base = reserve(li, 3u * cube.ntri, 0u);
    let sti = i32(max(params.stride, 1u));
    let p = vec3<i32>(gid) * sti;
    for (var t = 0u; t < cube.ntri; t++) {
        let at = base + 3u * t;
        if at + 3u > params.capacity {
            break;
        }
        for (var k = 0u; k < 3u; k++) {
            let e = entry(cube.case_index, 1u + 3u * t + k);
            let a = edge_corner(e);
            let b = a | (1u << (e / 4u));
            write_vertex(at + k, p + corner_offset(a) * sti, p + corner_offset(b) * sti, cube.v[a], cube.v[b]);
        }
    }
}

// The lower corner (0..8) of cube edge e (0..12: e / 4 the axis it runs along).
fn edge_corner(e: u32) -> u32 {
    let axis = e / 4u;
    let kk = e % 4u;
    return ((kk & 1u) << ((axis + 1u) % 3u)) | ((kk >> 1u) << ((axis + 2u) % 3u));
}

// Vertex `slot`: where the surface crosses the edge from cell ca (value va) to cell cb (value
// vb, one stride further along one axis), with its normal and (isosurfaces) speed.
fn write_vertex(slot: u32, ca: vec3<i32>, cb: vec3<i32>, va: f32, vb: f32) {
    let d = vb - va;
    var s = 0.5;
    if abs(d) > 0.0 {
        s = clamp((params.threshold - va) / d, 0.0, 1.0);
    }
    let pos = vec3<f32>(ca) + vec3<f32>(0.5) + s * vec3<f32>(cb - ca);
    // The normal points from higher to lower values (out of the inside).
    let g = mix(gradient(ca), gradient(cb), s);
    let len = length(g);
    var nrm = vec3<f32>(0.0, 0.0, 1.0);
    if len > 0.0 && is_finite(len) {
        nrm = -g / len;
    }
    var sp = 0.0;
    if params.size.w == 0u {
        sp = speed_at(pos);
    }
    let w = 5u * slot;
    let pb = bitcast<vec3<u32>>(pos);
    vertices[w] = pb.x;
    vertices[w + 1u] = pb.y;
    vertices[w + 2u] = pb.z;
    vertices[w + 3u] = pack4x8snorm(vec4<f32>(nrm, 0.0));
    vertices[w + 4u] = bitcast<u32>(sp);
}

// Cubes per axis at the params' stride.
fn cube_counts() -> vec3<u32> {
    return (max(params.size.xyz, vec3<u32>(1u)) - vec3<u32>(1u)) / max(params.stride, 1u);
}

// Word of `mesh` holding the vertex on the edge along `axis` from lattice point q.
fn edge_word(q: vec3<u32>, axis: u32) -> u32 {
    let m = cube_counts() + vec3<u32>(1u);
    return params.capacity + 3u * ((q.z * m.y + q.y) * m.x + q.x) + axis;
}

// Isosurface, pass 1: one thread per lattice point makes the vertices on its three edges
// toward +x, +y, +z that the surface crosses (both ends finite, one above the threshold), where
// the cubes' triangles expect them (the same position, normal and speed as `emit` computes).
@compute @workgroup_size(4, 4, 4)
fn iso_vertices(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    let st = max(params.stride, 1u);
    let cubes = cube_counts();
    let p = vec3<i32>(gid * st);
    var v1 = vec3<f32>(0.0);
    var v0 = 0.0;
    var bits = 0u;
    if all(gid <= cubes) {
        v0 = value_at(p);
        if is_finite(v0) {
            for (var a = 0u; a < 3u; a++) {
                if gid[a] < cubes[a] {
                    var d = vec3<i32>(0);
                    d[a] = i32(st);
                    let w = value_at(p + d);
                    v1[a] = w;
                    if is_finite(w) && ((v0 > params.threshold) != (w > params.threshold)) {
                        bits |= 1u << a;
                    }
                }
            }
        }
    }
    var id = reserve(li, countOneBits(bits), 1u);
    for (var a = 0u; a < 3u; a++) {
        if (bits & (1u << a)) == 0u {
            continue;
        }
        mesh[edge_word(gid, a)] = id;
        if id < params.capacity {
            var d = vec3<i32>(0);
            d[a] = i32(st);
            write_vertex(id, p, p + d, v0, v1[a]);
        }
        id += 1u;
    }
}

// Isosurface, pass 2: one thread per cube writes its triangles' vertex numbers (a triangle with
// a vertex past the capacity is written degenerate: nothing drawn).
@compute @workgroup_size(4, 4, 4)
fn iso_triangles(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    let cube = cube_at(gid);
    let ntri = cube.ntri;
    let case_index = cube.case_index;
    let base = reserve(li, 3u * ntri, 0u);
    for (var t = 0u; t < ntri; t++) {
        let at = base + 3u * t;
        if at + 3u > params.capacity {
            break;
        }
        var ids = vec3<u32>(0u);
        var ok = true;
        for (var k = 0u; k < 3u; k++) {
            let e = entry(case_index, 1u + 3u * t + k);
            let q = gid + vec3<u32>(corner_offset(edge_corner(e)));
            ids[k] = mesh[edge_word(q, e / 4u)];
            ok = ok && ids[k] < params.capacity;
        }
        if !ok {
            ids = vec3<u32>(0u);
        }
        mesh[at] = ids.x;
        mesh[at + 1u] = ids.y;
        mesh[at + 2u] = ids.z;
    }
}

@compute @workgroup_size(1)
fn finish() {
    draw_args[0] = min(atomicLoad(&counter[0]), params.capacity);
    draw_args[1] = 1u;
    draw_args[2] = 0u;
    draw_args[3] = 0u;
    draw_args[4] = 0u;
}
