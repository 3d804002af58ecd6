//! The random baseline: uniformly random actions inside the screenshot.

use super::{Decision, Policy};
use crate::env::{GuiAction, KeyCombo, ScreenState};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// Random clicks (mostly), typing, keys and scrolls, all inside the screenshot.
#[derive(Debug)]
pub struct RandomPolicy {
    rng: ChaCha8Rng,
    /// Only emit clicks (the usual baseline for click tasks and speed benchmarks).
    pub clicks_only: bool,
}

impl RandomPolicy {
    /// A random policy with its own seeded generator.
    pub fn new(seed: u64) -> Self {
        RandomPolicy { rng: ChaCha8Rng::seed_from_u64(seed), clicks_only: false }
    }

    /// One random action for a screenshot of this size.
    pub fn sample(&mut self, width: u32, height: u32) -> GuiAction {
        let r = &mut self.rng;
        let (w, h) = (width.max(1) as i32, height.max(1) as i32);
        let (x, y) = (r.gen_range(0..w), r.gen_range(0..h));
        if self.clicks_only {
            return GuiAction::Click { x, y };
        }
        match r.gen_range(0..100) {
            0..=69 => GuiAction::Click { x, y },
            70..=74 => GuiAction::DoubleClick { x, y },
            75..=84 => {
                let len = r.gen_range(1..8);
                let text = (0..len).map(|_| r.gen_range(b'a'..=b'z') as char).collect();
                GuiAction::Type { text }
            }
            85..=89 => {
                let key = ["Enter", "Tab", "Backspace", "ArrowDown", "ArrowUp"][r.gen_range(0..5)];
                GuiAction::Key(KeyCombo { modifiers: vec![], key: key.into() })
            }
            90..=94 => GuiAction::Scroll { x, y, dx: 0, dy: r.gen_range(-100..=100) },
            _ => GuiAction::Hover { x, y },
        }
    }
}

impl Policy for RandomPolicy {
    fn name(&self) -> String {
        "random".into()
    }
    fn act(&mut self, states: &[ScreenState]) -> anyhow::Result<Vec<Decision>> {
        Ok(states
            .iter()
            .map(|s| Decision::deterministic(self.sample(s.frame.width, s.frame.height)))
            .collect())
    }
}
