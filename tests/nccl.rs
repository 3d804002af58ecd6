//! NCCL's gradient sum (the `nccl` feature) on every GPU this machine has, one rank per GPU,
//! against the same sum through the host. Runs where a GPU is: `benches/gpu/run.sh`.

use candle_core::{DType, Tensor, Var};
use guirl::dist::tensors::all_reduce_grads;
use guirl::dist::{GpuSum, ProcessGroup, Rendezvous};
use std::net::TcpListener;
use std::time::Duration;

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

fn group(rank: usize, world: usize, port: u16, gpu_sum: GpuSum) -> ProcessGroup {
    let rv = Rendezvous {
        rank,
        world,
        local_rank: rank,
        addr: format!("127.0.0.1:{port}"),
        timeout: Duration::from_secs(60),
        gpu_sum,
    };
    ProcessGroup::connect(&rv, "nccl-test").unwrap()
}

/// Rank `rank`'s gradients of four variables: an f32 matrix and a bf16 vector that every
/// rank has a gradient for (values that depend on the rank), one with a gradient on rank 0
/// only, and one with a gradient on no rank. Summed over the ranks with `gpu_sum`.
fn summed(pg: &ProcessGroup, rank: usize) -> Vec<Option<Vec<f32>>> {
    // the device as guirl opens it: one stream of its own (policy::device)
    let dev = guirl::policy::device::cuda(rank).unwrap();
    let a = Var::from_tensor(&Tensor::zeros((3, 4), DType::F32, &dev).unwrap()).unwrap();
    let b = Var::from_tensor(&Tensor::zeros(5, DType::BF16, &dev).unwrap()).unwrap();
    let c = Var::from_tensor(&Tensor::zeros(2, DType::F32, &dev).unwrap()).unwrap();
    let d = Var::from_tensor(&Tensor::zeros(2, DType::F32, &dev).unwrap()).unwrap();
    let r = rank as f32 + 1.0;
    let ca =
        Tensor::arange(0f32, 12.0, &dev).unwrap().reshape((3, 4)).unwrap().affine(r as f64, 0.5).unwrap();
    let cb = Tensor::new(&[1f32, -2.0, 3.0, -4.0, 0.25], &dev).unwrap().affine(r as f64, 0.0).unwrap();
    let mut loss = ((a.as_tensor() * &ca).unwrap().sum_all().unwrap()
        + (b.as_tensor().to_dtype(DType::F32).unwrap() * &cb).unwrap().sum_all().unwrap())
    .unwrap();
    if rank == 0 {
        loss = (loss + c.as_tensor().sum_all().unwrap().affine(3.0, 0.0).unwrap()).unwrap();
    }
    let mut grads = loss.backward().unwrap();
    let vars = [a, b, c, d];
    all_reduce_grads(pg, &mut grads, &vars).unwrap();
    vars.iter()
        .map(|v| {
            grads.get(v.as_tensor()).map(|g| {
                assert_eq!(g.dtype(), v.dtype(), "a summed gradient keeps its variable's dtype");
                assert_eq!(g.dims(), v.dims());
                g.to_dtype(DType::F32).unwrap().flatten_all().unwrap().to_vec1::<f32>().unwrap()
            })
        })
        .collect()
}

#[test]
fn nccl_sums_the_gradients_of_one_rank_per_gpu_as_the_host_does() {
    let gpus = candle_core::cuda_backend::cudarc::driver::CudaContext::device_count().unwrap() as usize;
    assert!(gpus >= 1, "this test needs a GPU");
    println!("ranks: {gpus} (one per GPU)");
    let (nccl_port, host_port) = (free_port(), free_port());
    let ranks: Vec<_> = (0..gpus)
        .map(|rank| {
            std::thread::spawn(move || {
                let pg = group(rank, gpus, nccl_port, GpuSum::Nccl);
                let with_nccl = summed(&pg, rank);
                assert!(pg.sums_with_nccl(), "rank {rank} summed through the host");
                let host = group(rank, gpus, host_port, GpuSum::Host);
                let through_host = summed(&host, rank);
                assert!(!host.sums_with_nccl());
                (with_nccl, through_host)
            })
        })
        .collect();
    let w: f32 = (1..=gpus).map(|r| r as f32).sum();
    let want_a: Vec<f32> = (0..12).map(|i| i as f32 * w + 0.5 * gpus as f32).collect();
    let want_b: Vec<f32> = [1f32, -2.0, 3.0, -4.0, 0.25].iter().map(|x| x * w).collect();
    for (rank, h) in ranks.into_iter().enumerate() {
        let (nccl, host) = h.join().unwrap();
        assert_eq!(nccl[0].as_deref(), Some(&want_a[..]), "rank {rank}: f32 matrix");
        assert_eq!(nccl[1].as_deref(), Some(&want_b[..]), "rank {rank}: bf16 vector");
        assert_eq!(nccl[2].as_deref(), Some(&[3f32, 3.0][..]), "rank {rank}: a gradient on rank 0 only");
        assert_eq!(nccl[3], None, "rank {rank}: a variable with no gradient on any rank keeps none");
        assert_eq!(nccl, host, "rank {rank}: NCCL and the host agree");
    }
}
