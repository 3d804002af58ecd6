//! `ScreenState`: what a policy sees after a reset or a step.

use std::sync::Arc;

use image::RgbImage;
use serde::{Deserialize, Serialize};

/// The coordinate frame of a screenshot: how its pixels map onto the page.
///
/// Screenshot pixel (x, y) is viewport CSS pixel (`origin_x + x`, `origin_y + y`)
/// (device scale factor 1), and page pixel (`scroll_x + origin_x + x`, ...).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct Frame {
    /// Screenshot width in pixels.
    pub width: u32,
    /// Screenshot height in pixels.
    pub height: u32,
    /// Left edge of the screenshot in viewport CSS pixels.
    pub origin_x: i32,
    /// Top edge of the screenshot in viewport CSS pixels.
    pub origin_y: i32,
    /// Horizontal scroll offset of the page when the screenshot was taken.
    pub scroll_x: i32,
    /// Vertical scroll offset of the page when the screenshot was taken.
    pub scroll_y: i32,
}

impl Frame {
    /// Whether screenshot pixel (x, y) lies inside the screenshot.
    pub fn contains(&self, x: i32, y: i32) -> bool {
        x >= 0 && y >= 0 && (x as u32) < self.width && (y as u32) < self.height
    }
}

/// A bounding box in screenshot pixels.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, Default)]
pub struct BBox {
    /// Left.
    pub x: f32,
    /// Top.
    pub y: f32,
    /// Width.
    pub w: f32,
    /// Height.
    pub h: f32,
}

impl BBox {
    /// The centre, rounded to integer pixels.
    pub fn center(&self) -> (i32, i32) {
        ((self.x + self.w / 2.0).floor() as i32, (self.y + self.h / 2.0).floor() as i32)
    }
}

/// An interactive element of the page (a link, button, input, anything clickable) that a
/// person sees in the screenshot and can act on: not transparent, and reached by the
/// pointer somewhere in the screenshot (covered, clipped away, `visibility: hidden` or
/// off-screen elements are not listed). See docs/environment.md, "What `elements` holds".
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct Element {
    /// Lower-case tag name (`button`, `input`, `a`, ...).
    pub tag: String,
    /// The element's id attribute, or empty.
    #[serde(default)]
    pub id: String,
    /// The class attribute, or empty.
    #[serde(default)]
    pub classes: String,
    /// The text drawn in it (whitespace collapsed, at most 200 characters): text hidden
    /// by `font-size: 0`, `visibility: hidden`, `opacity: 0`, a transparent colour,
    /// `display: none`, clipping or something drawn over it is left out; a closed
    /// `<select>` has its chosen option's. Empty for inputs and textareas (see `value`).
    #[serde(default)]
    pub text: String,
    /// Accessible name of an input, textarea or select: its `aria-label`, else the text of
    /// its first `<label>` (the text drawn in it); empty for other elements.
    #[serde(default)]
    pub label: String,
    /// Current value for inputs, textareas and selects.
    #[serde(default)]
    pub value: String,
    /// `type` of an input element (`text`, `checkbox`, ...), or empty.
    #[serde(default)]
    pub input_type: String,
    /// Checked state of a checkbox or radio button (selected state of an `<option>`).
    #[serde(default)]
    pub checked: bool,
    /// Whether the element has keyboard focus.
    #[serde(default)]
    pub focused: bool,
    /// The `name` attribute, or empty.
    #[serde(default)]
    pub name: String,
    /// Where it is, in screenshot pixels (clipped to nothing; may extend past the edges).
    pub bbox: BBox,
}

/// What a policy observes: the screenshot plus the text context around it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ScreenState {
    /// The task this observation belongs to (`miniwob/click-test`, ...).
    pub task_id: String,
    /// The natural-language instruction for this episode.
    pub instruction: String,
    /// The page's URL.
    pub url: String,
    /// Steps taken so far in this episode (0 after reset).
    pub step: u32,
    /// How the screenshot maps onto the page.
    pub frame: Frame,
    /// The interactive elements a person sees and can act on, in document order, with
    /// boxes in screenshot pixels (see [`Element`]).
    pub elements: Vec<Element>,
    /// The screenshot, cropped to the task's viewport (RGB8). Serialized as base64 PNG.
    /// Shared: the env keeps it as the next observation's `previous_screenshot`, and a
    /// clone of the observation costs no copy of the pixels (2.8 MB at 1280×720).
    #[serde(with = "png_base64")]
    pub screenshot: Arc<RgbImage>,
    /// The episode's earlier actions in text form, oldest first (the env's memory of the
    /// episode, for policies that read it; the small policy's `history` input). Malformed action text is
    /// not an action and is left out.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub history: Vec<String>,
    /// The screenshot the last action was taken on (None at the first step), for policies
    /// that read the change since then (the small policy's `previous_frame` input). Not serialized: a
    /// recorded trajectory has it as the previous step's frame.
    #[serde(skip)]
    pub previous_screenshot: Option<Arc<RgbImage>>,
}

impl ScreenState {
    /// Elements whose text (trimmed) equals `text`.
    pub fn find_text<'a>(&'a self, text: &'a str) -> impl Iterator<Item = &'a Element> + 'a {
        self.elements.iter().filter(move |e| e.text.trim() == text.trim())
    }
}

/// Encode an RGB image as PNG bytes.
pub fn encode_png(img: &RgbImage) -> Vec<u8> {
    let mut out = Vec::new();
    image::codecs::png::PngEncoder::new_with_quality(
        &mut out,
        image::codecs::png::CompressionType::Fast,
        image::codecs::png::FilterType::Sub,
    )
    .write_image(img.as_raw(), img.width(), img.height(), image::ExtendedColorType::Rgb8)
    .expect("encoding an in-memory PNG cannot fail");
    out
}

/// Decode PNG (or any format `image` knows) bytes into RGB8 (an RGB image as decoded,
/// with no second copy; RGBA and others converted).
pub fn decode_png(bytes: &[u8]) -> Result<RgbImage, image::ImageError> {
    Ok(image::load_from_memory(bytes)?.into_rgb8())
}

use image::ImageEncoder;

mod png_base64 {
    use std::sync::Arc;

    use base64::Engine;
    use image::RgbImage;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(img: &Arc<RgbImage>, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&base64::engine::general_purpose::STANDARD.encode(super::encode_png(img)))
    }
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Arc<RgbImage>, D::Error> {
        let s = String::deserialize(d)?;
        let bytes = base64::engine::general_purpose::STANDARD.decode(s).map_err(serde::de::Error::custom)?;
        super::decode_png(&bytes).map(Arc::new).map_err(serde::de::Error::custom)
    }
}
