//! guirl's own CUDA kernels, each launch described without a device.
//!
//! An op with a kernel (decoding's attention, draw, layer steps and few-rows products; LoRA
//! dropout's masks) says how to launch it as a [`Launch`]: the source, the entry point,
//! the grid, the arguments in order and the output. [`cuda`] compiles the source with
//! NVRTC and runs the launch on a card. In the tests `host` compiles the same source for
//! the CPU under an emulation of CUDA's threads (a thread per CUDA thread, barriers for
//! `__syncthreads` and the warp shuffles, AddressSanitizer on every buffer) and runs the
//! same launch there: the kernels' arithmetic, indexing and launch shapes are checked
//! where no GPU is. In the `cuda` build `fit` assembles each kernel for the card and checks
//! that its blocks fit a multiprocessor. What only a card shows stays for the GPU tests: its memory model, its
//! math library's last bits, its speed.

#[cfg(feature = "cuda")]
pub(crate) mod cuda;
#[cfg(all(test, feature = "cuda"))]
pub(crate) mod fit;
#[cfg(test)]
pub(crate) mod host;

use candle_core::{Layout, Result, Shape, Tensor};

/// The element access every kernel source shares (bf16 as its bits, read and written
/// through f32), put in front of each source.
pub(crate) const ELEMS: &str = include_str!("elems.cuh");

/// An element type a kernel reads or writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Elem {
    F32,
    /// bf16, which the kernels handle as its bits (`unsigned short`).
    BF16,
    U32,
}

impl Elem {
    /// The element type of `dtype`, or an error naming the op (`what`).
    #[cfg(test)]
    pub(crate) fn of(dtype: candle_core::DType, what: &str) -> Result<Elem> {
        match dtype {
            candle_core::DType::F32 => Ok(Elem::F32),
            candle_core::DType::BF16 => Ok(Elem::BF16),
            candle_core::DType::U32 => Ok(Elem::U32),
            d => candle_core::bail!(
                "{what} on CUDA: {d:?} is not supported (f32 or bf16): set model.decode_kernels = \"eager\""
            ),
        }
    }

    /// The type a kernel source names it by.
    pub(crate) fn c_type(self) -> &'static str {
        match self {
            Elem::F32 => "float",
            Elem::BF16 => "unsigned short",
            Elem::U32 => "unsigned int",
        }
    }

    /// The suffix of the entry points compiled for it (`decode_swiglu_bf16`).
    pub(crate) fn suffix(self) -> &'static str {
        match self {
            Elem::F32 => "f32",
            Elem::BF16 => "bf16",
            Elem::U32 => "u32",
        }
    }

    /// Bytes an element.
    pub(crate) fn size(self) -> usize {
        match self {
            Elem::BF16 => 2,
            Elem::F32 | Elem::U32 => 4,
        }
    }
}

/// One argument of a launch, in the entry point's order.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Arg {
    /// The op's `i`-th input (its arguments, then what it holds): a pointer to its data
    /// from its layout's start offset.
    Input(usize),
    /// The output buffer.
    Out,
    I32(i32),
    I64(i64),
    U64(u64),
    F32(f32),
}

/// One kernel launch: what to compile, where to enter, how many threads, what to pass.
#[derive(Debug, Clone)]
pub(crate) struct Launch {
    /// A name unique to the source (NVRTC's module; each is compiled once per process).
    pub module: String,
    /// The text before the kernel's `.cu` file (after [`ELEMS`]): its defines.
    pub defines: String,
    /// The `.cu` file. Kept apart from `defines` so that a launch copies no source: the
    /// text is put together only where it is compiled ([`Launch::text`]).
    pub file: &'static str,
    pub entry: String,
    pub grid: (u32, u32, u32),
    /// Threads a block (one dimension).
    pub block: u32,
    /// Bytes of dynamic shared memory a block.
    pub shared: u32,
    pub args: Vec<Arg>,
    /// The output's element type, its length in elements (the kernel writes every one)
    /// and the shape the op returns.
    pub out: (Elem, usize, Shape),
}

impl Launch {
    /// The source to compile, after [`ELEMS`]: the defines, then the file.
    pub(crate) fn text(&self) -> String {
        format!("{}{}", self.defines, self.file)
    }
}

/// An op whose forward on CUDA is one launch of its own kernel.
pub(crate) trait Kernel {
    /// The tensors the op holds that its kernel reads, after its own arguments.
    fn held(&self) -> Vec<Tensor> {
        Vec::new()
    }

    /// The launch for `inputs`: the op's arguments, then [`Kernel::held`], each with its
    /// element type and layout. Refuses what the kernel cannot take, saying what to do.
    fn launch(&self, inputs: &[(Elem, &Layout)]) -> Result<Launch>;
}

/// An error unless `l` is contiguous (`what` names the tensor in it).
pub(crate) fn need_contiguous(l: &Layout, what: &str) -> Result<()> {
    if l.is_contiguous() {
        Ok(())
    } else {
        candle_core::bail!("{what} must be contiguous")
    }
}

/// An error unless every input has the first one's element type.
pub(crate) fn one_elem(inputs: &[(Elem, &Layout)], what: &str) -> Result<Elem> {
    let e = inputs[0].0;
    match e {
        Elem::F32 | Elem::BF16 if inputs.iter().all(|(x, _)| *x == e) => Ok(e),
        _ => candle_core::bail!(
            "{what} on CUDA: f32 or bf16 tensors, all of one dtype: set model.decode_kernels = \"eager\""
        ),
    }
}
