//! The action vocabulary and the grammar that keeps decoding inside it.
//!
//! An action is written as a short token sequence:
//!
//! ```text
//! click(x, y)            [click] [X x_bin] [Y y_bin]        (double_click, right_click, hover alike)
//! drag(x1, y1, x2, y2)   [drag] [X] [Y] [X] [Y]
//! scroll(x, y, dx, dy)   [scroll] [X] [Y] [up|down|left|right]
//! type("abc")            [type] [a] [b] [c] [END]           (1 ..= max_action_tokens-2 bytes)
//! key(Enter)             [key] [Enter]
//! wait(ms) / done()      [wait] / [done]
//! type("Kasie")          [type] [from p] [to q] [END]     (with copy: instruction bytes p..=q)
//! type("KASIE")          [type] [from p] [to q] [upper]   (the span in upper / lower case)
//! ```
//!
//! Coordinates: bin `b` of `n` bins over a frame `W` pixels wide covers pixels
//! `[b·W/n, (b+1)·W/n)` and decodes to its centre pixel `floor((2b+1)·W / (2n))`; encoding
//! picks the bin whose centre is nearest (ties to the lower bin), after clamping into the
//! frame. So `decode(encode(a)) == a` exactly when `a`'s coordinates are bin centres.
//! Typed text is printable ASCII (0x20..=0x7E), one token a byte. `wait` decodes to the
//! configured `wait_ms`, `scroll` to `scroll_step` pixels along one axis.

use anyhow::{anyhow, bail, Result};

use super::config::ActionSpaceConfig;
use super::copy::{Case, CopySource};
use crate::env::{GuiAction, KeyCombo};

/// Decoder start token (input only, never written).
pub const BOS: u32 = 0;
/// Ends typed text.
pub const END: u32 = 1;
const KIND0: u32 = 2;
const N_KINDS: u32 = GuiAction::KINDS.len() as u32;
/// The first x-coordinate token; the `x_bins` x tokens are followed by the `y_bins` y tokens.
pub const X0: u32 = KIND0 + N_KINDS;
const FIRST_BYTE: u8 = 0x20;
const N_BYTES: u32 = 95;
const SCROLL_DIRS: [&str; 4] = ["up", "down", "left", "right"];

/// What the argument at one position of an action must be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Slot {
    X,
    Y,
    Key,
    ScrollDir,
}

/// The argument slots that follow a kind token (typed text is handled apart).
fn slots(kind: &str) -> &'static [Slot] {
    match kind {
        "click" | "double_click" | "right_click" | "hover" => &[Slot::X, Slot::Y],
        "drag" => &[Slot::X, Slot::Y, Slot::X, Slot::Y],
        "scroll" => &[Slot::X, Slot::Y, Slot::ScrollDir],
        "key" => &[Slot::Key],
        _ => &[],
    }
}

/// Fewest tokens an action of this kind takes (a `type` with one byte takes 3).
pub fn min_tokens(kind: &str) -> usize {
    if kind == "type" {
        3
    } else {
        1 + slots(kind).len()
    }
}

/// Token layout for one action space: `BOS END kinds(10) X(x_bins) Y(y_bins) bytes(95)
/// keys scroll(4)`, then with copy `upper lower from(n) to(n)` (n instruction positions, see
/// [`super::copy`]). All ten kinds have tokens; the grammar masks those not enabled.
#[derive(Debug, Clone)]
pub struct ActionVocab {
    cfg: ActionSpaceConfig,
    keys: Vec<KeyCombo>,
    enabled: [bool; GuiAction::KINDS.len()],
    x0: u32,
    y0: u32,
    byte0: u32,
    key0: u32,
    scroll0: u32,
    case0: u32,
    copy0: u32,
    copy_n: u32,
    size: u32,
}

impl ActionVocab {
    /// The vocabulary of a (validated) action space, without copy tokens.
    pub fn new(cfg: &ActionSpaceConfig) -> Result<Self> {
        Self::with_copy(cfg, 0)
    }

    /// The vocabulary of a (validated) action space, with `from`/`to` copy tokens over
    /// `copy_positions` instruction bytes (0: none).
    pub fn with_copy(cfg: &ActionSpaceConfig, copy_positions: usize) -> Result<Self> {
        cfg.validate()?;
        // The longest fixed action (kind token plus its arguments) must fit.
        let need = cfg.kinds.iter().map(|k| min_tokens(k)).max().unwrap_or(1);
        if cfg.max_action_tokens < need {
            bail!(
                "VLM config: `actions.max_action_tokens` = {} is too small for the kinds listed: need at least {need}",
                cfg.max_action_tokens
            );
        }

        let keys = cfg
            .keys
            .iter()
            .map(|k| match GuiAction::parse(&format!("key({k})")) {
                Ok(GuiAction::Key(c)) => Ok(c),
                _ => Err(anyhow!("`actions.keys` has {k:?}, not a key")),
            })
            .collect::<Result<Vec<_>>>()?;
        let mut enabled = [false; GuiAction::KINDS.len()];
        for (i, k) in GuiAction::KINDS.iter().enumerate() {
            enabled[i] = cfg.kinds.iter().any(|c| c == k);
        }
        let x0 = X0;
        let y0 = x0 + cfg.x_bins as u32;
        let byte0 = y0 + cfg.y_bins as u32;
        let key0 = byte0 + N_BYTES;
        let scroll0 = key0 + keys.len() as u32;
        let case0 = scroll0 + SCROLL_DIRS.len() as u32;
        let copy_n = copy_positions as u32;
        let copy0 = if copy_n > 0 { case0 + Case::ALL.len() as u32 } else { case0 };
        let size = copy0 + 2 * copy_n;
        Ok(ActionVocab {
            cfg: cfg.clone(),
            keys,
            enabled,
            x0,
            y0,
            byte0,
            key0,
            scroll0,
            case0,
            copy0,
            copy_n,
            size,
        })
    }

    /// Number of tokens (the width of the model's output).
    pub fn size(&self) -> usize {
        self.size as usize
    }

    /// Longest action, in tokens.
    pub fn max_tokens(&self) -> usize {
        self.cfg.max_action_tokens
    }

    /// The action space this vocabulary was built from.
    pub fn config(&self) -> &ActionSpaceConfig {
        &self.cfg
    }

    /// Whether `type` may copy from the instruction.
    pub fn has_copy(&self) -> bool {
        self.copy_n > 0
    }

    /// A grammar at the start of an action, with no instruction to copy from.
    pub fn grammar(&self) -> Grammar<'_> {
        self.grammar_in(None)
    }

    /// A grammar at the start of an action whose `type` may copy from `src` (when this
    /// vocabulary has copy tokens).
    pub fn grammar_in<'a>(&'a self, src: Option<&'a CopySource>) -> Grammar<'a> {
        let src = src.filter(|_| self.has_copy());
        Grammar { vocab: self, src, state: State::Start, len: 0 }
    }

    /// A readable name for a token, for logs and error messages.
    pub fn token_name(&self, t: u32) -> String {
        match self.classify(t) {
            Some(Tok::Bos) => "<bos>".into(),
            Some(Tok::End) => "<end>".into(),
            Some(Tok::Kind(k)) => GuiAction::KINDS[k].into(),
            Some(Tok::X(b)) => format!("x{b}"),
            Some(Tok::Y(b)) => format!("y{b}"),
            Some(Tok::Byte(c)) => format!("{:?}", c as char),
            Some(Tok::Key(k)) => format!("key:{}", self.keys[k]),
            Some(Tok::Scroll(d)) => format!("scroll:{}", SCROLL_DIRS[d]),
            Some(Tok::Case(c)) => format!("{c:?}").to_lowercase(),
            Some(Tok::From(p)) => format!("from@{p}"),
            Some(Tok::To(q)) => format!("to@{q}"),
            None => format!("<invalid {t}>"),
        }
    }

    fn classify(&self, t: u32) -> Option<Tok> {
        Some(match t {
            BOS => Tok::Bos,
            END => Tok::End,
            t if t < self.x0 => Tok::Kind((t - KIND0) as usize),
            t if t < self.y0 => Tok::X((t - self.x0) as usize),
            t if t < self.byte0 => Tok::Y((t - self.y0) as usize),
            t if t < self.key0 => Tok::Byte(FIRST_BYTE + (t - self.byte0) as u8),
            t if t < self.scroll0 => Tok::Key((t - self.key0) as usize),
            t if t < self.case0 => Tok::Scroll((t - self.scroll0) as usize),
            t if t < self.copy0 => Tok::Case(Case::ALL[(t - self.case0) as usize]),
            t if t < self.copy0 + self.copy_n => Tok::From((t - self.copy0) as usize),
            t if t < self.size => Tok::To((t - self.copy0 - self.copy_n) as usize),
            _ => return None,
        })
    }

    /// The tokens of `action` on a `frame_w`×`frame_h` screenshot. Coordinates are
    /// quantised to bins (clamped into the frame), `scroll` to its dominant direction and
    /// `wait` to the configured length. Errors for a kind not enabled, a key not listed,
    /// or text that is empty, too long, or not printable ASCII.
    pub fn encode(&self, action: &GuiAction, frame_w: u32, frame_h: u32) -> Result<Vec<u32>> {
        self.encode_in(action, frame_w, frame_h, None)
    }

    /// As [`Self::encode`], but typed text that `src` holds as a span is written as a
    /// copy of its first such span (when this vocabulary has copy tokens).
    pub fn encode_in(
        &self,
        action: &GuiAction,
        frame_w: u32,
        frame_h: u32,
        src: Option<&CopySource>,
    ) -> Result<Vec<u32>> {
        let kind = action.kind();
        let ki = GuiAction::KINDS.iter().position(|k| *k == kind).expect("every kind is listed");
        if !self.enabled[ki] {
            bail!(
                "action `{action}`: kind `{kind}` is not in this policy's action space (kinds = {:?})",
                self.cfg.kinds
            );
        }
        let mut out = vec![KIND0 + ki as u32];
        let x = |v: i32| self.x0 + nearest_bin(v, frame_w, self.cfg.x_bins) as u32;
        let y = |v: i32| self.y0 + nearest_bin(v, frame_h, self.cfg.y_bins) as u32;
        match action {
            GuiAction::Click { x: px, y: py }
            | GuiAction::DoubleClick { x: px, y: py }
            | GuiAction::RightClick { x: px, y: py }
            | GuiAction::Hover { x: px, y: py } => out.extend([x(*px), y(*py)]),
            GuiAction::Drag { x1, y1, x2, y2 } => out.extend([x(*x1), y(*y1), x(*x2), y(*y2)]),
            GuiAction::Scroll { x: px, y: py, dx, dy } => {
                let dir = if dy.abs() >= dx.abs() { usize::from(*dy >= 0) } else { 2 + usize::from(*dx > 0) };
                out.extend([x(*px), y(*py), self.scroll0 + dir as u32]);
            }
            GuiAction::Type { text } => {
                if let Some((p, q, case)) = src.filter(|_| self.has_copy()).and_then(|s| s.find(text)) {
                    out.extend([self.copy0 + p as u32, self.copy0 + self.copy_n + q as u32]);
                    out.push(match case {
                        Some(c) => {
                            self.case0 + Case::ALL.iter().position(|k| *k == c).expect("listed") as u32
                        }
                        None => END,
                    });
                    return Ok(out);
                }
                let max = self.cfg.max_action_tokens - 2;
                if text.is_empty() || text.len() > max {
                    bail!("action `{action}`: typed text must have 1 to {max} bytes, it has {}", text.len());
                }
                for c in text.bytes() {
                    if !(FIRST_BYTE..FIRST_BYTE + N_BYTES as u8).contains(&c) {
                        bail!("action `{action}`: typed text must be printable ASCII, found byte 0x{c:02x}");
                    }
                    out.push(self.byte0 + u32::from(c - FIRST_BYTE));
                }
                out.push(END);
            }
            GuiAction::Key(combo) => match self.keys.iter().position(|k| k == combo) {
                Some(i) => out.push(self.key0 + i as u32),
                None => {
                    bail!("action `{action}`: key `{combo}` is not in `actions.keys` {:?}", self.cfg.keys)
                }
            },
            GuiAction::Wait { .. } | GuiAction::Done => {}
        }
        Ok(out)
    }

    /// The action a complete token sequence stands for, with exact pixel coordinates on
    /// a `frame_w`×`frame_h` screenshot. Errors if the sequence breaks the grammar or is
    /// unfinished.
    pub fn decode(&self, tokens: &[u32], frame_w: u32, frame_h: u32) -> Result<GuiAction> {
        self.decode_in(tokens, frame_w, frame_h, None)
    }

    /// As [`Self::decode`], for a sequence that may copy from `src`.
    pub fn decode_in(
        &self,
        tokens: &[u32],
        frame_w: u32,
        frame_h: u32,
        src: Option<&CopySource>,
    ) -> Result<GuiAction> {
        let mut g = self.grammar_in(src);
        for &t in tokens {
            g.advance(t)?;
        }
        if !g.is_complete() {
            bail!("unfinished action: {}", self.describe(tokens));
        }
        let mut xs = Vec::new();
        let mut ys = Vec::new();
        let (mut text, mut key, mut dir, mut span, mut case) = (String::new(), None, 0, None, None);
        for &t in &tokens[1..] {
            match self.classify(t) {
                Some(Tok::X(b)) => xs.push(bin_centre(b, frame_w, self.cfg.x_bins)),
                Some(Tok::Y(b)) => ys.push(bin_centre(b, frame_h, self.cfg.y_bins)),
                Some(Tok::Byte(c)) => text.push(c as char),
                Some(Tok::Key(k)) => key = Some(self.keys[k].clone()),
                Some(Tok::Scroll(d)) => dir = d,
                Some(Tok::Case(c)) => case = Some(c),
                Some(Tok::From(p)) => span = Some((p, p)),
                Some(Tok::To(q)) => span = span.map(|(p, _)| (p, q)),
                _ => {}
            }
        }
        // the grammar let the span through, so `src` holds it
        if let (Some((p, q)), Some(s)) = (span, src) {
            text = s.text(p, q, case);
        }
        let s = self.cfg.scroll_step;
        Ok(match GuiAction::KINDS[(tokens[0] - KIND0) as usize] {
            "click" => GuiAction::Click { x: xs[0], y: ys[0] },
            "double_click" => GuiAction::DoubleClick { x: xs[0], y: ys[0] },
            "right_click" => GuiAction::RightClick { x: xs[0], y: ys[0] },
            "hover" => GuiAction::Hover { x: xs[0], y: ys[0] },
            "drag" => GuiAction::Drag { x1: xs[0], y1: ys[0], x2: xs[1], y2: ys[1] },
            "scroll" => {
                let (dx, dy) = [(0, -s), (0, s), (-s, 0), (s, 0)][dir];
                GuiAction::Scroll { x: xs[0], y: ys[0], dx, dy }
            }
            "type" => GuiAction::Type { text },
            "key" => GuiAction::Key(key.expect("grammar requires a key")),
            "wait" => GuiAction::Wait { ms: self.cfg.wait_ms },
            _ => GuiAction::Done,
        })
    }

    fn describe(&self, tokens: &[u32]) -> String {
        tokens.iter().map(|&t| self.token_name(t)).collect::<Vec<_>>().join(" ")
    }
}

#[derive(Debug, Clone, Copy)]
enum Tok {
    Bos,
    End,
    Kind(usize),
    X(usize),
    Y(usize),
    Byte(u8),
    Key(usize),
    Scroll(usize),
    /// The case a copied span is typed in.
    Case(Case),
    /// First byte of a copied span.
    From(usize),
    /// Last byte of a copied span.
    To(usize),
}

/// Pixel of bin `b` of `n` over `size` pixels: the centre, `floor((2b+1)·size / 2n)`.
pub fn bin_centre(b: usize, size: u32, n: usize) -> i32 {
    ((2 * b as u64 + 1) * u64::from(size.max(1)) / (2 * n as u64)) as i32
}

/// The bin whose centre pixel is nearest to `v` (clamped into `0..size`; ties go low).
pub fn nearest_bin(v: i32, size: u32, n: usize) -> usize {
    let size = size.max(1);
    let v = v.clamp(0, size as i32 - 1);
    let guess = ((v as u64 * n as u64) / u64::from(size)).min(n as u64 - 1) as usize;
    let lo = guess.saturating_sub(1);
    let hi = (guess + 1).min(n - 1);
    (lo..=hi).min_by_key(|&b| (bin_centre(b, size, n) - v).abs()).expect("non-empty range")
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Start,
    Args {
        kind: usize,
        next: usize,
    },
    Text {
        bytes: usize,
    },
    /// A copied span has started at `from`; its last byte comes next.
    CopyTo {
        from: usize,
    },
    /// A copied span is complete; END (as it is) or a case token comes next.
    CopyCase,
    Complete,
}

/// Constrained-decoding state machine: which tokens may come next, so that every
/// sequence it accepts decodes to a valid action.
#[derive(Debug, Clone)]
pub struct Grammar<'a> {
    vocab: &'a ActionVocab,
    /// The instruction a `type` may copy from (None: free text only).
    src: Option<&'a CopySource>,
    state: State,
    len: usize,
}

impl Grammar<'_> {
    /// Whether a whole action has been written.
    pub fn is_complete(&self) -> bool {
        self.state == State::Complete
    }

    /// Tokens accepted so far.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether no token has been accepted yet.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether token `t` may come next.
    pub fn allows(&self, t: u32) -> bool {
        let v = self.vocab;
        match (self.state, v.classify(t)) {
            (State::Start, Some(Tok::Kind(k))) => v.enabled[k],
            (State::Args { kind, next }, Some(tok)) => matches!(
                (slots(GuiAction::KINDS[kind])[next], tok),
                (Slot::X, Tok::X(_))
                    | (Slot::Y, Tok::Y(_))
                    | (Slot::Key, Tok::Key(_))
                    | (Slot::ScrollDir, Tok::Scroll(_))
            ),
            (State::Text { bytes }, Some(Tok::Byte(_))) => bytes + 2 < v.cfg.max_action_tokens,
            (State::Text { bytes }, Some(Tok::End)) => bytes > 0,
            (State::Text { bytes: 0 }, Some(Tok::From(p))) => self.src.is_some_and(|s| s.can_start(p)),
            (State::CopyTo { from }, Some(Tok::To(q))) => self.src.is_some_and(|s| s.can_span(from, q)),
            (State::CopyCase, Some(Tok::End | Tok::Case(_))) => true,
            _ => false,
        }
    }

    /// The allowed next tokens, in order.
    pub fn allowed(&self) -> Vec<u32> {
        (0..self.vocab.size).filter(|&t| self.allows(t)).collect()
    }

    /// Write the grammar's additive mask for the next token into `out` (length = vocab
    /// size): 0 where allowed, `blocked` elsewhere. On a complete grammar, all 0.
    pub fn fill_mask(&self, out: &mut [f32], blocked: f32) {
        if self.is_complete() {
            out.fill(0.0);
            return;
        }
        for (t, o) in out.iter_mut().enumerate() {
            *o = if self.allows(t as u32) { 0.0 } else { blocked };
        }
    }

    /// Accept token `t`, or say why it is not allowed here.
    pub fn advance(&mut self, t: u32) -> Result<()> {
        if !self.allows(t) {
            bail!(
                "token {} is not allowed after {} token(s) in state {:?}",
                self.vocab.token_name(t),
                self.len,
                self.state
            );
        }
        self.len += 1;
        self.state = match (self.state, self.vocab.classify(t)) {
            (State::Start, Some(Tok::Kind(k))) => match GuiAction::KINDS[k] {
                "type" => State::Text { bytes: 0 },
                name if slots(name).is_empty() => State::Complete,
                _ => State::Args { kind: k, next: 0 },
            },
            (State::Args { kind, next }, _) if next + 1 == slots(GuiAction::KINDS[kind]).len() => {
                State::Complete
            }
            (State::Args { kind, next }, _) => State::Args { kind, next: next + 1 },
            (State::Text { .. }, Some(Tok::End)) | (State::CopyCase, _) => State::Complete,
            (State::Text { .. }, Some(Tok::From(p))) => State::CopyTo { from: p },
            (State::CopyTo { .. }, _) => State::CopyCase,
            (State::Text { bytes }, _) => State::Text { bytes: bytes + 1 },
            (s, _) => s,
        };
        Ok(())
    }
}

#[cfg(test)]
#[path = "tokens_tests.rs"]
mod tests;
