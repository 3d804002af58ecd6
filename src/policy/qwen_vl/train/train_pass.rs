//! What a model's forward does only in a training pass (the scoring pass of an update):
//! LoRA dropout and per-layer gradient checkpointing.
//!
//! One [`TrainPass`] is shared by a model's decoder and all its adapters. The policy sets
//! it for the length of a training pass and puts it back after, so rollouts, evaluation and
//! the KL reference's pass never see it. The state is the thread's: a collection running on
//! another thread during an update (an overlapped run) never sees the update's pass. Dropout masks are drawn from the pass's key (the
//! run's seed and the update step, see `train::seeds::pass_key`) and the adapter's own id
//! ([`crate::nn::dropout::keyed_mask`], on the model's device), never from a global
//! generator: the same run gives the same masks, and a checkpointed
//! layer's recomputation in the backward pass draws exactly the masks its forward drew.

use candle_core::{backprop::GradStore, Tensor, TensorId};
use rand::RngCore;
use std::cell::RefCell;
use std::collections::HashMap;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// The state of a training pass (the default: not one).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PassState {
    /// The key of this forward's dropout masks; `None`: no dropout (not a training pass).
    pub dropout_key: Option<u64>,
    /// Run each decoder layer outside the graph and recompute it in the backward pass.
    pub checkpoint: bool,
    /// Adapters use detached copies of A and B: a checkpointed layer's forward, which must
    /// build no graph, and decoding, which needs none.
    pub no_grad: bool,
}

/// A model's training-pass state (per thread), and the gradients its checkpointed layers
/// computed outside the main graph.
#[derive(Clone, Default)]
pub struct TrainPass(Arc<Shared>);

struct Shared {
    /// This model's key in each thread's states.
    id: u64,
    /// Gradients of trainable tensors, by id, accumulated by the checkpointed layers'
    /// backward (see [`TrainPass::merge_into`]).
    side: Mutex<HashMap<TensorId, Tensor>>,
}

impl Default for Shared {
    fn default() -> Self {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        Shared { id: NEXT.fetch_add(1, Ordering::Relaxed), side: Mutex::default() }
    }
}

thread_local! {
    /// Each model's pass state on this thread (absent: not a training pass).
    static STATES: RefCell<HashMap<u64, PassState>> = RefCell::new(HashMap::new());
}

impl TrainPass {
    /// The state in force on this thread.
    pub fn get(&self) -> PassState {
        STATES.with(|m| m.borrow().get(&self.0.id).copied()).unwrap_or_default()
    }

    /// Put `state` in force on this thread until the guard is dropped (then the previous
    /// one again).
    pub fn enter(&self, state: PassState) -> PassGuard {
        let previous = STATES.with(|m| m.borrow_mut().insert(self.0.id, state)).unwrap_or_default();
        PassGuard { id: self.0.id, previous, _thread: PhantomData }
    }

    /// Add `grad` to the side gradient of the tensor `id`.
    pub(crate) fn add_side_grad(&self, id: TensorId, grad: Tensor) -> candle_core::Result<()> {
        let mut side = self.0.side.lock().expect("side gradients");
        let sum = match side.remove(&id) {
            Some(g) => (g + grad)?,
            None => grad,
        };
        side.insert(id, sum);
        Ok(())
    }

    /// Forget side gradients left from a backward pass that was never merged.
    pub fn clear_side_grads(&self) {
        self.0.side.lock().expect("side gradients").clear();
    }

    /// Move the side gradients of `vars` into `grads` (added to what the main graph gave
    /// them). Gradients of tensors not in `vars` are dropped.
    pub fn merge_into(&self, grads: &mut GradStore, vars: &[Tensor]) -> candle_core::Result<()> {
        let mut side = std::mem::take(&mut *self.0.side.lock().expect("side gradients"));
        for v in vars {
            if let Some(g) = side.remove(&v.id()) {
                let sum = match grads.remove(v) {
                    Some(main) => (main + g)?,
                    None => g,
                };
                grads.insert(v, sum);
            }
        }
        Ok(())
    }
}

/// Restores the previous [`PassState`] when dropped. It belongs to its thread (not `Send`).
pub struct PassGuard {
    id: u64,
    previous: PassState,
    _thread: PhantomData<*const ()>,
}

impl Drop for PassGuard {
    fn drop(&mut self) {
        STATES.with(|m| m.borrow_mut().insert(self.id, self.previous));
    }
}

/// The key of sample `index`'s forward within a pass keyed `pass`.
pub fn sample_key(pass: u64, index: usize) -> u64 {
    crate::policy::trainable::stream_rng(pass, index as u64).next_u64()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_guard_restores_the_previous_state() {
        let pass = TrainPass::default();
        {
            let _g = pass.enter(PassState { dropout_key: Some(3), checkpoint: true, no_grad: false });
            assert_eq!(pass.get().dropout_key, Some(3));
            {
                let _h = pass.enter(PassState { no_grad: true, ..pass.get() });
                assert!(pass.get().no_grad && pass.get().checkpoint);
            }
            assert!(!pass.get().no_grad);
        }
        assert_eq!(pass.get(), PassState::default());
    }

    /// A collection on another thread during an update never sees the update's pass, nor
    /// one model's pass another model's.
    #[test]
    fn a_pass_is_its_threads_and_its_models() {
        let (pass, other) = (TrainPass::default(), TrainPass::default());
        let state = PassState { dropout_key: Some(9), checkpoint: true, no_grad: true };
        let _g = pass.enter(state);
        assert_eq!(pass.get(), state);
        assert_eq!(other.get(), PassState::default(), "another model");
        let seen = std::thread::scope(|s| s.spawn(|| pass.get()).join().unwrap());
        assert_eq!(seen, PassState::default(), "another thread");
    }
}
