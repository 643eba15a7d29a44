//! Packed weights against the f64 product of the dequantized operands, every packable type,
//! partial tiles and 1..=MAX_ROWS activation rows; and what is refused.
use super::*;
use crate::gemm::tests::{assert_matches_reference, dequantized, weights, TYPES};
use crate::pool::ThreadPool;
use crate::test_rng::Rng;
use ishizuki_core::huge::HugeArena;

#[test]
fn packed_matmul_matches_the_dequantized_product() {
    if tier() < Tier::Avx2 {
        eprintln!("skipped: no packed kernels at tier {}", tier().name());
        return;
    }
    let pool = ThreadPool::new(2);
    let packable = TYPES.iter().filter(|&&ty| Kind::of(ty).is_some());
    for &ty in packable {
        for (k, n_out) in [(32usize, 16), (96, 40), (576, 75)] {
            // whole blocks: 256, 256, 768 for a K-quant
            let k = k.next_multiple_of(ty.block_size());
            let mut rng = Rng(0x9ac4 ^ ty as u64 ^ k as u64);
            let wq = weights(ty, n_out, k, &mut rng);
            let wf = dequantized(ty, &wq, n_out, k);
            let mut view = WeightView::new(ty, n_out, k, &wq);
            let copy = pack(
                &view,
                &HugeArena::default(),
                &crate::pool::ThreadPool::new(2),
                &mut |_| {},
            )
            .expect("packable");
            view.packed = Some(&copy);
            for rows in (1..=MAX_ROWS).chain([MAX_ROWS + 5, 3 * MAX_ROWS]) {
                assert_eq!(applies(&[view], rows), rows <= MAX_ROWS);
                let x: Vec<f32> = (0..rows * k).map(|_| rng.unit()).collect();
                let mut out = vec![f32::NAN; rows * n_out];
                matmul(&pool, &[view], &x, rows, &mut [&mut out]);
                let what = format!("{ty} k {k} rows {rows}");
                assert_matches_reference(&pool, &out, &wf, &x, rows, n_out, &what);
            }
        }
    }
}

#[test]
fn several_packed_weights_share_one_call() {
    if tier() < Tier::Avx2 {
        return;
    }
    let pool = ThreadPool::new(2);
    let (k, mut rng) = (128, Rng(5));
    let (a, b) = (GgmlType::Q4_1, GgmlType::Q8_0);
    let (wa, wb) = (weights(a, 48, k, &mut rng), weights(b, 20, k, &mut rng));
    let (pa, pb) = (
        pack(
            &WeightView::new(a, 48, k, &wa),
            &HugeArena::default(),
            &crate::pool::ThreadPool::new(2),
            &mut |_| {},
        )
        .unwrap(),
        pack(
            &WeightView::new(b, 20, k, &wb),
            &HugeArena::default(),
            &crate::pool::ThreadPool::new(2),
            &mut |_| {},
        )
        .unwrap(),
    );
    let views = [
        WeightView {
            packed: Some(&pa),
            ..WeightView::new(a, 48, k, &wa)
        },
        WeightView {
            packed: Some(&pb),
            ..WeightView::new(b, 20, k, &wb)
        },
    ];
    let x: Vec<f32> = (0..2 * k).map(|_| rng.unit()).collect();
    let (mut oa, mut ob) = (vec![0f32; 2 * 48], vec![0f32; 2 * 20]);
    matmul(&pool, &views, &x, 2, &mut [&mut oa, &mut ob]);
    for (view, out) in views.iter().zip([&oa, &ob]) {
        let mut single = vec![0f32; out.len()];
        matmul(&pool, std::slice::from_ref(view), &x, 2, &mut [&mut single]);
        assert_eq!(out, &single, "{}", view.ty);
    }
}

/// Symmetric types store no mins, so a scale whose min (`-128 d` for Q8_0) is past f16's range
/// still packs, and its rows come back as the file's.
#[test]
fn symmetric_types_pack_scales_whose_min_overflows_f16() {
    let mut w = weights(GgmlType::Q8_0, 16, 32, &mut Rng(4));
    w[..2].copy_from_slice(&f16::from_f32(1000.0).to_le_bytes());
    let p = Packed::new(
        &HugeArena::default(),
        &ThreadPool::new(3),
        &WeightView::new(GgmlType::Q8_0, 16, 32, &w),
        &mut |_| {},
    )
    .expect("packed");
    assert_eq!(p.tile_bytes(), 512 + 2 * NR, "quants and scales only");
    let file = dequantized(GgmlType::Q8_0, &w, 16, 32);
    let mut row = [0f32; 32];
    p.dequantize_row(0, &mut row);
    assert_eq!(&row[..], &file[..32]);
}

#[test]
fn unpackable_weights_are_refused() {
    let mut rng = Rng(3);
    for ty in [GgmlType::Q6_K, GgmlType::IQ4_XS] {
        let w = weights(ty, 16, 256, &mut rng);
        assert!(
            Packed::new(
                &HugeArena::default(),
                &ThreadPool::new(1),
                &WeightView::new(ty, 16, 256, &w),
                &mut |_| {}
            )
            .is_none(),
            "{ty}"
        );
    }
    let w = weights(GgmlType::Q4_1, 16, 64, &mut rng);
    assert!(Packed::new(
        &HugeArena::default(),
        &ThreadPool::new(3),
        &WeightView::new(GgmlType::Q4_1, 16, 64, &w[1..]),
        &mut |_| {}
    )
    .is_none());
    assert!(Packed::new(
        &HugeArena::default(),
        &ThreadPool::new(3),
        &WeightView::new(GgmlType::Q4_1, 15, 64, &w),
        &mut |_| {}
    )
    .is_none());
    let view = WeightView::new(GgmlType::Q4_1, 16, 64, &w);
    assert!(!applies(&[view], 1), "a view without a packed copy");
}

#[test]
fn packing_hands_back_every_source_byte_once_in_order() {
    let mut rng = Rng(8);
    let n_out = 3 * RELEASE_ROWS + 5;
    let w = weights(GgmlType::Q4_0, n_out, 32, &mut rng);
    let mut next = 0;
    let p = Packed::new(
        &HugeArena::default(),
        &ThreadPool::new(3),
        &WeightView::new(GgmlType::Q4_0, n_out, 32, &w),
        &mut |done| {
            assert_eq!(done.as_ptr() as usize - w.as_ptr() as usize, next);
            next += done.len();
        },
    );
    assert!(p.is_some());
    assert_eq!(next, w.len());
}

#[test]
fn packed_tiles_unpack_to_the_gemm_form() {
    let mut rng = Rng(21);
    let packable = TYPES.iter().filter(|&&ty| Kind::of(ty).is_some());
    for &ty in packable {
        let (n_out, k) = (20, 96usize.next_multiple_of(ty.block_size()));
        let w = weights(ty, n_out, k, &mut rng);
        let view = WeightView::new(ty, n_out, k, &w);
        let p = Packed::new(
            &HugeArena::default(),
            &ThreadPool::new(1),
            &view,
            &mut |_| {},
        )
        .unwrap();
        for tile in 0..2 {
            let mut want = crate::gemm::Tile::default();
            assert!(want.unpack(&view, tile * NR));
            let (mut q, mut scale, mut min) = (
                vec![0; k * NR],
                vec![0.0; k / 32 * NR],
                vec![0.0; k / 32 * NR],
            );
            p.unpack_tile(tile, &mut q, &mut scale, &mut min);
            assert_eq!(
                (q, scale, min),
                (want.q, want.scale, want.min),
                "{ty} tile {tile}"
            );
        }
    }
}

#[test]
fn packed_rows_dequantize_like_the_file() {
    let mut rng = Rng(34);
    let packable = TYPES.iter().filter(|&&ty| Kind::of(ty).is_some());
    for &ty in packable {
        let (n_out, k) = (19, 64usize.next_multiple_of(ty.block_size()));
        let w = weights(ty, n_out, k, &mut rng);
        let want = dequantized(ty, &w, n_out, k);
        let p = Packed::new(
            &HugeArena::default(),
            &ThreadPool::new(1),
            &WeightView::new(ty, n_out, k, &w),
            &mut |_| {},
        )
        .unwrap();
        let signed = matches!(ty, GgmlType::Q4_0 | GgmlType::Q5_0 | GgmlType::Q8_0);
        for r in 0..n_out {
            let mut got = vec![f32::NAN; k];
            p.dequantize_row(r, &mut got);
            for (e, (&g, &w)) in got.iter().zip(&want[r * k..][..k]).enumerate() {
                // min types round d * q + m once here, twice in the reference
                let ok = if signed {
                    g == w
                } else {
                    (g - w).abs() <= 1e-6 * w.abs().max(1e-3)
                };
                assert!(ok, "{ty} row {r} element {e}: {g} vs {w}");
            }
        }
    }
}

/// Microseconds per row of a 1536 x 576 Q4_1 matmul (SmolLM2's ffn shape), packed kernels
/// against the GEMM, one thread, for choosing `MAX_ROWS`:
/// `cargo test --release -p ishizuki-cpu rows_sweep -- --ignored --nocapture`.
#[test]
#[ignore]
fn rows_sweep() {
    let pool = ThreadPool::new(1);
    let (ty, n_out, k) = (GgmlType::Q4_1, 1536, 576);
    let mut rng = Rng(77);
    let w = weights(ty, n_out, k, &mut rng);
    let copy = pack(
        &WeightView::new(ty, n_out, k, &w),
        &HugeArena::default(),
        &crate::pool::ThreadPool::new(2),
        &mut |_| {},
    )
    .unwrap();
    let view = WeightView {
        packed: Some(&copy),
        ..WeightView::new(ty, n_out, k, &w)
    };
    let best_of = |f: &mut dyn FnMut()| {
        (0..50)
            .map(|_| {
                let start = std::time::Instant::now();
                f();
                start.elapsed().as_secs_f64()
            })
            .fold(f64::MAX, f64::min)
    };
    for rows in [1, 2, 4, 8, 12, 16, 24, 32, 64, 128, 256] {
        let x: Vec<f32> = (0..rows * k).map(|_| rng.unit()).collect();
        let mut out = vec![0f32; rows * n_out];
        let packed = best_of(&mut || matmul(&pool, &[view], &x, rows, &mut [&mut out]));
        let gemm = best_of(&mut || {
            assert!(crate::gemm::gemm(&pool, &[view], &x, rows, &mut [&mut out]));
        });
        let us = |t: f64| t * 1e6 / rows as f64;
        println!(
            "{rows:3} rows: packed {:5.1} us/row, gemm {:5.1} us/row",
            us(packed),
            us(gemm)
        );
    }
}

/// GB/s of one-row packed matmuls over a weight larger than most L3s, next to the plain read
/// bandwidth of the same bytes, 1 and 2 threads: how close decode gets to the memory's speed.
/// A weight that fits a 2 MiB L2 shows what the kernel itself takes (its compute, not memory).
/// `cargo test --release -p ishizuki-cpu packed_throughput -- --ignored --nocapture`.
#[test]
#[ignore]
fn packed_throughput() {
    if tier() < Tier::Avx2 {
        return;
    }
    let mut rng = Rng(78);
    for (ty, n_out, k) in [
        (GgmlType::Q8_0, 1 << 18, 576),
        (GgmlType::Q4_1, 1 << 19, 576),
        (GgmlType::Q8_0, 768, 576),
        (GgmlType::Q4_1, 1536, 576),
    ] {
        let w = weights(ty, n_out, k, &mut rng);
        let arena = HugeArena::default();
        let copy = pack(
            &WeightView::new(ty, n_out, k, &w),
            &arena,
            &crate::pool::ThreadPool::new(2),
            &mut |_| {},
        )
        .unwrap();
        let view = WeightView {
            packed: Some(&copy),
            ..WeightView::new(ty, n_out, k, &w)
        };
        let x: Vec<f32> = (0..k).map(|_| rng.unit()).collect();
        let mut out = vec![0f32; n_out];
        for threads in [1, 2] {
            let pool = ThreadPool::new(threads);
            let mut times: Vec<f64> = (0..if copy.bytes > 1 << 24 { 30 } else { 300 })
                .map(|_| {
                    let start = std::time::Instant::now();
                    matmul(&pool, &[view], &x, 1, &mut [&mut out]);
                    start.elapsed().as_secs_f64()
                })
                .collect();
            times.sort_by(f64::total_cmp);
            let gbs = copy.bytes as f64 / times[times.len() / 2] / 1e9;
            let mem = crate::membw::read_bandwidth(&pool, copy.bytes, 10);
            println!(
                "{ty} {n_out}x{k} ({} MB), {threads} threads: packed {gbs:5.1} GB/s, plain reads {mem:5.1} GB/s",
                copy.bytes >> 20
            );
        }
    }
}

/// A type without a packed layout gets a resident copy of its bytes, handed back to the caller
/// piece by piece, and no packed kernels.
#[test]
fn other_types_get_a_resident_copy() {
    let (ty, n_out, k) = (GgmlType::Q6_K, 40, 512);
    let w = weights(ty, n_out, k, &mut Rng(9));
    let view = WeightView::new(ty, n_out, k, &w);
    let mut handed_back = 0;
    let copy = pack(
        &view,
        &HugeArena::default(),
        &crate::pool::ThreadPool::new(2),
        &mut |done| handed_back += done.len(),
    )
    .expect("a resident copy");
    assert_eq!(handed_back, w.len());
    assert_eq!(copy.bytes, w.len());
    assert_eq!(copy.resident.as_deref(), Some(&w[..]));
    let view = WeightView {
        packed: Some(&copy),
        ..view
    };
    assert!(packed(&view).is_none() && !applies(&[view], 1));
}

/// The spans of a call cover every tile of every weight once, in order, with about equal bytes.
#[test]
fn spans_cover_every_tile_once() {
    let mut rng = Rng(11);
    let arena = HugeArena::default();
    let shapes = [
        (GgmlType::Q4_1, 72),
        (GgmlType::Q8_0, 16),
        (GgmlType::Q5_0, 200),
    ];
    let ws: Vec<Vec<u8>> = shapes
        .iter()
        .map(|&(ty, n)| weights(ty, n, 64, &mut rng))
        .collect();
    let ps: Vec<Packed> = shapes
        .iter()
        .zip(&ws)
        .map(|(&(ty, n), w)| {
            Packed::new(
                &arena,
                &ThreadPool::new(1),
                &WeightView::new(ty, n, 64, w),
                &mut |_| {},
            )
            .unwrap()
        })
        .collect();
    let ps: Vec<&Packed> = ps.iter().collect();
    let total = spans::total_bytes(&ps);
    for spans in 1..=20 {
        let mut seen = Vec::new();
        for span in 0..spans {
            let mut bytes = 0;
            spans::for_each_part(&ps, spans::span_bytes(total, span, spans), |ji, tiles| {
                bytes += tiles.len() * ps[ji].tile_bytes();
                seen.extend(tiles.map(|t| (ji, t)));
            });
            let widest = ps.iter().map(|p| p.tile_bytes()).max().unwrap();
            assert!(bytes.abs_diff(total / spans) <= widest, "{spans} spans");
        }
        let all: Vec<(usize, usize)> = (0..ps.len())
            .flat_map(|ji| (0..ps[ji].n_tiles()).map(move |t| (ji, t)))
            .collect();
        assert_eq!(seen, all, "{spans} spans");
    }
}

/// Once a call has been followed by another, the next time it comes it hands out the starts of
/// the other's spans (the first byte of each, and the mapped end after it).
#[test]
fn a_call_learns_which_call_follows_it() {
    let mut rng = Rng(12);
    let arena = HugeArena::default();
    let pack_one = |n: usize, rng: &mut Rng| {
        let w = weights(GgmlType::Q4_1, n, 64, rng);
        Packed::new(
            &arena,
            &ThreadPool::new(1),
            &WeightView::new(GgmlType::Q4_1, n, 64, &w),
            &mut |_| {},
        )
        .unwrap()
    };
    let (a, b) = (pack_one(64, &mut rng), pack_one(96, &mut rng));
    let mut ahead = Vec::new();
    next_call::record(&[&a], spans::total_bytes(&[&a]), 2, &mut ahead);
    assert!(ahead.is_empty(), "nothing has followed `a` yet");
    next_call::record(&[&b], spans::total_bytes(&[&b]), 2, &mut ahead);
    next_call::record(&[&a], spans::total_bytes(&[&a]), 2, &mut ahead);
    let start = |p: &Packed, tile: usize| p.bytes().as_ptr() as usize + tile * p.tile_bytes();
    let end = b.prefetch_end() as usize;
    // b's 6 tiles in two spans of 3
    let len = 3 * b.tile_bytes();
    let want = [start(&b, 0), start(&b, 3)].map(|at| next_call::SpanStart { at, len, end });
    assert_eq!(ahead, want);
    assert!(end >= start(&b, 6));
}

/// Threads that claim from their own span's front and steal from the backs of the others get
/// every chunk of every span exactly once, whichever wins each race.
#[test]
fn racing_claims_take_every_chunk_once() {
    let spans = 4;
    let total = 40 * spans::CHUNK_BYTES + 1000;
    let mut chunks = Chunks::default();
    for round in 0..20 {
        chunks.reset(total, spans);
        let chunks = &chunks;
        let taken: Vec<Vec<(usize, Range<usize>)>> = std::thread::scope(|s| {
            let threads: Vec<_> = (0..spans)
                .map(|own| {
                    s.spawn(move || {
                        let mut mine = Vec::new();
                        // uneven speeds, so the stealing differs from round to round
                        let pause =
                            || (0..(own * 37 + round) % 200).for_each(|_| std::hint::spin_loop());
                        while let Some(claimed) = chunks.claim_front(own) {
                            mine.push((own, claimed));
                            pause();
                        }
                        while let Some((span, c)) = chunks.steal_back() {
                            mine.push((span, c..c + 1));
                            pause();
                        }
                        mine
                    })
                })
                .collect();
            threads.into_iter().map(|t| t.join().unwrap()).collect()
        });
        let mut all: Vec<Range<usize>> = taken
            .iter()
            .flatten()
            .map(|(span, claimed)| chunks.chunk_bytes(*span, claimed.clone()))
            .collect();
        all.sort_by_key(|r| r.start);
        assert_eq!(all.first().map(|r| r.start), Some(0));
        assert!(
            all.windows(2).all(|w| w[0].end == w[1].start),
            "round {round}: a gap or a chunk twice"
        );
        assert_eq!(all.last().map(|r| r.end), Some(total));
    }
}

/// What one decode step pays between its matmuls' streaming, per call: the row ops the caller
/// runs alone and a small packed matmul's fixed cost.
#[test]
#[ignore = "a measurement: cargo test --release -p ishizuki-cpu serial_costs -- --ignored --nocapture"]
fn serial_costs() {
    let mut rng = Rng(5);
    let time = |name: &str, f: &mut dyn FnMut()| {
        let mut ts: Vec<f64> = (0..2000)
            .map(|_| {
                let t = std::time::Instant::now();
                f();
                t.elapsed().as_secs_f64() * 1e9
            })
            .collect();
        ts.sort_by(f64::total_cmp);
        println!("{name:>28}: {:7.0} ns", ts[ts.len() / 2]);
    };
    let pool = ThreadPool::new(1);
    for k in [576usize, 1536] {
        let x: Vec<f32> = (0..k).map(|_| rng.unit()).collect();
        let mut acts = crate::gemm::Acts::default();
        time(&format!("quantize {k}"), &mut || {
            acts.quantize(&pool, &x, 1, k)
        });
        let w: Vec<f32> = (0..k).map(|_| rng.unit()).collect();
        let mut y = x.clone();
        time(&format!("rms_norm {k}"), &mut || {
            crate::ops::rms_norm(&mut y, &w, 1e-5, ishizuki_core::backend::NormKind::Rms)
        });
        // on a fresh copy each time: gating its own output would drift into subnormals
        let mut g = x.clone();
        time(&format!("copy and glu {k}"), &mut || {
            g.copy_from_slice(&x);
            crate::ops::glu(&mut g, &w, ishizuki_core::backend::Activation::SwiGlu)
        });
    }
    for threads in [1, 2] {
        let pool = ThreadPool::new(threads);
        let (ty, n_out, k) = (GgmlType::Q4_1, 32, 576);
        let wq = weights(ty, n_out, k, &mut rng);
        let mut view = WeightView::new(ty, n_out, k, &wq);
        let copy = pack(
            &view,
            &HugeArena::default(),
            &crate::pool::ThreadPool::new(2),
            &mut |_| {},
        )
        .unwrap();
        view.packed = Some(&copy);
        let x: Vec<f32> = (0..k).map(|_| rng.unit()).collect();
        let mut out = vec![0f32; n_out];
        time(&format!("packed 32x576, {threads} thr"), &mut || {
            matmul(&pool, &[view], &x, 1, &mut [&mut out])
        });
        time(&format!("empty pool.run, {threads} thr"), &mut || {
            pool.run(threads, &|_| {})
        });
    }
}

#[test]
fn packing_on_several_threads_equals_one() {
    let mut rng = Rng(30);
    for &ty in TYPES.iter().filter(|&&ty| Kind::of(ty).is_some()) {
        let (n_out, k) = (
            2 * RELEASE_ROWS + 3 * NR + 7,
            64usize.next_multiple_of(ty.block_size()),
        );
        let w = weights(ty, n_out, k, &mut rng);
        let view = WeightView::new(ty, n_out, k, &w);
        let arena = HugeArena::default();
        let one = Packed::new(&arena, &ThreadPool::new(1), &view, &mut |_| {}).unwrap();
        let three = Packed::new(&arena, &ThreadPool::new(3), &view, &mut |_| {}).unwrap();
        assert!(one.buf[..] == three.buf[..], "{ty}");
    }
    let w = weights(GgmlType::Q6_K, 40, 256, &mut rng);
    let view = WeightView::new(GgmlType::Q6_K, 40, 256, &w);
    let copy = pack(
        &view,
        &HugeArena::default(),
        &ThreadPool::new(3),
        &mut |_| {},
    )
    .unwrap();
    assert!(
        copy.resident.as_deref() == Some(&w[..]),
        "a resident copy holds the file's bytes"
    );
}
