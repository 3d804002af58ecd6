use super::*;
use candle_core::{Device, Tensor, Var};
use std::collections::HashMap;

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

fn rendezvous(rank: usize, world: usize, port: u16) -> Rendezvous {
    Rendezvous {
        rank,
        world,
        local_rank: rank,
        addr: format!("127.0.0.1:{port}"),
        timeout: Duration::from_secs(20),
        gpu_sum: Default::default(),
    }
}

/// Run `f` on `world` ranks, each in its own thread with its own connected group.
pub(crate) fn on_ranks<T: Send + 'static>(
    world: usize,
    fingerprint: impl Fn(usize) -> String,
    f: impl Fn(ProcessGroup) -> T + Send + Sync + Clone + 'static,
) -> Vec<anyhow::Result<T>> {
    let port = free_port();
    let handles: Vec<_> = (0..world)
        .map(|r| {
            let (f, fp) = (f.clone(), fingerprint(r));
            std::thread::spawn(move || ProcessGroup::connect(&rendezvous(r, world, port), &fp).map(f))
        })
        .collect();
    handles.into_iter().map(|h| h.join().unwrap()).collect()
}

#[test]
fn collectives_give_every_rank_the_same_answer_in_rank_order() {
    let out = on_ranks(
        3,
        |_| "cfg".into(),
        |pg| {
            let r = pg.rank();
            let gathered = pg.all_gather(Ok(vec![r as u8; r + 1])).unwrap();
            let mut xs = [r as f32, 1.0, 0.5 * r as f32];
            pg.all_reduce_f32(&mut xs).unwrap();
            let mut ys = [r as f64 * 1e-3];
            pg.all_reduce_f64(&mut ys).unwrap();
            let b = pg.broadcast(vec![7 + r as u8]).unwrap();
            let any = pg.any(r == 2).unwrap();
            let none = pg.any(false).unwrap();
            pg.barrier().unwrap();
            (gathered, xs, ys, b, any, none, pg.share(10))
        },
    );
    for (r, o) in out.into_iter().enumerate() {
        let (gathered, xs, ys, b, any, none, share) = o.unwrap();
        assert_eq!(gathered, vec![vec![0], vec![1, 1], vec![2, 2, 2]]);
        assert_eq!(xs, [3.0, 3.0, 1.5]);
        assert_eq!(ys, [(0.0 + 1e-3) + 2e-3]);
        assert_eq!(b, vec![7], "rank 0's bytes");
        assert!(any && !none);
        assert_eq!(share, [0..3, 3..6, 6..10][r]);
    }
    // Shares cover every item once, whatever n and W.
    for (n, w) in [(0, 2), (1, 2), (5, 3), (7, 4)] {
        let all: Vec<usize> = (0..w).flat_map(|r| share(n, r, w)).collect();
        assert_eq!(all, (0..n).collect::<Vec<_>>());
    }
}

#[test]
fn an_error_on_one_rank_is_every_ranks_error() {
    let out = on_ranks(
        3,
        |_| "cfg".into(),
        |pg| {
            let mine = if pg.rank() == 1 { Err("no chromedriver".to_string()) } else { Ok(vec![1]) };
            let e = pg.all_gather(mine).unwrap_err().to_string();
            // The group still works afterwards.
            let mut x = [1.0f32];
            pg.all_reduce_f32(&mut x).unwrap();
            (e, x[0])
        },
    );
    for o in out {
        let (e, x) = o.unwrap();
        assert_eq!(e, "rank 1: no chromedriver");
        assert_eq!(x, 3.0);
    }
    // Vectors of different lengths cannot be summed: a clear error on all ranks.
    let out = on_ranks(
        2,
        |_| "cfg".into(),
        |pg| {
            let mut xs = vec![0f32; 2 + pg.rank()];
            pg.all_reduce_f32(&mut xs).unwrap_err().to_string()
        },
    );
    for o in out {
        assert!(o.unwrap().contains("disagree on the model's shape"));
    }
}

#[test]
fn a_rank_that_stops_is_reported_by_the_others() {
    let out = on_ranks(
        3,
        |_| "cfg".into(),
        |pg| {
            if pg.rank() == 2 {
                drop(pg); // the process "dies": its connection closes
                return String::new();
            }
            pg.all_gather(Ok(vec![0])).unwrap_err().to_string()
        },
    );
    let msgs: Vec<String> = out.into_iter().map(Result::unwrap).collect();
    // the resume it names keeps the run's number of ranks
    let resume = "continue the run with --resume --nproc 3";
    assert!(msgs[0].contains("lost the connection to rank 2") && msgs[0].contains(resume), "{}", msgs[0]);
    assert!(msgs[1].contains("lost the connection to rank 2"), "{}", msgs[1]);
}

#[test]
fn a_rank_with_another_config_is_refused() {
    let out = on_ranks(2, |r| if r == 0 { "cfg-a".into() } else { "cfg-b".into() }, |_| ());
    for o in out {
        let e = o.unwrap_err().to_string();
        assert!(e.contains("another config") && e.contains("cfg-b"), "{e}");
    }
}

#[test]
fn rendezvous_from_torchrun_variables() {
    let vars = |kv: &[(&str, &str)]| {
        let m: HashMap<String, String> = kv.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        Rendezvous::from_vars(move |k| m.get(k).cloned())
    };
    assert_eq!(vars(&[]).unwrap(), None);
    assert_eq!(vars(&[("WORLD_SIZE", "1"), ("RANK", "0")]).unwrap(), None);
    let rv = vars(&[("WORLD_SIZE", "4"), ("RANK", "3"), ("LOCAL_RANK", "1"), ("MASTER_ADDR", "node0")])
        .unwrap()
        .unwrap();
    assert_eq!((rv.rank, rv.world, rv.local_rank, rv.addr.as_str()), (3, 4, 1, "node0:29500"));
    let e = vars(&[("WORLD_SIZE", "2")]).unwrap_err().to_string();
    assert!(e.contains("RANK is not set") && e.contains("--nproc 2"), "{e}");
    let e = vars(&[("WORLD_SIZE", "2"), ("RANK", "2")]).unwrap_err().to_string();
    assert!(e.contains("ranks run from 0 to 1"), "{e}");
    let e = vars(&[("WORLD_SIZE", "two")]).unwrap_err().to_string();
    assert!(e.contains("WORLD_SIZE=\"two\""), "{e}");
    let e = vars(&[("WORLD_SIZE", "2"), ("RANK", "0"), ("MASTER_PORT", "x")]).unwrap_err().to_string();
    assert!(e.contains("MASTER_PORT"), "{e}");
    // how GPU gradients are summed
    let base = [("WORLD_SIZE", "2"), ("RANK", "0")];
    let with = |v: &'static str| vars(&[base[0], base[1], ("GUIRL_DIST_BACKEND", v)]);
    assert_eq!(vars(&base).unwrap().unwrap().gpu_sum, GpuSum::Auto);
    assert_eq!(with("tcp").unwrap().unwrap().gpu_sum, GpuSum::Host);
    assert_eq!(with("auto").unwrap().unwrap().gpu_sum, GpuSum::Auto);
    let e = with("gloo").unwrap_err().to_string();
    assert!(e.contains("GUIRL_DIST_BACKEND=\"gloo\"") && e.contains("nccl, tcp or auto"), "{e}");
    if cfg!(feature = "nccl") {
        assert_eq!(with("nccl").unwrap().unwrap().gpu_sum, GpuSum::Nccl);
    } else {
        let e = with("nccl").unwrap_err().to_string();
        assert!(e.contains("no NCCL") && e.contains("--features nccl"), "{e}");
    }
}

#[test]
fn gradients_sum_over_ranks_and_absent_ones_stay_absent() {
    let out = on_ranks(
        2,
        |_| "cfg".into(),
        |pg| {
            let r = pg.rank() as f32;
            let dev = Device::Cpu;
            let a = Var::from_tensor(&Tensor::new(&[[1f32, 2.0], [3.0, 4.0]], &dev).unwrap()).unwrap();
            let b = Var::from_tensor(&Tensor::new(&[5f32, 6.0], &dev).unwrap()).unwrap();
            let c = Var::from_tensor(&Tensor::new(&[0f32], &dev).unwrap()).unwrap();
            // Rank 0's loss reads a only, rank 1's a and b; c is read by neither.
            let loss = if pg.rank() == 0 {
                (a.as_tensor() * 1.0).unwrap().sum_all().unwrap()
            } else {
                ((a.as_tensor() * f64::from(r + 1.0)).unwrap().sum_all().unwrap()
                    + b.as_tensor().sqr().unwrap().sum_all().unwrap())
                .unwrap()
            };
            let mut grads = loss.backward().unwrap();
            let vars = [a.clone(), b.clone(), c.clone()];
            tensors::all_reduce_grads(&pg, &mut grads, &vars).unwrap();
            let ga = grads.get(a.as_tensor()).unwrap().to_vec2::<f32>().unwrap();
            let gb = grads.get(b.as_tensor()).unwrap().to_vec1::<f32>().unwrap();
            let gc = grads.get(c.as_tensor()).is_none();
            // Rank 1's weights drift; keep_in_step sets them back to rank 0's.
            if pg.rank() == 1 {
                b.set(&Tensor::new(&[5f32, 6.5], &dev).unwrap()).unwrap();
            }
            let named = vec![("a".to_string(), a), ("b".to_string(), b.clone())];
            let differed = tensors::keep_in_step(&pg, &named).unwrap();
            let again = tensors::keep_in_step(&pg, &named).unwrap();
            (ga, gb, gc, differed, again, b.as_tensor().to_vec1::<f32>().unwrap())
        },
    );
    for o in out {
        let (ga, gb, gc, differed, again, b) = o.unwrap();
        assert_eq!(ga, vec![vec![3.0, 3.0], vec![3.0, 3.0]]);
        assert_eq!(gb, vec![10.0, 12.0]);
        assert!(gc, "a variable without a gradient anywhere got one");
        assert_eq!((differed, again), (vec![1], vec![]));
        assert_eq!(b, vec![5.0, 6.0]);
    }
}

/// A second group of the same ranks runs its collectives beside the first's, from another
/// thread of each rank and in another order on each: every answer is its own group's
/// (one group would hand rank 0 the wrong rank's parts, or hang).
#[test]
fn another_group_runs_its_collectives_beside_the_first() {
    let out = on_ranks(
        3,
        |_| "cfg".into(),
        |pg| {
            let other = std::sync::Arc::new(pg.another().unwrap());
            let r = pg.rank();
            let o = other.clone();
            let beside = std::thread::spawn(move || {
                if r == 1 {
                    std::thread::sleep(Duration::from_millis(100));
                }
                (0..20u8).map(|i| o.all_gather(Ok(vec![100 + i, r as u8])).unwrap()).collect::<Vec<_>>()
            });
            if r != 1 {
                std::thread::sleep(Duration::from_millis(100));
            }
            let sums: Vec<f32> = (0..20)
                .map(|i| {
                    let mut xs = [(r + i) as f32];
                    pg.all_reduce_f32(&mut xs).unwrap();
                    xs[0]
                })
                .collect();
            (sums, beside.join().unwrap(), other.rank(), other.world())
        },
    );
    for (r, o) in out.into_iter().enumerate() {
        let (sums, gathered, rank, world) = o.unwrap();
        assert_eq!((rank, world), (r, 3));
        assert_eq!(sums, (0..20).map(|i| (3 + 3 * i) as f32).collect::<Vec<_>>(), "rank {r}");
        for (i, g) in gathered.iter().enumerate() {
            let i = i as u8;
            assert_eq!(
                g,
                &vec![vec![100 + i, 0], vec![100 + i, 1], vec![100 + i, 2]],
                "rank {r}, gather {i}"
            );
        }
    }
}
