//! One body per op run on both backends: CUDA against the exact CPU backend (f32 arithmetic on
//! dequantized weights) by normalised mean squared error, for every weight type with a CUDA
//! kernel and rows 1, 2, 3, 8, 16 and 512 (3: the 8-bit kernels' 4-row variant). Without a GPU
//! these skip, unless ISHIZUKI_REQUIRE_CUDA is set (the GPU host), where that is a failure.
use ishizuki_core::backend::{Activation, AttnParams, NormKind, RopeKind, RopeParams, WeightView};
use ishizuki_core::quant::quantize_row;
use ishizuki_core::{
    Backend, Buffer, ForwardMeta, GgmlType, KvShape, LoadedWeight, WeightRole, WeightSource,
};
use ishizuki_cpu::CpuBackend;
use ishizuki_cuda::kernels::{f16_gemm_takes, Q8_ACTIVATION_TYPES, WEIGHT_TYPES};
use ishizuki_cuda::CudaBackend;
use std::sync::{Arc, OnceLock};

mod common;
use common::{open_gpu, Rng};

const ROWS: [usize; 6] = [1, 2, 3, 8, 16, 512];

fn gpu() -> Option<&'static CudaBackend> {
    static GPU: OnceLock<Option<CudaBackend>> = OnceLock::new();
    GPU.get_or_init(|| open_gpu(false)).as_ref()
}

/// The backend with f32 activations into every matmul.
fn gpu_exact() -> Option<&'static CudaBackend> {
    static GPU: OnceLock<Option<CudaBackend>> = OnceLock::new();
    GPU.get_or_init(|| open_gpu(true)).as_ref()
}

fn nmse(got: &[f32], want: &[f32]) -> f64 {
    assert_eq!(got.len(), want.len());
    let (mut err, mut norm) = (0f64, 0f64);
    for (&g, &w) in got.iter().zip(want) {
        assert!(g.is_finite(), "a non-finite output");
        err += (g as f64 - w as f64).powi(2);
        norm += (w as f64).powi(2);
    }
    err / norm.max(1e-30)
}

fn assert_close(what: &str, got: &[f32], want: &[f32], tol: f64) {
    let e = nmse(got, want);
    assert!(e <= tol, "{what}: NMSE {e:e} > {tol:e}");
}

/// `n_out x n_in` weights of `ty`: quantized random values, or for a type without a quantizer
/// random bytes whose f16 scales (and mins) are set to sane values.
fn weights(ty: GgmlType, n_out: usize, n_in: usize, rng: &mut Rng) -> Vec<u8> {
    let row_bytes = ty.row_bytes(n_in as u64).unwrap() as usize;
    let mut out = vec![0u8; row_bytes * n_out];
    // each block's f16 scale and min offsets (None: no min)
    let (scale_at, min_at) = match ty {
        GgmlType::Q5_K => (0, Some(2)),
        GgmlType::Q2_K => (80, Some(82)),
        GgmlType::Q3_K => (108, None),
        GgmlType::IQ4_NL | GgmlType::IQ4_XS => (0, None),
        _ => (0, None),
    };
    for row in out.chunks_mut(row_bytes) {
        let src = rng.vec(n_in);
        if quantize_row(ty, &src, row).is_ok() {
            continue;
        }
        let recipe = [
            GgmlType::Q5_K,
            GgmlType::Q2_K,
            GgmlType::Q3_K,
            GgmlType::IQ4_NL,
            GgmlType::IQ4_XS,
        ];
        assert!(
            recipe.contains(&ty),
            "{ty} has no quantizer and no recipe here"
        );
        for block in row.chunks_mut(ty.type_size()) {
            block.iter_mut().for_each(|b| *b = rng.next() as u8);
            let d = half::f16::from_f32(0.01 + 0.01 * rng.f32().abs());
            block[scale_at..scale_at + 2].copy_from_slice(&d.to_le_bytes());
            if let Some(at) = min_at {
                let m = half::f16::from_f32(0.005 * rng.f32().abs());
                block[at..at + 2].copy_from_slice(&m.to_le_bytes());
            }
        }
    }
    out
}

fn load(
    be: &dyn Backend,
    ty: GgmlType,
    n_out: usize,
    n_in: usize,
    bytes: &Arc<Vec<u8>>,
) -> LoadedWeight {
    let src = WeightSource {
        name: "test.weight",
        view: WeightView::new(ty, n_out, n_in, bytes),
        owner: bytes.clone(),
        role: WeightRole::BOTH,
    };
    be.load_weight(&src, &mut |_| {}).expect("load_weight")
}

fn host(be: &dyn Backend, b: &Buffer, n: usize) -> Vec<f32> {
    let mut out = vec![0f32; n];
    be.read(b, &mut out).expect("read");
    out
}

/// `x (rows, w.n_in) . w^T` on `be` from a fresh upload of `x`: the bits of a matmul that
/// quantizes its input itself.
fn matmul_of(be: &dyn Backend, w: &LoadedWeight, x: &[f32], rows: usize) -> Vec<f32> {
    let mut out = be.alloc(rows * w.n_out).unwrap();
    be.matmul(w, &be.load_vector(x).unwrap(), rows, &mut out)
        .unwrap();
    host(be, &out, rows * w.n_out)
}

/// The same op on both backends: `f(backend, inputs) -> output buffer` with inputs uploaded.
fn both(
    cpu: &dyn Backend,
    cuda: &dyn Backend,
    n_out: usize,
    f: impl Fn(&dyn Backend) -> Buffer,
) -> (Vec<f32>, Vec<f32>) {
    let (a, b) = (f(cuda), f(cpu));
    (host(cuda, &a, n_out), host(cpu, &b, n_out))
}

/// NMSE of 8-bit activations (a uniform rounding step of amax / 127 per 32 values) is ~2e-5.
const Q8_ACTIVATION_NMSE: f64 = 1e-4;
/// Prefill rows in fast mode: f16 operands (11-bit mantissas) into an f32-accumulated GEMM.
const F16_GEMM_NMSE: f64 = 1e-5;

#[test]
fn matmul_and_embed_match_the_cpu_for_every_weight_type() {
    let (Some(fast), Some(exact)) = (gpu(), gpu_exact()) else {
        return;
    };
    let cpu = CpuBackend::exact(2);
    let mut rng = Rng(0x9e3779b97f4a7c15);
    // n_out not a multiple of a block's output rows; n_in two K-quant super-blocks, and for
    // 32-blocks a row that ends inside a warp step of the 8-bit kernel; rows of 37 and 301
    // blocks take several passes of its loads, the last one partial; odd block counts pad
    // planar rows
    for (ty, _) in WEIGHT_TYPES {
        let widths: &[usize] = if ty.block_size() == 32 {
            &[512, 288, 9632]
        } else {
            &[512, 9472]
        };
        for &n_in in widths {
            let n_out = 101;
            let bytes = Arc::new(weights(ty, n_out, n_in, &mut rng));
            let wc = load(&cpu, ty, n_out, n_in, &bytes);
            for (cuda, is_exact) in [(exact, true), (fast, false)] {
                let wg = load(cuda, ty, n_out, n_in, &bytes);
                let q8 = !is_exact && Q8_ACTIVATION_TYPES.contains(&ty);
                for rows in ROWS {
                    let x = rng.vec(rows * n_in);
                    let run = |be: &dyn Backend, w: &LoadedWeight| {
                        let xb = be.load_vector(&x).unwrap();
                        let mut out = be.alloc(rows * n_out).unwrap();
                        be.matmul(w, &xb, rows, &mut out).unwrap();
                        host(be, &out, rows * n_out)
                    };
                    let tol = if q8 && rows <= 16 {
                        Q8_ACTIVATION_NMSE
                    } else if !is_exact && rows > 16 && f16_gemm_takes(ty) {
                        F16_GEMM_NMSE
                    } else {
                        1e-10
                    };
                    assert_close(
                        &format!("matmul {ty} n_in {n_in} rows {rows} exact {is_exact}"),
                        &run(cuda, &wg),
                        &run(&cpu, &wc),
                        tol,
                    );
                }
                let tokens: Vec<u32> = (0..7).map(|i| (i * 37 % n_out) as u32).collect();
                let embed = |be: &dyn Backend, w: &LoadedWeight| {
                    let mut meta = ForwardMeta::new(&tokens, 0, vec![]);
                    be.prepare(&mut meta).unwrap();
                    let mut out = be.alloc(tokens.len() * n_in).unwrap();
                    be.embed(w, &meta, &mut out).unwrap();
                    host(be, &out, tokens.len() * n_in)
                };
                assert_eq!(embed(cuda, &wg), embed(&cpu, &wc), "embed {ty}");
            }
        }
    }
}

#[test]
fn a_row_gives_the_same_bits_in_any_verification_batch() {
    let Some(cuda) = gpu() else { return };
    let mut rng = Rng(7);
    // 37 K-quant blocks, 296 32-blocks: several passes of the 8-bit kernel's loads
    let (n_out, n_in) = (64, 9472);
    for ty in [
        GgmlType::Q4_K,
        GgmlType::Q6_K,
        GgmlType::Q8_0,
        GgmlType::Q5_0,
    ] {
        let bytes = Arc::new(weights(ty, n_out, n_in, &mut rng));
        let w = load(cuda, ty, n_out, n_in, &bytes);
        let x = rng.vec(16 * n_in);
        let run = |rows: usize, from: usize| {
            let xb = cuda
                .load_vector(&x[from * n_in..(from + rows) * n_in])
                .unwrap();
            let mut out = cuda.alloc(rows * n_out).unwrap();
            cuda.matmul(&w, &xb, rows, &mut out).unwrap();
            host(cuda, &out, rows * n_out)
        };
        let all = run(16, 0);
        for r in 0..16 {
            assert_eq!(
                run(1, r),
                all[r * n_out..][..n_out].to_vec(),
                "{ty} row {r}"
            );
            assert_eq!(
                run(3, r.min(13))[..n_out],
                all[r.min(13) * n_out..][..n_out],
                "{ty} row {r} of 3"
            );
        }
    }
}

/// q, k and v of mixed types (two share a launch, one runs alone), a group longer than one
/// launch takes, and a type without 8-bit kernels: each output as the CPU's matmul, and on
/// CUDA the same bits as a matmul of its own.
#[test]
fn matmuls_of_one_input_match_the_cpu_and_their_own_matmul() {
    let Some(cuda) = gpu() else { return };
    let cpu = CpuBackend::exact(2);
    let mut rng = Rng(31);
    let n_in = 512;
    use GgmlType::*;
    let sets: [&[(GgmlType, usize)]; 3] = [
        &[(Q4_K, 96), (Q4_K, 40), (Q6_K, 40)],
        &[(Q8_0, 8), (Q8_0, 24), (Q8_0, 16), (Q8_0, 8)],
        &[(Q5_0, 32), (Q4_K, 16)],
    ];
    for set in sets {
        let bytes: Vec<_> = set
            .iter()
            .map(|&(ty, n)| Arc::new(weights(ty, n, n_in, &mut rng)))
            .collect();
        let on = |be: &dyn Backend| -> Vec<LoadedWeight> {
            set.iter()
                .zip(&bytes)
                .map(|(&(ty, n), b)| load(be, ty, n, n_in, b))
                .collect()
        };
        let (wg, wc) = (on(cuda), on(&cpu));
        for rows in ROWS {
            let x = rng.vec(rows * n_in);
            let multi = |be: &dyn Backend, ws: &[LoadedWeight]| -> Vec<Vec<f32>> {
                let xb = be.load_vector(&x).unwrap();
                let mut outs: Vec<Buffer> = ws
                    .iter()
                    .map(|w| be.alloc(rows * w.n_out).unwrap())
                    .collect();
                let refs: Vec<&LoadedWeight> = ws.iter().collect();
                let mut outs_mut: Vec<&mut Buffer> = outs.iter_mut().collect();
                be.matmul_multi(&refs, &xb, rows, &mut outs_mut).unwrap();
                outs.iter()
                    .zip(ws)
                    .map(|(o, w)| host(be, o, rows * w.n_out))
                    .collect()
            };
            let (got, want) = (multi(cuda, &wg), multi(&cpu, &wc));
            for (i, w) in wg.iter().enumerate() {
                let what = format!("matmul_multi {} of {set:?}, rows {rows}", w.ty);
                let tol = if rows <= 16 {
                    Q8_ACTIVATION_NMSE
                } else {
                    F16_GEMM_NMSE
                };
                assert_close(&what, &got[i], &want[i], tol);
                let xb = cuda.load_vector(&x).unwrap();
                let mut out = cuda.alloc(rows * w.n_out).unwrap();
                cuda.matmul(w, &xb, rows, &mut out).unwrap();
                assert_eq!(
                    got[i],
                    host(cuda, &out, rows * w.n_out),
                    "{what}: own matmul"
                );
            }
        }
    }
}

/// The gated pair: the one-kernel 8-bit path and the fallback (a type without it) against the
/// CPU's matmul_glu, and against CUDA's two matmuls then glu.
#[test]
fn the_gated_pair_matches_the_cpu_and_the_unfused_ops() {
    let Some(cuda) = gpu() else { return };
    let cpu = CpuBackend::exact(2);
    let mut rng = Rng(57);
    let n_out = 72;
    let cases = [
        GgmlType::Q4_K,
        GgmlType::Q6_K,
        GgmlType::Q8_0,
        GgmlType::Q5_0,
    ];
    for (ty, n_in) in cases.into_iter().flat_map(|t| [(t, 512), (t, 9472)]) {
        let (bg, bu) = (
            Arc::new(weights(ty, n_out, n_in, &mut rng)),
            Arc::new(weights(ty, n_out, n_in, &mut rng)),
        );
        let (gc, uc) = (
            load(&cpu, ty, n_out, n_in, &bg),
            load(&cpu, ty, n_out, n_in, &bu),
        );
        let (gg, ug) = (
            load(cuda, ty, n_out, n_in, &bg),
            load(cuda, ty, n_out, n_in, &bu),
        );
        for act in [Activation::SwiGlu, Activation::GeGluTanh] {
            for rows in ROWS {
                let x = rng.vec(rows * n_in);
                let n = rows * n_out;
                let fused = |be: &dyn Backend, g: &LoadedWeight, u: &LoadedWeight| {
                    let xb = be.load_vector(&x).unwrap();
                    let (mut gate, mut up) = (be.alloc(n).unwrap(), be.alloc(n).unwrap());
                    be.matmul_glu([g, u], &xb, rows, &mut gate, &mut up, act)
                        .unwrap();
                    host(be, &gate, n)
                };
                let got = fused(cuda, &gg, &ug);
                let what = format!("matmul_glu {ty} n_in {n_in} {act:?} rows {rows}");
                let tol = if rows <= 16 {
                    2.0 * Q8_ACTIVATION_NMSE
                } else {
                    2.0 * F16_GEMM_NMSE
                };
                assert_close(&what, &got, &fused(&cpu, &gc, &uc), tol);
                let xb = cuda.load_vector(&x).unwrap();
                let (mut gate, mut up) = (cuda.alloc(n).unwrap(), cuda.alloc(n).unwrap());
                cuda.matmul(&gg, &xb, rows, &mut gate).unwrap();
                cuda.matmul(&ug, &xb, rows, &mut up).unwrap();
                cuda.glu(&mut gate, &up, n, act).unwrap();
                assert_close(
                    &format!("{what}: unfused"),
                    &got,
                    &host(cuda, &gate, n),
                    1e-12,
                );
            }
        }
    }
}

#[test]
fn an_unsupported_weight_type_fails_at_load_naming_the_tensor() {
    let Some(cuda) = gpu() else { return };
    let ty = GgmlType::IQ2_XXS;
    let bytes = Arc::new(vec![0u8; ty.row_bytes(256).unwrap() as usize * 4]);
    let src = WeightSource {
        name: "blk.0.ffn_down.weight",
        view: WeightView::new(ty, 4, 256, &bytes),
        owner: bytes.clone(),
        role: WeightRole::MATMUL,
    };
    let Err(err) = cuda.load_weight(&src, &mut |_| {}) else {
        panic!("IQ2_XXS loaded on CUDA")
    };
    assert!(err.to_string().contains("blk.0.ffn_down.weight"), "{err}");
}

#[test]
fn norms_and_elementwise_ops_match_the_cpu() {
    let Some(cuda) = gpu() else { return };
    let cpu = CpuBackend::exact(2);
    let mut rng = Rng(11);
    // float4 rows, a width that is not a multiple of 4, and a block of 1024 threads
    for (width, rows) in ROWS.iter().map(|&r| (320, r)).chain([(322, 3), (4096, 2)]) {
        let n = rows * width;
        let (x, d, w, bias) = (rng.vec(n), rng.vec(n), rng.vec(width), rng.vec(width));
        for kind in [NormKind::Rms, NormKind::RmsPlusOne] {
            let (g, c) = both(&cpu, cuda, n, |be| {
                let mut xb = be.load_vector(&x).unwrap();
                be.rms_norm(&mut xb, rows, &be.load_vector(&w).unwrap(), 1e-6, kind)
                    .unwrap();
                xb
            });
            assert_close(&format!("rms_norm {kind:?} rows {rows}"), &g, &c, 1e-12);
            for with_delta in [false, true] {
                let run = |be: &dyn Backend| {
                    let mut xb = be.load_vector(&x).unwrap();
                    let db = be.load_vector(&d).unwrap();
                    let mut out = be.alloc(n).unwrap();
                    let wb = be.load_vector(&w).unwrap();
                    be.add_rms_norm(
                        &mut xb,
                        with_delta.then_some(&db),
                        &mut out,
                        rows,
                        &wb,
                        1e-5,
                        kind,
                    )
                    .unwrap();
                    [host(be, &xb, n), host(be, &out, n)].concat()
                };
                assert_close(
                    &format!("add_rms_norm rows {rows}"),
                    &run(cuda),
                    &run(&cpu),
                    1e-12,
                );
            }
        }
        let elementwise = |be: &dyn Backend| {
            let mut xb = be.load_vector(&x).unwrap();
            be.add_bias(&mut xb, rows, &be.load_vector(&bias).unwrap())
                .unwrap();
            be.add(&mut xb, &be.load_vector(&d).unwrap(), n).unwrap();
            be.scale(&mut xb, n, 3.5).unwrap();
            be.softcap(&mut xb, n, 2.0).unwrap();
            let mut gate = be.load_vector(&d).unwrap();
            be.glu(&mut gate, &xb, n, Activation::SwiGlu).unwrap();
            let mut gate2 = be.load_vector(&x).unwrap();
            be.glu(&mut gate2, &xb, n, Activation::GeGluTanh).unwrap();
            [host(be, &xb, n), host(be, &gate, n), host(be, &gate2, n)].concat()
        };
        assert_close(
            &format!("bias/add/scale/softcap/glu rows {rows}"),
            &elementwise(cuda),
            &elementwise(&cpu),
            1e-12,
        );
    }
}

#[test]
fn rope_kv_and_attention_match_the_cpu() {
    let Some(cuda) = gpu() else { return };
    let cpu = CpuBackend::exact(2);
    let mut rng = Rng(13);
    // (n_head, n_head_kv, head_dim, window, softcap, cached keys before a few-row forward):
    // query heads per KV head 1..16 (past one block's 8), splits of one and of two tiles
    let shapes = [
        (4, 2, 64, None, None, 9000),
        (8, 1, 256, Some(40), Some(50.0), 300),
        (6, 6, 128, None, None, 300),
        (4, 2, 16, Some(3), None, 300),
        (2, 1, 80, None, Some(20.0), 300),
        (14, 2, 64, None, None, 300),
        (16, 1, 32, Some(1000), None, 2000),
    ];
    for (n_head, n_head_kv, head_dim, window, softcap, deep) in shapes {
        for rows in ROWS {
            // a prefix already cached, then this forward's rows
            let start = if rows == 512 { 100 } else { deep };
            let shape = KvShape {
                n_layer: 2,
                n_head_kv,
                head_dim,
                capacity: start + rows + 8,
            };
            let prefix: Vec<u32> = (0..start as u32).collect();
            let tokens: Vec<u32> = (0..rows as u32).collect();
            let (q_all, k_pre, v_pre) = (
                rng.vec(rows * n_head * head_dim),
                rng.vec(start * n_head_kv * head_dim),
                rng.vec(start * n_head_kv * head_dim),
            );
            let (k_new, v_new) = (
                rng.vec(rows * n_head_kv * head_dim),
                rng.vec(rows * n_head_kv * head_dim),
            );
            let kind = if n_head == 6 {
                RopeKind::Neox
            } else {
                RopeKind::Norm
            };
            let p = AttnParams {
                n_head,
                n_head_kv,
                head_dim,
                scale: 1.0 / (head_dim as f32).sqrt(),
                window,
                softcap,
            };
            let run = |be: &dyn Backend, fused: bool| {
                let mut kv = be.alloc_kv(shape).unwrap();
                let mut pre = ForwardMeta::new(&prefix, 0, vec![]);
                be.prepare(&mut pre).unwrap();
                let (kb, vb) = (
                    be.load_vector(&k_pre).unwrap(),
                    be.load_vector(&v_pre).unwrap(),
                );
                be.write_kv(&mut kv, 1, &kb, &vb, &pre).unwrap();
                let mut meta = ForwardMeta::new(&tokens, start, vec![]);
                be.prepare(&mut meta).unwrap();
                let mut q = be.load_vector(&q_all).unwrap();
                let mut k = be.load_vector(&k_new).unwrap();
                let v = be.load_vector(&v_new).unwrap();
                if fused {
                    let rope = RopeParams {
                        theta: 10000.0,
                        freq_scale: 0.5,
                        kind,
                    };
                    be.rope_write_kv(&mut q, &mut k, &v, n_head, &mut kv, 1, &meta, rope)
                        .unwrap();
                } else {
                    be.rope(&mut q, n_head, head_dim, &meta, 10000.0, 0.5, kind)
                        .unwrap();
                    be.rope(&mut k, n_head_kv, head_dim, &meta, 10000.0, 0.5, kind)
                        .unwrap();
                    be.write_kv(&mut kv, 1, &k, &v, &meta).unwrap();
                }
                let mut out = be.alloc(rows * n_head * head_dim).unwrap();
                be.attention(&q, &kv, 1, &meta, &p, &mut out).unwrap();
                [host(be, &q, q_all.len()), host(be, &out, q_all.len())].concat()
            };
            let what = format!("heads {n_head}/{n_head_kv}x{head_dim} window {window:?} softcap {softcap:?} rows {rows}");
            let fused = run(cuda, true);
            assert_close(&what, &fused, &run(&cpu, false), 1e-9);
            // the fused rope + KV write is the three ops it replaces, to the bit
            let bits = |x: &[f32]| x.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&fused), bits(&run(cuda, false)), "{what}: fused");
        }
    }
}

#[test]
fn gather_read_and_argmax_match_the_cpu() {
    let Some(cuda) = gpu() else { return };
    let cpu = CpuBackend::exact(2);
    let mut rng = Rng(17);
    let width = 1000;
    for rows in ROWS {
        let mut x = rng.vec(rows * width);
        // ties take the lowest index, NaN is never chosen, an all-NaN row answers 0
        x[3] = 5.0;
        x[7] = 5.0;
        if rows > 1 {
            x[width] = f32::NAN;
            x[width + 1..2 * width]
                .iter_mut()
                .for_each(|v| *v = f32::NAN);
        }
        let wanted: Vec<u32> = (0..rows as u32).step_by(3).collect();
        let tokens = vec![0u32; rows];
        let run = |be: &dyn Backend| {
            let xb = be.load_vector(&x).unwrap();
            let mut meta = ForwardMeta::new(&tokens, 0, wanted.clone());
            be.prepare(&mut meta).unwrap();
            let mut dst = be.alloc(wanted.len() * width).unwrap();
            be.gather_rows(&xb, width, &meta, &mut dst).unwrap();
            let ids = be.argmax(&xb, rows, width).unwrap();
            (host(be, &dst, wanted.len() * width), ids)
        };
        let (g, c) = (run(cuda), run(&cpu));
        assert_eq!(g.1, c.1, "argmax rows {rows}");
        assert_eq!(
            g.0.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
            c.0.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
            "gather rows {rows}"
        );
    }
}

#[test]
fn bad_shapes_and_foreign_handles_are_errors() {
    let Some(cuda) = gpu() else { return };
    let cpu = CpuBackend::new(1);
    let small = cuda.alloc(4).unwrap();
    let mut out = cuda.alloc(4).unwrap();
    assert!(
        cuda.add(&mut out, &small, 5).is_err(),
        "past a buffer's end"
    );
    let theirs = cpu.alloc(4).unwrap();
    assert!(
        cuda.add(&mut out, &theirs, 4).is_err(),
        "another backend's buffer"
    );
    let meta = ForwardMeta::new(&[1], 0, vec![0]);
    let mut x = cuda.alloc(64).unwrap();
    assert!(
        cuda.rope(&mut x, 1, 64, &meta, 1e4, 1.0, RopeKind::Norm)
            .is_err(),
        "metadata not prepared"
    );
    let shape = KvShape {
        n_layer: 1,
        n_head_kv: 1,
        head_dim: 64,
        capacity: 4,
    };
    let mut kv = cuda.alloc_kv(shape).unwrap();
    let mut late = ForwardMeta::new(&[1], 4, vec![0]);
    cuda.prepare(&mut late).unwrap();
    let k = cuda.alloc(64).unwrap();
    assert!(
        cuda.write_kv(&mut kv, 0, &k, &k, &late).is_err(),
        "a position past the capacity"
    );
}

/// A decode norm leaves its output quantized for the next matmul: that matmul gives the bits
/// of one on a copy (quantized by itself), and an op writing the output in between makes the
/// matmul quantize again.
#[test]
fn a_norm_quantizes_for_the_next_matmul_only() {
    let Some(cuda) = gpu() else { return };
    let cpu = CpuBackend::exact(2);
    let mut rng = Rng(91);
    let (n_out, n_in, rows) = (48, 1024, 2);
    let bytes = Arc::new(weights(GgmlType::Q4_K, n_out, n_in, &mut rng));
    let (wg, wc) = (
        load(cuda, GgmlType::Q4_K, n_out, n_in, &bytes),
        load(&cpu, GgmlType::Q4_K, n_out, n_in, &bytes),
    );
    let (x, g, y) = (rng.vec(rows * n_in), rng.vec(n_in), rng.vec(rows * n_in));
    let gb = cuda.load_vector(&g).unwrap();
    let normed = |touch: bool| {
        let mut xb = cuda.load_vector(&x).unwrap();
        let mut out = cuda.alloc(rows * n_in).unwrap();
        let kind = NormKind::Rms;
        cuda.add_rms_norm(&mut xb, None, &mut out, rows, &gb, 1e-6, kind)
            .unwrap();
        if touch {
            cuda.add(&mut out, &cuda.load_vector(&y).unwrap(), rows * n_in)
                .unwrap();
        }
        let mut mm = cuda.alloc(rows * n_out).unwrap();
        cuda.matmul(&wg, &out, rows, &mut mm).unwrap();
        (host(cuda, &out, rows * n_in), host(cuda, &mm, rows * n_out))
    };
    let (out, fused) = normed(false);
    assert_eq!(
        fused,
        matmul_of(cuda, &wg, &out, rows),
        "fused quantization"
    );
    let (touched, after) = normed(true);
    assert_eq!(after, matmul_of(cuda, &wg, &touched, rows), "after a write");
    let tol = Q8_ACTIVATION_NMSE;
    assert_close(
        "after a write, the CPU",
        &after,
        &matmul_of(&cpu, &wc, &touched, rows),
        tol,
    );
}

/// Decode attention leaves its output quantized for the output matmul, with one split and
/// with several merged: that matmul gives the bits of one on a copy.
#[test]
fn attention_quantizes_for_the_output_matmul() {
    let Some(cuda) = gpu() else { return };
    let mut rng = Rng(93);
    let (n_head, n_head_kv, head_dim, n_out) = (8, 2, 64, 40);
    let n_in = n_head * head_dim;
    let bytes = Arc::new(weights(GgmlType::Q4_K, n_out, n_in, &mut rng));
    let w = load(cuda, GgmlType::Q4_K, n_out, n_in, &bytes);
    let p = AttnParams {
        n_head,
        n_head_kv,
        head_dim,
        scale: 0.125,
        window: None,
        softcap: None,
    };
    for (start, rows) in [(10, 1), (10, 3), (290, 1), (290, 3)] {
        let shape = KvShape {
            n_layer: 1,
            n_head_kv,
            head_dim,
            capacity: 300,
        };
        let mut kv = cuda.alloc_kv(shape).unwrap();
        let prefix: Vec<u32> = (0..(start + rows) as u32).collect();
        let mut all = ForwardMeta::new(&prefix, 0, vec![]);
        cuda.prepare(&mut all).unwrap();
        let kn = (start + rows) * n_head_kv * head_dim;
        let (k, v) = (
            cuda.load_vector(&rng.vec(kn)).unwrap(),
            cuda.load_vector(&rng.vec(kn)).unwrap(),
        );
        cuda.write_kv(&mut kv, 0, &k, &v, &all).unwrap();
        let tokens = vec![0u32; rows];
        let mut meta = ForwardMeta::new(&tokens, start, vec![]);
        cuda.prepare(&mut meta).unwrap();
        let q = cuda.load_vector(&rng.vec(rows * n_in)).unwrap();
        let mut out = cuda.alloc(rows * n_in).unwrap();
        cuda.attention(&q, &kv, 0, &meta, &p, &mut out).unwrap();
        let mut fused = cuda.alloc(rows * n_out).unwrap();
        cuda.matmul(&w, &out, rows, &mut fused).unwrap();
        let copy = host(cuda, &out, rows * n_in);
        assert_eq!(
            host(cuda, &fused, rows * n_out),
            matmul_of(cuda, &w, &copy, rows),
            "{start} cached keys, {rows} rows"
        );
    }
}
