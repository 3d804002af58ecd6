//! What the model reads and writes as text: the chat prompt of a state, and actions in the
//! model's coordinate frame (the history it is shown, the answers it is taught).

use super::QwenVlPolicy;
use crate::env::{GuiAction, ScreenState};
use crate::policy::api::prompt::{system_prompt, user_text};
use anyhow::Result;
use serde_json::json;

impl QwenVlPolicy {
    /// The prompt ids and the processed screenshot the policy decodes from for a state
    /// (what a comparison with another engine must feed it).
    pub fn prompt(
        &self,
        state: &ScreenState,
    ) -> Result<(Vec<u32>, crate::policy::qwen_vl::processor::ProcessedImage)> {
        let m = &self.model;
        let img = m.processor.process(&state.screenshot);
        let ids = self.prompt_ids(state, img.tokens(m.config.vision.spatial_merge_size))?;
        Ok((ids, img))
    }

    /// The prompt's token ids for `state`, its screenshot `image_tokens` tokens long.
    pub(super) fn prompt_ids(&self, state: &ScreenState, image_tokens: usize) -> Result<Vec<u32>> {
        let m = &self.model;
        let (w, h) = state.screenshot.dimensions();
        let system = system_prompt(&self.system, &self.coords.describe(w, h));
        let history: Vec<String> = state.history.iter().map(|a| self.in_frame_text(a, w, h)).collect();
        let user = user_text(state, &history, false);
        let messages = json!([
            {"role": "system", "content": system},
            {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": user}]},
        ]);
        let rendered = m.chat.render(&messages, true)?;
        m.chat.encode_prompt(&rendered, &[image_tokens])
    }

    /// An earlier action's text (screenshot pixels) rewritten in the model's frame.
    fn in_frame_text(&self, action: &str, w: u32, h: u32) -> String {
        match action.parse::<GuiAction>() {
            Ok(a) => self.format_action(&a, w, h),
            Err(_) => action.to_string(),
        }
    }

    /// `action` (screenshot pixels) as guirl text in the model's coordinate frame.
    pub fn format_action(&self, action: &GuiAction, w: u32, h: u32) -> String {
        let pt = |x: i32, y: i32| -> (i32, i32) {
            let (fx, fy) = self.coords.from_px(x as f64, y as f64, w, h);
            (fx.round() as i32, fy.round() as i32)
        };
        let a = match action.clone() {
            GuiAction::Click { x, y } => {
                let (x, y) = pt(x, y);
                GuiAction::Click { x, y }
            }
            GuiAction::DoubleClick { x, y } => {
                let (x, y) = pt(x, y);
                GuiAction::DoubleClick { x, y }
            }
            GuiAction::RightClick { x, y } => {
                let (x, y) = pt(x, y);
                GuiAction::RightClick { x, y }
            }
            GuiAction::Hover { x, y } => {
                let (x, y) = pt(x, y);
                GuiAction::Hover { x, y }
            }
            GuiAction::Drag { x1, y1, x2, y2 } => {
                let ((x1, y1), (x2, y2)) = (pt(x1, y1), pt(x2, y2));
                GuiAction::Drag { x1, y1, x2, y2 }
            }
            GuiAction::Scroll { x, y, dx, dy } => {
                let (x, y) = pt(x, y);
                let (dx, dy) = self.coords.from_px(dx as f64, dy as f64, w, h);
                GuiAction::Scroll { x, y, dx: dx.round() as i32, dy: dy.round() as i32 }
            }
            other => other,
        };
        a.to_string()
    }
}
