//! `GuiAction`: what an agent does to the screen, and its one canonical text form.
//!
//! ```text
//! click(x, y)   double_click(x, y)   right_click(x, y)   hover(x, y)
//! drag(x1, y1, x2, y2)   scroll(x, y, dx, dy)   type("text, with \"escapes\"")
//! key(Enter)   key(ctrl+a)   wait(ms)   done()
//! ```
//! Coordinates are integer pixels of the observation's screenshot, origin top-left.
//! `GuiAction::parse(&a.to_string()) == Ok(a)` holds for every action.

use serde::{Deserialize, Serialize};
use std::fmt;

/// A modifier key held during a `key(...)` press.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Modifier {
    /// Control.
    Ctrl,
    /// Alt / Option.
    Alt,
    /// Shift.
    Shift,
    /// Meta / Command.
    Meta,
}

impl Modifier {
    fn name(self) -> &'static str {
        match self {
            Modifier::Ctrl => "ctrl",
            Modifier::Alt => "alt",
            Modifier::Shift => "shift",
            Modifier::Meta => "meta",
        }
    }
    fn from_name(s: &str) -> Option<Self> {
        Some(match s.to_ascii_lowercase().as_str() {
            "ctrl" | "control" => Modifier::Ctrl,
            "alt" | "option" => Modifier::Alt,
            "shift" => Modifier::Shift,
            "meta" | "cmd" | "command" => Modifier::Meta,
            _ => return None,
        })
    }
    /// The WebDriver key code (a private-use code point) for this modifier.
    pub fn webdriver_char(self) -> char {
        match self {
            Modifier::Ctrl => '\u{E009}',
            Modifier::Alt => '\u{E00A}',
            Modifier::Shift => '\u{E008}',
            Modifier::Meta => '\u{E03D}',
        }
    }
}

/// Named (non-character) keys and their WebDriver code points.
pub const NAMED_KEYS: &[(&str, char)] = &[
    ("Enter", '\u{E007}'),
    ("Tab", '\u{E004}'),
    ("Escape", '\u{E00C}'),
    ("Backspace", '\u{E003}'),
    ("Delete", '\u{E017}'),
    ("Insert", '\u{E016}'),
    ("Space", ' '),
    ("ArrowLeft", '\u{E012}'),
    ("ArrowUp", '\u{E013}'),
    ("ArrowRight", '\u{E014}'),
    ("ArrowDown", '\u{E015}'),
    ("Home", '\u{E011}'),
    ("End", '\u{E010}'),
    ("PageUp", '\u{E00E}'),
    ("PageDown", '\u{E00F}'),
    ("F1", '\u{E031}'),
    ("F2", '\u{E032}'),
    ("F3", '\u{E033}'),
    ("F4", '\u{E034}'),
    ("F5", '\u{E035}'),
    ("F6", '\u{E036}'),
    ("F7", '\u{E037}'),
    ("F8", '\u{E038}'),
    ("F9", '\u{E039}'),
    ("F10", '\u{E03A}'),
    ("F11", '\u{E03B}'),
    ("F12", '\u{E03C}'),
];

/// A key press with optional modifiers: `Enter`, `ctrl+a`, `ctrl+shift+Tab`.
///
/// Canonical form: modifiers in the order ctrl, alt, shift, meta, then the key, which is
/// either a name from [`NAMED_KEYS`] or a single printable character other than `+`,
/// `(`, `)` and whitespace... except that `+` is written as itself when it is the last
/// part (`ctrl++`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct KeyCombo {
    /// Modifiers, sorted and without repeats.
    pub modifiers: Vec<Modifier>,
    /// The key: a named key or one character.
    pub key: String,
}

impl KeyCombo {
    /// The WebDriver code point of the (non-modifier) key.
    pub fn webdriver_char(&self) -> char {
        NAMED_KEYS
            .iter()
            .find(|(n, _)| *n == self.key)
            .map(|(_, c)| *c)
            .unwrap_or_else(|| self.key.chars().next().unwrap_or(' '))
    }

    fn parse(s: &str) -> Result<Self, String> {
        let (mods_part, key) = if s == "+" {
            (None, "+")
        } else {
            match s.strip_suffix("++") {
                Some(rest) => (Some(rest), "+"),
                None => match s.rfind('+') {
                    Some(i) if i + 1 < s.len() => (Some(&s[..i]), &s[i + 1..]),
                    Some(_) => return Err("a key after '+'".into()),
                    None => (None, s),
                },
            }
        };
        let mut modifiers = Vec::new();
        if let Some(m) = mods_part.filter(|m| !m.is_empty()) {
            for name in m.split('+') {
                let md = Modifier::from_name(name.trim()).ok_or_else(|| {
                    format!("a modifier (ctrl, alt, shift, meta), found {}", quote_cut(name))
                })?;
                if !modifiers.contains(&md) {
                    modifiers.push(md);
                }
            }
        }
        modifiers.sort();
        let key = key.trim();
        let key = if let Some((n, _)) = NAMED_KEYS.iter().find(|(n, _)| n.eq_ignore_ascii_case(key)) {
            n.to_string()
        } else if key.chars().count() == 1 {
            key.to_string()
        } else {
            return Err(format!(
                "a key name (Enter, Tab, Escape, Backspace, ArrowUp, F1, ...) or one character, found {}",
                quote_cut(key)
            ));
        };
        Ok(KeyCombo { modifiers, key })
    }
}

impl fmt::Display for KeyCombo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for m in &self.modifiers {
            write!(f, "{}+", m.name())?;
        }
        f.write_str(&self.key)
    }
}

/// One thing an agent does to the screen. See the module docs for the text form.
// The variants' fields are the coordinates, offsets, text and duration that each variant's
// doc names; a doc line per field would repeat it.
#[allow(missing_docs)]
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum GuiAction {
    /// Left click at screenshot pixel (x, y).
    Click { x: i32, y: i32 },
    /// Double click at (x, y).
    DoubleClick { x: i32, y: i32 },
    /// Right click at (x, y).
    RightClick { x: i32, y: i32 },
    /// Move the pointer to (x, y).
    Hover { x: i32, y: i32 },
    /// Press at (x1, y1), move to (x2, y2), release.
    Drag { x1: i32, y1: i32, x2: i32, y2: i32 },
    /// Scroll the wheel by (dx, dy) pixels with the pointer at (x, y).
    Scroll { x: i32, y: i32, dx: i32, dy: i32 },
    /// Type text into whatever has focus.
    Type { text: String },
    /// Press a key, possibly with modifiers.
    Key(KeyCombo),
    /// Do nothing for this many milliseconds.
    Wait { ms: u32 },
    /// Declare the task finished.
    Done,
}

impl GuiAction {
    /// The action's name in the text form (`click`, `type`, ...).
    pub fn kind(&self) -> &'static str {
        match self {
            GuiAction::Click { .. } => "click",
            GuiAction::DoubleClick { .. } => "double_click",
            GuiAction::RightClick { .. } => "right_click",
            GuiAction::Hover { .. } => "hover",
            GuiAction::Drag { .. } => "drag",
            GuiAction::Scroll { .. } => "scroll",
            GuiAction::Type { .. } => "type",
            GuiAction::Key(_) => "key",
            GuiAction::Wait { .. } => "wait",
            GuiAction::Done => "done",
        }
    }

    /// All action names, in text-form order.
    pub const KINDS: [&'static str; 10] =
        ["click", "double_click", "right_click", "hover", "drag", "scroll", "type", "key", "wait", "done"];

    /// Points on the screenshot this action touches (for bounds checks and drawing).
    pub fn points(&self) -> Vec<(i32, i32)> {
        match *self {
            GuiAction::Click { x, y }
            | GuiAction::DoubleClick { x, y }
            | GuiAction::RightClick { x, y }
            | GuiAction::Hover { x, y }
            | GuiAction::Scroll { x, y, .. } => vec![(x, y)],
            GuiAction::Drag { x1, y1, x2, y2 } => vec![(x1, y1), (x2, y2)],
            _ => vec![],
        }
    }

    /// Parse the canonical text form. Whitespace around tokens is allowed.
    pub fn parse(s: &str) -> Result<GuiAction, ParseActionError> {
        Parser { s, pos: 0 }.action()
    }
}

impl std::str::FromStr for GuiAction {
    type Err = ParseActionError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        GuiAction::parse(s)
    }
}

impl fmt::Display for GuiAction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GuiAction::Click { x, y } => write!(f, "click({x}, {y})"),
            GuiAction::DoubleClick { x, y } => write!(f, "double_click({x}, {y})"),
            GuiAction::RightClick { x, y } => write!(f, "right_click({x}, {y})"),
            GuiAction::Hover { x, y } => write!(f, "hover({x}, {y})"),
            GuiAction::Drag { x1, y1, x2, y2 } => write!(f, "drag({x1}, {y1}, {x2}, {y2})"),
            GuiAction::Scroll { x, y, dx, dy } => write!(f, "scroll({x}, {y}, {dx}, {dy})"),
            GuiAction::Type { text } => write!(f, "type({})", quote(text)),
            GuiAction::Key(k) => write!(f, "key({k})"),
            GuiAction::Wait { ms } => write!(f, "wait({ms})"),
            GuiAction::Done => f.write_str("done()"),
        }
    }
}

// Actions travel as their text form in JSON (trajectories, the HTTP API).
impl Serialize for GuiAction {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for GuiAction {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        GuiAction::parse(&s).map_err(serde::de::Error::custom)
    }
}

/// Quote a string with `"`, escaping `"`, `\` and control characters.
fn quote(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if c.is_control() => out.push_str(&format!("\\u{{{:x}}}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// A malformed action text: where it went wrong and what was expected there. The message
/// quotes a long text only around the problem (a model's runaway answer would otherwise
/// fill logs and replies).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("malformed action {} at position {position}: expected {expected}", excerpt(input, *position))]
pub struct ParseActionError {
    /// The text that was parsed.
    pub input: String,
    /// Byte offset of the problem.
    pub position: usize,
    /// What the parser expected there.
    pub expected: String,
}

/// `s` quoted, cut to its first 40 characters (with `…`) when longer: a key name in an
/// error message, which may be a whole runaway answer.
fn quote_cut(s: &str) -> String {
    const MAX: usize = 40;
    match s.char_indices().nth(MAX) {
        Some((i, _)) => format!("{:?}…", &s[..i]),
        None => format!("{s:?}"),
    }
}

/// `input` quoted, or for a text over 80 bytes the 40 bytes either side of `at` with `…`
/// where it was cut and its length.
fn excerpt(input: &str, at: usize) -> String {
    const SIDE: usize = 40;
    if input.len() <= 2 * SIDE {
        return format!("{input:?}");
    }
    let floor = |mut i: usize| {
        i = i.min(input.len());
        while !input.is_char_boundary(i) {
            i -= 1;
        }
        i
    };
    let (a, b) = (floor(at.saturating_sub(SIDE)), floor(at.saturating_add(SIDE)));
    let cut = |yes: bool| if yes { "…" } else { "" };
    format!("{}{:?}{} ({} bytes)", cut(a > 0), &input[a..b], cut(b < input.len()), input.len())
}

struct Parser<'a> {
    s: &'a str,
    pos: usize,
}

impl Parser<'_> {
    fn err<T>(&self, expected: impl Into<String>) -> Result<T, ParseActionError> {
        Err(ParseActionError { input: self.s.to_string(), position: self.pos, expected: expected.into() })
    }
    fn rest(&self) -> &str {
        &self.s[self.pos..]
    }
    fn ws(&mut self) {
        let trimmed = self.rest().trim_start();
        self.pos = self.s.len() - trimmed.len();
    }
    fn eat(&mut self, c: char) -> Result<(), ParseActionError> {
        self.ws();
        if self.rest().starts_with(c) {
            self.pos += c.len_utf8();
            Ok(())
        } else {
            self.err(format!("'{c}'"))
        }
    }
    fn ident(&mut self) -> &str {
        self.ws();
        let start = self.pos;
        let len =
            self.rest().find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(self.rest().len());
        self.pos += len;
        &self.s[start..self.pos]
    }
    fn int(&mut self) -> Result<i64, ParseActionError> {
        self.ws();
        let r = self.rest();
        let sign = usize::from(r.starts_with('-'));
        let digits = r[sign..].find(|c: char| !c.is_ascii_digit()).unwrap_or(r.len() - sign);
        if digits == 0 {
            return self.err("an integer");
        }
        // a fraction (a model's `click(12.5, 40)`): say that the numbers are whole
        if r[sign + digits..].starts_with('.')
            && r[sign + digits + 1..].starts_with(|c: char| c.is_ascii_digit())
        {
            self.pos += sign + digits;
            return self.err(
                "a whole number (coordinates and amounts are integers: screenshot pixels, not fractions)",
            );
        }
        match r[..sign + digits].parse::<i64>() {
            Ok(v) => {
                self.pos += sign + digits;
                Ok(v)
            }
            Err(_) => self.err("an integer that fits in 32 bits"),
        }
    }
    fn coord(&mut self) -> Result<i32, ParseActionError> {
        let at = self.pos;
        let v = self.int()?;
        i32::try_from(v).or_else(|_| {
            self.pos = at;
            self.err("an integer that fits in 32 bits")
        })
    }
    fn ints<const N: usize>(&mut self) -> Result<[i32; N], ParseActionError> {
        let mut out = [0; N];
        for (i, slot) in out.iter_mut().enumerate() {
            if i > 0 {
                self.eat(',')?;
            }
            *slot = self.coord()?;
        }
        Ok(out)
    }
    fn string(&mut self) -> Result<String, ParseActionError> {
        self.ws();
        if !self.rest().starts_with('"') {
            return self.err("a quoted string like \"hello\"");
        }
        self.pos += 1;
        let mut out = String::new();
        loop {
            let Some(c) = self.rest().chars().next() else {
                return self.err("a closing '\"'");
            };
            self.pos += c.len_utf8();
            match c {
                '"' => return Ok(out),
                '\\' => {
                    let Some(e) = self.rest().chars().next() else {
                        return self.err("an escape after '\\'");
                    };
                    self.pos += e.len_utf8();
                    match e {
                        '"' => out.push('"'),
                        '\\' => out.push('\\'),
                        'n' => out.push('\n'),
                        't' => out.push('\t'),
                        'r' => out.push('\r'),
                        'u' => {
                            self.eat('{')?;
                            let r = self.rest();
                            let len = r.find('}').unwrap_or(0);
                            match u32::from_str_radix(&r[..len], 16).ok().and_then(char::from_u32) {
                                Some(ch) if len > 0 => {
                                    out.push(ch);
                                    self.pos += len + 1;
                                }
                                _ => return self.err("a hex code point like \\u{1f}"),
                            }
                        }
                        _ => {
                            self.pos -= e.len_utf8();
                            return self.err("one of the escapes \\\" \\\\ \\n \\t \\r \\u{..}");
                        }
                    }
                }
                c => out.push(c),
            }
        }
    }

    fn action(mut self) -> Result<GuiAction, ParseActionError> {
        let name_at = {
            self.ws();
            self.pos
        };
        let name = self.ident().to_string();
        if !GuiAction::KINDS.contains(&name.as_str()) {
            self.pos = name_at;
            return self.err(format!("an action name ({})", GuiAction::KINDS.join(", ")));
        }
        self.eat('(')?;
        let a = match name.as_str() {
            "click" | "double_click" | "right_click" | "hover" => {
                let [x, y] = self.ints::<2>()?;
                match name.as_str() {
                    "click" => GuiAction::Click { x, y },
                    "double_click" => GuiAction::DoubleClick { x, y },
                    "right_click" => GuiAction::RightClick { x, y },
                    _ => GuiAction::Hover { x, y },
                }
            }
            "drag" => {
                let [x1, y1, x2, y2] = self.ints::<4>()?;
                GuiAction::Drag { x1, y1, x2, y2 }
            }
            "scroll" => {
                let [x, y, dx, dy] = self.ints::<4>()?;
                GuiAction::Scroll { x, y, dx, dy }
            }
            "type" => GuiAction::Type { text: self.string()? },
            "key" => {
                self.ws();
                let start = self.pos;
                // The combo runs to the closing paren; `key())` would be a ')' key, which
                // we do not support, so the first ')' ends it.
                let len = self.rest().find(')').unwrap_or(self.rest().len());
                let combo = self.s[start..start + len].trim_end().to_string();
                if combo.is_empty() {
                    return self.err("a key like Enter or ctrl+a");
                }
                match KeyCombo::parse(&combo) {
                    Ok(k) => {
                        self.pos = start + len;
                        GuiAction::Key(k)
                    }
                    Err(e) => return self.err(e),
                }
            }
            "wait" => {
                let at = self.pos;
                let v = self.int()?;
                match u32::try_from(v) {
                    Ok(ms) => GuiAction::Wait { ms },
                    Err(_) => {
                        self.pos = at;
                        return self.err("a non-negative number of milliseconds");
                    }
                }
            }
            _ => GuiAction::Done,
        };
        self.eat(')')?;
        self.ws();
        if !self.rest().is_empty() {
            return self.err("the end of the action");
        }
        Ok(a)
    }
}

#[cfg(test)]
#[path = "action_tests.rs"]
mod tests;
