use candle_core::{Device, Var, D};
use std::time::Instant;

fn time<F: FnMut()>(name: &str, mut f: F) {
    f();
    let mut v = vec![];
    for _ in 0..5 {
        let t = Instant::now();
        f();
        v.push(t.elapsed().as_secs_f64() * 1000.0);
    }
    v.sort_by(|a, b| a.total_cmp(b));
    println!("{name:40} min {:7.1} ms  med {:7.1} ms", v[0], v[2]);
}

#[test]
#[ignore]
fn op_costs() {
    let dev = Device::Cpu;
    let att = Var::randn(0f32, 1., (32, 4, 151, 151), &dev).unwrap();
    time("softmax fwd [32,4,151,151]", || {
        candle_nn::ops::softmax(att.as_tensor(), D::Minus1).unwrap();
    });
    time("softmax fwd+bwd", || {
        let y = candle_nn::ops::softmax(att.as_tensor(), D::Minus1).unwrap();
        y.sum_all().unwrap().backward().unwrap();
    });
    let h = Var::randn(0f32, 1., (32, 151, 256), &dev).unwrap();
    time("gelu fwd+bwd [32,151,256]", || {
        h.as_tensor().gelu().unwrap().sum_all().unwrap().backward().unwrap();
    });
    time("relu fwd+bwd [32,151,256]", || {
        h.as_tensor().relu().unwrap().sum_all().unwrap().backward().unwrap();
    });
    let x = Var::randn(0f32, 1., (32, 151, 64), &dev).unwrap();
    let w = Var::ones(64, candle_core::DType::F32, &dev).unwrap();
    let b = Var::zeros(64, candle_core::DType::F32, &dev).unwrap();
    time("layernorm fwd+bwd [32,151,64]", || {
        candle_nn::ops::layer_norm_slow(x.as_tensor(), w.as_tensor(), b.as_tensor(), 1e-5)
            .unwrap()
            .sum_all()
            .unwrap()
            .backward()
            .unwrap();
    });
    let wl = Var::randn(0f32, 0.02, (256, 64), &dev).unwrap();
    time("linear 64->256 fwd+bwd [32,151,64]", || {
        let y = x.as_tensor().broadcast_matmul(&wl.as_tensor().t().unwrap()).unwrap();
        y.sum_all().unwrap().backward().unwrap();
    });
    let q = Var::randn(0f32, 1., (32, 4, 151, 16), &dev).unwrap();
    let kt = Var::randn(0f32, 1., (32, 4, 16, 151), &dev).unwrap();
    time("qk matmul fwd+bwd", || {
        q.as_tensor().matmul(kt.as_tensor()).unwrap().sum_all().unwrap().backward().unwrap();
    });
}

#[test]
#[ignore]
fn fused_costs() {
    use super::fused;
    let dev = Device::Cpu;
    let att = Var::randn(0f32, 1., (32, 4, 151, 151), &dev).unwrap();
    time("fused softmax fwd+bwd", || {
        let y = fused::masked_softmax(
            att.as_tensor(),
            &candle_core::Tensor::zeros((32, 1, 1, 151), candle_core::DType::F32, &dev).unwrap(),
        )
        .unwrap();
        y.sum_all().unwrap().backward().unwrap();
    });
    let h = Var::randn(0f32, 1., (32, 151, 256), &dev).unwrap();
    time("fused gelu fwd+bwd [32,151,256]", || {
        fused::gelu(h.as_tensor()).unwrap().sum_all().unwrap().backward().unwrap();
    });
    let x = Var::randn(0f32, 1., (32, 151, 64), &dev).unwrap();
    let w = Var::ones(64, candle_core::DType::F32, &dev).unwrap();
    let b = Var::zeros(64, candle_core::DType::F32, &dev).unwrap();
    time("fused layernorm fwd+bwd [32,151,64]", || {
        fused::layer_norm(x.as_tensor(), w.as_tensor(), b.as_tensor(), 1e-5)
            .unwrap()
            .sum_all()
            .unwrap()
            .backward()
            .unwrap();
    });
}

#[test]
#[ignore]
fn reduce_costs() {
    let dev = Device::Cpu;
    let x = candle_core::Tensor::randn(0f32, 1., (32, 151, 64), &dev).unwrap();
    time("sum_keepdim(0) of [4832,64]", || {
        x.reshape((4832, 64)).unwrap().sum_keepdim(0).unwrap();
    });
    time("sum over (0,1) of [32,151,64]", || {
        x.sum_keepdim((0, 1)).unwrap();
    });
    time("t() then sum_keepdim(1)", || {
        x.reshape((4832, 64)).unwrap().t().unwrap().contiguous().unwrap().sum_keepdim(1).unwrap();
    });
    let w = Var::ones(64, candle_core::DType::F32, &dev).unwrap();
    time("broadcast_mul w fwd+bwd", || {
        x.broadcast_mul(w.as_tensor()).unwrap().sum_all().unwrap().backward().unwrap();
    });
    time("broadcast_add w fwd+bwd", || {
        x.broadcast_add(w.as_tensor()).unwrap().sum_all().unwrap().backward().unwrap();
    });
    let xv = Var::randn(0f32, 1., (32, 151, 64), &dev).unwrap();
    time("sum_all backward only on var", || {
        xv.as_tensor().sum_all().unwrap().backward().unwrap();
    });
    time("mul fwd+bwd same shape", || {
        (xv.as_tensor() * &x).unwrap().sum_all().unwrap().backward().unwrap();
    });
}

#[test]
#[ignore]
fn layer_costs() {
    use super::model::*;
    use candle_core::Module;
    use candle_nn::{VarBuilder, VarMap};
    let dev = Device::Cpu;
    let cfg = super::VlmConfig::small();
    let map = VarMap::new();
    let vb = VarBuilder::from_varmap(&map, candle_core::DType::F32, &dev);
    let enc = EncoderLayer::new(&cfg, 0.01, vb.pp("e")).unwrap();
    let x = Var::randn(0f32, 1., (32, 151, 64), &dev).unwrap();
    let mask = candle_core::Tensor::zeros((32, 1, 1, 151), candle_core::DType::F32, &dev).unwrap();
    time("encoder layer fwd", || {
        enc.forward(x.as_tensor(), &mask).unwrap();
    });
    time("encoder layer fwd+bwd", || {
        enc.forward(x.as_tensor(), &mask).unwrap().sum_all().unwrap().backward().unwrap();
    });
    let attn = Attention::new(64, 4, 0.01, vb.pp("a")).unwrap();
    time("attention fwd+bwd", || {
        attn.forward(x.as_tensor(), x.as_tensor(), &mask).unwrap().sum_all().unwrap().backward().unwrap();
    });
    let mlp = Mlp::new(64, 256, 0.01, vb.pp("m")).unwrap();
    time("mlp fwd+bwd", || {
        mlp.forward(x.as_tensor()).unwrap().sum_all().unwrap().backward().unwrap();
    });
    let ln = LayerNorm::new(64, vb.pp("ln")).unwrap();
    time("ln fwd+bwd", || {
        ln.forward(x.as_tensor()).unwrap().sum_all().unwrap().backward().unwrap();
    });
    let stem = VisionStem::new(&cfg, vb.pp("s")).unwrap();
    let img = candle_core::Tensor::randn(0f32, 1., (32, 96, 72, 3), &dev).unwrap();
    time("stem fwd+bwd", || {
        stem.forward(&img).unwrap().sum_all().unwrap().backward().unwrap();
    });
    let dec = DecoderLayer::new(&cfg, 0.01, vb.pp("d")).unwrap();
    let y = Var::randn(0f32, 1., (32, 13, 64), &dev).unwrap();
    let causal = candle_core::Tensor::zeros((13, 13), candle_core::DType::F32, &dev).unwrap();
    time("decoder layer fwd+bwd (incl. cross kv)", || {
        let kv = attn.kv(x.as_tensor()).unwrap();
        dec.forward(y.as_tensor(), &causal, &kv, &mask).unwrap().sum_all().unwrap().backward().unwrap();
    });
}

#[test]
#[ignore]
fn attn_costs() {
    use super::model::*;
    use candle_nn::{VarBuilder, VarMap};
    let dev = Device::Cpu;
    let map = VarMap::new();
    let vb = VarBuilder::from_varmap(&map, candle_core::DType::F32, &dev);
    let x = Var::randn(0f32, 1., (32, 151, 64), &dev).unwrap();
    let mask = candle_core::Tensor::zeros((32, 1, 1, 151), candle_core::DType::F32, &dev).unwrap();
    for h in [1, 2, 4] {
        let attn = Attention::new(64, h, 0.01, vb.pp(format!("a{h}"))).unwrap();
        time(&format!("attention heads {h} fwd"), || {
            attn.forward(x.as_tensor(), x.as_tensor(), &mask).unwrap();
        });
        time(&format!("attention heads {h} fwd+bwd"), || {
            attn.forward(x.as_tensor(), x.as_tensor(), &mask).unwrap().sum_all().unwrap().backward().unwrap();
        });
    }
    let s = Var::randn(0f32, 1., (32, 4, 151, 151), &dev).unwrap();
    time("fused softmax fwd+bwd", || {
        super::fused::masked_softmax(s.as_tensor(), &mask).unwrap().sum_all().unwrap().backward().unwrap();
    });
    time("mask add fwd+bwd", || {
        s.as_tensor().broadcast_add(&mask).unwrap().sum_all().unwrap().backward().unwrap();
    });
    let v = Var::randn(0f32, 1., (32, 4, 151, 16), &dev).unwrap();
    time("pv matmul fwd+bwd", || {
        s.as_tensor().matmul(v.as_tensor()).unwrap().sum_all().unwrap().backward().unwrap();
    });
    time("sum_all bwd of [32,4,151,151]", || {
        s.as_tensor().sum_all().unwrap().backward().unwrap();
    });
}
