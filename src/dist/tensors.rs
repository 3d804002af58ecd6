//! Tensors across ranks: gradients summed, weights sent from rank 0, weights compared.
//! Each moves as one flat f32 vector (one device-to-host copy, not one per variable); with
//! NCCL (the `nccl` feature), gradients on a GPU are summed there and never leave it.

use super::ProcessGroup;
use candle_core::backprop::GradStore;
use candle_core::{DType, Tensor, Var};

/// All of `ts` flattened to one f32 vector on the host.
fn flat_host(ts: &[Tensor]) -> candle_core::Result<Vec<f32>> {
    if ts.is_empty() {
        return Ok(Vec::new());
    }
    let flat: Vec<Tensor> =
        ts.iter().map(|t| t.flatten_all()?.to_dtype(DType::F32)).collect::<candle_core::Result<_>>()?;
    Tensor::cat(&flat, 0)?.to_vec1::<f32>()
}

/// `xs` cut back into tensors shaped, typed and placed like `like`.
fn unflatten(xs: Vec<f32>, like: &[&Tensor]) -> candle_core::Result<Vec<Tensor>> {
    let Some(first) = like.first() else { return Ok(Vec::new()) };
    let n = xs.len();
    split_like(&Tensor::from_vec(xs, n, first.device())?, like)
}

/// The flat tensor `all` cut into tensors shaped and typed like `like`.
fn split_like(all: &Tensor, like: &[&Tensor]) -> candle_core::Result<Vec<Tensor>> {
    let mut at = 0;
    like.iter()
        .map(|t| {
            let k = t.elem_count();
            let part = all.narrow(0, at, k)?.reshape(t.shape())?.to_dtype(t.dtype());
            at += k;
            part
        })
        .collect()
}

/// A gradient store with no variable's gradient: what a rank without rows in a minibatch
/// brings to [`all_reduce_grads`].
pub fn no_gradients() -> candle_core::Result<GradStore> {
    Tensor::zeros((), DType::F32, &candle_core::Device::Cpu)?.backward()
}

/// Sum the gradients of `vars` over the ranks, in place. A variable that has a gradient on
/// no rank keeps none (the optimizer leaves it alone, as it would in one process); one that
/// has a gradient on some rank gets the sum, a missing one counting as zero.
pub fn all_reduce_grads(pg: &ProcessGroup, grads: &mut GradStore, vars: &[Var]) -> anyhow::Result<()> {
    let mut present: Vec<f32> =
        vars.iter().map(|v| f32::from(u8::from(grads.get(v.as_tensor()).is_some()))).collect();
    let values: Vec<Tensor> = vars
        .iter()
        .map(|v| match grads.get(v.as_tensor()) {
            Some(g) => Ok(g.clone()),
            None => v.as_tensor().zeros_like(),
        })
        .collect::<candle_core::Result<_>>()?;
    let like: Vec<&Tensor> = vars.iter().map(Var::as_tensor).collect();
    let (present, summed) = match sum_on_device(pg, &present, &values)? {
        Some((present, summed)) => (present, split_like(&summed, &like)?),
        None => {
            let mut flat = flat_host(&values)?;
            present.append(&mut flat);
            pg.all_reduce_f32(&mut present)?;
            let summed = present.split_off(vars.len());
            (present, unflatten(summed, &like)?)
        }
    };
    for ((v, g), p) in vars.iter().zip(summed).zip(present) {
        if p > 0.0 {
            grads.insert(v.as_tensor(), g);
        } else {
            grads.remove(v.as_tensor());
        }
    }
    Ok(())
}

/// The presence flags and the gradients summed on their GPU (NCCL), as one flat vector with
/// the flags first; `None` where the group sums through the host.
fn sum_on_device(
    pg: &ProcessGroup,
    present: &[f32],
    values: &[Tensor],
) -> anyhow::Result<Option<(Vec<f32>, Tensor)>> {
    let Some(first) = values.first() else { return Ok(None) };
    if !pg.sums_on(first.device()) {
        return Ok(None);
    }
    let mut parts = vec![Tensor::new(present, first.device())?];
    for v in values {
        parts.push(v.flatten_all()?.to_dtype(DType::F32)?);
    }
    let Some(sum) = pg.sum_on_device(&Tensor::cat(&parts, 0)?)? else { return Ok(None) };
    let n = present.len();
    let flags = sum.narrow(0, 0, n)?.to_vec1::<f32>()?;
    Ok(Some((flags, sum.narrow(0, n, sum.dim(0)? - n)?)))
}

/// Set `vars` on every rank to rank 0's values.
pub fn broadcast_vars(pg: &ProcessGroup, vars: &[Var]) -> anyhow::Result<()> {
    let tensors: Vec<Tensor> = vars.iter().map(|v| v.as_tensor().clone()).collect();
    let mine = if pg.is_root() { super::wire::f32_bytes(&flat_host(&tensors)?) } else { Vec::new() };
    let bytes = pg.broadcast(mine)?;
    if pg.is_root() {
        return Ok(());
    }
    let mut xs = vec![0f32; bytes.len() / 4];
    super::wire::read_f32(&bytes, &mut xs)?;
    let want: usize = vars.iter().map(|v| v.elem_count()).sum();
    anyhow::ensure!(xs.len() == want, "rank 0 sent {} weights, this rank's model has {want}", xs.len());
    let like: Vec<&Tensor> = vars.iter().map(Var::as_tensor).collect();
    for (v, t) in vars.iter().zip(unflatten(xs, &like)?) {
        v.set(&t)?;
    }
    Ok(())
}

/// A digest of `vars`' exact values (names, shapes and bits).
pub fn digest(vars: &[(String, Var)]) -> anyhow::Result<u64> {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    let tensors: Vec<Tensor> = vars.iter().map(|(_, v)| v.as_tensor().clone()).collect();
    for (n, v) in vars {
        n.hash(&mut h);
        v.dims().hash(&mut h);
    }
    for x in flat_host(&tensors)? {
        x.to_bits().hash(&mut h);
    }
    Ok(h.finish())
}

/// Whether every rank holds the same `vars`; where they do not, rank 0's are sent to all
/// (and the ranks that differed are named in the returned list).
pub fn keep_in_step(pg: &ProcessGroup, vars: &[(String, Var)]) -> anyhow::Result<Vec<usize>> {
    let mine = digest(vars)?.to_le_bytes().to_vec();
    let all = pg.all_gather(Ok(mine))?;
    let differing: Vec<usize> = (1..all.len()).filter(|&r| all[r] != all[0]).collect();
    if !differing.is_empty() {
        let plain: Vec<Var> = vars.iter().map(|(_, v)| v.clone()).collect();
        broadcast_vars(pg, &plain)?;
    }
    Ok(differing)
}
