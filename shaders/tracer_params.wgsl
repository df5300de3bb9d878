// The uniform both tracer shaders bind at 0, prepended to tracers.wgsl and tracers_draw.wgsl
// when they are built (TRACERS_WGSL, TRACERS_DRAW_WGSL in app/src/viewer/render/tracers.rs).
// Keep it in sync with `TracerParams` there.

struct Params {
    clip_from_world: mat4x4<f32>,
    // nx, ny, nz, number of tracers
    size: vec4<u32>,
    // x = floats from one velocity row to the next, y = lattice spacing of the values (1: every
    // cell), z = a counter that changes every pass (random respawns), w = 1: place every tracer
    // anew (the seeding changed, the run went back)
    pitch: vec4<u32>,
    // lower corner of the box tracers are released in; w = a tracer's life in time steps
    seed_min: vec4<f32>,
    // upper corner; w = time steps to move the tracers by in this pass
    seed_max: vec4<f32>,
    // streamline seeds: the first seed's corner of the seed rectangle (w = step length in cells)
    line_origin: vec4<f32>,
    // the rectangle's two edges (w unused)
    line_u: vec4<f32>,
    line_v: vec4<f32>,
    // seeds along u, along v, points per line, colour map row
    lines: vec4<u32>,
    // tracer colour (sRGB, alpha)
    color: vec4<f32>,
    // x = dot size in pixels, y, z = view size in pixels; w = 1 when lines are coloured by speed
    style: vec4<f32>,
    // lo, hi of the streamlines' speed colour range; zw unused
    line_range: vec4<f32>,
};
