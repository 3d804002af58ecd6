//! Tests of the parent module (kept apart to keep the module short).
use super::*;
use AnswerFormat::{BrowserGym as Bg, Guirl, QwenToolCall as Qwen, UiTars};

/// A MiniWoB-sized screenshot: 160 wide, 210 high; its centre is (80, 105).
const W: u32 = 160;
const H: u32 = 210;

/// Read `answer` in `mode` on a `w`×`h` shot; the action's text form and the format.
fn read(answer: &str, mode: CoordMode, w: u32, h: u32) -> (String, AnswerFormat) {
    match parse_answer(answer, &mode, w, h) {
        Ok(p) => (p.action.to_string(), p.format),
        Err(e) => panic!("{answer:?} did not parse: {e}"),
    }
}

fn check(cases: &[(&str, &str, AnswerFormat)], mode: CoordMode, w: u32, h: u32) {
    for &(answer, want, format) in cases {
        assert_eq!(read(answer, mode, w, h), (want.to_string(), format), "answer {answer:?} in {mode}");
    }
}

fn err(answer: &str) -> String {
    match parse_answer(answer, &CoordMode::Px, W, H) {
        Ok(p) => panic!("{answer:?} parsed as {} ({})", p.action, p.format),
        Err(e) => e,
    }
}

#[test]
fn guirl_text_form() {
    check(
        &[
            ("click(10, 20)", "click(10, 20)", Guirl),
            ("double_click(10.4, 20.6)", "double_click(10, 21)", Guirl),
            ("right_click(1,2)", "right_click(1, 2)", Guirl),
            ("hover( 3 , 4 )", "hover(3, 4)", Guirl),
            ("click(x=7, y=8)", "click(7, 8)", Guirl),
            ("click([7, 8])", "click(7, 8)", Guirl),
            ("drag(1, 2, 30.5, 40)", "drag(1, 2, 31, 40)", Guirl),
            ("scroll(80, 105, 0, -120)", "scroll(80, 105, 0, -120)", Guirl),
            (r#"type("a \"b\"\n")"#, r#"type("a \"b\"\n")"#, Guirl),
            ("type('single')", r#"type("single")"#, Guirl),
            (r#"type("\u{e9}t\u00e9")"#, r#"type("été")"#, Guirl),
            ("key(Enter)", "key(Enter)", Guirl),
            ("key(ctrl+a)", "key(ctrl+a)", Guirl),
            ("key(ctrl + shift + Tab)", "key(ctrl+shift+Tab)", Guirl),
            ("key(ctrl++)", "key(ctrl++)", Guirl),
            ("key(Return)", "key(Enter)", Guirl),
            ("key(\"Tab\")", "key(Tab)", Guirl),
            ("wait(250)", "wait(250)", Guirl),
            ("done()", "done()", Guirl),
            ("done('the answer is 4')", "done()", Guirl),
            ("-5 px off: click(-5, 400)", "click(-5, 400)", Guirl), // px is not clamped
        ],
        CoordMode::Px,
        W,
        H,
    );
}

#[test]
fn browsergym_coordinate_actions() {
    check(
        &[
            ("mouse_click(87.2, 68)", "click(87, 68)", Bg),
            ("mouse_click(56, 71.56, 'right')", "right_click(56, 72)", Bg),
            ("mouse_click(5, 6, button=\"right\")", "right_click(5, 6)", Bg),
            ("mouse_click(x=5, y=6, button='left')", "click(5, 6)", Bg),
            ("mouse_dblclick(5, 6)", "double_click(5, 6)", Bg),
            ("mouse_move(7, 8)", "hover(7, 8)", Bg),
            ("mouse_drag_and_drop(1, 2, 3, 4)", "drag(1, 2, 3, 4)", Bg),
            ("mouse_drag_and_drop(from_x=1, from_y=2, to_x=3, to_y=4)", "drag(1, 2, 3, 4)", Bg),
            // Two arguments: BrowserGym's scroll(dx, dy), at the screenshot's centre.
            ("scroll(0, 200)", "scroll(80, 105, 0, 200)", Bg),
            ("scroll(delta_x=-10, delta_y=0)", "scroll(80, 105, -10, 0)", Bg),
            ("scroll_at(10, 20, -5, 30)", "scroll(10, 20, -5, 30)", Bg),
            (r"keyboard_type('it\'s')", r#"type("it's")"#, Bg),
            ("keyboard_insert_text(\"x\")", r#"type("x")"#, Bg),
            ("noop()", "wait(1000)", Bg),
            ("noop(500)", "wait(500)", Bg),
            ("noop(wait_ms=250.0)", "wait(250)", Bg),
            ("send_msg_to_user('The city was built in 1751.')", "done()", Bg),
            ("report_infeasible(\"no such field\")", "done()", Bg),
        ],
        CoordMode::Px,
        W,
        H,
    );
}

#[test]
fn playwright_and_pyautogui_key_names() {
    check(
        &[
            ("keyboard_press('Enter')", "key(Enter)", Bg),
            ("keyboard_press('ControlOrMeta+a')", "key(ctrl+a)", Bg),
            ("keyboard_press('Control+a')", "key(ctrl+a)", Bg),
            ("keyboard_press('Control+Shift+ArrowLeft')", "key(ctrl+shift+ArrowLeft)", Bg),
            ("keyboard_press('Alt+Tab')", "key(alt+Tab)", Bg),
            ("keyboard_press('Meta+KeyC')", "key(meta+c)", Bg),
            ("keyboard_press('Shift+Digit1')", "key(shift+1)", Bg),
            ("keyboard_press('Backspace')", "key(Backspace)", Bg),
            ("keyboard_press('Escape')", "key(Escape)", Bg),
            ("keyboard_press('Delete')", "key(Delete)", Bg),
            ("keyboard_press('PageDown')", "key(PageDown)", Bg),
            ("keyboard_press('Control++')", "key(ctrl++)", Bg),
            ("keyboard_press('a')", "key(a)", Bg),
            ("hotkey(key='ctrl c')", "key(ctrl+c)", UiTars),
            ("hotkey(key='ctrl shift t')", "key(ctrl+shift+t)", UiTars),
            ("hotkey(key='cmd v')", "key(meta+v)", UiTars),
            ("press(key='enter')", "key(Enter)", UiTars),
            ("press(key='arrowleft')", "key(ArrowLeft)", UiTars),
            ("press(key='down')", "key(ArrowDown)", UiTars),
            ("hotkey(key='esc')", "key(Escape)", UiTars),
            ("hotkey(key='space')", "key(Space)", UiTars),
            ("hotkey(key=' ')", "key(Space)", UiTars),
            ("hotkey(key='pgup')", "key(PageUp)", UiTars),
            ("hotkey(key='f5')", "key(F5)", UiTars),
            ("hotkey('ctrl', 'shift', 'Tab')", "key(ctrl+shift+Tab)", UiTars), // pyautogui style
        ],
        CoordMode::Px,
        W,
        H,
    );
}

#[test]
fn ui_tars_actions() {
    check(
        &[
            ("click(start_box='(10,20)')", "click(10, 20)", UiTars),
            ("click(start_box='<|box_start|>(10,20)<|box_end|>')", "click(10, 20)", UiTars),
            ("click(point='<point>10 20</point>')", "click(10, 20)", UiTars),
            ("click('(10, 20)')", "click(10, 20)", UiTars),
            ("left_single(start_box='(10.5,20)')", "click(11, 20)", UiTars),
            // Four numbers are a box: its centre ((10+30)/2, (20+40)/2) = (20, 30).
            ("left_single(start_box='(10,20,30,40)')", "click(20, 30)", UiTars),
            ("left_double(start_box='<bbox>10 20 30 40</bbox>')", "double_click(20, 30)", UiTars),
            ("right_single(point='<point>5 6</point>')", "right_click(5, 6)", UiTars),
            ("hover(start_box='(1,2)')", "hover(1, 2)", UiTars),
            ("drag(start_box='(1,2)', end_box='(3,4)')", "drag(1, 2, 3, 4)", UiTars),
            (
                "drag(start_point='<point>1 2</point>', end_point='<point>3 4</point>')",
                "drag(1, 2, 3, 4)",
                UiTars,
            ),
            ("select(start_box='(1,2)', end_box='(3,4)')", "drag(1, 2, 3, 4)", UiTars),
            ("type(content='hello')", r#"type("hello")"#, UiTars),
            // A trailing \n submits: kept, so guirl types the text and presses Enter.
            (r"type(content='hello\n')", r#"type("hello\n")"#, UiTars),
            (r#"type(content='say \"hi\"')"#, r#"type("say \"hi\"")"#, UiTars),
            // Unescaped quote inside content, as UI-TARS models sometimes write.
            ("type(content='I'm here')", r#"type("I'm here")"#, UiTars),
            (
                "Action: type(content='I'm here')\n\nThen click(start_box='(1,2)')",
                r#"type("I'm here")"#,
                UiTars,
            ),
            ("scroll(start_box='(10,20)', direction='down')", "scroll(10, 20, 0, 100)", UiTars),
            ("scroll(point='<point>10 20</point>', direction='up')", "scroll(10, 20, 0, -100)", UiTars),
            ("scroll(direction='left')", "scroll(80, 105, -100, 0)", UiTars),
            ("scroll(direction='Right')", "scroll(80, 105, 100, 0)", UiTars),
            ("wait()", "wait(5000)", UiTars),
            ("finished(content='It is 42.')", "done()", UiTars),
            ("finished()", "done()", UiTars),
            ("call_user()", "done()", UiTars),
        ],
        CoordMode::Px,
        W,
        H,
    );
}

fn tool(args: &str) -> String {
    format!("<tool_call>\n{{\"name\": \"computer_use\", \"arguments\": {args}}}\n</tool_call>")
}

#[test]
fn qwen_tool_calls() {
    let cases = [
        (r#"{"action": "left_click", "coordinate": [10, 20]}"#, "click(10, 20)"),
        (r#"{"action": "right_click", "coordinate": [10.6, 20]}"#, "right_click(11, 20)"),
        (r#"{"action": "double_click", "coordinate": ["10", "20"]}"#, "double_click(10, 20)"),
        (r#"{"action": "mouse_move", "coordinate": [1, 2]}"#, "hover(1, 2)"),
        (r#"{"action": "left_click", "coordinate": [10, 20, 30, 40]}"#, "click(20, 30)"),
        (
            r#"{"action": "left_click_drag", "start_coordinate": [1, 2], "coordinate": [3, 4]}"#,
            "drag(1, 2, 3, 4)",
        ),
        (r#"{"action": "swipe", "coordinate": [1, 2], "coordinate2": [3, 4]}"#, "drag(1, 2, 3, 4)"),
        (r#"{"action": "type", "text": "hi\nthere"}"#, r#"type("hi\nthere")"#),
        (r#"{"action": "key", "keys": ["ctrl", "c"]}"#, "key(ctrl+c)"),
        (r#"{"action": "key", "keys": ["Return"]}"#, "key(Enter)"),
        (r#"{"action": "key", "keys": ["ctrl+shift+t"]}"#, "key(ctrl+shift+t)"),
        // Qwen: positive pixels scroll up, i.e. a negative wheel dy; at the centre by default.
        (r#"{"action": "scroll", "pixels": 50}"#, "scroll(80, 105, 0, -50)"),
        (r#"{"action": "scroll", "pixels": -300, "coordinate": [10, 20]}"#, "scroll(10, 20, 0, 300)"),
        (r#"{"action": "hscroll", "pixels": 30}"#, "scroll(80, 105, 30, 0)"),
        (r#"{"action": "wait", "time": 2}"#, "wait(2000)"),
        (r#"{"action": "wait", "time": 0.5}"#, "wait(500)"),
        (r#"{"action": "wait"}"#, "wait(1000)"),
        (r#"{"action": "terminate", "status": "success"}"#, "done()"),
        (r#"{"action": "answer", "text": "42"}"#, "done()"),
    ];
    for (args, want) in cases {
        assert_eq!(read(&tool(args), CoordMode::Px, W, H), (want.to_string(), Qwen), "{args}");
        // The OpenAI tool_calls shape: arguments as a JSON string.
        let a = parse_tool_call("computer_use", &Value::String(args.into()), &CoordMode::Px, W, H);
        assert_eq!(a.map(|a| a.to_string()), Ok(want.to_string()), "{args}");
    }
    // A bare JSON object, in prose or a fence.
    let bare = "I will click it.\n```json\n{\"name\": \"computer_use\", \"arguments\": \
                {\"action\": \"left_click\", \"coordinate\": [1, 2]}}\n```";
    assert_eq!(read(bare, CoordMode::Px, W, H), ("click(1, 2)".into(), Qwen));
    // The thinking before the call is ignored; the first call is taken.
    let two = format!(
        "<think>click(1, 1) would miss</think>\n{}\n{}",
        tool(r#"{"action": "left_click", "coordinate": [5, 6]}"#),
        tool(r#"{"action": "type", "text": "x"}"#)
    );
    assert_eq!(read(&two, CoordMode::Px, W, H), ("click(5, 6)".into(), Qwen));
}

#[test]
fn coordinate_modes() {
    // rel1000 on 160×210: x·160/1000, y·210/1000; (500, 500) → (80, 105).
    check(
        &[
            ("click(500, 500)", "click(80, 105)", Guirl),
            ("mouse_click(1000, 1000)", "click(159, 209)", Bg), // right/bottom edge, clamped
            // bbox centre (200, 300) → (32, 63).
            ("click(start_box='<bbox>100 100 300 500</bbox>')", "click(32, 63)", UiTars),
            // Deltas scale but are not clamped: 100·210/1000 = 21, −2000·160/1000 = −320.
            ("scroll(500, 500, -2000, 100)", "scroll(80, 105, -320, 21)", Guirl),
            ("scroll(0, 100)", "scroll(80, 105, 0, 21)", Bg),
            // UI-TARS scrolls are screenshot pixels, whatever the mode.
            ("scroll(start_box='(500,500)', direction='down')", "scroll(80, 105, 0, 100)", UiTars),
        ],
        CoordMode::Rel1000,
        W,
        H,
    );
    // rel999: 999 → 160 and 210, clamped; 333·160/999 = 53.33 → 53.
    check(&[("click(333, 999)", "click(53, 209)", Guirl)], CoordMode::Rel999, W, H);
    // rel1: 0.25·160 = 40, 0.5·210 = 105.
    check(&[("mouse_click(0.25, 0.5)", "click(40, 105)", Bg)], CoordMode::Rel1, W, H);
    // smart_resize on 1280×720: round(720/28 = 25.71) = 26 → 728, round(1280/28 = 45.71) = 46
    // → 1288 (area inside the limits); x·1280/1288, y·720/728: (644, 364) → (640, 360).
    let qwen = tool(r#"{"action": "left_click", "coordinate": [644, 364]}"#);
    let scroll = tool(r#"{"action": "scroll", "pixels": -364}"#); // 364·720/728 = 360 down
    check(
        &[
            ("Action: click(start_box='(644,364)')", "click(640, 360)", UiTars),
            (&qwen, "click(640, 360)", Qwen),
            (&scroll, "scroll(640, 360, 0, 360)", Qwen),
            ("click(1288, 728)", "click(1279, 719)", Guirl), // clamped to the last pixel
        ],
        CoordMode::SMART_RESIZE,
        1280,
        720,
    );
    // smart_resize on MiniWoB's 160×210 → 252×336: (126, 168) → (80, 105).
    check(&[("left_single(start_box='(126,168)')", "click(80, 105)", UiTars)], CoordMode::SMART_RESIZE, W, H);
}

#[test]
fn answers_with_prose_and_fences() {
    check(
        &[
            ("Thought: The button is up.\nAction: click(start_box='(10,20)')", "click(10, 20)", UiTars),
            (
                "Thought: I could click(1, 1) or type('x').\nAction: click(start_box='(10,20)')\n\nDone.",
                "click(10, 20)",
                UiTars,
            ),
            (
                "Thought: type the name then submit.\nAction: type(content='Bob\\n')\n",
                "type(\"Bob\\n\")",
                UiTars,
            ),
            ("I'll press it.\n```python\nmouse_click(10, 20)\n```\nThat should work.", "click(10, 20)", Bg),
            ("```\nclick(3, 4)\n```", "click(3, 4)", Guirl),
            ("Plan:\n```\nclick(1, 2)\n```\nBetter:\n```python\nkey(Enter)\n```", "key(Enter)", Guirl),
            // No marker: the last line holding a call, its first call.
            ("I thought of click(1, 2), but\nit is type(\"abc\") then click(3,4)", "type(\"abc\")", Guirl),
            ("click(5, 6).", "click(5, 6)", Guirl),
            ("The final answer: `key(Enter)`", "key(Enter)", Guirl),
            ("I will click the OK button.\nclick(12, 34)", "click(12, 34)", Guirl),
            ("Let me wait (a second) and then done()", "done()", Guirl),
            ("pyautogui.click(100, 200)", "click(100, 200)", Guirl),
        ],
        CoordMode::Px,
        W,
        H,
    );
}

#[test]
fn unreadable_answers_name_the_accepted_forms() {
    for garbage in ["I don't know what to do.", "", "{\"foo\": 1}", "clickity click"] {
        let e = err(garbage);
        assert!(e.starts_with("no action found in the answer"), "{e}");
        assert!(e.contains(&format!("{:?}", garbage.trim())), "{e}");
        for form in ["click(x, y)", "mouse_click(x, y", "start_box=", "computer_use", "key(ctrl+a)"] {
            assert!(e.contains(form), "{form} missing from: {e}");
        }
    }
    // A long answer is quoted by its start and end.
    let long = format!("BEGIN {}END", "blah ".repeat(400));
    let e = err(&long);
    assert!(e.contains("\"BEGIN blah") && e.contains("blah END\"") && e.contains(" … "), "{e}");
    assert!(e.len() < 400 + ACCEPTED_FORMS.len(), "{e}");
}

#[test]
fn recognised_but_unreadable_actions_say_why() {
    let cases = [
        ("click('13')", "looks like an element id"),
        ("Action: click(start_box='(abc)')", "a box needs 2 numbers"),
        ("mouse_click(1, 2, 'middle')", "not supported"),
        ("mouse_down(1, 2)", "not supported"),
        ("fill('12', 'bob')", "page elements"),
        ("keyboard_press('Hyper+a')", "\"Hyper\" is not a modifier"),
        ("keyboard_press('Foo')", "unknown key \"Foo\""),
        ("keyboard_press('Shift')", "no key"),
        ("scroll(direction='sideways')", "use up, down, left or right"),
        ("wait(-5)", "non-negative"),
        ("type(\"abc", "not a readable call"),
        ("click(1)", "needs a number as argument 2"),
        ("drag(start_box='(1,2)')", "end_box"),
        (&tool(r#"{"action": "triple_click", "coordinate": [1, 2]}"#), "triple_click is not supported"),
        (&tool(r#"{"action": "fly"}"#), "unknown computer_use action \"fly\""),
        (&tool(r#"{"action": "left_click_drag", "coordinate": [1, 2]}"#), "start_coordinate"),
        (&tool(r#"{"action": "left_click"}"#), "needs coordinate"),
        (&tool(r#"{"coordinate": [1, 2]}"#), "no \"action\""),
        (
            "<tool_call>{\"name\": \"computer_use\", \"arguments\": {oops}}</tool_call>",
            "holds no JSON object",
        ),
        ("<tool_call>{\"name\": \"browser\", \"arguments\": {}}</tool_call>", "unknown tool \"browser\""),
    ];
    for (answer, why) in cases {
        let e = err(answer);
        assert!(e.starts_with("could not read an action from the answer"), "{e}");
        assert!(e.contains(why), "{answer:?}: {why:?} missing from: {e}");
        assert!(e.contains("accepted forms"), "{e}");
    }
    // What follows the markers is the answer: no fallback into the reasoning before it.
    for (answer, why) in [
        ("Thought: click(1, 1)?\nAction: click(start_box='(abc)')", "a box needs 2 numbers"),
        ("Thought: click(1, 1)?\n<tool_call>{\"name\": \"computer_use\"}</tool_call>", "holds no JSON"),
    ] {
        assert!(err(answer).contains(why), "{answer:?}: {}", err(answer));
    }
    assert!(err("<think>click(1, 1) maybe</think>\nI am not sure.").starts_with("no action found"));
    // A readable call elsewhere wins over an unreadable one.
    assert_eq!(read("click('13')\nclick(1, 2)", CoordMode::Px, W, H).0, "click(1, 2)");
}

#[test]
fn formats_print_and_serialize() {
    for (f, s) in [(Guirl, "guirl"), (Bg, "browsergym"), (UiTars, "ui_tars"), (Qwen, "qwen_tool_call")] {
        assert_eq!(f.to_string(), s);
        assert_eq!(serde_json::to_string(&f).unwrap(), format!("{s:?}"));
    }
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(3000))]
    /// Any text, and text made of the pieces the readers look for, gives Ok or Err: no panic.
    #[test]
    fn never_panics(
        any in proptest::prelude::any::<String>(),
        pieces in concat!(
            "(click|mouse_click|type|key|scroll|hotkey|noop|wait|content=|start_box=|",
            "<tool_call>|</tool_call>|",
            "\\{\"name\": \"computer_use\", \"arguments\": |\\{|\\}|\\(|\\)|\\[|'|\"|,|=|\\+|",
            "-?[0-9.]{1,4}|e5|é| |\\\\u|\\\\|\n|```|Action:)*"
        ),
    ) {
        for mode in [CoordMode::Px, CoordMode::SMART_RESIZE, CoordMode::Rel1000, CoordMode::Rel1] {
            let _ = parse_answer(&any, &mode, W, H);
            let _ = parse_answer(&pieces, &mode, W, H);
            let _ = parse_answer(&pieces, &mode, 0, 0);
        }
    }
}
