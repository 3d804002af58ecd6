//! Tests of the parent module (kept apart to keep the module short).
use super::*;
use proptest::prelude::*;

fn arb_action() -> impl Strategy<Value = GuiAction> {
    let c = -5000i32..5000;
    let key = prop_oneof![
        proptest::sample::select(NAMED_KEYS.iter().map(|(n, _)| n.to_string()).collect::<Vec<_>>()),
        "[a-zA-Z0-9+=;,./\\-]".prop_map(|s| s),
    ];
    prop_oneof![
        (c.clone(), c.clone()).prop_map(|(x, y)| GuiAction::Click { x, y }),
        (c.clone(), c.clone()).prop_map(|(x, y)| GuiAction::DoubleClick { x, y }),
        (c.clone(), c.clone()).prop_map(|(x, y)| GuiAction::RightClick { x, y }),
        (c.clone(), c.clone()).prop_map(|(x, y)| GuiAction::Hover { x, y }),
        (c.clone(), c.clone(), c.clone(), c.clone()).prop_map(|(x1, y1, x2, y2)| GuiAction::Drag {
            x1,
            y1,
            x2,
            y2
        }),
        (c.clone(), c.clone(), c.clone(), c.clone()).prop_map(|(x, y, dx, dy)| GuiAction::Scroll {
            x,
            y,
            dx,
            dy
        }),
        any::<String>().prop_map(|text| GuiAction::Type { text }),
        (proptest::collection::btree_set(0..4usize, 0..4), key).prop_map(|(m, key)| {
            let all = [Modifier::Ctrl, Modifier::Alt, Modifier::Shift, Modifier::Meta];
            GuiAction::Key(KeyCombo { modifiers: m.into_iter().map(|i| all[i]).collect(), key })
        }),
        any::<u32>().prop_map(|ms| GuiAction::Wait { ms }),
        Just(GuiAction::Done),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]
    #[test]
    fn parse_format_roundtrip(a in arb_action()) {
        let text = a.to_string();
        prop_assert_eq!(GuiAction::parse(&text), Ok(a), "text: {}", text);
    }
}

#[test]
fn examples_parse() {
    assert_eq!(GuiAction::parse(" click( 3 ,4 ) ").unwrap(), GuiAction::Click { x: 3, y: 4 });
    assert_eq!(
        GuiAction::parse(r#"type("a \"b\"\n")"#).unwrap(),
        GuiAction::Type { text: "a \"b\"\n".into() }
    );
    assert_eq!(GuiAction::parse("key(Ctrl+A)").unwrap().to_string(), "key(ctrl+A)");
    assert_eq!(GuiAction::parse("key(enter)").unwrap().to_string(), "key(Enter)");
    assert_eq!(GuiAction::parse("key(ctrl++)").unwrap().to_string(), "key(ctrl++)");
}

#[test]
fn errors_name_position_and_expectation() {
    let e = GuiAction::parse("clik(1, 2)").unwrap_err();
    assert_eq!(e.position, 0);
    assert!(e.expected.contains("action name"), "{e}");
    let e = GuiAction::parse("click(1 2)").unwrap_err();
    assert_eq!(e.position, 8);
    assert_eq!(e.expected, "','");
    let e = GuiAction::parse("click(1, x)").unwrap_err();
    assert_eq!(e.position, 9);
    assert!(e.to_string().contains("expected an integer"), "{e}");
    // a fraction is named as one, at its point (it said "expected ','")
    let e = GuiAction::parse("click(1.5, 2)").unwrap_err();
    assert_eq!(e.position, 7);
    assert!(e.expected.contains("whole number"), "{e}");
    assert!(GuiAction::parse("wait(1.)").unwrap_err().expected == "')'");
    let e = GuiAction::parse("type(\"abc").unwrap_err();
    assert!(e.expected.contains("closing"), "{e}");
    let e = GuiAction::parse("key(ctrl+Foo)").unwrap_err();
    assert!(e.expected.contains("key name"), "{e}");
    let e = GuiAction::parse("done() extra").unwrap_err();
    assert_eq!(e.position, 7);
    let e = GuiAction::parse("wait(-1)").unwrap_err();
    assert!(e.expected.contains("non-negative"), "{e}");
    assert_eq!(
        e.to_string(),
        "malformed action \"wait(-1)\" at position 5: expected a non-negative number of milliseconds"
    );
    // A long text is quoted only around the problem, cut on character boundaries.
    let long = format!("type(\"{}\") {}", "é".repeat(3000), "x".repeat(500));
    let e = GuiAction::parse(&long).unwrap_err();
    let m = e.to_string();
    assert!(m.len() < 200, "{m}");
    assert!(
        m.contains("…\"éé") && m.contains("\") xxx") && m.contains(&format!("({} bytes)", long.len())),
        "{m}"
    );
    assert_eq!(e.input, long, "the error keeps the whole text");
    // So is a long key or modifier name in what was expected.
    for long in [format!("key({})", "a".repeat(9000)), format!("key({}+a)", "b".repeat(9000))] {
        let m = GuiAction::parse(&long).unwrap_err().to_string();
        let found = m.split("found ").nth(1).unwrap_or_else(|| panic!("{m}"));
        assert_eq!(found.chars().count(), 43, "40 characters, quotes and the cut mark: {m}");
        assert!(m.len() < 400, "{m}");
    }
}
