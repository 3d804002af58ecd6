//! The random baseline: uniformly random actions inside the screenshot.

use super::{Decision, Policy};
use crate::env::{GuiAction, KeyCombo, ScreenState};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// Random clicks (mostly), typing, keys and scrolls, all inside the screenshot.
#[derive(Debug)]
pub struct RandomPolicy {
    seed: u64,
    rng: ChaCha8Rng,
    /// Only emit clicks (the usual baseline for click tasks and speed benchmarks).
    pub clicks_only: bool,
}

impl RandomPolicy {
    /// A random policy with its own seeded generator.
    pub fn new(seed: u64) -> Self {
        RandomPolicy { seed, rng: ChaCha8Rng::seed_from_u64(seed), clicks_only: false }
    }

    /// One random action for a screenshot of this size.
    pub fn sample(&mut self, width: u32, height: u32) -> GuiAction {
        Self::draw(&mut self.rng, self.clicks_only, width, height)
    }

    fn draw(r: &mut ChaCha8Rng, clicks_only: bool, width: u32, height: u32) -> GuiAction {
        let (w, h) = (width.max(1) as i32, height.max(1) as i32);
        let (x, y) = (r.gen_range(0..w), r.gen_range(0..h));
        if clicks_only {
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
    /// Each state draws from its own stream (the seed mixed with its key), so a run with
    /// several browsers takes the same actions whichever browser asks first.
    fn act_keyed(&mut self, states: &[ScreenState], keys: &[u64]) -> anyhow::Result<Vec<Decision>> {
        anyhow::ensure!(keys.len() == states.len(), "{} keys for {} states", keys.len(), states.len());
        Ok(states
            .iter()
            .zip(keys)
            .map(|(s, &k)| {
                let mut rng = super::trainable::stream_rng(self.seed, k);
                Decision::deterministic(Self::draw(&mut rng, self.clicks_only, s.frame.width, s.frame.height))
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::stream_key;

    fn state() -> ScreenState {
        ScreenState {
            task_id: String::new(),
            instruction: String::new(),
            url: String::new(),
            step: 0,
            frame: crate::env::Frame { width: 160, height: 210, ..Default::default() },
            elements: Vec::new(),
            screenshot: image::RgbImage::new(1, 1).into(),
            history: Vec::new(),
            previous_screenshot: None,
        }
    }

    fn texts(d: Vec<Decision>) -> Vec<String> {
        d.into_iter().map(|d| d.action.to_string()).collect()
    }

    #[test]
    fn keyed_draws_do_not_depend_on_batching_or_order() {
        let states = vec![state(); 6];
        let keys: Vec<u64> = (0..6).map(|j| stream_key(j, 3)).collect();
        let together = texts(RandomPolicy::new(5).act_keyed(&states, &keys).unwrap());
        let mut one = RandomPolicy::new(5);
        for (i, &k) in keys.iter().enumerate().rev() {
            // Draw something else first: the shared generator must not leak into keyed draws.
            one.sample(160, 210);
            let alone = texts(one.act_keyed(&states[..1], &[k]).unwrap());
            assert_eq!(alone[0], together[i]);
        }
        let other = texts(RandomPolicy::new(6).act_keyed(&states, &keys).unwrap());
        assert_ne!(other, together, "another seed draws other actions");
        assert!(together.iter().collect::<std::collections::HashSet<_>>().len() > 1);
    }
}
