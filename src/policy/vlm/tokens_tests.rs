//! Tests of `tokens.rs`.

use super::*;
use rand::{Rng, SeedableRng};

fn all_kinds() -> ActionSpaceConfig {
    ActionSpaceConfig {
        kinds: GuiAction::KINDS.iter().map(|s| s.to_string()).collect(),
        keys: vec!["Enter".into(), "ctrl+a".into(), "Tab".into()],
        max_action_tokens: 10,
        ..Default::default()
    }
}

#[test]
fn random_paths_through_the_grammar_always_parse() {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
    for cfg in [all_kinds(), ActionSpaceConfig::default()] {
        let v = ActionVocab::new(&cfg).unwrap();
        for i in 0..1000 {
            let (w, h) = (rng.gen_range(1..400), rng.gen_range(1..400));
            let mut g = v.grammar();
            let mut toks = Vec::new();
            while !g.is_complete() {
                let allowed = g.allowed();
                assert!(!allowed.is_empty(), "dead end after {toks:?}");
                let t = allowed[rng.gen_range(0..allowed.len())];
                g.advance(t).unwrap();
                toks.push(t);
            }
            assert!(toks.len() <= cfg.max_action_tokens, "{toks:?}");
            let a = v.decode(&toks, w, h).unwrap();
            assert!(cfg.kinds.iter().any(|k| k == a.kind()));
            let text = a.to_string();
            assert_eq!(GuiAction::parse(&text).unwrap(), a, "path {i}: {text}");
            for (x, y) in a.points() {
                assert!(x >= 0 && y >= 0 && x < w as i32 && y < h as i32, "{text} on {w}x{h}");
            }
            if w as usize >= cfg.x_bins && h as usize >= cfg.y_bins {
                // Bin centres are distinct, so encoding recovers the very tokens.
                assert_eq!(v.encode(&a, w, h).unwrap(), toks, "{text}");
            }
        }
    }
}

#[test]
fn round_trip_on_bin_centres() {
    let cfg = all_kinds();
    let v = ActionVocab::new(&cfg).unwrap();
    let (w, h) = (160, 210);
    let cx = |b| bin_centre(b, w, cfg.x_bins);
    let cy = |b| bin_centre(b, h, cfg.y_bins);
    let actions = [
        GuiAction::Click { x: cx(0), y: cy(0) },
        GuiAction::Click { x: cx(31), y: cy(41) },
        GuiAction::DoubleClick { x: cx(5), y: cy(17) },
        GuiAction::RightClick { x: cx(9), y: cy(2) },
        GuiAction::Hover { x: cx(12), y: cy(30) },
        GuiAction::Drag { x1: cx(1), y1: cy(2), x2: cx(30), y2: cy(40) },
        GuiAction::Scroll { x: cx(3), y: cy(4), dx: 0, dy: 100 },
        GuiAction::Scroll { x: cx(3), y: cy(4), dx: -100, dy: 0 },
        GuiAction::parse("type(\"a \\\"b\\\"!\")").unwrap(),
        GuiAction::parse("key(ctrl+a)").unwrap(),
        GuiAction::parse("key(Enter)").unwrap(),
        GuiAction::Wait { ms: 500 },
        GuiAction::Done,
    ];
    for a in actions {
        let toks = v.encode(&a, w, h).unwrap();
        assert_eq!(v.decode(&toks, w, h).unwrap(), a, "{a}");
    }
    // Every bin centre is a fixed point, on frames smaller and larger than the bins.
    for size in [7u32, 32, 160, 211, 1280] {
        for b in 0..32 {
            let c = bin_centre(b, size, 32);
            assert_eq!(bin_centre(nearest_bin(c, size, 32), size, 32), c);
            if size >= 32 {
                assert_eq!(nearest_bin(c, size, 32), b);
            }
        }
    }
    // Off-centre and off-screen coordinates snap to the nearest bin inside the frame.
    let a = v.decode(&v.encode(&GuiAction::Click { x: -40, y: 999 }, w, h).unwrap(), w, h).unwrap();
    assert_eq!(a, GuiAction::Click { x: cx(0), y: cy(41) });
}

#[test]
fn encode_errors_say_what_is_wrong() {
    let v = ActionVocab::new(&ActionSpaceConfig::default()).unwrap();
    let e = |a: &str| v.encode(&GuiAction::parse(a).unwrap(), 160, 210).unwrap_err().to_string();
    assert!(e("drag(1, 2, 3, 4)").contains("kind `drag` is not in"));
    assert!(e("key(F5)").contains("key `F5` is not in"));
    assert!(e("type(\"\")").contains("1 to 22 bytes"));
    assert!(e("type(\"caf\u{e9}\")").contains("printable ASCII"));
    assert!(v.decode(&[KIND0], 160, 210).unwrap_err().to_string().contains("unfinished"));
    assert!(v.decode(&[END], 160, 210).unwrap_err().to_string().contains("not allowed"));
}

#[test]
fn text_length_is_capped_by_max_action_tokens() {
    let cfg = ActionSpaceConfig { max_action_tokens: 5, ..Default::default() };
    let v = ActionVocab::new(&cfg).unwrap();
    let mut g = v.grammar();
    g.advance(KIND0 + 6).unwrap(); // type
    assert!(!g.allows(END), "empty text is not allowed");
    for _ in 0..3 {
        g.advance(v.byte0).unwrap();
    }
    assert_eq!(g.allowed(), vec![END]);
    g.advance(END).unwrap();
    assert!(g.is_complete() && g.len() == 5);
}

#[test]
fn max_action_tokens_must_fit_the_kinds() {
    let mut c = crate::policy::vlm::VlmConfig::tiny().actions;
    c.kinds.push("drag".into());
    c.max_action_tokens = 3;
    let e = ActionVocab::new(&c).unwrap_err().to_string();
    assert!(e.contains("max_action_tokens") && e.contains("need at least 5"), "{e}");
}
