//! The adapter weights decoding reads (`decode_lora`): the policy's own, or its adapters
//! merged into copies of their layers' weights for a session (`QwenVl::merge_adapters`),
//! when those copies fit in the device's memory.

use super::*;
use crate::policy::qwen_vl::train::lora::MergedAdapters;
use crate::policy::qwen_vl::train::train_pass::PassState;

/// The adapter weights decoding reads (`decode_lora`), chosen once per session or call.
#[derive(Clone)]
pub(super) enum DecodeWeights {
    /// The policy's own: each adapted layer runs its base product and its adapter's.
    Separate,
    /// The policy's adapters merged into copies of their layers' weights.
    Merged(Arc<MergedAdapters>),
}

/// Whether merged copies of `need` bytes fit in `free` bytes (`None`: not known, a CPU's
/// memory) with a tenth to spare. When they do not: an error saying what to do if the
/// config asked for merged adapters (`explicit`), else a warning and `false`, so that the
/// default decodes with separate adapters rather than running out of memory mid-collection.
fn merge_fits(need: u64, free: Option<u64>, explicit: bool) -> Result<bool> {
    let Some(free) = free else { return Ok(true) };
    if need as f64 <= 0.9 * free as f64 {
        return Ok(true);
    }
    let gib = |b: u64| b as f64 / (1u64 << 30) as f64;
    let what = format!(
        "the adapters merged for decoding need {:.1} GiB for copies of their layers and the GPU has {:.1} GiB to spare",
        gib(need),
        gib(free)
    );
    if explicit {
        bail!("model.decode_lora = \"merged\": {what}: set decode_lora = \"separate\" (slower decoding, no copies)");
    }
    static WARNED: std::sync::Once = std::sync::Once::new();
    WARNED.call_once(|| {
        tracing::warn!("{what}: decoding with the adapters separate (set model.decode_lora to choose)")
    });
    Ok(false)
}

impl QwenVlPolicy {
    /// The adapter weights a decoding session or call reads (`decode_lora`): merged now
    /// from the adapters this policy uses, or the policy's own.
    pub(super) fn decode_weights(&self) -> Result<DecodeWeights> {
        if self.settings.decode_lora_on(&self.device) == DecodeLora::Separate || self.model.lora().is_none() {
            return Ok(DecodeWeights::Separate);
        }
        let free = crate::policy::device::allocatable(&self.device)?;
        if !merge_fits(self.model.merged_bytes(), free, self.settings.decode_lora.is_some())? {
            return Ok(DecodeWeights::Separate);
        }
        Ok(self.model.merge_adapters(&self.mode)?.map_or(DecodeWeights::Separate, DecodeWeights::Merged))
    }

    /// `f`, a decoding call, with the adapter weights `w` and no autograd graph: the
    /// adapters (Vars) are read detached, so a prompt's pass does not keep every layer's
    /// activations for a backward that never comes (1.6 GB at its peak for a 1 075-token
    /// prompt at the 0.5B size). The values are the same bits.
    pub(super) fn decoding<T>(&self, w: &DecodeWeights, f: impl FnOnce() -> Result<T>) -> Result<T> {
        let _no_graph = self.model.text.pass().enter(PassState { no_grad: true, ..PassState::default() });
        match w {
            DecodeWeights::Separate => self.with_adapters(f),
            DecodeWeights::Merged(m) => {
                let _use = self.model.lora().map(|(_, s)| s.scope_merged(m.clone()));
                f()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Merged copies that would not fit: the default falls back to separate adapters, a
    /// config that asked for merged ones gets an error that says what to set.
    #[test]
    fn merged_copies_that_do_not_fit_fall_back_or_say_what_to_set() {
        let gib = 1u64 << 30;
        assert!(merge_fits(3 * gib, None, true).unwrap(), "a CPU's memory is not checked");
        assert!(merge_fits(3 * gib, Some(4 * gib), true).unwrap());
        assert!(!merge_fits(3 * gib, Some(3 * gib), false).unwrap(), "the default falls back");
        let e = merge_fits(3 * gib, Some(2 * gib), true).unwrap_err().to_string();
        assert!(
            e.contains("model.decode_lora = \"merged\"")
                && e.contains("3.0 GiB")
                && e.contains("2.0 GiB")
                && e.contains("decode_lora = \"separate\""),
            "{e}"
        );
    }
}
