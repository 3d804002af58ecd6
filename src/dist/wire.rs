//! Byte layouts of the collectives: lists of byte strings, and f32/f64 vectors
//! (little-endian), summed in rank order.

use anyhow::{ensure, Context};

/// `[u64 count]{[u64 len][bytes]}`.
pub fn join(parts: &[Vec<u8>]) -> Vec<u8> {
    let mut out = Vec::with_capacity(8 + parts.iter().map(|p| p.len() + 8).sum::<usize>());
    out.extend_from_slice(&(parts.len() as u64).to_le_bytes());
    for p in parts {
        out.extend_from_slice(&(p.len() as u64).to_le_bytes());
        out.extend_from_slice(p);
    }
    out
}

/// The inverse of [`join`].
pub fn split(bytes: &[u8]) -> anyhow::Result<Vec<Vec<u8>>> {
    let mut r = Reader(bytes);
    let n = r.u64()? as usize;
    (0..n).map(|_| r.bytes()).collect()
}

/// A cursor over bytes.
pub struct Reader<'a>(pub &'a [u8]);

impl<'a> Reader<'a> {
    /// The next `n` bytes.
    pub fn take(&mut self, n: usize) -> anyhow::Result<&'a [u8]> {
        ensure!(self.0.len() >= n, "truncated: {} bytes wanted, {} left", n, self.0.len());
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }

    /// A little-endian u64.
    pub fn u64(&mut self) -> anyhow::Result<u64> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().context("8 bytes")?))
    }

    /// A length-prefixed byte string.
    pub fn bytes(&mut self) -> anyhow::Result<Vec<u8>> {
        let n = self.u64()? as usize;
        Ok(self.take(n)?.to_vec())
    }
}

pub fn f32_bytes(xs: &[f32]) -> Vec<u8> {
    xs.iter().flat_map(|x| x.to_le_bytes()).collect()
}

pub fn f64_bytes(xs: &[f64]) -> Vec<u8> {
    xs.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// Element-wise sums of equally long vectors, rank 0's first.
fn sum<const N: usize>(parts: &[Vec<u8>], add: impl Fn(&mut [u8], &[u8])) -> Result<Vec<u8>, String> {
    let len = parts[0].len();
    if let Some((r, p)) = parts.iter().enumerate().find(|(_, p)| p.len() != len) {
        return Err(format!(
            "rank {r} sent {} values to sum, rank 0 {}: the ranks disagree on the model's shape",
            p.len() / N,
            len / N
        ));
    }
    let mut acc = parts[0].clone();
    for p in &parts[1..] {
        for (a, b) in acc.chunks_exact_mut(N).zip(p.chunks_exact(N)) {
            add(a, b);
        }
    }
    Ok(acc)
}

pub fn sum_f32(parts: &[Vec<u8>]) -> Result<Vec<u8>, String> {
    sum::<4>(parts, |a, b| {
        let s = f32::from_le_bytes(a.try_into().expect("4")) + f32::from_le_bytes(b.try_into().expect("4"));
        a.copy_from_slice(&s.to_le_bytes());
    })
}

pub fn sum_f64(parts: &[Vec<u8>]) -> Result<Vec<u8>, String> {
    sum::<8>(parts, |a, b| {
        let s = f64::from_le_bytes(a.try_into().expect("8")) + f64::from_le_bytes(b.try_into().expect("8"));
        a.copy_from_slice(&s.to_le_bytes());
    })
}

pub fn read_f32(bytes: &[u8], xs: &mut [f32]) -> anyhow::Result<()> {
    ensure!(bytes.len() == xs.len() * 4, "a sum of {} bytes for {} values", bytes.len(), xs.len());
    for (x, b) in xs.iter_mut().zip(bytes.chunks_exact(4)) {
        *x = f32::from_le_bytes(b.try_into().expect("4"));
    }
    Ok(())
}

pub fn read_f64(bytes: &[u8], xs: &mut [f64]) -> anyhow::Result<()> {
    ensure!(bytes.len() == xs.len() * 8, "a sum of {} bytes for {} values", bytes.len(), xs.len());
    for (x, b) in xs.iter_mut().zip(bytes.chunks_exact(8)) {
        *x = f64::from_le_bytes(b.try_into().expect("8"));
    }
    Ok(())
}
