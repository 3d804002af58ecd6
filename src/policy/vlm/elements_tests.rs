//! The `elements` input: what each element's token reads (words, match flags, value, role,
//! state, box, position cell), the slots and their mask, that every part learns, that the
//! token shares the image grid's position under it, and that a batch scores each row as
//! that row alone.

use super::elements::{element_tokens, ElementEncoder, ElementInputs, ElementToken, Role, ELEMENT_WORDS};
use super::layers::NEG;
use super::*;
use crate::env::{BBox, Element};

/// The tiny preset (a 4 × 5 token grid; on a 160 × 200 screenshot one token is 40 × 40
/// pixels) reading at most `max` elements.
fn cfg(max: usize) -> VlmConfig {
    VlmConfig {
        word_buckets: 1024,
        inputs: Inputs { elements: Some(max), ..Inputs::default() },
        ..VlmConfig::tiny()
    }
}

fn el(tag: &str, input_type: &str, text: &str, label: &str, (x, y, w, h): (f32, f32, f32, f32)) -> Element {
    Element {
        tag: tag.into(),
        input_type: input_type.into(),
        text: text.into(),
        label: label.into(),
        bbox: BBox { x, y, w, h },
        ..Default::default()
    }
}

/// A page: a label, a checked switch, a focused filled field, a button half off the
/// screenshot, and a link with more words than a token reads.
fn page() -> ScreenState {
    let mut s = speed::square_state(160, 200, 0, 0, 1, [0, 0, 0], "Turn on \"Dark mode\" and type \"hi\".");
    let mut switch = el("input", "checkbox", "", "Wi-Fi", (130.0, 45.0, 20.0, 10.0));
    switch.checked = true;
    let mut field = el("input", "text", "", "Name", (40.0, 160.0, 80.0, 20.0));
    (field.value, field.focused) = ("Hi there".into(), true);
    s.elements = vec![
        el("label", "", "Dark mode", "", (0.0, 5.0, 40.0, 10.0)),
        switch,
        field,
        el("button", "", "Go go GO", "", (150.0, 190.0, 40.0, 40.0)),
        el("a", "", "a b c d e f g h i j", "", (0.0, 0.0, 10.0, 10.0)),
    ];
    s
}

fn close(a: &[f32], b: &[f32]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| (x - y).abs() < 1e-6)
}

fn word(w: &str) -> u32 {
    words::word_buckets(w.as_bytes(), 1024)[0]
}

#[test]
fn each_element_reads_its_words_value_role_state_box_and_cell() {
    let t = element_tokens(&page(), &cfg(32), 32);
    assert_eq!(t.len(), 5);
    let want = ElementToken {
        words: vec![word("dark"), word("mode")],
        matched: vec![true, true],
        value: vec![],
        value_matched: vec![],
        role: Role::Label,
        checked: false,
        focused: false,
        bbox: t[0].bbox,
        cell: 0,
    };
    assert_eq!(t[0], want);
    assert!(close(&t[0].bbox, &[-1.0, -0.95, -0.5, -0.85]), "{:?}", t[0].bbox);
    // The switch: its accessible name (not an instruction word), checked, column 3 row 1.
    assert_eq!(
        (t[1].words.clone(), t[1].matched.clone()),
        (vec![word("wi"), word("fi")], vec![false, false])
    );
    assert_eq!((t[1].role, t[1].checked, t[1].focused, t[1].cell), (Role::Checkbox, true, false, 4 + 3));
    // The field: its name and, apart, its value ("Hi" is the instruction's "hi": no case).
    assert_eq!(
        (t[2].words.clone(), t[2].value.clone()),
        (vec![word("name")], vec![word("hi"), word("there")])
    );
    assert_eq!(
        (t[2].value_matched.clone(), t[2].role, t[2].focused),
        (vec![true, false], Role::TextField, true)
    );
    assert_eq!(t[2].cell, 4 * 4 + 2);
    // Half off the screenshot: the box is clamped, the centre cell is the last one.
    assert_eq!((t[3].words.clone(), t[3].role, t[3].cell), (vec![word("go")], Role::Button, 19));
    assert!(close(&t[3].bbox, &[0.875, 0.9, 1.0, 1.0]), "{:?}", t[3].bbox);
    // Ten words: the first eight.
    assert_eq!(t[4].words, ["a", "b", "c", "d", "e", "f", "g", "h"].map(word).to_vec());
    assert_eq!((t[4].role, t[4].words.len()), (Role::Link, ELEMENT_WORDS));
    // At most `max`, in document order.
    assert_eq!(element_tokens(&page(), &cfg(3), 3), t[..3].to_vec());
}

#[test]
fn roles_come_from_the_tag_and_the_input_type() {
    let role = |tag: &str, ty: &str| Role::of(&el(tag, ty, "", "", (0.0, 0.0, 1.0, 1.0)));
    assert_eq!(role("a", ""), Role::Link);
    assert_eq!(role("input", "submit"), Role::Button);
    assert_eq!(role("input", ""), Role::TextField);
    assert_eq!(role("input", "email"), Role::TextField);
    assert_eq!(role("input", "password"), Role::Password);
    assert_eq!(role("input", "radio"), Role::Radio);
    assert_eq!(role("input", "number"), Role::Number);
    assert_eq!(role("input", "date"), Role::DateTime);
    assert_eq!(role("input", "color"), Role::OtherInput);
    assert_eq!(
        (role("textarea", ""), role("select", ""), role("option", "")),
        (Role::TextArea, Role::Select, Role::Option)
    );
    assert_eq!(role("div", ""), Role::Other);
    assert_eq!(Role::OtherInput as usize + 1, Role::COUNT);
}

/// The packed tensors: means' weights and match shares, and the slots' key mask (past
/// `max_elements`, and for a state without elements).
#[test]
fn slots_pad_to_the_longest_row_and_empty_ones_are_masked() {
    let c = cfg(4);
    let mut bare = page();
    bare.elements.clear();
    let enc = inputs::encoder_inputs(&[page(), bare.clone()], &c, &Device::Cpu).unwrap();
    let e = enc.elements.as_ref().unwrap();
    assert_eq!(e.words.dims(), &[2, 4, ELEMENT_WORDS]);
    let share = e.word_match.flatten_all().unwrap().to_vec1::<f32>().unwrap();
    assert_eq!(share, [1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]);
    assert_eq!(e.value_match.flatten_all().unwrap().to_vec1::<f32>().unwrap()[2], 0.5);
    assert_eq!(
        e.has_value.flatten_all().unwrap().to_vec1::<f32>().unwrap(),
        [0., 0., 1., 0., 0., 0., 0., 0.]
    );
    let w = e.word_weights.flatten_all().unwrap().to_vec1::<f32>().unwrap();
    assert_eq!(w[..3], [0.5, 0.5, 0.0]);
    let roles = e.roles.to_vec2::<u32>().unwrap();
    assert_eq!(roles[0], [Role::Label, Role::Checkbox, Role::TextField, Role::Button].map(|r| r as u32));
    assert_eq!(roles[1], [Role::Other as u32; 4]);
    assert_eq!(e.states.to_vec3::<f32>().unwrap()[0][..3], [vec![0.0, 0.0], vec![1.0, 0.0], vec![0.0, 1.0]]);
    assert_eq!(e.cells.to_vec2::<u32>().unwrap()[0], [0, 7, 18, 19]);
    assert!(close(&e.boxes.to_vec3::<f32>().unwrap()[0][3], &[0.875, 0.9, 1.0, 1.0]));
    // The key mask's last four places are the slots: all four filled (the fifth element is
    // past max_elements), none for the state without elements.
    let mask = enc.key_mask.flatten_all().unwrap().to_vec1::<f32>().unwrap();
    let n = mask.len() / 2;
    assert_eq!(mask[n - 4..n], [0.0; 4]);
    assert_eq!(mask[2 * n - 4..], [NEG; 4]);
    // A batch without any element still has one (masked) slot.
    let enc = inputs::encoder_inputs(&[bare], &c, &Device::Cpu).unwrap();
    assert_eq!(enc.elements.unwrap().words.dims(), &[1, 1, ELEMENT_WORDS]);
    assert_eq!(*enc.key_mask.flatten_all().unwrap().to_vec1::<f32>().unwrap().last().unwrap(), NEG);
    // Without the input there is nothing of it.
    assert!(inputs::encoder_inputs(&[page()], &VlmConfig::tiny(), &Device::Cpu).unwrap().elements.is_none());
}

/// An element's token and the image tokens under its box share the grid's position: the
/// same row of the stem's table, added to the token of that element only.
#[test]
fn an_element_token_carries_the_grid_position_under_its_centre() {
    let (d, c) = (16, cfg(8));
    let map = candle_nn::VarMap::new();
    let enc = ElementEncoder::new(d, init::seeded_var_builder(&map, 1, &Device::Cpu)).unwrap();
    let x = ElementInputs::new(&[element_tokens(&page(), &c, 8)], 5, c.image_tokens(), &Device::Cpu).unwrap();
    let words = Tensor::randn(0f32, 1.0, (1024, d), &Device::Cpu).unwrap();
    let pos = Tensor::randn(0f32, 1.0, (c.image_tokens(), d), &Device::Cpu).unwrap();
    let mut moved = pos.to_vec2::<f32>().unwrap();
    moved[7].iter_mut().for_each(|v| *v += 1.0); // the switch's cell
    let moved = Tensor::new(moved, &Device::Cpu).unwrap();
    let a = enc.forward(&x, &words, &pos).unwrap();
    let b = enc.forward(&x, &words, &moved).unwrap();
    let diff = (b - a).unwrap().squeeze(0).unwrap().to_vec2::<f32>().unwrap();
    for (i, row) in diff.iter().enumerate() {
        let want = if i == 1 { 1.0 } else { 0.0 };
        assert!(row.iter().all(|v| (v - want).abs() < 1e-5), "element {i}: {row:?}");
    }
}

/// The pointer's keys read each element where it lies: `on_cells` has one 1 per element,
/// on the image token under its box centre, and nothing for the empty slots.
#[test]
fn each_element_keys_the_pointer_on_the_token_under_its_centre() {
    let c = cfg(8);
    let tokens = element_tokens(&page(), &c, 8);
    let x = ElementInputs::new(std::slice::from_ref(&tokens), 5, c.image_tokens(), &Device::Cpu).unwrap();
    let on = x.on_cells.squeeze(0).unwrap().to_vec2::<f32>().unwrap();
    assert_eq!((on.len(), on[0].len()), (c.image_tokens(), 5));
    for j in 0..5 {
        let ones: Vec<usize> = (0..on.len()).filter(|&i| on[i][j] == 1.0).collect();
        let want = tokens.get(j).map(|t| vec![t.cell]).unwrap_or_default();
        assert_eq!(ones, want, "slot {j}");
        assert_eq!(on.iter().map(|r| r[j]).sum::<f32>(), want.len() as f32, "slot {j}");
    }
}

/// One backward pass reaches every part of the element tokens (the word table through a
/// word only the screen has, every role the page has, both states, the box, the match and
/// value vectors, the segment), and the value vector's gradient is the finite difference
/// of the loss.
#[test]
fn every_part_of_the_element_tokens_learns() {
    let p = VlmPolicy::new(cfg(8), &Device::Cpu, 3).unwrap();
    let state = page();
    let action = vec![GuiAction::parse("click(140, 50)").unwrap()];
    let mut bare = state.clone();
    bare.elements.clear();
    let loss =
        |p: &VlmPolicy| p.log_probs(std::slice::from_ref(&state), &action).unwrap().logp.sum_all().unwrap();
    let without = p.log_probs(&[bare], &action).unwrap().logp.sum_all().unwrap();
    let with = loss(&p);
    let (a, b) = (with.to_scalar::<f32>().unwrap(), without.to_scalar::<f32>().unwrap());
    assert!((a - b).abs() > 1e-6, "the elements change nothing");
    let grads = with.backward().unwrap();
    let var = |name: &str| {
        p.named_vars().into_iter().find(|(n, _)| n == name).unwrap_or_else(|| panic!("{name}")).1
    };
    let rows = |name: &str| grads.get(var(name).as_tensor()).unwrap().to_vec2::<f32>().unwrap();
    let live = |row: &[f32]| row.iter().any(|v| *v != 0.0);
    assert!(live(&rows("encoder.word_emb")[word("wi") as usize]), "a screen-only word has no gradient");
    for name in [
        "encoder.elements.match",
        "encoder.elements.value",
        "encoder.elements.segment",
        "encoder.elements.box.weight",
    ] {
        assert!(rows(name).iter().all(|r| live(r)), "{name}: a row without gradient");
    }
    assert!(rows("encoder.elements.state").iter().all(|r| live(r)), "checked and focused both learn");
    let roles = rows("encoder.elements.role");
    for r in [Role::Label, Role::Checkbox, Role::TextField, Role::Button, Role::Link] {
        assert!(live(&roles[r as usize]), "{r:?}");
    }
    assert!(!live(&roles[Role::Radio as usize]), "no radio button on the page");
    // d loss / d value[0, j] against a central difference.
    let value = var("encoder.elements.value");
    let start = value.as_tensor().to_vec2::<f32>().unwrap();
    let g = rows("encoder.elements.value")[0].clone();
    let j = (0..g.len()).max_by(|&x, &y| g[x].abs().total_cmp(&g[y].abs())).unwrap();
    let at = |delta: f32| {
        let mut v = start.clone();
        v[0][j] += delta;
        value.set(&Tensor::new(v, &Device::Cpu).unwrap()).unwrap();
        loss(&p).to_scalar::<f32>().unwrap()
    };
    let h = 1e-2;
    let (up, down) = (at(h), at(-h));
    at(0.0);
    let fd = (up - down) / (2.0 * h);
    assert!((fd - g[j]).abs() <= 0.05 * g[j].abs() + 1e-3, "finite difference {fd} vs gradient {}", g[j]);
}

/// Rows with different element counts (none, a few, more than `max_elements`) score in a
/// batch as each alone: the padded slots are masked out.
#[test]
fn a_batch_scores_each_row_as_that_row_alone() {
    let p = VlmPolicy::new(cfg(8), &Device::Cpu, 5).unwrap();
    let (mut states, actions) = speed::synthetic_batch(6, 4);
    states[1].elements.clear();
    states[2] = page();
    let counts: Vec<usize> = states.iter().map(|s| s.elements.len()).collect();
    assert!(counts.iter().any(|&n| n > 8) && counts.contains(&0), "{counts:?}");
    let together = p.log_probs(&states, &actions).unwrap().logp.to_vec2::<f32>().unwrap();
    for i in 0..states.len() {
        let alone = p.log_probs(&states[i..=i], &actions[i..=i]).unwrap().logp.to_vec2::<f32>().unwrap();
        for (j, v) in alone[0].iter().enumerate() {
            assert!(
                (v - together[i][j]).abs() < 1e-5,
                "row {i} token {j}: {v} alone, {} in the batch",
                together[i][j]
            );
        }
    }
}
