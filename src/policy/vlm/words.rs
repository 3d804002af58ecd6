//! Where a word or a point falls: a word's hash bucket (the instruction's, the screen's
//! and the critic's and reward model's bags of words) and a screen point's cell of the
//! image grid. Every input of the small policy that matches words or places marks on the
//! grid reads these (`inputs.rs`, `elements.rs`, `history.rs`).

use super::config::VlmConfig;

/// For each byte of `text`, the hash bucket (1..`buckets`) of the word it belongs to, or 0
/// outside words. A word is a run of ASCII letters and digits; the hash is FNV-1a, so the
/// buckets are the same on every machine and in every run.
///
/// Why: with byte embeddings and absolute positions, "Sync" at offset 9 and at offset 40
/// share nothing until the encoder has learned to spell; a word feature makes matching a
/// name in the instruction against one on the screen a one-layer lookup.
pub fn word_buckets(text: &[u8], buckets: usize) -> Vec<u32> {
    let mut out = vec![0u32; text.len()];
    let mut i = 0;
    while i < text.len() {
        if !text[i].is_ascii_alphanumeric() {
            i += 1;
            continue;
        }
        let end = text[i..].iter().position(|c| !c.is_ascii_alphanumeric()).map_or(text.len(), |n| i + n);
        out[i..end].fill(bucket(&text[i..end], buckets));
        i = end;
    }
    out
}

/// [`word_buckets`] of `text` as the policy reads it: without case (ASCII letters
/// lowered), so the page's "Email" is the instruction's "email".
pub fn policy_words(text: &[u8], cfg: &VlmConfig) -> Vec<u32> {
    word_buckets(&text.to_ascii_lowercase(), cfg.word_buckets)
}

/// The distinct words of `text` as the policy reads them ([`policy_words`]), in order of
/// first appearance, at most `max`.
pub fn distinct_words(text: &str, cfg: &VlmConfig, max: usize) -> Vec<u32> {
    let mut out = Vec::new();
    for id in starts(&policy_words(text.as_bytes(), cfg)) {
        if out.len() == max {
            break;
        }
        if !out.contains(&id) {
            out.push(id);
        }
    }
    out
}

/// The bucket of each word of a per-byte bucket list, in order (one per word).
fn starts(per_byte: &[u32]) -> impl Iterator<Item = u32> + '_ {
    // a word starts where a non-zero bucket follows a separator
    per_byte.iter().enumerate().filter(|&(i, &b)| b != 0 && (i == 0 || per_byte[i - 1] == 0)).map(|(_, &b)| b)
}

/// The hash bucket (1..`buckets`, FNV-1a) of one word's bytes; 0 with fewer than 2 buckets.
pub(super) fn bucket(word: &[u8], buckets: usize) -> u32 {
    let hash =
        word.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &c| (h ^ u64::from(c)).wrapping_mul(0x0100_0000_01b3));
    if buckets > 1 {
        1 + (hash % (buckets as u64 - 1)) as u32
    } else {
        0
    }
}

/// A text's words as bucket ids ([`word_buckets`]: 1.., one per word, in order), at most
/// `max` (the critic's and the reward model's bag of words).
pub fn instruction_words(text: &str, buckets: usize, max: usize) -> Vec<u32> {
    starts(&word_buckets(text.as_bytes(), buckets)).take(max).collect()
}

/// The image-token grid cell of the point (`x`, `y`) on a `w`×`h` screenshot, if on it.
pub(crate) fn grid_cell(x: f32, y: f32, (w, h): (u32, u32), cfg: &VlmConfig) -> Option<usize> {
    let (gw, gh) = (cfg.grid_w(), cfg.grid_h());
    if !(0.0..w as f32).contains(&x) || !(0.0..h as f32).contains(&y) {
        return None;
    }
    Some((y / h as f32 * gh as f32) as usize * gw + (x / w as f32 * gw as f32) as usize)
}
