//! The draw / erase brush and STL loading: obstacles painted into the running domain.

use super::app::{Tool, ViewerApp};
use super::worker::Command;
use egui::{Color32, Ui};
use glam::Vec3;
use sim_core::scene::FaceKind;
use sim_core::EditTo;
use std::path::Path;
use std::sync::Arc;

/// Name of the obstacle the Draw tool paints into.
pub const DRAWN: &str = "drawn";

impl ViewerApp {
    /// Edits sent that the solver has not confirmed yet.
    #[cfg(test)]
    #[must_use]
    pub fn pending_edits(&self) -> usize {
        self.edit.preview.len()
    }

    /// Choose the tool; in 3D the slice painted on is made visible.
    pub fn set_tool(&mut self, t: Tool) {
        if self.edit.active {
            self.end_stroke();
        }
        self.edit.tool = t;
        if t != Tool::Navigate && !self.is_2d() {
            self.view.show[self.edit.axis] = true;
        }
    }

    /// Voxelise an STL file into the running domain (the Load STL button's path, after the dialog):
    /// centred at the panel's position, its longest edge the panel's fraction of the domain's
    /// smallest extent. Errors come back as messages; the run goes on.
    pub fn load_stl(&mut self, path: &Path) {
        let n = self.grid;
        let dims = if self.is_2d() { 2 } else { 3 };
        let smallest = n[..dims].iter().copied().min().unwrap_or(1) as f32;
        let mut center = [0.0f32; 3];
        for a in 0..dims {
            center[a] = self.edit.stl_center[a].clamp(0.0, 1.0) * (n[a] as f32 - 1.0);
        }
        let size = self.edit.stl_size.clamp(0.01, 1.0) * smallest;
        self.edit.seq += 1;
        self.edit.stroke += 1;
        self.worker.send(Command::LoadStl { seq: self.edit.seq, stroke: self.edit.stroke, path: path.to_path_buf(), center, size });
        self.message(format!("loading {}…", path.display()), false);
    }

    /// Undo the last stroke or STL load.
    pub fn undo_stroke(&mut self) {
        if self.edit.active {
            self.end_stroke();
        }
        self.worker.send(Command::UndoStroke);
    }

    /// Whether a cell lies on a non-periodic face layer (walls, inlets, outlets): the brush
    /// preview leaves those alone, as the solver refuses most of them.
    fn locked(&self, c: usize) -> bool {
        let n = self.grid;
        let p = [c % n[0], (c / n[0]) % n[1], c / (n[0] * n[1])];
        let faces = self.scene.scene.boundaries.faces();
        let dims = if self.is_2d() { 2 } else { 3 };
        (0..dims).any(|a| {
            (p[a] == 0 && faces[2 * a].kind != FaceKind::Periodic) || (p[a] + 1 == n[a] && faces[2 * a + 1].kind != FaceKind::Periodic)
        })
    }

    /// A solid mask with the unconfirmed edits painted in.
    pub(crate) fn with_preview(&self, mask: &Arc<Vec<u8>>) -> Arc<Vec<u8>> {
        let mut m = (**mask).clone();
        for (_, cells, solid) in &self.edit.preview {
            for &c in cells.iter() {
                if c < m.len() && !self.locked(c) {
                    // Drawn cells are obstacles (2: drawn as surfaces too).
                    m[c] = if *solid { 2 } else { 0 };
                }
            }
        }
        Arc::new(m)
    }

    /// Axis painted on (2 in 2D, the image plane), the world coordinate of its plane and the
    /// cell layer.
    fn paint_plane(&self) -> (usize, f32, usize) {
        if self.is_2d() {
            (2, 0.5, 0)
        } else {
            let a = self.edit.axis;
            let k = self.view.slices[a].min(self.grid[a].saturating_sub(1));
            (a, k as f32 + 0.5, k)
        }
    }

    /// The point of the painted plane under a screen position (points), if the view shows it.
    #[must_use]
    pub fn world_at(&self, pos: egui::Pos2) -> Option<Vec3> {
        let rect = self.view_rect?;
        if rect.width() < 1.0 || rect.height() < 1.0 {
            return None;
        }
        let ndc = [(pos.x - rect.left()) / rect.width() * 2.0 - 1.0, 1.0 - (pos.y - rect.top()) / rect.height() * 2.0];
        let (axis, coord, _) = self.paint_plane();
        self.view.camera.pick_plane(self.grid, rect.width() / rect.height(), self.is_2d(), ndc, axis, coord)
    }

    /// Screen position (points) of a world point, if in front of the camera.
    #[must_use]
    pub fn screen_of(&self, p: Vec3) -> Option<egui::Pos2> {
        let rect = self.view_rect?;
        let px =
            self.view.camera.project(self.grid, [rect.width().max(1.0) as u32, rect.height().max(1.0) as u32], self.is_2d(), p.into())?;
        // `project` works in whole pixels of the given size; scale back to the rect's points.
        let sx = rect.width() / rect.width().max(1.0).floor();
        let sy = rect.height() / rect.height().max(1.0).floor();
        Some(egui::pos2(rect.left() + px[0] * sx, rect.top() + px[1] * sy))
    }

    /// Cells of the brush centred at `c` on the painted plane.
    fn brush_cells(&self, c: Vec3, out: &mut Vec<usize>) {
        let n = self.grid;
        let (axis, _, layer) = self.paint_plane();
        let (u, v) = match axis {
            0 => (1, 2),
            1 => (0, 2),
            _ => (0, 1),
        };
        let r = self.edit.brush.max(0.5);
        let range = |a: usize| {
            let lo = (c[a] - r).floor().max(0.0) as usize;
            let hi = ((c[a] + r).floor() as i64).min(n[a] as i64 - 1);
            (lo, hi)
        };
        let ((u0, u1), (v0, v1)) = (range(u), range(v));
        let under = [c[u].floor(), c[v].floor()];
        for j in v0 as i64..=v1 {
            for i in u0 as i64..=u1 {
                let (fi, fj) = (i as f32, j as f32);
                let inside = (fi + 0.5 - c[u]).powi(2) + (fj + 0.5 - c[v]).powi(2) <= r * r || (fi == under[0] && fj == under[1]);
                if inside {
                    let mut p = [0usize; 3];
                    p[axis] = layer;
                    p[u] = i as usize;
                    p[v] = j as usize;
                    out.push(p[0] + n[0] * (p[1] + n[1] * p[2]));
                }
            }
        }
    }

    /// Paint along the pointer's path from the last stamp to `w`.
    fn paint_to(&mut self, w: Vec3) {
        let step = (self.edit.brush * 0.5).max(0.5);
        let from = self.edit.last.unwrap_or(w);
        let k = ((w - from).length() / step).ceil().max(1.0) as usize;
        let mut cells = std::mem::take(&mut self.edit.frame);
        for i in 1..=k {
            self.brush_cells(from.lerp(w, i as f32 / k as f32), &mut cells);
        }
        self.edit.frame = cells;
        self.edit.last = Some(w);
    }

    /// Send the cells painted in this frame as one edit, and show them at once.
    fn flush_edits(&mut self) {
        if self.edit.frame.is_empty() {
            return;
        }
        let mut cells = std::mem::take(&mut self.edit.frame);
        cells.sort_unstable();
        cells.dedup();
        let solid = self.edit.tool == Tool::Draw;
        let to = if solid { EditTo::Solid(DRAWN.into()) } else { EditTo::Fluid };
        self.edit.seq += 1;
        let cells = Arc::new(cells);
        self.edit.preview.push((self.edit.seq, Arc::clone(&cells), solid));
        if let Some(snap) = &self.snap {
            let patched = self.with_preview(&snap.solid);
            if let Some(snap) = self.snap.as_mut() {
                snap.solid = patched;
            }
        }
        self.worker.send(Command::Edit { seq: self.edit.seq, stroke: self.edit.stroke, cells: (*cells).clone(), to });
    }

    fn end_stroke(&mut self) {
        self.flush_edits();
        if self.edit.active {
            self.worker.send(Command::EndStroke(self.edit.stroke));
        }
        self.edit.active = false;
        self.edit.last = None;
    }

    /// Left button on the view with Draw or Erase: paint; released: the stroke ends.
    pub(crate) fn paint_input(&mut self, ui: &Ui, resp: &egui::Response) {
        let pos = resp.hover_pos().or_else(|| resp.interact_pointer_pos());
        self.edit.hover = pos.and_then(|p| self.world_at(p));
        let down = resp.is_pointer_button_down_on() && ui.input(|i| i.pointer.primary_down());
        if !self.edit.tool.is_brush() || !down {
            if self.edit.active {
                self.end_stroke();
            }
            return;
        }
        let Some(w) = resp.interact_pointer_pos().and_then(|p| self.world_at(p)) else { return };
        if !self.edit.active {
            self.edit.active = true;
            self.edit.stroke += 1;
            self.edit.last = None;
        }
        self.paint_to(w);
        self.flush_edits();
    }

    /// The brush outline at the pointer.
    pub(crate) fn brush_cursor(&self, ui: &Ui) {
        let (Some(c), true) = (self.edit.hover, self.edit.tool.is_brush()) else { return };
        let (axis, _, _) = self.paint_plane();
        let (u, v) = match axis {
            0 => (1, 2),
            1 => (0, 2),
            _ => (0, 1),
        };
        let r = self.edit.brush.max(0.5);
        let pts: Vec<egui::Pos2> = (0..=40)
            .filter_map(|k| {
                let t = k as f32 / 40.0 * std::f32::consts::TAU;
                let mut p = c;
                p[u] += r * t.cos();
                p[v] += r * t.sin();
                self.screen_of(p)
            })
            .collect();
        let color = if self.edit.tool == Tool::Draw { Color32::from_rgb(255, 220, 120) } else { Color32::from_rgb(120, 200, 255) };
        ui.painter().add(egui::Shape::line(pts, egui::Stroke::new(1.5, color)));
    }
}
