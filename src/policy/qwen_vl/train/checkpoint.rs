//! Gradient checkpointing per decoder layer (`[model] gradient_checkpointing`).
//!
//! candle has none built in. A checkpointed layer's forward runs outside the graph (the
//! input detached, the adapters' A and B detached), so none of its activations are kept;
//! its output is attached to the graph by a custom op over the layer's input and one of its
//! trainable tensors. The op's backward recomputes the layer with the input as a fresh
//! `Var`, under the same training-pass state (the same dropout masks, the same adapter
//! weights), back-propagates the output's gradient through it, returns the input's
//! gradient and adds the layer's adapter gradients to the model's side gradient store.
//! The policy merges that store into the main gradients (`TrainablePolicy::gradients`)
//! before the optimizer sees them.
//!
//! Peak memory then holds one layer's activations at a time plus each layer's input; the
//! price is a second forward of every layer.

use super::lora::{AdapterSwitch, AdapterUse, LoraAdapter};
use super::train_pass::{PassState, TrainPass};
use crate::nn::attach::{attach2, attach3};
use anyhow::{bail, Result};
use candle_core::{Tensor, Var};
use std::sync::Arc;

/// A layer's forward on its input and, over a shared prefix, the prefix's keys and values
/// stacked `[2, 1, kv_heads, P, D]`; everything else (weights, rope tables, mask) captured.
pub(crate) type LayerFn = Arc<dyn Fn(&Tensor, Option<&Tensor>) -> Result<Tensor> + Send + Sync>;

/// `layer` on `x` `[B, T, H]` (after a shared prefix's keys and values `prefix_kv`, which
/// get their gradient too), checkpointed (see the module docs). `layer_adapters` are the
/// layer's LoRA adapters, whose live A and B are its trainable tensors; `layer` runs the
/// plain forward, with no cache.
pub(crate) fn checkpointed(
    pass: &TrainPass,
    layer_adapters: &[&LoraAdapter],
    x: &Tensor,
    prefix_kv: Option<&Tensor>,
    layer: LayerFn,
) -> Result<Tensor> {
    let state = PassState { no_grad: false, ..pass.get() };
    let out = {
        let _no_grad = pass.enter(PassState { no_grad: true, ..state });
        layer(&x.detach(), prefix_kv.map(Tensor::detach).as_ref())?
    };
    if out.track_op() {
        bail!(
            "gradient checkpointing: a decoder layer holds a weight trained whole; only adapters can be \
             trained inside a checkpointed layer"
        );
    }
    let switch = layer_adapters.first().map(|a| a.switch().clone());
    let adapters = switch.map(|s| {
        let u = s.get();
        (s, u)
    });
    // the live adapters' A and B are the layer's trainable tensors (snapshot weights are not Vars)
    let vars: Vec<Tensor> = match &adapters {
        Some((_, AdapterUse::Live)) => {
            layer_adapters.iter().flat_map(|a| [a.a.as_tensor().clone(), a.b.as_tensor().clone()]).collect()
        }
        _ => Vec::new(),
    };
    // The op hangs on a trainable tensor too, so that it is in the graph even when its input
    // is not (the first layer over frozen embeddings).
    let anchor = vars.first().cloned().unwrap_or_else(|| x.clone());
    let ck = Checkpoint { layer, pass: pass.clone(), state, adapters, vars };
    // the output is handed over as the node's forward; its backward recomputes the layer
    let failed = |e: anyhow::Error| candle_core::Error::Msg(format!("{e:#}"));
    Ok(match prefix_kv {
        None => attach2([x, &anchor], out, "checkpointed-decoder-layer", move |[x, _anchor], grad| {
            let (dx, _) = ck.recompute(x, None, grad).map_err(failed)?;
            Ok((dx, None))
        })?,
        Some(kv) => attach3([x, kv, &anchor], out, "checkpointed-decoder-layer", move |[x, kv, _], grad| {
            let (dx, dkv) = ck.recompute(x, Some(kv), grad).map_err(failed)?;
            Ok((dx, dkv, None))
        })?,
    })
}

/// What the node's backward needs to recompute the layer.
struct Checkpoint {
    layer: LayerFn,
    pass: TrainPass,
    /// The training-pass state of the forward (its dropout key).
    state: PassState,
    /// The adapters' switch and the weights it selected in the forward.
    adapters: Option<(AdapterSwitch, AdapterUse)>,
    /// The layer's trainable tensors.
    vars: Vec<Tensor>,
}

impl Checkpoint {
    /// The gradients of the input and of the prefix's keys and values (each when in the
    /// graph), after adding the layer's adapter gradients to the side store.
    fn recompute(
        &self,
        x: &Tensor,
        kv: Option<&Tensor>,
        grad: &Tensor,
    ) -> Result<(Option<Tensor>, Option<Tensor>)> {
        let _state = self.pass.enter(self.state);
        let _use = self.adapters.as_ref().map(|(s, u)| s.scope(u.clone()));
        let result = (|| -> Result<(Option<Tensor>, Option<Tensor>)> {
            // a fresh leaf for each input the graph wants a gradient of
            let leaf = |t: &Tensor| -> Result<Tensor> {
                Ok(if t.track_op() { Var::from_tensor(&t.detach())?.as_tensor().clone() } else { t.detach() })
            };
            let input = leaf(x)?;
            let kv_in = kv.map(leaf).transpose()?;
            let out = (self.layer)(&input, kv_in.as_ref())?;
            let grads = (out * grad.detach())?.sum_all()?.backward()?;
            for v in &self.vars {
                if let Some(g) = grads.get(v) {
                    self.pass.add_side_grad(v.id(), g.clone())?;
                }
            }
            let dx = if x.track_op() { grads.get(&input).cloned() } else { None };
            let dkv = match (kv, &kv_in) {
                (Some(k), Some(leaf)) if k.track_op() => grads.get(leaf).cloned(),
                _ => None,
            };
            Ok((dx, dkv))
        })();
        result
    }
}
