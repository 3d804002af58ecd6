use super::*;
use candle_core::{Device, D};
use rand::{Rng, SeedableRng};

/// `rows` random logit rows over `v` tokens, and a banned list with every 7th token from
/// the 3rd on banned.
fn logits(rows: usize, v: usize, seed: u64) -> (Tensor, Tensor) {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let x: Vec<f32> = (0..rows * v).map(|_| rng.gen_range(-4.0..4.0)).collect();
    let banned: Vec<f32> = (0..v).map(|i| if i % 7 == 3 { f32::NEG_INFINITY } else { 0.0 }).collect();
    (Tensor::from_vec(x, (rows, v), &Device::Cpu).unwrap(), Tensor::new(banned, &Device::Cpu).unwrap())
}

/// The row's log-probabilities as the eager path computes them.
fn log_softmax(x: &Tensor, banned: &Tensor, t: f64) -> Vec<Vec<f32>> {
    let z = (x.to_dtype(DType::F32).unwrap() / t).unwrap().broadcast_add(banned).unwrap();
    candle_nn::ops::log_softmax(&z, D::Minus1).unwrap().to_vec2().unwrap()
}

/// The inverse CDF in f64: the first token whose cumulative probability passes `u·total`.
fn host(lp: &[f32], u: f32) -> usize {
    let total: f64 = lp.iter().map(|x| (*x as f64).exp()).sum();
    let mut acc = 0.0f64;
    for (i, x) in lp.iter().enumerate() {
        acc += (*x as f64).exp();
        if acc > u as f64 * total {
            return i;
        }
    }
    unreachable!("u < 1")
}

fn run(x: &Tensor, banned: &Tensor, t: f64, pick: Pick) -> (Vec<u32>, Vec<f32>) {
    let (tok, both) = draw(x, banned, t, pick).unwrap();
    let both = both.to_vec2::<f32>().unwrap();
    assert!(both.iter().zip(tok.to_vec1::<u32>().unwrap()).all(|(b, t)| b[0] == t as f32), "tokens twice");
    (tok.to_vec1().unwrap(), both.iter().map(|b| b[1]).collect())
}

#[test]
fn draws_are_the_inverse_cdf_never_banned_with_their_log_softmax() {
    for (v, seed, t) in [(5, 1, 1.0), (1024, 2, 0.7), (3000, 3, 1.5), (151_936, 4, 1.0)] {
        let (x, banned) = logits(3, v, seed);
        let lp = log_softmax(&x, &banned, t);
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
        for _ in 0..20 {
            let u: Vec<f32> = (0..3).map(|_| rng.gen()).collect();
            let (tok, got) = run(&x, &banned, t, Pick::Sample(&u));
            for r in 0..3 {
                let k = tok[r] as usize;
                assert!(k < v && lp[r][k].is_finite(), "V={v}: drew {k}, banned or past the end");
                let want = host(&lp[r], u[r]);
                let cdf = |n: usize| lp[r][..n].iter().map(|x| (*x as f64).exp()).sum::<f64>();
                let near = (cdf(k.min(want)) - cdf(k.max(want))).abs() < 1e-5;
                assert!(k == want || near, "V={v} u={}: drew {k}, the inverse CDF is {want}", u[r]);
                assert!((got[r] - lp[r][k]).abs() < 1e-5, "V={v}: log-prob {} against {}", got[r], lp[r][k]);
            }
        }
    }
}

#[test]
fn greedy_takes_the_first_most_probable_token() {
    let (x, banned) = logits(4, 2000, 7);
    let lp = log_softmax(&x, &banned, 1.0);
    let (tok, got) = run(&x, &banned, 1.0, Pick::Greedy);
    for r in 0..4 {
        let best = lp[r].iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let first = lp[r].iter().position(|&l| l == best).unwrap();
        assert_eq!(tok[r] as usize, first);
        assert!((got[r] - best).abs() < 1e-5);
    }
    // ties: the first of equals, also when a banned token would have been larger
    let x = Tensor::new(&[[1f32, 3.0, 3.0, 9.0]], &Device::Cpu).unwrap();
    let banned = Tensor::new(&[0f32, 0.0, 0.0, f32::NEG_INFINITY], &Device::Cpu).unwrap();
    assert_eq!(run(&x, &banned, 1.0, Pick::Greedy).0, [1]);
}

#[test]
fn extreme_draws_stay_on_tokens_with_mass() {
    let (x, banned) = logits(2, 2500, 9);
    let lp = log_softmax(&x, &banned, 1.0);
    for u in [0.0f32, 1.0 - f32::EPSILON, 0.999_999_9] {
        let (tok, _) = run(&x, &banned, 1.0, Pick::Sample(&[u, u]));
        for r in 0..2 {
            assert!(lp[r][tok[r] as usize].is_finite(), "u={u}: a banned token");
        }
    }
    // one token holds all the mass
    let x = Tensor::zeros((1, 3000), DType::F32, &Device::Cpu).unwrap();
    let mut only = vec![f32::NEG_INFINITY; 3000];
    only[2047] = 0.0;
    let banned = Tensor::new(only, &Device::Cpu).unwrap();
    for u in [0.0f32, 0.5, 1.0 - f32::EPSILON] {
        let (tok, lp) = run(&x, &banned, 1.0, Pick::Sample(&[u]));
        assert_eq!((tok[0], lp[0]), (2047, 0.0));
    }
}

#[test]
fn a_rows_draw_does_not_depend_on_the_other_rows() {
    let (x, banned) = logits(6, 4000, 5);
    let u = [0.1f32, 0.5, 0.93, 0.0001, 0.77, 0.4];
    let together = run(&x, &banned, 1.3, Pick::Sample(&u));
    for r in 0..6 {
        let alone = run(&x.narrow(0, r, 1).unwrap(), &banned, 1.3, Pick::Sample(&u[r..=r]));
        assert_eq!((alone.0[0], alone.1[0].to_bits()), (together.0[r], together.1[r].to_bits()), "row {r}");
    }
}

#[test]
fn frequencies_follow_the_probabilities_and_bf16_logits_draw_alike() {
    // three tokens with mass 0.2, 0.3, 0.5 far apart in a vocabulary of 3000
    let mut x = vec![-1e4f32; 3000];
    for (t, p) in [(10, 0.2f32), (1500, 0.3), (2999, 0.5)] {
        x[t] = p.ln();
    }
    let x = Tensor::from_vec(x, (1, 3000), &Device::Cpu).unwrap();
    let banned = Tensor::zeros(3000, DType::F32, &Device::Cpu).unwrap();
    let mut counts = std::collections::HashMap::new();
    for k in 0..1000 {
        let u = (k as f32 + 0.5) / 1000.0;
        *counts.entry(run(&x, &banned, 1.0, Pick::Sample(&[u])).0[0]).or_insert(0) += 1;
    }
    assert_eq!((counts[&10], counts[&1500], counts[&2999]), (200, 300, 500), "{counts:?}");
    // bf16 logits are read as their values
    let (x, banned) = logits(2, 3000, 11);
    let xb = x.to_dtype(DType::BF16).unwrap();
    let lp = log_softmax(&xb, &banned, 1.0);
    let (tok, got) = run(&xb, &banned, 1.0, Pick::Sample(&[0.3, 0.8]));
    for r in 0..2 {
        assert!((got[r] - lp[r][tok[r] as usize]).abs() < 1e-5);
    }
}

#[test]
fn bad_inputs_are_errors_that_say_what() {
    let (x, banned) = logits(2, 10, 1);
    let e = draw(&x, &banned, 1.0, Pick::Sample(&[0.5])).unwrap_err().to_string();
    assert!(e.contains("1 draws for 2 rows"), "{e}");
    let e = draw(&x, &banned.narrow(0, 0, 9).unwrap(), 1.0, Pick::Greedy).unwrap_err().to_string();
    assert!(e.contains("want [10] f32"), "{e}");
    let e = draw(&x, &banned, 0.0, Pick::Greedy).unwrap_err().to_string();
    assert!(e.contains("temperature 0"), "{e}");
}
