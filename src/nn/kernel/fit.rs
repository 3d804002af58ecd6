//! Whether a launch fits a card, seen without one (tests of the `cuda` build): ptxas, the
//! toolkit's assembler, turns the PTX that NVRTC makes into the card's code and reports
//! what a thread of each entry point takes. A block asking for more registers or shared
//! memory than a multiprocessor has fails at launch on the card ("too many resources
//! requested for launch"); registers spilled to local memory slow every step. Both are
//! known here, before a GPU session spends its minutes finding out.

use super::{cuda, Launch};
use std::process::Command;

/// Registers a multiprocessor holds (compute capability 7.0 to 9.0), allocated to a warp
/// in units of 256 (8 a thread).
const REGISTERS: u32 = 65_536;
/// Shared memory a block gets without opting in to more (cuda.rs does not), static and
/// dynamic together.
const SHARED: u32 = 48 * 1024;

/// What ptxas says a thread of one entry point takes.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Resources {
    pub registers: u32,
    /// Bytes of local memory a thread: its stack frame (arrays the compiler could not keep
    /// in registers) and spilled registers.
    pub local: u32,
    /// Bytes of static shared memory a block.
    pub shared: u32,
}

/// The resources of `entry` in the module NVRTC compiles from `text`, as ptxas assembles it
/// for the card the build targets (`CUDA_COMPUTE_CAP`, 90 when unset).
pub(crate) fn resources(module: &str, text: impl FnOnce() -> String, entry: &str) -> Resources {
    let ptx = cuda::compiled(module, text).unwrap_or_else(|e| panic!("{e}"));
    let dir = std::env::temp_dir().join(format!("guirl-ptxas-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a temporary folder");
    let file = dir.join(format!("{module}.ptx"));
    std::fs::write(&file, ptx.as_bytes()).expect("writing the PTX");
    let cap = std::env::var("CUDA_COMPUTE_CAP").unwrap_or_else(|_| "90".into());
    let ptxas = std::env::var("CUDA_HOME").map_or("ptxas".into(), |h| format!("{h}/bin/ptxas"));
    let out = Command::new(&ptxas)
        .args([&format!("-arch=sm_{cap}"), "-v", "-o", "/dev/null"])
        .arg(&file)
        .output()
        .unwrap_or_else(|e| {
            panic!("running {ptxas}: {e}: set CUDA_HOME to the toolkit (benches/gpu/build.sh does)")
        });
    let log = String::from_utf8_lossy(&out.stderr).into_owned() + &String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "ptxas failed on {module}:\n{log}");
    parse(&log, entry).unwrap_or_else(|| panic!("ptxas said nothing of {entry} in {module}:\n{log}"))
}

/// `entry`'s resources in ptxas's `-v` report.
fn parse(log: &str, entry: &str) -> Option<Resources> {
    let start = log.find(&format!("Compiling entry function '{entry}'"))?;
    let rest = &log[start..];
    // the entry's own lines: up to the next entry's
    let rest = &rest[..rest[1..].find("Compiling entry function").map_or(rest.len(), |i| i + 1)];
    // the number written just before `unit` ("40 registers", "0 bytes stack frame")
    let before = |unit: &str| -> u32 {
        rest.find(unit).map_or(0, |i| {
            let head = rest[..i].trim_end();
            let digits = head.rsplit(|c: char| !c.is_ascii_digit()).next().unwrap_or("");
            digits.parse().unwrap_or(0)
        })
    };
    Some(Resources {
        registers: before(" registers"),
        local: before(" bytes stack frame") + before(" bytes spill stores"),
        shared: before(" bytes smem"),
    })
}

/// Panics unless a block of `threads` threads running `entry` (with `dynamic` bytes of
/// shared memory) fits a multiprocessor, keeping everything in registers.
pub(crate) fn assert_fits(
    module: &str,
    text: impl FnOnce() -> String,
    entry: &str,
    threads: u32,
    dynamic: u32,
) {
    let r = resources(module, text, entry);
    let registers = r.registers.div_ceil(8) * 8 * threads.div_ceil(32) * 32;
    assert!(
        registers <= REGISTERS,
        "{entry} ({module}): {threads} threads of {} registers need {registers} of {REGISTERS}",
        r.registers
    );
    assert!(
        r.shared + dynamic <= SHARED,
        "{entry} ({module}): {} + {dynamic} bytes of shared memory, above {SHARED}",
        r.shared
    );
    assert_eq!(r.local, 0, "{entry} ({module}) keeps {} bytes a thread in local memory: {r:?}", r.local);
}

/// [`assert_fits`] for a launch as an op makes it.
pub(crate) fn assert_launch_fits(l: &Launch) {
    assert_fits(&l.module, || l.text(), &l.entry, l.block, l.shared);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// ptxas's report as CUDA 13.0 writes it, two entry points.
    #[test]
    fn the_report_is_read_entry_by_entry() {
        let log = "ptxas info    : 0 bytes gmem\n\
            ptxas info    : Compiling entry function 'a_bf16' for 'sm_90'\n\
            ptxas info    : Function properties for a_bf16\n\
            \x20   8 bytes stack frame, 4 bytes spill stores, 4 bytes spill loads\n\
            ptxas info    : Used 189 registers, used 1 barriers, 132 bytes smem\n\
            ptxas info    : Compiling entry function 'a_f32' for 'sm_90'\n\
            ptxas info    : Function properties for a_f32\n\
            \x20   0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n\
            ptxas info    : Used 40 registers, used 0 barriers\n";
        assert_eq!(parse(log, "a_bf16"), Some(Resources { registers: 189, local: 12, shared: 132 }));
        assert_eq!(parse(log, "a_f32"), Some(Resources { registers: 40, local: 0, shared: 0 }));
        assert_eq!(parse(log, "b_f32"), None);
    }

    /// A kernel that spills, or asks for more registers than a block of 1 024 threads gets,
    /// is caught.
    #[test]
    #[should_panic(expected = "registers need")]
    fn a_block_too_big_for_its_registers_is_caught() {
        // 64 live accumulators a thread: far above the 64 registers 1 024 threads may each have
        let text = || {
            "extern \"C\" __global__ void heavy(const float* x, float* y) {\n\
               float a[64];\n\
               #pragma unroll\n\
               for (int i = 0; i < 64; i++) a[i] = x[threadIdx.x * 64 + i];\n\
               #pragma unroll\n\
               for (int j = 0; j < 64; j++) {\n\
                 #pragma unroll\n\
                 for (int i = 0; i < 64; i++) a[i] = a[i] * a[(i + j) % 64] + 1.0f;\n\
               }\n\
               float s = 0.0f;\n\
               #pragma unroll\n\
               for (int i = 0; i < 64; i++) s += a[i] * x[i];\n\
               y[threadIdx.x] = s;\n\
             }\n"
            .to_string()
        };
        assert_fits("guirl_fit_probe", text, "heavy", 1024, 0);
    }
}
