// Slice planes of a scalar field, coloured through a lookup table; solid cells grey.
// 2D scenes draw only the z plane (nz = 1) with an orthographic camera that fits the domain.
// World space: cell (x, y, z) fills [x, x+1] x [y, y+1] x [z, z+1].
// Keep `Globals` in sync with `gpu_data::FieldGlobals` in app/src/viewer/render.rs.

struct Globals {
    clip_from_world: mat4x4<f32>,
    // nx, ny, nz, colour map row
    size: vec4<u32>,
    // slice index along x, y, z; w = bit mask of the planes to draw (1 = x, 2 = y, 4 = z)
    slices: vec4<u32>,
    // lo, hi of the colour range; z = 1 to draw NaN cells magenta, w unused
    range: vec4<f32>,
};

@group(0) @binding(0) var<uniform> g: Globals;
@group(0) @binding(1) var field: texture_3d<f32>;
@group(0) @binding(2) var solid: texture_3d<u32>;
@group(0) @binding(3) var lut: texture_2d<f32>;

struct VsOut {
    @builtin(position) clip: vec4<f32>,
    @location(0) world: vec3<f32>,
    @location(1) @interpolate(flat) axis: u32,
};

// One quad (two triangles) per plane; instance = axis. Planes that are off collapse to nothing.
@vertex
fn vs_slice(@builtin(vertex_index) vi: u32, @builtin(instance_index) axis: u32) -> VsOut {
    var corners = array<vec2<f32>, 6>(
        vec2<f32>(0.0, 0.0), vec2<f32>(1.0, 0.0), vec2<f32>(1.0, 1.0),
        vec2<f32>(0.0, 0.0), vec2<f32>(1.0, 1.0), vec2<f32>(0.0, 1.0),
    );
    let c = corners[vi];
    let n = vec3<f32>(g.size.xyz);
    var p = vec3<f32>(0.0);
    let pos = f32(g.slices[axis]) + 0.5;
    if axis == 0u {
        p = vec3<f32>(pos, c.x * n.y, c.y * n.z);
    } else if axis == 1u {
        p = vec3<f32>(c.x * n.x, pos, c.y * n.z);
    } else {
        p = vec3<f32>(c.x * n.x, c.y * n.y, pos);
    }
    var out: VsOut;
    out.world = p;
    out.axis = axis;
    if (g.slices.w & (1u << axis)) == 0u {
        out.clip = vec4<f32>(2.0, 2.0, 2.0, 1.0);
    } else {
        out.clip = g.clip_from_world * vec4<f32>(p, 1.0);
    }
    return out;
}

// The colour of a normalised value: LUT entry round(t * 255) (keep in sync with colormap.rs).
fn lut_color(t: f32) -> vec3<f32> {
    let i = u32(clamp(t, 0.0, 1.0) * 255.0 + 0.5);
    return textureLoad(lut, vec2<u32>(i, g.size.w), 0).rgb;
}

// The target is a plain (non-sRGB) RGBA8 texture holding gamma-encoded colours, as egui's own
// textures do: the stored bytes are the LUT's sRGB bytes.
@fragment
fn fs_slice(in: VsOut) -> @location(0) vec4<f32> {
    let nmax = vec3<i32>(g.size.xyz) - vec3<i32>(1);
    var cell = clamp(vec3<i32>(floor(in.world)), vec3<i32>(0), nmax);
    cell[in.axis] = i32(g.slices[in.axis]);
    if textureLoad(solid, cell, 0).r != 0u {
        return vec4<f32>(0.5, 0.5, 0.5, 1.0);
    }
    let v = textureLoad(field, cell, 0).r;
    // NaN and infinities (a blown-up state): magenta.
    if !(abs(v) <= 3.0e38) {
        return vec4<f32>(1.0, 0.0, 1.0, 1.0);
    }
    let lo = g.range.x;
    let hi = g.range.y;
    var t = 0.5;
    if hi > lo {
        t = (v - lo) / (hi - lo);
    }
    return vec4<f32>(lut_color(t), 1.0);
}

// The domain box: 12 edges, 24 vertices, no vertex buffer.
@vertex
fn vs_box(@builtin(vertex_index) vi: u32) -> @builtin(position) vec4<f32> {
    let edge = vi / 2u;
    let end = f32(vi % 2u);
    let n = vec3<f32>(g.size.xyz);
    var p = vec3<f32>(0.0);
    let a = edge / 4u;          // axis the edge runs along
    let k = edge % 4u;          // which of the 4 parallel edges
    let b = f32(k & 1u);
    let c = f32((k >> 1u) & 1u);
    if a == 0u {
        p = vec3<f32>(end, b, c);
    } else if a == 1u {
        p = vec3<f32>(b, end, c);
    } else {
        p = vec3<f32>(b, c, end);
    }
    return g.clip_from_world * vec4<f32>(p * n, 1.0);
}

@fragment
fn fs_box() -> @location(0) vec4<f32> {
    return vec4<f32>(0.8, 0.8, 0.8, 1.0);
}
