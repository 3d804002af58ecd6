//! Coordinate frames of model answers, and their conversion to screenshot pixels.
//!
//! guirl's actions are in integer pixels of the screenshot the policy saw. Models answer
//! in other frames: Qwen2.5-VL and UI-TARS-1.5 in pixels of the image *after* their
//! processor's `smart_resize`, Qwen2-VL / UI-TARS v1 / Qwen3-VL in 0–1000 relative units,
//! Gemini in 0–999, SeeClick-style models in 0–1 fractions. [`CoordMode`] names the frame
//! and converts positions ([`CoordMode::to_px`]) and scroll amounts
//! ([`CoordMode::delta_to_px`]) into screenshot pixels.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// Qwen2.5-VL / UI-TARS-1.5 processor defaults: 28-pixel patches (14 × 2 merge).
pub const QWEN_FACTOR: u32 = 28;
/// Qwen2.5-VL default `min_pixels` (100 · 28 · 28).
pub const QWEN_MIN_PIXELS: u64 = 100 * 28 * 28;
/// Qwen2.5-VL default `max_pixels` (16384 · 28 · 28).
pub const QWEN_MAX_PIXELS: u64 = 16384 * 28 * 28;

/// How the coordinates in a model's answer map to screenshot pixels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CoordMode {
    /// Pixels of the screenshot itself (guirl, BrowserGym, MiniWoB).
    Px,
    /// Pixels of the screenshot as resized by Qwen2.5-VL's `smart_resize` (Qwen2.5-VL,
    /// UI-TARS-1.5).
    SmartResize {
        /// Both sides of the resized image are multiples of this (28 for Qwen2.5-VL).
        factor: u32,
        /// The resized image has at least about this many pixels.
        min_pixels: u64,
        /// The resized image has at most this many pixels.
        max_pixels: u64,
    },
    /// 0..=1000 along each side (Qwen2-VL, UI-TARS v1, Qwen3-VL).
    Rel1000,
    /// 0..=999 along each side (Gemini computer use).
    Rel999,
    /// Fractions 0..=1 along each side (SeeClick / Aguvis style).
    Rel1,
}

const MODES_HELP: &str = "use px, smart_resize[:MIN_PIXELS,MAX_PIXELS[,FACTOR]], rel1000, rel999 or rel1";

impl CoordMode {
    /// `smart_resize` with Qwen2.5-VL's defaults (factor 28, 78400..=12845056 pixels).
    pub const SMART_RESIZE: CoordMode = CoordMode::SmartResize {
        factor: QWEN_FACTOR,
        min_pixels: QWEN_MIN_PIXELS,
        max_pixels: QWEN_MAX_PIXELS,
    };

    /// Screenshot pixels per model unit along x and y for a `width`×`height` screenshot.
    fn scale(&self, width: u32, height: u32) -> (f64, f64) {
        let (w, h) = (width as f64, height as f64);
        match *self {
            CoordMode::Px => (1.0, 1.0),
            CoordMode::SmartResize { factor, min_pixels, max_pixels } => {
                let (h_bar, w_bar) = smart_resize(height, width, factor, min_pixels, max_pixels);
                (w / w_bar as f64, h / h_bar as f64)
            }
            CoordMode::Rel1000 => (w / 1000.0, h / 1000.0),
            CoordMode::Rel999 => (w / 999.0, h / 999.0),
            CoordMode::Rel1 => (w, h),
        }
    }

    /// A position (x, y) in this frame → screenshot pixels of a `width`×`height` shot.
    ///
    /// Relative and resized frames are clamped into the screenshot (a model's "1000" is the
    /// right edge, pixel `width − 1`); `Px` is only rounded, not clamped, because the
    /// environment reports out-of-screen clicks itself.
    pub fn to_px(&self, x: f64, y: f64, width: u32, height: u32) -> (i32, i32) {
        let (sx, sy) = self.scale(width, height);
        let (px, py) = ((x * sx).round(), (y * sy).round());
        if *self == CoordMode::Px {
            return (px as i32, py as i32);
        }
        let clamp = |v: f64, side: u32| v.clamp(0.0, side.saturating_sub(1) as f64) as i32;
        (clamp(px, width), clamp(py, height))
    }

    /// A scroll amount (dx, dy) in this frame's units → screenshot pixels: the same scale
    /// as [`CoordMode::to_px`] but without clamping, since a delta is not a position.
    pub fn delta_to_px(&self, dx: f64, dy: f64, width: u32, height: u32) -> (i32, i32) {
        let (sx, sy) = self.scale(width, height);
        ((dx * sx).round() as i32, (dy * sy).round() as i32)
    }

    /// The inverse of [`CoordMode::to_px`] (without its rounding and clamping): screenshot
    /// pixels → this frame. Used to describe a frame in prompts and in tests.
    pub fn from_px(&self, x: f64, y: f64, width: u32, height: u32) -> (f64, f64) {
        let (sx, sy) = self.scale(width, height);
        (x / sx, y / sy)
    }

    /// One sentence for a system prompt telling the model its coordinate frame.
    pub fn describe(&self, width: u32, height: u32) -> String {
        let rel = |max: &str, kind: &str| {
            format!(
                "Coordinates are {kind} from 0 to {max} relative to the screenshot's width and height \
                 ({width}×{height} pixels): 0 is the left or top edge, {max} the right or bottom edge; \
                 scroll amounts use the same units."
            )
        };
        match *self {
            CoordMode::Px => format!(
                "Coordinates are pixels of the screenshot, {width} wide and {height} high, origin top-left \
                 (x to the right, y down); scroll amounts are pixels too."
            ),
            CoordMode::SmartResize { factor, min_pixels, max_pixels } => {
                let (h_bar, w_bar) = smart_resize(height, width, factor, min_pixels, max_pixels);
                format!(
                    "Coordinates are pixels of the screenshot resized to {w_bar} wide and {h_bar} high, \
                     origin top-left (x to the right, y down); scroll amounts are pixels of that size too."
                )
            }
            CoordMode::Rel1000 => rel("1000", "integers"),
            CoordMode::Rel999 => rel("999", "integers"),
            CoordMode::Rel1 => rel("1", "fractions"),
        }
    }
}

impl FromStr for CoordMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let t = s.trim().to_ascii_lowercase();
        Ok(match t.as_str() {
            "px" => CoordMode::Px,
            "smart_resize" => CoordMode::SMART_RESIZE,
            "rel1000" => CoordMode::Rel1000,
            "rel999" => CoordMode::Rel999,
            "rel1" => CoordMode::Rel1,
            _ => {
                let Some(args) = t.strip_prefix("smart_resize:") else {
                    return Err(format!("unknown coordinate mode {s:?}: {MODES_HELP}"));
                };
                let bad = || {
                    format!(
                        "bad coordinate mode {s:?}: smart_resize takes MIN_PIXELS,MAX_PIXELS (positive \
                         integers, MIN <= MAX) and optionally a FACTOR (default 28), e.g. \
                         smart_resize:3136,1003520"
                    )
                };
                let nums: Vec<u64> = args
                    .split(',')
                    .map(|n| n.trim().parse::<u64>())
                    .collect::<Result<_, _>>()
                    .map_err(|_| bad())?;
                let (min_pixels, max_pixels, factor) = match nums[..] {
                    [a, b] => (a, b, QWEN_FACTOR as u64),
                    [a, b, f] => (a, b, f),
                    _ => return Err(bad()),
                };
                if min_pixels == 0 || min_pixels > max_pixels || factor == 0 || factor > u32::MAX as u64 {
                    return Err(bad());
                }
                CoordMode::SmartResize { factor: factor as u32, min_pixels, max_pixels }
            }
        })
    }
}

impl fmt::Display for CoordMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            m if m == CoordMode::SMART_RESIZE => f.write_str("smart_resize"),
            CoordMode::SmartResize { factor, min_pixels, max_pixels } if factor == QWEN_FACTOR => {
                write!(f, "smart_resize:{min_pixels},{max_pixels}")
            }
            CoordMode::SmartResize { factor, min_pixels, max_pixels } => {
                write!(f, "smart_resize:{min_pixels},{max_pixels},{factor}")
            }
            CoordMode::Px => f.write_str("px"),
            CoordMode::Rel1000 => f.write_str("rel1000"),
            CoordMode::Rel999 => f.write_str("rel999"),
            CoordMode::Rel1 => f.write_str("rel1"),
        }
    }
}

// Reports and configs carry the mode as its text form.
impl Serialize for CoordMode {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for CoordMode {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d)?.parse().map_err(serde::de::Error::custom)
    }
}

/// Qwen2.5-VL's `smart_resize`: the `(h_bar, w_bar)` an image of `height`×`width` is
/// resized to before the model sees it.
///
/// Each side is rounded to a multiple of `factor` (ties to even, as Python's `round`);
/// if the area then exceeds `max_pixels`, both sides shrink by
/// `beta = sqrt(h·w / max_pixels)` and are floored to multiples of `factor`; if it falls
/// below `min_pixels`, both grow by `beta = sqrt(min_pixels / (h·w))` and are ceiled.
/// Sides are at least `factor` (as in the `transformers` image processor); zero sides
/// count as 1. Python's aspect-ratio limit (200) is not checked.
pub fn smart_resize(height: u32, width: u32, factor: u32, min_pixels: u64, max_pixels: u64) -> (u32, u32) {
    let (h, w, f) = (height.max(1) as f64, width.max(1) as f64, factor.max(1) as f64);
    let by = |v: f64, op: fn(f64) -> f64| ((op(v / f) * f) as u32).max(factor);
    let (h_bar, w_bar) = (by(h, f64::round_ties_even), by(w, f64::round_ties_even));
    let area = h_bar as u64 * w_bar as u64;
    if area > max_pixels {
        let beta = (h * w / max_pixels as f64).sqrt();
        (by(h / beta, f64::floor), by(w / beta, f64::floor))
    } else if area < min_pixels {
        let beta = (min_pixels as f64 / (h * w)).sqrt();
        (by(h * beta, f64::ceil), by(w * beta, f64::ceil))
    } else {
        (h_bar, w_bar)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn smart_resize_hand_values() {
        // MiniWoB 160 wide × 210 high: round(210/28 = 7.5) = 8 → 224, round(160/28 = 5.71) = 6
        // → 168; 224·168 = 37632 < 78400, so beta = sqrt(78400 / (210·160)) = 1.5275;
        // 210·beta = 320.8 → ceil(11.46)·28 = 336; 160·beta = 244.4 → ceil(8.73)·28 = 252.
        assert_eq!(smart_resize(210, 160, 28, QWEN_MIN_PIXELS, QWEN_MAX_PIXELS), (336, 252));
        // 1920×1080: round(1080/28 = 38.57) = 39 → 1092, round(1920/28 = 68.57) = 69 → 1932;
        // 1092·1932 = 2109744 is inside [78400, 12845056].
        assert_eq!(smart_resize(1080, 1920, 28, QWEN_MIN_PIXELS, QWEN_MAX_PIXELS), (1092, 1932));
        // 1280×720: round(25.71) = 26 → 728, round(45.71) = 46 → 1288.
        assert_eq!(smart_resize(720, 1280, 28, QWEN_MIN_PIXELS, QWEN_MAX_PIXELS), (728, 1288));
        // 1000×1000 with max 500000: 36·28 = 1008, 1008² > 500000, beta = sqrt(2) = 1.41421;
        // 1000/beta = 707.1 → floor(25.25)·28 = 700.
        assert_eq!(smart_resize(1000, 1000, 28, 1000, 500_000), (700, 700));
        // Ties go to even as in Python: round(70/28 = 2.5) = 2 → 56 (not 84); 1400/28 = 50.
        assert_eq!(smart_resize(70, 1400, 28, 1000, 1 << 30), (56, 1400));
        // Tiny sides stay at least one factor.
        assert_eq!(smart_resize(5, 5, 28, 1, 1 << 30), (28, 28));
    }

    #[test]
    fn to_px_in_every_mode() {
        let sr = CoordMode::SMART_RESIZE;
        let cases = [
            (CoordMode::Px, (12.4, 99.6), (160, 210), (12, 100)),
            (CoordMode::Px, (-5.0, 400.0), (160, 210), (-5, 400)), // not clamped
            // 500·160/1000 = 80, 500·210/1000 = 105.
            (CoordMode::Rel1000, (500.0, 500.0), (160, 210), (80, 105)),
            // 1000 → 160 and 210, clamped to the last pixel.
            (CoordMode::Rel1000, (1000.0, 1000.0), (160, 210), (159, 209)),
            (CoordMode::Rel1000, (-3.0, 0.0), (160, 210), (0, 0)),
            // 333·1280/999 = 426.67 → 427; 999·720/999 = 720 → 719.
            (CoordMode::Rel999, (333.0, 999.0), (1280, 720), (427, 719)),
            // 0.25·160 = 40, 0.5·210 = 105.
            (CoordMode::Rel1, (0.25, 0.5), (160, 210), (40, 105)),
            // 160×210 resizes to 252×336: 126·160/252 = 80, 168·210/336 = 105.
            (sr, (126.0, 168.0), (160, 210), (80, 105)),
            // 1280×720 resizes to 1288×728: 644·1280/1288 = 640, 364·720/728 = 360;
            // 1288 → 1280 → clamped to 1279.
            (sr, (644.0, 364.0), (1280, 720), (640, 360)),
            (sr, (1288.0, 0.0), (1280, 720), (1279, 0)),
        ];
        for (mode, (x, y), (w, h), want) in cases {
            assert_eq!(mode.to_px(x, y, w, h), want, "{mode} ({x}, {y}) on {w}x{h}");
        }
    }

    #[test]
    fn deltas_scale_without_clamping() {
        // 100 rel1000 units of 210 px = 21 px; −2000 units of 160 px = −320 px (no clamp).
        assert_eq!(CoordMode::Rel1000.delta_to_px(-2000.0, 100.0, 160, 210), (-320, 21));
        assert_eq!(CoordMode::Px.delta_to_px(0.0, -300.0, 160, 210), (0, -300));
        // 1280×720 → 1288×728: −728·720/728 = −720.
        assert_eq!(CoordMode::SMART_RESIZE.delta_to_px(0.0, -728.0, 1280, 720), (0, -720));
    }

    #[test]
    fn from_px_round_trips() {
        let modes =
            [CoordMode::Px, CoordMode::SMART_RESIZE, CoordMode::Rel1000, CoordMode::Rel999, CoordMode::Rel1];
        for mode in modes {
            for (w, h) in [(160u32, 210u32), (1280, 720), (1920, 1080)] {
                for (px, py) in [(0, 0), (17, 33), (w as i32 / 2, h as i32 / 3), (w as i32 - 1, h as i32 - 1)]
                {
                    let (mx, my) = mode.from_px(px as f64, py as f64, w, h);
                    assert_eq!(mode.to_px(mx, my, w, h), (px, py), "{mode} {w}x{h}");
                    if mode != CoordMode::Rel1 {
                        // A model answers in integers: still within 1 px.
                        let (rx, ry) = mode.to_px(mx.round(), my.round(), w, h);
                        assert!((rx - px).abs() <= 1 && (ry - py).abs() <= 1, "{mode} {w}x{h} ({px}, {py})");
                    }
                }
            }
        }
    }

    #[test]
    fn modes_parse_and_print() {
        for (text, mode) in [
            ("px", CoordMode::Px),
            ("smart_resize", CoordMode::SMART_RESIZE),
            ("rel1000", CoordMode::Rel1000),
            ("rel999", CoordMode::Rel999),
            ("rel1", CoordMode::Rel1),
            (
                "smart_resize:3136,1003520",
                CoordMode::SmartResize { factor: 28, min_pixels: 3136, max_pixels: 1_003_520 },
            ),
            (
                "smart_resize:4096,1048576,32",
                CoordMode::SmartResize { factor: 32, min_pixels: 4096, max_pixels: 1 << 20 },
            ),
        ] {
            assert_eq!(text.parse::<CoordMode>(), Ok(mode));
            assert_eq!(mode.to_string(), text);
            assert_eq!(serde_json::to_string(&mode).unwrap(), format!("{text:?}"));
            assert_eq!(serde_json::from_str::<CoordMode>(&format!("{text:?}")).unwrap(), mode);
        }
        assert_eq!(" Rel1000 ".parse::<CoordMode>(), Ok(CoordMode::Rel1000));
    }

    #[test]
    fn bad_modes_name_the_options() {
        let e = "foo".parse::<CoordMode>().unwrap_err();
        assert_eq!(
            e,
            "unknown coordinate mode \"foo\": use px, smart_resize[:MIN_PIXELS,MAX_PIXELS[,FACTOR]], \
             rel1000, rel999 or rel1"
        );
        for bad in
            ["smart_resize:", "smart_resize:10", "smart_resize:9,3", "smart_resize:a,b", "smart_resize:0,5"]
        {
            let e = bad.parse::<CoordMode>().unwrap_err();
            assert!(e.contains("MIN_PIXELS,MAX_PIXELS") && e.contains(bad), "{e}");
        }
    }

    #[test]
    fn describe_names_the_frame() {
        assert_eq!(
            CoordMode::Px.describe(160, 210),
            "Coordinates are pixels of the screenshot, 160 wide and 210 high, origin top-left (x to the \
             right, y down); scroll amounts are pixels too."
        );
        assert!(CoordMode::SMART_RESIZE.describe(160, 210).contains("resized to 252 wide and 336 high"));
        assert!(CoordMode::Rel1000.describe(160, 210).contains("integers from 0 to 1000"));
        assert!(CoordMode::Rel999.describe(160, 210).contains("from 0 to 999"));
        assert!(CoordMode::Rel1.describe(160, 210).contains("fractions from 0 to 1 "));
    }
}
