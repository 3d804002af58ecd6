//! The call-shaped answer formats (guirl, BrowserGym, UI-TARS): a small reader for
//! Python-like calls, what each action name means, and key-name mapping. Kept apart from
//! the parent module, which decides where in an answer to look.

use super::answer::{
    center, key_action, millis, split_keys, AnswerFormat, Frame, ParsedAnswer, DEFAULT_WAIT_MS,
    UITARS_SCROLL_PX, UITARS_WAIT_MS,
};
use crate::env::GuiAction;

/// Action names a call may start with, in any of the three formats.
#[rustfmt::skip]
pub(super) const KNOWN: &[&str] = &[
    // guirl (UI-TARS shares click, hover, drag, type, scroll and wait)
    "click", "double_click", "right_click", "hover", "drag", "scroll", "type", "key", "wait", "done",
    // BrowserGym (the last row only to say why they are not supported)
    "mouse_click", "mouse_dblclick", "mouse_move", "mouse_drag_and_drop", "scroll_at", "keyboard_type",
    "keyboard_insert_text", "keyboard_press", "noop", "send_msg_to_user", "report_infeasible",
    "mouse_down", "mouse_up", "keyboard_down", "keyboard_up", "fill", "select_option", "dblclick", "goto",
    // UI-TARS
    "left_single", "left_double", "right_single", "select", "hotkey", "press", "finished", "call_user",
];

/// An argument value: a number, a quoted string, a bare word, or a list / tuple.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Val {
    Num(f64),
    Str(String),
    Word(String),
    List(Vec<Val>),
}

/// A call as written: `name(positional..., key=value...)`.
pub(super) struct Call {
    name: String,
    pos: Vec<Val>,
    kw: Vec<(String, Val)>,
    /// The call's text, for error messages.
    pub(super) text: String,
}

impl Call {
    /// A keyword argument under any of `names`.
    fn kwarg(&self, names: &[&str]) -> Option<&Val> {
        self.kw.iter().find(|(k, _)| names.contains(&k.as_str())).map(|(_, v)| v)
    }
    /// A keyword argument under any of `names`, else the positional argument `i`.
    fn arg(&self, i: usize, names: &[&str]) -> Option<&Val> {
        self.kwarg(names).or_else(|| self.pos.get(i))
    }
    fn num(&self, i: usize, names: &[&str]) -> Result<f64, String> {
        match self.arg(i, names) {
            Some(Val::Num(n)) => Ok(*n),
            Some(Val::Str(s)) if s.trim().parse::<f64>().is_ok() => Ok(s.trim().parse().unwrap()),
            _ => Err(format!("{} needs a number as argument {} ({})", self.name, i + 1, names.join(" or "))),
        }
    }
    fn text_arg(&self, i: usize, names: &[&str]) -> Result<String, String> {
        match self.arg(i, names) {
            Some(Val::Str(s) | Val::Word(s)) => Ok(s.clone()),
            Some(Val::Num(n)) if n.fract() == 0.0 => Ok(format!("{}", *n as i64)),
            _ => Err(format!("{} needs a quoted string argument ({})", self.name, names.join(" or "))),
        }
    }
    /// Only positional numbers, exactly `n` of them.
    fn nums<const N: usize>(&self) -> Option<[f64; N]> {
        if !self.kw.is_empty() || self.pos.len() != N {
            return None;
        }
        let mut out = [0.0; N];
        for (o, v) in out.iter_mut().zip(&self.pos) {
            *o = if let Val::Num(n) = v { *n } else { return None };
        }
        Some(out)
    }
}

/// Read the arguments of the call `name(` that starts at byte `call_start` (the lexer
/// stands after its `(`), up to the closing `)`.
pub(super) fn read_call(name: &str, call_start: usize, lx: &mut Lexer) -> Result<Call, String> {
    let start = lx.pos;
    let read = |lx: &mut Lexer| -> Result<Call, String> {
        let (mut pos, mut kw) = (Vec::new(), Vec::new());
        loop {
            lx.ws();
            if lx.eat(')') {
                break;
            }
            let save = lx.pos;
            let word = lx.ident();
            lx.ws();
            if !word.is_empty() && lx.rest().starts_with('=') && !lx.rest().starts_with("==") {
                lx.pos += 1;
                kw.push((word.to_string(), lx.value()?));
            } else {
                lx.pos = save;
                pos.push(lx.value()?);
            }
            lx.ws();
            if !lx.eat(',') && !lx.rest().starts_with(')') {
                return Err("',' or ')' between arguments".into());
            }
        }
        let text = lx.s[call_start..lx.pos].to_string();
        Ok(Call { name: name.to_string(), pos, kw, text })
    };
    let err = |lx: &Lexer, e: String| {
        let upto: String = lx.s[call_start..].chars().take(80).collect();
        format!("{upto:?} is not a readable call: expected {e} at byte {}", lx.pos - call_start)
    };
    match read(lx) {
        Ok(c) => Ok(c),
        // guirl's `key(ctrl+a)` is not Python: take the text up to the first ')'.
        Err(_) if name == "key" && lx.s[start..].contains(')') => {
            let len = lx.s[start..].find(')').unwrap();
            lx.pos = start + len + 1;
            let raw = lx.s[start..start + len].trim().to_string();
            Ok(Call {
                name: name.into(),
                pos: vec![Val::Word(raw)],
                kw: vec![],
                text: lx.s[call_start..lx.pos].into(),
            })
        }
        // UI-TARS models write `type(content='I'm here')` unescaped: run to the first `')`.
        Err(e) => {
            let rest = &lx.s[start..];
            let body = rest.trim_start().strip_prefix("content").map(str::trim_start);
            match body
                .and_then(|b| b.strip_prefix('='))
                .map(str::trim_start)
                .and_then(|b| b.strip_prefix('\''))
            {
                Some(b) if name == "type" && b.contains("')") => {
                    let content = &b[..b.find("')").unwrap()];
                    lx.pos = lx.s.len() - (b.len() - content.len() - 2);
                    let text = content.replace("\\n", "\n").replace("\\'", "'").replace("\\\"", "\"");
                    Ok(Call {
                        name: name.into(),
                        pos: vec![],
                        kw: vec![("content".into(), Val::Str(text))],
                        text: lx.s[call_start..lx.pos].into(),
                    })
                }
                _ => Err(err(lx, e)),
            }
        }
    }
}

/// What a call means, in screenshot pixels.
pub(super) fn interpret(c: &Call, fr: &Frame) -> Result<ParsedAnswer, String> {
    use AnswerFormat::{BrowserGym as Bg, Guirl, UiTars};
    let ok = |action, format| Ok(ParsedAnswer { action, format });
    let xy = |i: usize, nx: &[&str], ny: &[&str]| -> Result<(i32, i32), String> {
        Ok(fr.pt((c.num(i, nx)?, c.num(i + 1, ny)?)))
    };
    let name = c.name.as_str();
    match name {
        "click" | "double_click" | "right_click" | "hover" | "left_single" | "left_double"
        | "right_single" => {
            let ((x, y), format) = match (c.kwarg(&["start_box", "point", "start_point"]), c.pos.first()) {
                (Some(b), _) => (box_point(b, fr)?, UiTars),
                (None, Some(b @ Val::Str(_))) if c.pos.len() == 1 => (box_point(b, fr)?, UiTars),
                (None, Some(b @ Val::List(_))) if c.pos.len() == 1 => (box_point(b, fr)?, Guirl),
                _ if name.contains('_') && !name.contains("click") => {
                    return Err(format!("{name} needs start_box='(x,y)'"))
                }
                _ => (xy(0, &["x"], &["y"])?, Guirl),
            };
            let action = match name {
                "click" | "left_single" => GuiAction::Click { x, y },
                "double_click" | "left_double" => GuiAction::DoubleClick { x, y },
                "right_click" | "right_single" => GuiAction::RightClick { x, y },
                _ => GuiAction::Hover { x, y },
            };
            ok(action, format)
        }
        "drag" | "select" => {
            if let Some([x1, y1, x2, y2]) = c.nums::<4>() {
                let ((x1, y1), (x2, y2)) = (fr.pt((x1, y1)), fr.pt((x2, y2)));
                return ok(GuiAction::Drag { x1, y1, x2, y2 }, Guirl);
            }
            let from = c.kwarg(&["start_box", "start_point"]).ok_or("drag needs start_box and end_box")?;
            let to = c.kwarg(&["end_box", "end_point"]).ok_or("drag needs end_box='(x,y)'")?;
            let ((x1, y1), (x2, y2)) = (box_point(from, fr)?, box_point(to, fr)?);
            ok(GuiAction::Drag { x1, y1, x2, y2 }, UiTars)
        }
        "scroll" if c.kwarg(&["direction"]).is_some() => {
            let (x, y) = match c.kwarg(&["start_box", "point", "start_point"]) {
                Some(b) => box_point(b, fr)?,
                None => fr.centre(),
            };
            let s = UITARS_SCROLL_PX;
            let (dx, dy) = match c.text_arg(usize::MAX, &["direction"])?.trim().to_ascii_lowercase().as_str()
            {
                "down" => (0, s),
                "up" => (0, -s),
                "right" => (s, 0),
                "left" => (-s, 0),
                d => return Err(format!("scroll direction {d:?}: use up, down, left or right")),
            };
            ok(GuiAction::Scroll { x, y, dx, dy }, UiTars)
        }
        "scroll" if c.pos.len() == 4 => {
            let (x, y) = xy(0, &[], &[])?;
            let (dx, dy) = fr.delta(c.num(2, &[])?, c.num(3, &[])?);
            ok(GuiAction::Scroll { x, y, dx, dy }, Guirl)
        }
        "scroll" | "scroll_at" => {
            let ((x, y), i) =
                if name == "scroll_at" { (xy(0, &["x"], &["y"])?, 2) } else { (fr.centre(), 0) };
            let (dx, dy) = fr.delta(c.num(i, &["delta_x", "dx"])?, c.num(i + 1, &["delta_y", "dy"])?);
            ok(GuiAction::Scroll { x, y, dx, dy }, Bg)
        }
        "type" => match c.kwarg(&["content"]) {
            // A trailing "\n" means "submit" to UI-TARS; guirl's type presses Enter for it.
            Some(_) => ok(GuiAction::Type { text: c.text_arg(0, &["content"])? }, UiTars),
            None => ok(GuiAction::Type { text: c.text_arg(0, &["text"])? }, Guirl),
        },
        "keyboard_type" | "keyboard_insert_text" => {
            ok(GuiAction::Type { text: c.text_arg(0, &["text"])? }, Bg)
        }
        "key" => ok(key_action(&split_keys(&c.text_arg(0, &["key", "keys"])?))?, Guirl),
        "keyboard_press" => ok(key_action(&split_keys(&c.text_arg(0, &["key", "key_comb"])?))?, Bg),
        "hotkey" if c.pos.len() > 1 => {
            let keys: Vec<String> = (0..c.pos.len()).map(|i| c.text_arg(i, &[])).collect::<Result<_, _>>()?;
            ok(key_action(&keys.iter().map(String::as_str).collect::<Vec<_>>())?, UiTars)
        }
        "hotkey" | "press" if c.pos.len() <= 1 => {
            ok(key_action(&split_keys(&c.text_arg(0, &["key", "hotkey", "press"])?))?, UiTars)
        }
        "wait" if c.pos.is_empty() && c.kw.is_empty() => ok(GuiAction::Wait { ms: UITARS_WAIT_MS }, UiTars),
        "wait" => ok(GuiAction::Wait { ms: millis(c.num(0, &["ms"])?)? }, Guirl),
        "noop" => {
            let ms = if c.arg(0, &["wait_ms"]).is_some() {
                c.num(0, &["wait_ms"])?
            } else {
                DEFAULT_WAIT_MS as f64
            };
            ok(GuiAction::Wait { ms: millis(ms)? }, Bg)
        }
        "done" => ok(GuiAction::Done, Guirl),
        "finished" | "call_user" => ok(GuiAction::Done, UiTars),
        "send_msg_to_user" | "report_infeasible" => ok(GuiAction::Done, Bg),
        "mouse_click" | "mouse_dblclick" => {
            let (x, y) = xy(0, &["x"], &["y"])?;
            let button =
                if c.arg(2, &["button"]).is_some() { c.text_arg(2, &["button"])? } else { "left".into() };
            let action = match (name, button.as_str()) {
                ("mouse_click", "left") => GuiAction::Click { x, y },
                ("mouse_click", "right") => GuiAction::RightClick { x, y },
                ("mouse_dblclick", "left") => GuiAction::DoubleClick { x, y },
                _ => return Err(format!("{name} with button {button:?} is not supported by guirl")),
            };
            ok(action, Bg)
        }
        "mouse_move" => {
            let (x, y) = xy(0, &["x"], &["y"])?;
            ok(GuiAction::Hover { x, y }, Bg)
        }
        "mouse_drag_and_drop" => {
            let (x1, y1) = xy(0, &["from_x"], &["from_y"])?;
            let (x2, y2) = xy(2, &["to_x"], &["to_y"])?;
            ok(GuiAction::Drag { x1, y1, x2, y2 }, Bg)
        }
        "mouse_down" | "mouse_up" | "keyboard_down" | "keyboard_up" => Err(format!(
            "{name} is not supported: guirl presses and releases in one action \
             (mouse_drag_and_drop, keyboard_press)"
        )),
        _ => Err(format!(
            "{name}(...) acts on page elements or tabs; guirl takes coordinate actions such as \
             mouse_click(x, y)"
        )),
    }
}

/// A UI-TARS box argument → a point: `'(x,y)'`, `'<|box_start|>(x,y)<|box_end|>'`,
/// `'<point>x y</point>'`, or four numbers (`'(x1,y1,x2,y2)'`, `<bbox>x1 y1 x2 y2</bbox>`)
/// → the box's centre; also a list of 2 or 4 numbers.
fn box_point(v: &Val, fr: &Frame) -> Result<(i32, i32), String> {
    let nums = match v {
        Val::Str(s) => numbers(s),
        Val::List(l) => l
            .iter()
            .map(|x| if let Val::Num(n) = x { Some(*n) } else { None })
            .collect::<Option<_>>()
            .unwrap_or_default(),
        _ => vec![],
    };
    let hint = match v {
        Val::Str(s) if nums.len() < 2 => format!(
            " ({s:?} looks like an element id; guirl acts on coordinates: click(x, y) or \
             click(start_box='(x,y)'))"
        ),
        _ => String::new(),
    };
    center(&nums)
        .map(|p| fr.pt(p))
        .ok_or_else(|| format!("a box needs 2 numbers (x, y) or 4 (x1, y1, x2, y2){hint}"))
}

/// All decimal numbers in a string, in order.
pub(super) fn numbers(s: &str) -> Vec<f64> {
    let mut out = Vec::new();
    let mut lx = Lexer { s, pos: 0 };
    while lx.pos < s.len() {
        let at = lx.pos;
        match lx.number() {
            Some(n) => out.push(n),
            None => lx.pos = at + s[at..].chars().next().map_or(1, char::len_utf8),
        }
    }
    out
}

/// A small reader for Python-like literals: numbers, quoted strings, words, lists.
pub(super) struct Lexer<'a> {
    pub(super) s: &'a str,
    pub(super) pos: usize,
}

impl<'a> Lexer<'a> {
    pub(super) fn rest(&self) -> &'a str {
        &self.s[self.pos..]
    }
    pub(super) fn ws(&mut self) {
        self.pos = self.s.len() - self.rest().trim_start().len();
    }
    fn eat(&mut self, c: char) -> bool {
        let yes = self.rest().starts_with(c);
        if yes {
            self.pos += c.len_utf8();
        }
        yes
    }
    pub(super) fn ident(&mut self) -> &'a str {
        let start = self.pos;
        let len =
            self.rest().find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(self.rest().len());
        self.pos += len;
        &self.s[start..self.pos]
    }
    /// `-12`, `3.5`, `.5`, `1e3`; `None` (position kept) if none starts here.
    fn number(&mut self) -> Option<f64> {
        let r = self.rest().as_bytes();
        let mut i = usize::from(matches!(r.first(), Some(b'-' | b'+')));
        let digits = |i: &mut usize| {
            let s = *i;
            while r.get(*i).is_some_and(u8::is_ascii_digit) {
                *i += 1;
            }
            *i - s
        };
        let mut n = digits(&mut i);
        if r.get(i) == Some(&b'.') {
            i += 1;
            n += digits(&mut i);
        }
        if n == 0 {
            return None;
        }
        if matches!(r.get(i), Some(b'e' | b'E')) {
            let mut j = i + 1 + usize::from(matches!(r.get(i + 1), Some(b'-' | b'+')));
            if digits(&mut j) > 0 {
                i = j;
            }
        }
        let v = self.rest()[..i].trim_end_matches('.').parse().ok()?;
        self.pos += i;
        Some(v)
    }
    fn value(&mut self) -> Result<Val, String> {
        self.ws();
        let Some(c) = self.rest().chars().next() else { return Err("a value".into()) };
        match c {
            '\'' | '"' => self.string(c).map(Val::Str),
            '(' | '[' => {
                let close = if c == '(' { ')' } else { ']' };
                self.pos += 1;
                let mut items = Vec::new();
                loop {
                    self.ws();
                    if self.eat(close) {
                        return Ok(Val::List(items));
                    }
                    items.push(self.value()?);
                    self.ws();
                    if !self.eat(',') && !self.rest().starts_with(close) {
                        return Err(format!("',' or '{close}'"));
                    }
                }
            }
            c if c.is_ascii_alphabetic() || c == '_' => Ok(Val::Word(self.ident().to_string())),
            _ => self.number().map(Val::Num).ok_or_else(|| "a number, a quoted string or a list".into()),
        }
    }
    /// A Python string literal quoted with `q`; escapes `\n \t \r \\ \' \"`, `\uXXXX` and
    /// guirl's `\u{..}`; other backslashes stay as written (as in Python).
    fn string(&mut self, q: char) -> Result<String, String> {
        self.pos += 1;
        let mut out = String::new();
        let mut chars = self.rest().char_indices();
        while let Some((i, c)) = chars.next() {
            match c {
                c if c == q => {
                    self.pos += i + 1;
                    return Ok(out);
                }
                '\\' => match chars.next().map(|(_, e)| e) {
                    Some('n') => out.push('\n'),
                    Some('t') => out.push('\t'),
                    Some('r') => out.push('\r'),
                    Some('u') => {
                        let rest = chars.as_str();
                        let (hex, used) = match rest.strip_prefix('{') {
                            Some(r) => r.find('}').map_or(("", 0), |e| (&r[..e], e + 2)),
                            None => (rest.get(..4).unwrap_or(""), 4),
                        };
                        match u32::from_str_radix(hex, 16).ok().and_then(char::from_u32) {
                            Some(ch) => {
                                out.push(ch);
                                for _ in 0..used {
                                    chars.next();
                                }
                            }
                            None => out.push_str("\\u"),
                        }
                    }
                    Some(e @ ('\\' | '\'' | '"')) => out.push(e),
                    Some(e) => {
                        out.push('\\');
                        out.push(e);
                    }
                    None => break,
                },
                c => out.push(c),
            }
        }
        Err(format!("a closing {q}"))
    }
}
