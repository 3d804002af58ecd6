//! The built-in task table (pages live in `environments/builtin/<name>/`).
//!
//! Every task draws its instance (values, layout) from the seed passed to
//! `guirlTask.reset(seed)`; the page protocol is described in
//! `environments/builtin/common.js`. `max_steps` is about two to three times what the
//! scripted oracle (`policy::oracle::builtin`) needs on the longest instances.

/// One built-in task.
pub struct BuiltinSpec {
    /// Folder name under `environments/builtin/`; the task id is `builtin/<name>`.
    pub name: &'static str,
    /// One line on what the agent must do.
    pub description: &'static str,
    /// Step limit of an episode.
    pub max_steps: u32,
    /// Viewport (and screenshot) width in CSS pixels.
    pub width: u32,
    /// Viewport (and screenshot) height in CSS pixels.
    pub height: u32,
    /// Whether the task navigates between several HTML pages.
    pub multi_page: bool,
}

/// All built-in tasks.
pub const BUILTIN_TASKS: &[BuiltinSpec] = &[
    BuiltinSpec {
        name: "click-color-button",
        description: "Click the button of the named colour among 3-8 unlabelled coloured buttons.",
        max_steps: 5,
        width: 200,
        height: 200,
        multi_page: false,
    },
    BuiltinSpec {
        name: "counter",
        description: "Press + / - until the counter shows the given number, then Submit.",
        max_steps: 20,
        width: 200,
        height: 200,
        multi_page: false,
    },
    BuiltinSpec {
        name: "fill-form",
        description: "Type a name and an email, set two checkboxes, Submit.",
        max_steps: 20,
        width: 240,
        height: 240,
        multi_page: false,
    },
    BuiltinSpec {
        name: "select-option",
        description: "Open a custom dropdown, pick the named option, Submit.",
        max_steps: 10,
        width: 240,
        height: 240,
        multi_page: false,
    },
    BuiltinSpec {
        name: "toggle-switches",
        description: "Set 3-5 on/off switches to the wanted pattern, then Apply.",
        max_steps: 15,
        width: 240,
        height: 240,
        multi_page: false,
    },
    BuiltinSpec {
        name: "drag-to-bin",
        description: "Drag the named item(s) into the bin.",
        max_steps: 8,
        width: 240,
        height: 240,
        multi_page: false,
    },
    BuiltinSpec {
        name: "search-table",
        description: "Find a person in a scrolling table (search box or scroll) and press Delete on their row.",
        max_steps: 10,
        width: 280,
        height: 280,
        multi_page: false,
    },
    BuiltinSpec {
        name: "scroll-to-find",
        description: "Scroll a long list until the named item shows, then click it.",
        max_steps: 12,
        width: 240,
        height: 240,
        multi_page: false,
    },
    BuiltinSpec {
        name: "login-settings",
        description: "Sign in, go from the dashboard to Settings, change one field, Save (3 pages).",
        max_steps: 30,
        width: 320,
        height: 320,
        multi_page: true,
    },
    BuiltinSpec {
        name: "shop-checkout",
        description: "Search a shop, open the right colour, pick a size, add to cart, check out with an address (5 pages).",
        max_steps: 36,
        width: 320,
        height: 320,
        multi_page: true,
    },
    BuiltinSpec {
        name: "inbox-reply",
        description: "Open the email from a sender, then reply with a text or forward it to an address (3 pages).",
        max_steps: 15,
        width: 320,
        height: 320,
        multi_page: true,
    },
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_pages_exist() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("environments/builtin");
        assert!(root.join("common.js").is_file());
        for (i, s) in BUILTIN_TASKS.iter().enumerate() {
            assert!(BUILTIN_TASKS[..i].iter().all(|o| o.name != s.name), "duplicate {}", s.name);
            assert!(root.join(s.name).join("index.html").is_file(), "{} has no index.html", s.name);
            assert!(s.max_steps > 0 && s.width >= 100 && s.height >= 100);
        }
        assert!(BUILTIN_TASKS.iter().filter(|s| s.multi_page).count() >= 3);
    }
}
