//! A [`Launch`] on the host, for the tests: the kernel's own source compiled as C++ under
//! `host.h` (CUDA's threads as OS threads, its barriers and warp shuffles emulated), with
//! AddressSanitizer and UndefinedBehaviorSanitizer, fed the same arguments a card gets.
//!
//! It checks what a kernel computes and where it reads and writes: the sums, the indexing,
//! the launch's grid and arguments (a pointer of the wrong element type does not compile),
//! reads past a buffer, every output element written. [`run_for_races`] builds the same
//! program under ThreadSanitizer instead: memory one thread of a block writes and another
//! reads with no barrier between. Not what only a card shows: its memory model beyond
//! that, its math library's last bits (`expf` is the host's), its speed.
//!
//! The program is compiled once per source, argument list and check into the temporary
//! folder (`c++`, or `$CXX`: C++20, as `scripts/setup.sh` installs).

use super::{Arg, Elem, Kernel, Launch, ELEMS};
use candle_core::{CpuStorage, Device, Layout, Result, Storage, Tensor};
use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const SHIM: &str = include_str!("host.h");

/// How long a launch may run before it counts as hung (a barrier some thread never
/// reaches).
const HUNG: Duration = Duration::from_secs(300);

/// What a host program is built to catch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Check {
    /// Reads and writes past a buffer, and undefined behaviour (AddressSanitizer, UBSan).
    Bounds,
    /// Data races between the threads of a block: memory one writes and another reads or
    /// writes with no barrier between (ThreadSanitizer alone: it cannot share a build with
    /// AddressSanitizer, and UBSan's own checks race in its eyes as threads start).
    Races,
}

impl Check {
    fn sanitize(self) -> &'static str {
        match self {
            Check::Bounds => "-fsanitize=address,undefined",
            Check::Races => "-fsanitize=thread",
        }
    }
}

/// `op`'s launch over `args` (its custom op's arguments) and what it holds, all on the CPU,
/// run on the host as a card would run it: the kernel's output.
pub(crate) fn run<K: Kernel>(op: &K, args: &[&Tensor]) -> Result<Tensor> {
    run_checked(op, args, Check::Bounds, BlockOrder::InOrder)
}

/// [`run`] with the blocks last first. A card runs blocks in no set order, side by side;
/// the emulation runs them one after another, so a block that reads what another block
/// writes, or two blocks writing one output, give other bits in the other order.
pub(crate) fn run_blocks_reversed<K: Kernel>(op: &K, args: &[&Tensor]) -> Result<Tensor> {
    run_checked(op, args, Check::Bounds, BlockOrder::Reversed)
}

/// The order the emulation runs a grid's blocks in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum BlockOrder {
    InOrder,
    Reversed,
}

/// [`run`] under ThreadSanitizer: an error where two threads of a block touch the same
/// memory, one of them writing, with no `__syncthreads` or `__syncwarp` between (a
/// shuffle is none: here, as on a card, it orders no memory). Blocks run one after
/// another here, so races between blocks are not seen ([`run_blocks_reversed`] looks for
/// them).
pub(crate) fn run_for_races<K: Kernel>(op: &K, args: &[&Tensor]) -> Result<Tensor> {
    run_checked(op, args, Check::Races, BlockOrder::InOrder)
}

fn run_checked<K: Kernel>(op: &K, args: &[&Tensor], check: Check, order: BlockOrder) -> Result<Tensor> {
    let held = op.held();
    let inputs: Vec<&Tensor> = args.iter().copied().chain(held.iter()).collect();
    let elems = inputs.iter().map(|t| Elem::of(t.dtype(), "host kernel")).collect::<Result<Vec<_>>>()?;
    let layouts: Vec<Layout> = inputs.iter().map(|t| t.layout().clone()).collect();
    let described: Vec<(Elem, &Layout)> = elems.iter().copied().zip(&layouts).collect();
    let launch = op.launch(&described)?;
    let exe = compiled(&launch, &elems, check)?;
    let mut stdin = Vec::new();
    let (gx, gy, gz) = launch.grid;
    for v in [gx, gy, gz, launch.block] {
        stdin.extend(v.to_le_bytes());
    }
    stdin.extend((launch.shared as u64).to_le_bytes());
    stdin.extend(u64::from(order == BlockOrder::Reversed).to_le_bytes());
    for t in &inputs {
        let bytes = reachable_bytes(t)?;
        stdin.extend((bytes.len() as u64).to_le_bytes());
        stdin.extend(bytes);
    }
    let (elem, len, shape) = &launch.out;
    stdin.extend((*len as u64).to_le_bytes());
    for a in &launch.args {
        match a {
            Arg::I32(v) => stdin.extend((*v as i64).to_le_bytes()),
            Arg::I64(v) => stdin.extend(v.to_le_bytes()),
            Arg::U64(v) => stdin.extend(v.to_le_bytes()),
            Arg::F32(v) => stdin.extend((v.to_bits() as u64).to_le_bytes()),
            Arg::Input(_) | Arg::Out => {}
        }
    }
    let out = execute(&exe, &stdin, &launch)?;
    if out.len() != len * elem.size() {
        candle_core::bail!("{}: {} bytes back for {len} elements", launch.entry, out.len());
    }
    let unwritten = out.chunks_exact(elem.size()).filter(|c| c.iter().all(|&b| b == 0xff)).count();
    if unwritten > 0 {
        candle_core::bail!("{}: {unwritten} of its {len} output elements were never written", launch.entry);
    }
    let t = match elem {
        Elem::F32 => Tensor::from_vec(words(&out, f32::from_le_bytes), *len, &Device::Cpu)?,
        Elem::U32 => Tensor::from_vec(words(&out, u32::from_le_bytes), *len, &Device::Cpu)?,
        Elem::BF16 => Tensor::from_vec(
            out.chunks_exact(2).map(|c| half::bf16::from_bits(u16::from_le_bytes([c[0], c[1]]))).collect(),
            *len,
            &Device::Cpu,
        )?,
    };
    t.reshape(shape)
}

fn words<T>(b: &[u8], f: impl Fn([u8; 4]) -> T) -> Vec<T> {
    b.chunks_exact(4).map(|c| f([c[0], c[1], c[2], c[3]])).collect()
}

/// `t`'s data from its layout's start offset to the last element the layout reaches (so
/// the sanitizer sees a read past it).
fn reachable_bytes(t: &Tensor) -> Result<Vec<u8>> {
    let l = t.layout();
    let span = if l.shape().elem_count() == 0 {
        0
    } else {
        1 + l.dims().iter().zip(l.stride()).map(|(d, s)| (d - 1) * s).sum::<usize>()
    };
    let range = l.start_offset()..l.start_offset() + span;
    let (s, _) = t.storage_and_layout();
    let Storage::Cpu(s) = &*s else { candle_core::bail!("host kernel: a tensor not on the CPU") };
    Ok(match s {
        CpuStorage::F32(v) => v[range].iter().flat_map(|x| x.to_le_bytes()).collect(),
        CpuStorage::BF16(v) => v[range].iter().flat_map(|x| x.to_bits().to_le_bytes()).collect(),
        CpuStorage::U32(v) => v[range].iter().flat_map(|x| x.to_le_bytes()).collect(),
        _ => candle_core::bail!("host kernel: f32, bf16 or u32 tensors only"),
    })
}

/// The C++ program for `launch` (its source, entry and argument list; the values come on
/// its standard input), compiled once: its path.
fn compiled(launch: &Launch, elems: &[Elem], check: Check) -> Result<PathBuf> {
    let program = program(launch, elems);
    let cxx = std::env::var("CXX").unwrap_or_else(|_| "c++".into());
    let flags = [
        "-std=c++20",
        "-O1",
        "-g",
        "-pthread",
        check.sanitize(),
        "-fno-sanitize-recover=all",
        "-fno-omit-frame-pointer",
        "-w",
    ];
    let key = fnv(&format!("{cxx} {flags:?}\n{program}"));
    let dir = std::env::temp_dir().join("guirl-kernel-host").join(format!("{}-{key:016x}", launch.module));
    let exe = dir.join("kernel");
    if exe.exists() {
        return Ok(exe);
    }
    std::fs::create_dir_all(&dir)?;
    // names of this compile's own: tests in other threads and processes compile beside it
    static COMPILES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let unique =
        format!("{}-{}", std::process::id(), COMPILES.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
    let src = dir.join(format!("kernel-{unique}.cpp"));
    std::fs::write(&src, &program)?;
    let tmp = dir.join(format!("kernel-{unique}"));
    let out = Command::new(&cxx).args(flags).arg("-o").arg(&tmp).arg(&src).output().map_err(|e| {
        candle_core::Error::Msg(format!(
            "the kernel tests compile CUDA sources for the host with a C++20 compiler, and `{cxx}` \
             could not run ({e}): install g++ (scripts/setup.sh does) or set CXX"
        ))
    })?;
    if !out.status.success() {
        candle_core::bail!(
            "{} did not compile for the host ({cxx}): {}",
            launch.module,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    // another test process may have compiled the same program meanwhile: either is right
    std::fs::rename(&tmp, &exe)?;
    Ok(exe)
}

/// 64-bit FNV-1a: a name for a program that stays the same from run to run.
fn fnv(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| (h ^ b as u64).wrapping_mul(0x0100_0000_01b3))
}

/// The program's text: the shim, the element access, the source (its dynamic shared
/// memory made a pointer) and a `main` that reads the launch and writes the output.
fn program(launch: &Launch, elems: &[Elem]) -> String {
    let source: String = launch
        .text()
        .lines()
        .map(|line| match line.trim().strip_prefix("extern __shared__ ") {
            // `extern __shared__ float sh[];` → `float* sh = (float*)guirl_dynamic_shared;`
            Some(decl) => {
                let decl = decl.trim_end_matches(';').trim_end_matches("[]");
                let (ty, name) = decl.rsplit_once(' ').expect("extern __shared__ TYPE NAME[];");
                format!("{ty}* {name} = ({ty}*)guirl_dynamic_shared;\n")
            }
            None => format!("{line}\n"),
        })
        .collect();
    let (out, _, _) = &launch.out;
    let mut main = String::from("int main() {\n  guirl_dim3 grid;\n  unsigned block;\n");
    main += "  guirl_read(&grid, 12);\n  guirl_read(&block, 4);\n  const size_t shared = guirl_u64();\n";
    main += "  const bool reversed = guirl_u64() != 0;\n";
    for (i, e) in elems.iter().enumerate() {
        main += &format!("  auto* in{i} = guirl_input<{}>();\n", e.c_type());
    }
    main +=
        &format!("  const size_t len = guirl_u64();\n  auto* out = guirl_output<{}>(len);\n", out.c_type());
    let mut call = Vec::new();
    for (i, a) in launch.args.iter().enumerate() {
        let scalar = |ty: &str, from: &str| format!("  const {ty} s{i} = {from};\n");
        match a {
            Arg::Input(j) => call.push(format!("in{j}")),
            Arg::Out => call.push("out".into()),
            Arg::I32(_) => main += &scalar("int", "(int)(int64_t)guirl_u64()"),
            Arg::I64(_) => main += &scalar("long", "(long)guirl_u64()"),
            Arg::U64(_) => main += &scalar("unsigned long long", "guirl_u64()"),
            Arg::F32(_) => main += &scalar("float", "__uint_as_float((unsigned)guirl_u64())"),
        }
        if !matches!(a, Arg::Input(_) | Arg::Out) {
            call.push(format!("s{i}"));
        }
    }
    main += &format!(
        "  guirl_run(grid, block, shared, reversed, [&] {{ {}({}); }});\n",
        launch.entry,
        call.join(", ")
    );
    main += "  fwrite(out, sizeof(*out), len, stdout);\n  return 0;\n}\n";
    format!("{SHIM}\n{ELEMS}\n{source}\n{main}")
}

/// Runs the program on `stdin`: its standard output.
fn execute(exe: &PathBuf, stdin: &[u8], launch: &Launch) -> Result<Vec<u8>> {
    let mut child = Command::new(exe)
        .env("ASAN_OPTIONS", "detect_leaks=0")
        .env("TSAN_OPTIONS", "halt_on_error=1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    let (mut out, mut err) = (child.stdout.take().expect("piped"), child.stderr.take().expect("piped"));
    let reader = std::thread::spawn(move || {
        let mut b = Vec::new();
        out.read_to_end(&mut b).map(|_| b)
    });
    let err_reader = std::thread::spawn(move || {
        let mut b = String::new();
        err.read_to_string(&mut b).map(|_| b)
    });
    child.stdin.take().expect("piped").write_all(stdin)?;
    let start = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait()? {
            break s;
        }
        if start.elapsed() > HUNG {
            child.kill()?;
            candle_core::bail!(
                "{}: still running after {HUNG:?} on the host: a barrier or shuffle some thread never reaches?",
                launch.entry
            );
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let out = reader.join().expect("reader")?;
    let err = err_reader.join().expect("reader")?;
    if !status.success() {
        candle_core::bail!("{} failed on the host ({status}):\n{err}", launch.entry);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Shape;

    /// A kernel of the test's own: `body` over `n` threads in `blocks` blocks, reading `x`
    /// and writing `n` floats.
    struct Probe {
        body: &'static str,
        n: usize,
        blocks: usize,
    }

    impl Kernel for Probe {
        fn launch(&self, _: &[(Elem, &Layout)]) -> Result<Launch> {
            Ok(Launch {
                module: "guirl_probe".into(),
                file: "",
                defines: format!(
                    "extern \"C\" __global__ void probe(const float* x, float* out) {{\n  const int t = threadIdx.x;\n  {}\n}}",
                    self.body
                ),
                entry: "probe".into(),
                grid: (self.blocks as u32, 1, 1),
                block: (self.n / self.blocks) as u32,
                shared: 0,
                args: vec![Arg::Input(0), Arg::Out],
                out: (Elem::F32, self.n, Shape::from(self.n)),
            })
        }
    }

    fn probe(body: &'static str) -> Result<Vec<f32>> {
        let x = Tensor::arange(0f32, 64., &Device::Cpu)?;
        run(&Probe { body, n: 64, blocks: 1 }, &[&x])?.to_vec1()
    }

    /// ThreadSanitizer's build sees a block's threads share memory without a barrier, and
    /// passes the same kernel with one; a warp's lanes sharing memory with only a shuffle
    /// between race too (a card's shuffle orders no memory), and pass with `__syncwarp`.
    #[test]
    fn the_race_check_sees_a_missing_barrier() {
        let x = Tensor::arange(0f32, 64., &Device::Cpu).unwrap();
        let race = |body| run_for_races(&Probe { body, n: 64, blocks: 1 }, &[&x]);
        let want: Vec<f32> = (0..64).map(|t| ((t + 32) % 64) as f32).collect();
        let synced =
            race("__shared__ float s[64];\n  s[t] = x[t];\n  __syncthreads();\n  out[t] = s[(t + 32) % 64];");
        assert_eq!(synced.unwrap().to_vec1::<f32>().unwrap(), want);
        let racy = race("__shared__ float s[64];\n  s[t] = x[t];\n  out[t] = s[(t + 32) % 64];").unwrap_err();
        assert!(racy.to_string().contains("ThreadSanitizer: data race"), "{racy}");

        let want: Vec<f32> = (0..64).map(|t| (t ^ 1) as f32).collect();
        let warp = race("__shared__ float s[64];\n  s[t] = x[t];\n  __syncwarp();\n  out[t] = s[t ^ 1];");
        assert_eq!(warp.unwrap().to_vec1::<f32>().unwrap(), want);
        let shuffled = race(
            "__shared__ float s[64];\n  s[t] = x[t];\n  const float v = __shfl_xor_sync(0xffffffffu, x[t], 1);\n  \
             out[t] = s[t ^ 1] + 0.0f * v;",
        )
        .unwrap_err();
        assert!(shuffled.to_string().contains("ThreadSanitizer: data race"), "{shuffled}");
        // the shuffle's own values cross without a race
        let values = race("out[t] = __shfl_xor_sync(0xffffffffu, x[t], 1);");
        assert_eq!(values.unwrap().to_vec1::<f32>().unwrap(), want);
    }

    /// A block that reads what an earlier block wrote gives other bits with the blocks run
    /// last first; blocks that keep to their own outputs give the same.
    #[test]
    fn reversed_blocks_show_a_block_reading_another() {
        let x = Tensor::arange(0f32, 64., &Device::Cpu).unwrap();
        let bits = |t: Tensor| t.to_vec1::<f32>().unwrap().iter().map(|v| v.to_bits()).collect::<Vec<_>>();
        let both = |body| {
            let p = Probe { body, n: 64, blocks: 4 };
            (bits(run(&p, &[&x]).unwrap()), run_blocks_reversed(&p, &[&x]).map(bits))
        };
        let (a, b) = both("const int i = blockIdx.x * 16 + t;\n  out[i] = 2.0f * x[i];");
        assert_eq!(a, b.unwrap());
        // last first, the read finds the output's unwritten fill (NaN bits), which the sum keeps
        let (a, b) = both(
            "const int i = blockIdx.x * 16 + t;\n  out[i] = x[i];\n  if (blockIdx.x > 0) out[i] += out[i - 16];",
        );
        match b {
            Ok(b) => assert_ne!(a, b, "a block reading the block before it"),
            Err(e) => assert!(e.to_string().contains("never written"), "{e}"),
        }
    }

    /// What the emulation is for: a right kernel runs (a shuffle and a barrier among
    /// them), and a read past an input, an output element left unwritten, a read of shared
    /// memory before any thread wrote it and a shuffle with a lane that has returned are
    /// each an error that says so.
    #[test]
    fn the_emulation_runs_kernels_and_catches_their_faults() {
        let sum =
            probe("float v = __shfl_xor_sync(0xffffffffu, x[t], 1);\n  __syncthreads();\n  out[t] = v;")
                .unwrap();
        assert_eq!(sum, (0..64).map(|t| (t ^ 1) as f32).collect::<Vec<_>>());

        let past = probe("out[t] = x[t + 1];").unwrap_err().to_string();
        assert!(past.contains("AddressSanitizer: heap-buffer-overflow"), "{past}");

        let unwritten = probe("if (t != 5) out[t] = x[t];").unwrap_err().to_string();
        assert!(unwritten.contains("1 of its 64 output elements were never written"), "{unwritten}");

        // static shared memory starts as NaN bits, not zeros, so the read-before-write shows
        let early =
            probe("__shared__ float s[64];\n  out[t] = s[(t + 1) % 64];\n  __syncthreads();\n  s[t] = x[t];")
                .unwrap_err()
                .to_string();
        assert!(early.contains("64 of its 64 output elements were never written"), "{early}");
        let shared =
            probe("__shared__ float s[64];\n  s[t] = x[t];\n  __syncthreads();\n  out[t] = s[(t + 1) % 64];")
                .unwrap();
        assert_eq!(shared, (0..64).map(|t| ((t + 1) % 64) as f32).collect::<Vec<_>>());

        let gone =
            probe("if (t == 3) return;\n  out[t] = __shfl_xor_sync(0xffffffffu, x[t], 1);").unwrap_err();
        assert!(gone.to_string().contains("shuffles with lane 3 of its warp, which has returned"), "{gone}");
    }
}
