//! Products of a few rows by a weight stored in rows, `x Wᵀ` with `x` `[m ≤ 8, k]` and `W`
//! `[n, k]` (f32, CPU): a decoding step's products, one or a few answers at a time.
//!
//! Such a product is the weight read once: its time is memory, not arithmetic. The `gemm`
//! crate takes one row as a matrix-vector product at the memory's speed (about 30 GB/s on
//! the 2-core machine), but from two rows on it runs its blocked kernel, which took 2–3×
//! as long (0.57 against 0.17 ms for `[·, 1024] · [1024, 3072]`, 41 against 18.5 ms for
//! Qwen's LM head): decoding two answers together cost as much as two steps of one.
//! Here each weight row is read once and dotted with every input row while it is in the
//! registers, so `m` rows cost about what one does.
//!
//! Written with AVX2 intrinsics rather than as plain loops built per instruction set (as
//! `nn::activation`'s kernels are): built that way the compiler kept the accumulators in
//! memory, and 4 to 8 rows ran 1.4–10× slower than here (three versions tried).
//!
//! Every output element is a dot product computed on its own, in a fixed order (16 lanes,
//! then the lanes summed pairwise), whatever `m` and however the columns are split over
//! threads: a row's result does not depend on the other rows, nor on how many there are
//! (`nn::gemm::padded_rows` relies on it: a decoding step of up to 8 answers needs no
//! padding). For short rows (a LoRA B, `k` its rank) the lane sums are most of the work,
//! so eight outputs' sums are reduced together, the same additions in fewer instructions
//! (`[8, 16] · [16, 3072]` 42 against 63 µs), and a small product stays on the calling
//! thread.
//! With AVX2 and FMA (x86-64, checked at run time) each multiply-add is fused; elsewhere
//! plain arithmetic in the same order rounds twice, so results are the same on one
//! machine, not across machines. On the 2-core machine (AVX2), `[m, 1024] · [1024, 3072]`
//! took 0.16, 0.19, 0.32 and 0.63 ms for 1, 2, 4 and 8 rows (`gemm`: 0.17, 0.57, 0.60,
//! 0.66), the LM head 20.6, 22.0, 25.6 and 41.9 ms (`gemm`: 18.5, 41.3, 41.7, 43.9).

use rayon::prelude::*;

/// Most rows the kernel takes (its accumulators stay in registers).
pub const MAX_ROWS: usize = 8;

/// Rows up to this long have their reductions batched ([`reduce8`]).
const SHORT: usize = 64;

/// Products smaller than this many multiply-adds run on the calling thread: handing a
/// LoRA B product (`[8, 16] · [16, 3072]`) to rayon took about 25 µs, the product 2–40.
const SPLIT_WORK: usize = 1 << 20;

/// Lanes of each dot product's accumulator.
const LANES: usize = 16;

/// `x Wᵀ` for `x` `[m, k]` (rows contiguous, `1 ≤ m ≤ MAX_ROWS`) and `w` `[n, k]` (rows
/// contiguous), written by columns: element `(i, j)` at `j · m + i`.
///
/// # Panics
/// If `m` is out of range, `k` is 0 or the slices are shorter than `m × k` and `n × k`.
pub fn by_columns(x: &[f32], m: usize, w: &[f32], n: usize, k: usize) -> Vec<f32> {
    assert!((1..=MAX_ROWS).contains(&m) && k > 0 && x.len() >= m * k && w.len() >= n * k);
    let mut out = vec![0f32; n * m];
    if m * n * k < SPLIT_WORK {
        columns(x, m, &w[..n * k], k, &mut out);
        return out;
    }
    // blocks of columns: enough for every thread to get several, none too small to pay
    let threads = rayon::current_num_threads().max(1);
    let cols = n.div_ceil(threads * 8).clamp(16, 1024);
    out.par_chunks_mut(cols * m).enumerate().for_each(|(b, o)| {
        let j0 = b * cols;
        let w = &w[j0 * k..(j0 + o.len() / m) * k];
        columns(x, m, w, k, o);
    });
    out
}

/// `a · b` in the kernel's order (16 lanes summed pairwise, the ragged end after), fused
/// multiply-adds where the machine has AVX2 and FMA: a vectorised dot product whose result
/// does not depend on anything but its operands (decoding's attention scores).
///
/// # Panics
/// If the lengths differ.
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len(), "a dot product of two lengths");
    #[cfg(target_arch = "x86_64")]
    if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") {
        // SAFETY: the features are present; both slices hold `b.len()` elements
        return unsafe { dots_avx2(&[a], b) }[0];
    }
    dots_plain(&[a], b)[0]
}

/// One block of columns: `o[j · m + i] = x_i · w_j` for the block's weight rows `w`. Rows
/// go four at a time at most: more accumulators than that no longer fit the registers
/// (AVX2's sixteen hold four rows' 16 lanes), so five to eight rows are two groups, each
/// weight row read from memory once and from the cache for the second.
fn columns(x: &[f32], m: usize, w: &[f32], k: usize, o: &mut [f32]) {
    match m {
        1 => dispatch::<1, 0>(x, w, k, o),
        2 => dispatch::<2, 0>(x, w, k, o),
        3 => dispatch::<3, 0>(x, w, k, o),
        4 => dispatch::<4, 0>(x, w, k, o),
        5 => dispatch::<4, 1>(x, w, k, o),
        6 => dispatch::<4, 2>(x, w, k, o),
        7 => dispatch::<4, 3>(x, w, k, o),
        8 => dispatch::<4, 4>(x, w, k, o),
        _ => unreachable!("checked by by_columns"),
    }
}

/// The block with AVX2 and FMA where the machine has them (checked once per call), else
/// plain arithmetic; its rows in groups of `A` then `B`.
fn dispatch<const A: usize, const B: usize>(x: &[f32], w: &[f32], k: usize, o: &mut [f32]) {
    let first: [&[f32]; A] = std::array::from_fn(|i| &x[i * k..(i + 1) * k]);
    let second: [&[f32]; B] = std::array::from_fn(|i| &x[(A + i) * k..(A + i + 1) * k]);
    #[cfg(target_arch = "x86_64")]
    if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") {
        // SAFETY: the features are present; every row and weight row holds `k` elements
        return unsafe { block_avx2::<A, B>(&first, &second, w, k, o) };
    }
    for (wj, oj) in w.chunks_exact(k).zip(o.chunks_exact_mut(A + B)) {
        oj[..A].copy_from_slice(&dots_plain(&first, wj));
        oj[A..].copy_from_slice(&dots_plain(&second, wj));
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn block_avx2<const A: usize, const B: usize>(
    first: &[&[f32]; A],
    second: &[&[f32]; B],
    w: &[f32],
    k: usize,
    o: &mut [f32],
) {
    use std::arch::x86_64::*;
    let m = A + B;
    // short rows (a LoRA B's rank): the reductions are most of the cost, so eight weight
    // rows' sums are reduced together (`reduce8`), the same additions as one at a time
    let rows = (w.len() / k).min(o.len() / m);
    let batched = if k <= SHORT { rows / 8 * 8 } else { 0 };
    let (w8, w_rest) = w.split_at(batched * k);
    let (o8, o_rest) = o.split_at_mut(batched * m);
    for (w8, o8) in w8.chunks_exact(8 * k).zip(o8.chunks_exact_mut(8 * m)) {
        let mut s1 = [[_mm256_setzero_ps(); 8]; A];
        let mut s2 = [[_mm256_setzero_ps(); 8]; B];
        for (j, wj) in w8.chunks_exact(k).enumerate() {
            let a = sums_avx2(first, wj);
            for i in 0..A {
                s1[i][j] = a[i];
            }
            if B > 0 {
                let b = sums_avx2(second, wj);
                for i in 0..B {
                    s2[i][j] = b[i];
                }
            }
        }
        // each group's rows, their sums, and where they start in an output column
        for (rows, sums, at) in [(&first[..], &s1[..], 0), (&second[..], &s2[..], A)] {
            for (i, s) in sums.iter().enumerate() {
                let r = reduce8(s);
                for (j, wj) in w8.chunks_exact(k).enumerate() {
                    o8[j * m + at + i] = tail(rows[i], wj, r[j]);
                }
            }
        }
    }
    for (wj, oj) in w_rest.chunks_exact(k).zip(o_rest.chunks_exact_mut(m)) {
        oj[..A].copy_from_slice(&dots_avx2(first, wj));
        if B > 0 {
            oj[A..].copy_from_slice(&dots_avx2(second, wj));
        }
    }
}

/// `s` plus the products of the elements past the last full 16, in order, fused.
#[inline]
fn tail(x: &[f32], w: &[f32], mut s: f32) -> f32 {
    let full = w.len() / LANES * LANES;
    for e in full..w.len() {
        s = x[e].mul_add(w[e], s);
    }
    s
}

/// Each of eight 8-lane sums reduced as [`dots_avx2`] reduces one (`l + 4`, `+ 2`, `+ 1`),
/// the eight at once: the same additions of the same operands, so the same bits.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[inline]
unsafe fn reduce8(s: &[std::arch::x86_64::__m256; 8]) -> [f32; 8] {
    use std::arch::x86_64::*;
    // [s_a's 4 + 4 | s_b's 4 + 4]: each sum's halves added (`l + 4`), two sums a vector
    let halves = |a: __m256, b: __m256| {
        _mm256_add_ps(_mm256_permute2f128_ps::<0x20>(a, b), _mm256_permute2f128_ps::<0x31>(a, b))
    };
    let (u01, u23) = (halves(s[0], s[1]), halves(s[2], s[3]));
    let (u45, u67) = (halves(s[4], s[5]), halves(s[6], s[7]));
    // lanes `l + 2`: [0: 2, 2: 2 | 1: 2, 3: 2]
    let pairs = |c: __m256, d: __m256| {
        _mm256_add_ps(_mm256_shuffle_ps::<0x44>(c, d), _mm256_shuffle_ps::<0xEE>(c, d))
    };
    let (e, f) = (pairs(u01, u23), pairs(u45, u67));
    // lanes `l + 1`: [0, 2, 4, 6 | 1, 3, 5, 7]
    let r = _mm256_add_ps(_mm256_shuffle_ps::<0x88>(e, f), _mm256_shuffle_ps::<0xDD>(e, f));
    let mut v = [0f32; 8];
    _mm256_storeu_ps(v.as_mut_ptr(), r);
    [v[0], v[4], v[1], v[5], v[2], v[6], v[3], v[7]]
}

/// Each row's 16 lanes over the full blocks of 16 (fused multiply-adds), lane `l` holding
/// elements `l, l + 16, …`, then summed to 8 (`l + 8`).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[inline]
unsafe fn sums_avx2<const M: usize>(rows: &[&[f32]; M], w: &[f32]) -> [std::arch::x86_64::__m256; M] {
    use std::arch::x86_64::*;
    let k = w.len();
    let full = k / LANES * LANES;
    let mut lo = [_mm256_setzero_ps(); M];
    let mut hi = [_mm256_setzero_ps(); M];
    let mut c = 0;
    while c < full {
        let w0 = _mm256_loadu_ps(w.as_ptr().add(c));
        let w1 = _mm256_loadu_ps(w.as_ptr().add(c + 8));
        for i in 0..M {
            let p = rows[i].as_ptr().add(c);
            lo[i] = _mm256_fmadd_ps(_mm256_loadu_ps(p), w0, lo[i]);
            hi[i] = _mm256_fmadd_ps(_mm256_loadu_ps(p.add(8)), w1, hi[i]);
        }
        c += LANES;
    }
    std::array::from_fn(|i| _mm256_add_ps(lo[i], hi[i]))
}

/// `x_i · w` for each row with AVX2: lane `l` of 16 sums elements `l, l + 16, …` (fused
/// multiply-adds, [`sums_avx2`]), the lanes are summed pairwise (`l + 8`, then `+ 4`, `+ 2`,
/// `+ 1`), and the elements past the last full 16 are added after, fused.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[inline]
unsafe fn dots_avx2<const M: usize>(rows: &[&[f32]; M], w: &[f32]) -> [f32; M] {
    use std::arch::x86_64::*;
    let sums = sums_avx2(rows, w);
    std::array::from_fn(|i| {
        let s8 = sums[i];
        let s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps::<1>(s8));
        let s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
        let s1 = _mm_add_ss(s2, _mm_shuffle_ps::<1>(s2, s2));
        tail(rows[i], w, _mm_cvtss_f32(s1))
    })
}

/// [`dots_avx2`]'s order in plain arithmetic (each multiply and add rounded: the same
/// results as the FMA path within rounding, not bit for bit).
fn dots_plain<const M: usize>(rows: &[&[f32]; M], w: &[f32]) -> [f32; M] {
    let k = w.len();
    let full = k / LANES * LANES;
    let mut out = [0f32; M];
    for (o, row) in out.iter_mut().zip(rows) {
        let mut lanes = [0f32; LANES];
        for (xc, wc) in row[..full].chunks_exact(LANES).zip(w[..full].chunks_exact(LANES)) {
            for l in 0..LANES {
                lanes[l] += xc[l] * wc[l];
            }
        }
        let mut width = LANES;
        while width > 1 {
            width /= 2;
            for l in 0..width {
                lanes[l] += lanes[l + width];
            }
        }
        *o = (full..k).fold(lanes[0], |s, e| s + row[e] * w[e]);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    fn random(n: usize, seed: u64) -> Vec<f32> {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
        (0..n).map(|_| rng.gen_range(-1.0..1.0)).collect()
    }

    /// Against the products in f64, for every row count, a `k` with a ragged end and one
    /// without, and column counts that leave a ragged last block.
    #[test]
    fn few_rows_by_a_weight_are_the_products() {
        for (k, n) in [(16, 45), (50, 37), (64, 1000), (301, 2049)] {
            let w = random(n * k, 1);
            for m in 1..=MAX_ROWS {
                let x = random(m * k, 2 + m as u64);
                let got = by_columns(&x, m, &w, n, k);
                for j in 0..n {
                    for i in 0..m {
                        let want: f64 = (0..k).map(|e| x[i * k + e] as f64 * w[j * k + e] as f64).sum();
                        let d = (got[j * m + i] as f64 - want).abs();
                        assert!(d < 1e-4, "k {k} n {n} m {m} ({i}, {j}): {d}");
                    }
                }
            }
        }
    }

    /// The plain path (machines without AVX2 and FMA) against the products in f64, and
    /// against the AVX2 path within rounding where this machine has it.
    #[test]
    fn the_plain_path_computes_the_same_products() {
        let (k, n) = (301, 5);
        let w = random(n * k, 5);
        let x = random(3 * k, 6);
        let rows: [&[f32]; 3] = std::array::from_fn(|i| &x[i * k..(i + 1) * k]);
        for j in 0..n {
            let wj = &w[j * k..(j + 1) * k];
            let plain = dots_plain(&rows, wj);
            for i in 0..3 {
                let want: f64 = (0..k).map(|e| rows[i][e] as f64 * wj[e] as f64).sum();
                assert!((plain[i] as f64 - want).abs() < 1e-4, "({i}, {j})");
            }
            #[cfg(target_arch = "x86_64")]
            if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") {
                // SAFETY: the features are present
                let fused = unsafe { dots_avx2(&rows, wj) };
                for i in 0..3 {
                    assert!((plain[i] - fused[i]).abs() < 1e-4, "({i}, {j})");
                }
            }
        }
    }

    /// A row's bits do not depend on the other rows, on how many there are, or on the
    /// threads: the first row alone, among 8 others, and on 1 or 3 threads; for long rows
    /// and for short ones (a LoRA B's rank), whose sums are reduced eight weight rows at a
    /// time except at a block's ragged end (blocks of 563 columns here), and which run on
    /// the calling thread when the product is small (one row) and split when not (8 rows).
    #[test]
    fn a_rows_bits_do_not_depend_on_the_others_or_the_threads() {
        for (k, n) in [(300, 700), (16, 9001)] {
            let w = random(n * k, 3);
            let x = random(MAX_ROWS * k, 4);
            let first = |out: &[f32], m: usize| (0..n).map(|j| out[j * m].to_bits()).collect::<Vec<_>>();
            let alone = first(&by_columns(&x[..k], 1, &w, n, k), 1);
            for threads in [1, 3] {
                let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
                for m in [2, 5, MAX_ROWS] {
                    let mut other = x[..m * k].to_vec();
                    other[k..].copy_from_slice(&random((m - 1) * k, 9 + m as u64));
                    let got = pool.install(|| by_columns(&other, m, &w, n, k));
                    assert_eq!(first(&got, m), alone, "k {k}: {m} rows on {threads} threads");
                }
            }
        }
    }
}
