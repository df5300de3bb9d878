//! The Export panel: screenshots, recordings, VTK export, checkpoints.

use crate::viewer::app::{Dialog, ViewerApp};
use crate::viewer::worker::Command;
use egui::Ui;
use std::path::PathBuf;

impl ViewerApp {
    pub(crate) fn export_ui(&mut self, ui: &mut Ui) {
        ui.horizontal(|ui| {
            if ui.button("Screenshot (F12)").on_hover_text("into screenshots/").clicked() {
                self.screenshot();
            }
            if ui.button("Save as…").clicked() {
                self.file_dialog(Dialog::SaveScreenshot);
            }
        });
        ui.separator();
        self.recording_ui(ui);
        ui.separator();
        ui.horizontal(|ui| {
            ui.add(egui::TextEdit::singleline(&mut self.vtk_path).id(egui::Id::unique("esoflow.vtk_path")).desired_width(160.0));
            if ui.button("Export VTK").clicked() {
                self.worker.send(Command::ExportVtk(PathBuf::from(self.vtk_path.trim())));
            }
            if ui.button("…").clicked() {
                self.file_dialog(Dialog::ExportVtk);
            }
        });
        ui.horizontal(|ui| {
            ui.add(egui::TextEdit::singleline(&mut self.ckpt_path).id(egui::Id::unique("esoflow.checkpoint_path")).desired_width(120.0));
            if ui.button("Save checkpoint").clicked() {
                self.save_checkpoint(PathBuf::from(self.ckpt_path.trim()));
            }
            if ui.button("Load").clicked() {
                self.worker.send(Command::LoadCheckpoint(PathBuf::from(self.ckpt_path.trim())));
            }
        });
        ui.horizontal(|ui| {
            if ui.button("Save checkpoint as…").clicked() {
                self.file_dialog(Dialog::SaveCheckpoint);
            }
            if ui.button("Load checkpoint…").clicked() {
                self.file_dialog(Dialog::LoadCheckpoint);
            }
        });
    }
}
