//! The panels of the viewer's left side, one file each, and what their text fields share.

pub mod adaptive;
pub mod compression;
pub mod export;
pub mod help;
pub mod presets;
pub mod probes;
pub mod scene;
pub mod schemes;
pub mod sidebar;
pub mod simulation;
pub mod stats;
pub mod tracers;
pub mod view;

/// Whether the user just left a text field (Enter, Tab, a click elsewhere): `focused` is the
/// field's focus as of its last drawing, updated here. Exactly once per edit: egui's
/// `lost_focus` stays true for two frames, and by the second the field may hold the solver's
/// value again (a budget typed and then reset to "none" was the flaky viewer test's failure).
fn left_field(focused: &mut bool, r: &egui::Response) -> bool {
    let was = std::mem::replace(focused, r.has_focus());
    was && !*focused
}
