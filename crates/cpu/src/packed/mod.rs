//! Weights repacked at load for the AVX2 and AVX-512 matmuls of few activation rows (decode,
//! draft verification): rows interleaved in tiles of 16, so one 64-byte load feeds one
//! `vpdpbusd` (AVX2: two `vpmaddubsw`) for 16 rows and each block's 16 scales load as one
//! vector, with no per-row reduction.
//!
//! Layout: tile after tile (16 rows; rows past `n_out` are zero), each tile sub-block after
//! sub-block (32 elements), each sub-block its quants then 16 f16 scales and, for Q4_1 and
//! Q5_1, 16 f16 mins (`x = scale * q + min`, q unsigned, as `gemm::unpack` defines it; the
//! symmetric Q4_0, Q5_0 and Q8_0 store no mins: theirs is `-2^(bits-1) scale`). Quants per
//! kind, with `q[n][e]` element `e` of row `n`:
//! - `Nibbles` (4-bit): 4 x 64 bytes, byte `64 j + 4 n + i` = `q[n][4j+i] | q[n][16+4j+i] << 4`;
//! - `Nibbles5` (5-bit): the same of the low 4 bits, then 8 u64 masks of the fifth bit, mask
//!   `jq` bit `4 n + i` = bit 4 of `q[n][4jq+i]`;
//! - `Bytes` (8-bit): 8 x 64 bytes, byte `64 j + 4 n + i` = `q[n][4j+i]`.
//!
//! Q4_K (`NibblesK`) groups 8 sub-blocks of `Nibbles` quants into a super-block followed by
//! its heads as the file has them (f16 `d` and `-dmin`, 6-bit scales and mins as bytes), so the
//! copy is 2.8% larger than the file's and its products are the file's.
//!
//! Only types whose scales and stored mins are exact in f16 are packed (the legacy 32-element ones
//! and Q4_K), so the packed product is the file's. The packed copy also feeds the GEMM's tile
//! unpacking and the embedding lookup, so the file's pages of a packed weight are not read
//! again.
/// A kernel module's `TileKernel` entry, `tiles`: per tile, every group of `MR` activation
/// rows while the tile is in L1, dispatched on the quant kind (`tile_rows::<BITS, KQ, MINS, R>`)
/// and the group's size (`$r`: the sizes below `MR`).
#[cfg(target_arch = "x86_64")]
macro_rules! tile_kernel_entry {
    ([$($r:literal),*]) => {
        pub(super) unsafe fn tiles(
            p: &Packed,
            tiles: Range<usize>,
            a: &Acts,
            rows: usize,
            out: *mut f32,
        ) {
            // the kernels ask for their lines `PREFETCH_BYTES` ahead: the first ones now
            let start = p.bytes().as_ptr().add(tiles.start * p.tile_bytes());
            let first = PREFETCH_BYTES.min(tiles.len() * p.tile_bytes());
            prefetch_lines(start, first, p.prefetch_end());
            for tile in tiles.clone() {
                for m0 in (0..rows).step_by(MR) {
                    let out = out.add(m0 * p.n_out + (tile - tiles.start) * NR);
                    let n = (rows - m0).min(MR);
                    match p.kind {
                        Kind::Nibbles { mins: true } => by_rows::<4, false, true>(p, tile, a, m0, n, out),
                        Kind::Nibbles { mins: false } => by_rows::<4, false, false>(p, tile, a, m0, n, out),
                        Kind::Nibbles5 { mins: true } => by_rows::<5, false, true>(p, tile, a, m0, n, out),
                        Kind::Nibbles5 { mins: false } => by_rows::<5, false, false>(p, tile, a, m0, n, out),
                        Kind::Bytes => by_rows::<8, false, false>(p, tile, a, m0, n, out),
                        Kind::NibblesK => by_rows::<4, true, true>(p, tile, a, m0, n, out),
                    }
                }
            }
        }

        /// `tile_rows` for `n` activation rows.
        unsafe fn by_rows<const BITS: u8, const KQ: bool, const MINS: bool>(
            p: &Packed,
            tile: usize,
            a: &Acts,
            m0: usize,
            n: usize,
            out: *mut f32,
        ) {
            match n {
                $($r => tile_rows::<BITS, KQ, MINS, $r>(p, tile, a, m0, out),)*
                _ => tile_rows::<BITS, KQ, MINS, MR>(p, tile, a, m0, out),
            }
        }
    };
}

#[cfg(target_arch = "x86_64")]
mod x86_avx2;
#[cfg(target_arch = "x86_64")]
mod x86_avx512;

mod next_call;
mod spans;
#[cfg(test)]
mod tests;

use crate::gemm::{unpack, Acts};
use crate::matmul::{prefetch_line_run, prefetch_lines, PREFETCH_BYTES};
use crate::pool::{self, SharedMut, ThreadPool};
use crate::simd::{tier, Tier};
use half::f16;
use half::slice::HalfFloatSliceExt;
use ishizuki_core::huge::{HugeArena, HugeSlice};
use ishizuki_core::quant::{get_scale_min_k4, BlockQ4K};
use ishizuki_core::{GgmlType, PackedWeight, WeightView};
use spans::Chunks;
use std::cell::RefCell;
use std::ops::Range;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// Rows per tile.
pub const NR: usize = 16;
/// Elements per sub-block.
const SUB: usize = 32;
/// Source rows one packing task reads (whole tiles).
const RELEASE_ROWS: usize = 64 * NR;
/// Most activation rows the packed kernels take (decode, draft verification); more go to the
/// GEMM, which is as fast from about 24 rows on here (`rows_sweep`) and takes AMX.
pub const MAX_ROWS: usize = 16;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// 4-bit quants: Q4_1 with `mins`, Q4_0 without.
    Nibbles { mins: bool },
    /// 5-bit quants: Q5_1 with `mins`, Q5_0 without.
    Nibbles5 { mins: bool },
    /// 8-bit quants (Q8_0), no mins.
    Bytes,
    /// Q4_K: nibbles as `Nibbles`, heads per super-block (see `K_HEADS`).
    NibblesK,
}

/// Sub-blocks per K-quant super-block.
const K_SUBS: usize = 8;
/// Heads of a `NibblesK` super-block after its 8 sub-blocks' quants: 16 f16 `d`, 16 f16
/// `-dmin`, then 8 x 16 u8 sub-block scales and 8 x 16 u8 mins (`x = d sc q + (-dmin) m`).
const K_HEADS: usize = 2 * NR * 2 + 2 * K_SUBS * NR;

/// Offset in a `NibblesK` super-block's heads of sub-block `j`'s 16 byte scales.
const fn k_scales_at(j: usize) -> usize {
    4 * NR + j * NR
}

/// Offset in a `NibblesK` super-block's heads of sub-block `j`'s 16 byte mins.
const fn k_mins_at(j: usize) -> usize {
    4 * NR + (K_SUBS + j) * NR
}

impl Kind {
    fn of(ty: GgmlType) -> Option<Kind> {
        use GgmlType::*;
        match ty {
            Q4_0 => Some(Kind::Nibbles { mins: false }),
            Q4_1 => Some(Kind::Nibbles { mins: true }),
            Q5_0 => Some(Kind::Nibbles5 { mins: false }),
            Q5_1 => Some(Kind::Nibbles5 { mins: true }),
            Q8_0 => Some(Kind::Bytes),
            Q4_K => Some(Kind::NibblesK),
            _ => None,
        }
    }

    /// Bytes of one sub-block's quants for a tile.
    pub const fn quant_bytes(self) -> usize {
        match self {
            Kind::Nibbles { .. } | Kind::NibblesK => 256,
            Kind::Nibbles5 { .. } => 256 + 64,
            Kind::Bytes => 512,
        }
    }

    /// Sub-blocks in the group a tile repeats: a super-block for K-quants, else one.
    pub const fn group_subs(self) -> usize {
        match self {
            Kind::NibblesK => K_SUBS,
            _ => 1,
        }
    }

    /// Bytes of one group of a tile: its sub-blocks' quants, then their heads (for the legacy
    /// kinds 16 f16 scales, then 16 f16 mins if it stores them).
    pub const fn group_bytes(self) -> usize {
        match self {
            Kind::NibblesK => K_SUBS * 256 + K_HEADS,
            _ => self.quant_bytes() + 2 * NR * (1 + self.stores_mins() as usize),
        }
    }

    /// Whether a legacy kind's heads hold mins (else a sub-block's min is `-offset * scale`).
    pub const fn stores_mins(self) -> bool {
        matches!(
            self,
            Kind::Nibbles { mins: true } | Kind::Nibbles5 { mins: true }
        )
    }

    /// What a symmetric kind's unsigned quants are offset by: `2^(bits - 1)`.
    pub const fn offset(self) -> f32 {
        match self {
            Kind::Nibbles { .. } | Kind::NibblesK => 8.0,
            Kind::Nibbles5 { .. } => 16.0,
            Kind::Bytes => 128.0,
        }
    }

    /// The kind the kernels' generics `<BITS, KQ, MINS>` stand for.
    pub const fn of_generics(bits: u8, kq: bool, mins: bool) -> Kind {
        match (bits, kq) {
            (4, true) => Kind::NibblesK,
            (4, false) => Kind::Nibbles { mins },
            (5, _) => Kind::Nibbles5 { mins },
            _ => Kind::Bytes,
        }
    }

    /// Offset in a tile of sub-block `s`'s quants.
    pub const fn quants_at(self, s: usize) -> usize {
        s / self.group_subs() * self.group_bytes() + s % self.group_subs() * self.quant_bytes()
    }

    /// Offset in a tile of the heads of the group holding sub-block `s`.
    pub const fn heads_at(self, s: usize) -> usize {
        let g = self.group_subs();
        s / g * self.group_bytes() + g * self.quant_bytes()
    }

    /// Row `n`'s (scale, min) of sub-block `s`, read from `tile`.
    fn head(self, tile: &[u8], s: usize, n: usize) -> (f32, f32) {
        let h = &tile[self.heads_at(s)..];
        let f16_at = |i: usize| f16::from_le_bytes([h[2 * i], h[2 * i + 1]]).to_f32();
        match self {
            Kind::NibblesK => {
                let j = s % K_SUBS;
                let (sc, m) = (h[k_scales_at(j) + n], h[k_mins_at(j) + n]);
                (f16_at(n) * sc as f32, f16_at(NR + n) * m as f32)
            }
            _ if self.stores_mins() => (f16_at(n), f16_at(NR + n)),
            _ => (f16_at(n), -self.offset() * f16_at(n)),
        }
    }
}

/// A weight in the packed layout.
pub struct Packed {
    pub kind: Kind,
    pub n_out: usize,
    pub n_in: usize,
    /// 64-byte aligned: sub-blocks of kinds with mins are too, the others 32-byte aligned.
    buf: HugeSlice,
}

impl Packed {
    pub fn tile_bytes(&self) -> usize {
        self.n_in / SUB / self.kind.group_subs() * self.kind.group_bytes()
    }

    pub fn n_tiles(&self) -> usize {
        self.n_out.div_ceil(NR)
    }

    pub fn bytes(&self) -> &[u8] {
        &self.buf
    }

    /// The end of the mapped bytes a kernel may prefetch from: this weight's and those after
    /// it (the next weights packed, in forward order).
    pub fn prefetch_end(&self) -> *const u8 {
        self.bytes()
            .as_ptr_range()
            .end
            .wrapping_add(self.buf.mapped_after())
    }

    /// Packs `w` into `arena` on all of `pool`'s threads, or None when its type has no packed
    /// kind, a row is malformed, or a scale or min is not exact in f16. `consumed` gets each
    /// batch of `w.data`'s rows once they are read.
    pub fn new(
        arena: &HugeArena,
        pool: &ThreadPool,
        w: &WeightView,
        consumed: &mut dyn FnMut(&[u8]),
    ) -> Option<Packed> {
        let kind = Kind::of(w.ty)?;
        let (k, row_bytes) = (w.n_in, w.row_bytes().ok()?);
        let group = SUB * kind.group_subs();
        if !k.is_multiple_of(group) || w.data.len() != row_bytes * w.n_out {
            return None;
        }
        let n_tiles = w.n_out.div_ceil(NR);
        let tile_bytes = k / group * kind.group_bytes();
        let mut p = Packed {
            kind,
            n_out: w.n_out,
            n_in: k,
            buf: arena.alloc(n_tiles * tile_bytes)?,
        };
        let failed = AtomicBool::new(false);
        let buf = SharedMut(p.buf.as_mut_ptr());
        // a batch of tiles per thread, then the batch's source rows go back to the caller
        let per_task = RELEASE_ROWS / NR;
        let batch = per_task * pool.n_threads();
        for first in (0..n_tiles).step_by(batch) {
            let tiles = first..(first + batch).min(n_tiles);
            pool.run(tiles.len().div_ceil(per_task), &|task| {
                let start = tiles.start + task * per_task;
                let mine = start..(start + per_task).min(tiles.end);
                // SAFETY: each task writes only its own tiles, which lie inside `buf`
                let out = unsafe {
                    let at = buf.ptr().add(mine.start * tile_bytes);
                    std::slice::from_raw_parts_mut(at, mine.len() * tile_bytes)
                };
                if pack_tiles(kind, w, mine, out).is_none() {
                    failed.store(true, Ordering::Relaxed);
                }
            });
            if failed.load(Ordering::Relaxed) {
                return None;
            }
            let rows = tiles.start * NR..(tiles.end * NR).min(w.n_out);
            consumed(&w.data[rows.start * row_bytes..rows.end * row_bytes]);
        }
        Some(p)
    }
}

/// Packs the rows of `tiles` of `w` into `out`, those tiles' bytes.
fn pack_tiles(kind: Kind, w: &WeightView, tiles: Range<usize>, out: &mut [u8]) -> Option<()> {
    let k = w.n_in;
    let (row_bytes, tile_bytes) = (w.row_bytes().ok()?, out.len() / tiles.len().max(1));
    let (mut q, mut scale, mut min) = (vec![0u8; k], vec![0f32; k / SUB], vec![0f32; k / SUB]);
    for r in tiles.start * NR..(tiles.end * NR).min(w.n_out) {
        let src = &w.data[r * row_bytes..][..row_bytes];
        if !unpack::unpack_row(w.ty, src, &mut q, &mut scale, &mut min) {
            return None;
        }
        let tile = &mut out[(r / NR - tiles.start) * tile_bytes..][..tile_bytes];
        let n = r % NR;
        for s in 0..k / SUB {
            let at = kind.quants_at(s);
            kind.put_quants(&mut tile[at..], n, &q[s * SUB..][..SUB]);
        }
        if kind == Kind::NibblesK {
            put_k_heads(tile, n, src)?;
            continue;
        }
        for s in 0..k / SUB {
            let heads = &mut tile[kind.heads_at(s)..];
            put_f16(&mut heads[2 * n..], scale[s])?;
            if kind.stores_mins() {
                put_f16(&mut heads[2 * (NR + n)..], min[s])?;
            } else if min[s] != -kind.offset() * scale[s] {
                return None;
            }
        }
    }
    Some(())
}

/// How a kernel asks for its tile's stream `PREFETCH_BYTES` ahead, a sub-block's share of
/// lines at a time (a few lines a sub-block keep the stream ahead without bursts that fill the
/// line-fill buffers; past the weight's end they are the next weight's): bare prefetches when
/// all the tile's lines ahead lie in mapped memory (every tile but the arena's last few), where
/// a bound and a loop per line cost as much as the sub-block's arithmetic; else bounded ones.
#[derive(Clone, Copy)]
struct Ahead {
    /// The tile's first sub-block, `PREFETCH_BYTES` on.
    from: *const u8,
    end: *const u8,
    mapped: bool,
    /// A sub-block's share of its group's bytes, and the lines that cover it (constants once
    /// `for_tile` is inlined into a kernel).
    stride: usize,
    lines: usize,
}

impl Ahead {
    /// For the tile at `base` of `p`, whose kind the kernel's `<BITS, KQ, MINS>` stand for.
    #[inline(always)]
    fn for_tile<const BITS: u8, const KQ: bool, const MINS: bool>(
        p: &Packed,
        base: *const u8,
    ) -> Ahead {
        debug_assert_eq!(Kind::of_generics(BITS, KQ, MINS), p.kind);
        let stride = const {
            let kind = Kind::of_generics(BITS, KQ, MINS);
            kind.group_bytes() / kind.group_subs()
        };
        let lines = stride.div_ceil(64);
        let (from, end) = (base.wrapping_add(PREFETCH_BYTES), p.prefetch_end());
        let tile_ahead = p.n_in / SUB * stride + 64 * lines;
        Ahead {
            from,
            end,
            mapped: from.wrapping_add(tile_ahead) <= end,
            stride,
            lines,
        }
    }

    /// Asks for sub-block `s`'s share of lines.
    #[inline(always)]
    fn fetch(&self, s: usize) {
        let at = self.from.wrapping_add(s * self.stride);
        if self.mapped {
            prefetch_line_run(at, self.lines);
        } else {
            prefetch_lines(at, self.stride, self.end);
        }
    }
}

impl Packed {
    /// Tile `tile` in the GEMM's unpacked form: `q` as `(n_in / 4, NR, 4)` u8, `scale` and `min`
    /// as `(n_in / 32, NR)`.
    pub fn unpack_tile(&self, tile: usize, q: &mut [u8], scale: &mut [f32], min: &mut [f32]) {
        let src = &self.bytes()[tile * self.tile_bytes()..][..self.tile_bytes()];
        for s in 0..self.n_in / SUB {
            let sub = &src[self.kind.quants_at(s)..];
            // the 8 quads of this sub-block, 64 bytes each
            let quads = &mut q[s * 8 * 64..][..8 * 64];
            match self.kind {
                Kind::Bytes => quads.copy_from_slice(&sub[..512]),
                Kind::Nibbles { .. } | Kind::Nibbles5 { .. } | Kind::NibblesK => {
                    let (lo, hi) = quads.split_at_mut(4 * 64);
                    for ((l, h), &v) in lo.iter_mut().zip(hi.iter_mut()).zip(&sub[..256]) {
                        (*l, *h) = (v & 0x0f, v >> 4);
                    }
                }
            }
            if let Kind::Nibbles5 { .. } = self.kind {
                for (quad, bits) in quads
                    .chunks_exact_mut(64)
                    .zip(sub[256..320].chunks_exact(8))
                {
                    let bits = u64::from_le_bytes(bits.try_into().expect("8 bytes"));
                    for (i, v) in quad.iter_mut().enumerate() {
                        *v |= ((bits >> i & 1) as u8) << 4;
                    }
                }
            }
            let (scale, min) = (&mut scale[s * NR..][..NR], &mut min[s * NR..][..NR]);
            if self.kind == Kind::NibblesK {
                // d and -dmin of the super-block times the sub-block's byte scales and mins
                let h = &src[self.kind.heads_at(s)..][..K_HEADS];
                let mut d = [0f32; 2 * NR];
                let halves: &[f16] = bytemuck::cast_slice(&h[..4 * NR]);
                halves.convert_to_f32_slice(&mut d);
                let j = s % K_SUBS;
                let (sc, m) = (&h[k_scales_at(j)..][..NR], &h[k_mins_at(j)..][..NR]);
                for n in 0..NR {
                    (scale[n], min[n]) = (d[n] * sc[n] as f32, d[NR + n] * m[n] as f32);
                }
            } else {
                // 16 scales then 16 mins; a vector conversion each rather than a call per value
                let heads = &src[self.kind.heads_at(s)..];
                let scales: &[f16] = bytemuck::cast_slice(&heads[..2 * NR]);
                scales.convert_to_f32_slice(scale);
                if self.kind.stores_mins() {
                    let mins: &[f16] = bytemuck::cast_slice(&heads[2 * NR..][..2 * NR]);
                    mins.convert_to_f32_slice(min);
                } else {
                    let offset = self.kind.offset();
                    min.iter_mut()
                        .zip(&*scale)
                        .for_each(|(m, s)| *m = -offset * s);
                }
            }
        }
    }
}

impl Packed {
    /// Row `r` dequantized into `out` (`n_in` values): the embedding lookup of a table whose
    /// packed copy is the one kept resident. Signed types give the file's values exactly.
    pub fn dequantize_row(&self, r: usize, out: &mut [f32]) {
        let (tile, n) = (r / NR, r % NR);
        let src = &self.bytes()[tile * self.tile_bytes()..][..self.tile_bytes()];
        for (s, o) in out.chunks_exact_mut(SUB).enumerate() {
            let sub = &src[self.kind.quants_at(s)..];
            let (scale, min) = self.kind.head(src, s, n);
            for (e, o) in o.iter_mut().enumerate() {
                let (quad, lane) = (e / 4, 4 * n + e % 4);
                let q = match self.kind {
                    Kind::Bytes => sub[64 * quad + lane],
                    Kind::Nibbles { .. } | Kind::Nibbles5 { .. } | Kind::NibblesK => {
                        let nibble = sub[64 * (quad % 4) + lane] >> (4 * (quad / 4)) & 0x0f;
                        let fifth = matches!(self.kind, Kind::Nibbles5 { .. })
                            && sub[256 + 8 * quad + lane / 8] >> (lane % 8) & 1 == 1;
                        nibble | (fifth as u8) << 4
                    }
                };
                // one rounding: scale * (q - offset) exactly as the file's d * q for signed types
                *o = scale.mul_add(q as f32, min);
            }
        }
    }
}

impl Kind {
    /// Writes row `n`'s 32 quants `q` into one sub-block's quant bytes.
    fn put_quants(self, sub: &mut [u8], n: usize, q: &[u8]) {
        for (e, &v) in q.iter().enumerate() {
            let (quad, i) = (e / 4, e % 4);
            match self {
                Kind::Bytes => sub[64 * quad + 4 * n + i] = v,
                Kind::Nibbles { .. } | Kind::Nibbles5 { .. } | Kind::NibblesK => {
                    let at = 64 * (quad % 4) + 4 * n + i;
                    sub[at] |= (v & 0x0f) << (4 * (quad / 4));
                    if matches!(self, Kind::Nibbles5 { .. }) && v & 0x10 != 0 {
                        let bit = 4 * n + i;
                        sub[256 + 8 * quad + bit / 8] |= 1 << (bit % 8);
                    }
                }
            }
        }
    }
}

/// Row `n`'s heads of every super-block of the Q4_K row `src` into `tile`: `d` and `-dmin`
/// as they are (f16), the 6-bit scales and mins as bytes. None for a short row.
fn put_k_heads(tile: &mut [u8], n: usize, src: &[u8]) -> Option<()> {
    let kind = Kind::NibblesK;
    for (b, block) in src.chunks(GgmlType::Q4_K.type_size()).enumerate() {
        let block: &BlockQ4K = bytemuck::try_from_bytes(block).ok()?;
        let heads = &mut tile[kind.heads_at(b * K_SUBS)..][..K_HEADS];
        heads[2 * n..][..2].copy_from_slice(&block.d);
        // the sign is the top bit of the second byte
        heads[2 * (NR + n)..][..2].copy_from_slice(&[block.dmin[0], block.dmin[1] ^ 0x80]);
        for j in 0..K_SUBS {
            let (sc, m) = get_scale_min_k4(j, &block.scales);
            heads[k_scales_at(j) + n] = sc;
            heads[k_mins_at(j) + n] = m;
        }
    }
    Some(())
}

/// Stores `v` as f16 if that is exact.
fn put_f16(at: &mut [u8], v: f32) -> Option<()> {
    let h = f16::from_f32(v);
    (h.to_f32() == v).then(|| at[..2].copy_from_slice(&h.to_le_bytes()))
}

/// The CPU backend's `pack`: a packed copy when this tier has the packed kernels for `w`'s
/// type, else a resident copy of its bytes in huge pages (decode streams every weight once per
/// token, and file pages are 4 KiB).
pub fn pack(
    w: &WeightView,
    arena: &HugeArena,
    pool: &ThreadPool,
    consumed: &mut dyn FnMut(&[u8]),
) -> Option<PackedWeight> {
    if tier() >= Tier::Avx2 && Kind::of(w.ty).is_some() {
        let p = Packed::new(arena, pool, w, consumed)?;
        return Some(PackedWeight {
            bytes: p.buf.len(),
            data: Box::new(p),
            resident: None,
        });
    }
    let mut copy = arena.alloc(w.data.len())?;
    let batch = RESIDENT_CHUNK * pool.n_threads();
    for (dst, src) in copy.chunks_mut(batch).zip(w.data.chunks(batch)) {
        let to = SharedMut(dst.as_mut_ptr());
        pool.run(src.len().div_ceil(RESIDENT_CHUNK), &|task| {
            let part = &src[task * RESIDENT_CHUNK..]
                [..RESIDENT_CHUNK.min(src.len() - task * RESIDENT_CHUNK)];
            // SAFETY: each task writes its own chunk of `dst`, which is as long as `src`
            unsafe {
                let at = to.ptr().add(task * RESIDENT_CHUNK);
                std::ptr::copy_nonoverlapping(part.as_ptr(), at, part.len());
            }
        });
        consumed(src);
    }
    Some(PackedWeight {
        bytes: copy.len(),
        data: Box::new(()),
        resident: Some(copy),
    })
}

/// Bytes one task copies when making a resident copy.
const RESIDENT_CHUNK: usize = 1 << 20;

/// The CPU backend's packed copy of `w`, if it has one.
pub fn packed<'a>(w: &WeightView<'a>) -> Option<&'a Packed> {
    w.packed?.data.downcast_ref::<Packed>()
}

/// Whether `matmul` should take the packed path for these weights and rows.
pub fn applies(ws: &[WeightView], rows: usize) -> bool {
    (1..=MAX_ROWS).contains(&rows)
        && tier() >= Tier::Avx2
        && ws.iter().all(|w| {
            packed(w).is_some_and(|p| p.n_in == w.n_in && p.n_out == w.n_out)
                && w.n_in == ws[0].n_in
        })
}

/// One call's rows of one packed weight: `out (rows, n_out)` for tiles `tiles`, `out` at the
/// first tile's first column and rows `n_out` apart.
/// Unsafe: the kernel's tier must be this CPU's, `acts` hold `rows` rows of `n_in`, `out` must
/// have room.
type TileKernel = unsafe fn(&Packed, Range<usize>, &Acts, usize, *mut f32);

thread_local! {
    /// The call's quantized activations, its chunks, and the span starts of the call expected
    /// next.
    static STATE: RefCell<CallState> = RefCell::default();
}

#[derive(Default)]
struct CallState {
    acts: Acts,
    chunks: Chunks,
    ahead: Vec<next_call::SpanStart>,
}

/// Calls so far, whose parity orders the halves of the next one (see `matmul`).
static CALLS: AtomicUsize = AtomicUsize::new(0);

/// `outs[i] (rows, n_out_i) = x (rows, k) . ws[i]^T` for weights that `applies` accepted.
///
/// The weights' tiles, in order, are cut into one contiguous span of about equal bytes per
/// thread, so each thread streams one range (prefetchers ramp up once per call, not per
/// weight); a thread that ends its span early takes chunks from the back of another
/// (`spans`). Packed weights lie in the arena in forward order, so the thread that ends a call
/// at its last byte can go on into the next call's first span: the spans' order flips every
/// call, and the kernels prefetch past a weight's end.
pub fn matmul(
    pool: &ThreadPool,
    ws: &[WeightView],
    x: &[f32],
    rows: usize,
    outs: &mut [&mut [f32]],
) {
    #[cfg(target_arch = "x86_64")]
    let kernel: TileKernel = if tier() >= Tier::Avx512 {
        x86_avx512::tiles
    } else {
        x86_avx2::tiles
    };
    #[cfg(not(target_arch = "x86_64"))]
    let kernel: TileKernel = unreachable!("packed weights are made on x86-64 only");
    let ps: Vec<&Packed> = ws.iter().map(|w| packed(w).expect("applies")).collect();
    let outs: Vec<SharedMut<f32>> = outs.iter_mut().map(|o| SharedMut(o.as_mut_ptr())).collect();
    let n_tiles: usize = ps.iter().map(|p| p.n_tiles()).sum();
    let spans = pool.n_threads().min(n_tiles);
    let flip = CALLS.fetch_add(1, Ordering::Relaxed) % 2 == 1;
    STATE.with_borrow_mut(|state| {
        let total = spans::total_bytes(&ps);
        next_call::record(&ps, total, spans, &mut state.ahead);
        let quantizing = crate::trace::span("quantize");
        state.acts.quantize(pool, x, rows, ws[0].n_in);
        drop(quantizing);
        state.chunks.reset(total, spans);
        let CallState {
            acts,
            chunks,
            ahead,
        } = &*state;
        let run_chunks = |span: usize, claimed: Range<usize>| {
            spans::for_each_part(&ps, chunks.chunk_bytes(span, claimed), |ji, tiles| {
                let out = outs[ji].ptr();
                // SAFETY: the kernel is this tier's (`applies`); only this chunk's claimant
                // writes these tiles' columns of every row of this output, whose shape the
                // caller checked.
                unsafe { kernel(ps[ji], tiles.clone(), acts, rows, out.add(tiles.start * NR)) };
            })
        };
        pool.run(spans, &|task| {
            let own = span_of(flip, task, spans);
            while let Some(claimed) = chunks.claim_front(own) {
                run_chunks(own, claimed);
            }
            while let Some((span, chunk)) = chunks.steal_back() {
                run_chunks(span, chunk..chunk + 1);
            }
            // this thread takes this task next call too (`ThreadPool::run`); the order flips.
            // Its first lines now, and a worker streams on into its L2 while it waits.
            if task < ahead.len() {
                let next = ahead[span_of(!flip, task, ahead.len())];
                let (at, end) = (next.at as *const u8, next.end as *const u8);
                prefetch_lines(at, PREFETCH_BYTES, end);
                let rest = next.len.saturating_sub(PREFETCH_BYTES);
                pool::prefetch_while_idle(at.wrapping_add(PREFETCH_BYTES), rest, end);
            }
        });
    });
}

/// The span task `task` of `spans` takes: in order, or from the end when `flip`.
fn span_of(flip: bool, task: usize, spans: usize) -> usize {
    if flip {
        spans - 1 - task
    } else {
        task
    }
}
