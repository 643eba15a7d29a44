//! Cases breaking tensor infos (names, dims, types, sizes) and the data layout.
use super::*;
use ishizuki_core::GgmlType;
use ishizuki_formats::GgufWriter;

/// One tensor info, then enough zeros for the data of any small tensor.
pub fn one_tensor(dims: &[u64], ty: u32, offset: u64, m: &mut InfoMarks) -> Raw {
    Raw::gguf(1, 0)
        .tensor_at("t", dims, ty, offset, m)
        .pad(32)
        .zeros(256)
}

pub fn tensor_info_cases(c: &mut Vec<Case>) {
    let long = Raw::gguf(1, 0).u64(1000).zeros(40);
    case! { c, "tensor name past end", long, 24, E::StringOutOfBounds { len: 1000, .. } }
    let bad = Raw::gguf(1, 0)
        .str(&[0xff])
        .u32(1)
        .u64(32)
        .u32(F32_T)
        .u64(0)
        .zeros(160);
    case! { c, "tensor name not utf-8", bad, 24, E::InvalidUtf8 { .. } }
    let n_dims_at = 24 + 8 + 1;
    let dims = |n: u32| Raw::gguf(1, 0).str(b"t").u32(n).zeros(64);
    case! { c, "n_dims 0", dims(0), n_dims_at, E::BadDimCount { n_dims: 0, .. } }
    let five = MAX_DIMS as u32 + 1;
    case! { c, "n_dims 5", dims(five), n_dims_at, E::BadDimCount { n_dims: 5, .. } }
    case! { c, "n_dims max", dims(u32::MAX), n_dims_at, E::BadDimCount { .. } }
    let mut at = 0;
    let zero0 = Raw::gguf(1, 0).str(b"t").u32(2).mark(&mut at).u64(0).u64(4);
    let zero0 = zero0.u32(F32_T).u64(0).zeros(64);
    case! { c, "dim 0 is zero", zero0, at, E::ZeroDim { axis: 0, .. } }
    let zero3 = Raw::gguf(1, 0)
        .str(b"t")
        .u32(4)
        .u64(32)
        .u64(2)
        .u64(2)
        .mark(&mut at);
    let zero3 = zero3.u64(0).u32(F32_T).u64(0).zeros(64);
    case! { c, "dim 3 is zero", zero3, at, E::ZeroDim { axis: 3, .. } }
    let mut m = InfoMarks::default();
    let sq = one_tensor(&[1 << 32, 1 << 32], F32_T, 0, &mut m);
    case! { c, "elements overflow u64", sq, m.dims, E::ElementCountOverflow { .. } }
    let i8_t = 24;
    let big = one_tensor(&[1 << 63], i8_t, 0, &mut m);
    case! { c, "elements over i64::MAX", big, m.dims, E::ElementCountOverflow { .. } }
    let three = one_tensor(&[1 << 21, 1 << 21, 1 << 22], F32_T, 0, &mut m);
    case! { c, "elements overflow in 3 dims", three, m.dims, E::ElementCountOverflow { .. } }
    tensor_type_cases(c);
    let cut_raw = || Raw::gguf(1, 1).kv("pad", STRING).str(&[b'x'; 40]).str(b"t");
    let cut = cut_raw().u32(2).u64(8).mark(&mut at).bytes(&[1, 2, 3, 4]);
    case! { c, "tensor info cut in dims", cut, at, E::Truncated { need: 8, available: 4, .. } }
    let cut = cut_raw()
        .u32(1)
        .u64(8)
        .u32(F32_T)
        .mark(&mut at)
        .bytes(&[0; 7]);
    case! { c, "tensor info cut in offset", cut, at, E::Truncated { need: 8, .. } }
    let second = Raw::gguf(2, 1).kv("pad", STRING).str(&[b'x'; 64]);
    let second = second.tensor("a", &[8], F32_T, 0).mark(&mut at);
    case! { c, "second tensor info missing", second, at, E::Truncated { available: 0, .. } }
    let dup = Raw::gguf(2, 0).tensor("t", &[8], F32_T, 0).mark(&mut at);
    let dup = dup.tensor("t", &[8], F32_T, 32).pad(32).zeros(64);
    case! { c, "duplicate tensor name", dup, at, E::DuplicateTensor { .. } }
}

fn tensor_type_cases(c: &mut Vec<Case>) {
    let mut m = InfoMarks::default();
    for (name, id) in [
        ("type 4", 4),
        ("type 31", 31),
        ("type 36", 36),
        ("type 40", 40),
    ] {
        c.push(Case {
            name,
            bytes: one_tensor(&[32], id, 0, &mut m).0,
            at: m.ty,
            check: |e| {
                matches!(
                    e,
                    E::UnknownTensorType {
                        type_id: 4 | 31 | 36 | 40,
                        ..
                    }
                )
            },
        });
    }
    let max = one_tensor(&[32], u32::MAX, 0, &mut m);
    case! { c, "type u32::MAX", max, m.ty, E::UnknownTensorType { type_id: u32::MAX, .. } }
    let q40 = one_tensor(&[16], Q4_0_T, 0, &mut m);
    case! { c, "Q4_0 row of 16", q40, m.dims, E::RowNotBlockMultiple { row: 16, block: 32, .. } }
    let q4k = one_tensor(&[32, 8], Q4_K_T, 0, &mut m);
    case! { c, "Q4_K row of 32", q4k, m.dims, E::RowNotBlockMultiple { row: 32, block: 256, .. } }
    // 32 elements in all, but rows of 1: blocks may not span rows.
    let cols = one_tensor(&[1, 32], Q4_0_T, 0, &mut m);
    case! { c, "Q4_0 rows of 1", cols, m.dims, E::RowNotBlockMultiple { row: 1, .. } }
    let f32s = one_tensor(&[1 << 62], F32_T, 0, &mut m);
    case! { c, "F32 bytes overflow", f32s, m.dims, E::ByteSizeOverflow { .. } }
    let i64s = one_tensor(&[1 << 61, 2], I64_T, 0, &mut m);
    case! { c, "I64 bytes overflow", i64s, m.dims, E::ByteSizeOverflow { .. } }
}

pub fn layout_cases(c: &mut Vec<Case>) {
    let mut m = InfoMarks::default();
    let mis = one_tensor(&[8], F32_T, 4, &mut m);
    case! { c, "offset 4 under alignment 32", mis, m.offset,
    E::MisalignedTensor { data_offset: 4, alignment: 32, .. } }
    let a64 = Raw::gguf(1, 1).kv("general.alignment", U32).u32(64);
    let a64 = a64
        .tensor_at("t", &[8], F32_T, 32, &mut m)
        .pad(64)
        .zeros(128);
    case! { c, "offset 32 under alignment 64", a64, m.offset,
    E::MisalignedTensor { alignment: 64, .. } }
    let mis = one_tensor(&[8], F32_T, 31, &mut m);
    case! { c, "offset 31", mis, m.offset, E::MisalignedTensor { .. } }
    let far = Raw::gguf(1, 0)
        .tensor_at("t", &[8], F32_T, 1024, &mut m)
        .pad(32)
        .zeros(32);
    case! { c, "offset past end", far, m.offset, E::TensorOutOfBounds { start: 1088, .. } }
    let wrap = one_tensor(&[8], F32_T, u64::MAX - 31, &mut m);
    case! { c, "offset wraps u64", wrap, m.offset, E::TensorOutOfBounds { .. } }
    let short = Raw::gguf(1, 0)
        .tensor_at("t", &[8], F32_T, 0, &mut m)
        .pad(32)
        .zeros(31);
    case! { c, "data one byte short", short, m.offset, E::TensorOutOfBounds { end: 96, .. } }
    let none = Raw::gguf(1, 0).tensor_at("t", &[8], F32_T, 0, &mut m);
    case! { c, "no data section", none, m.offset, E::TensorOutOfBounds { file_len: 57, .. } }
    let two = Raw::gguf(2, 0).tensor("a", &[8], F32_T, 0);
    let two = two
        .tensor_at("b", &[8], F32_T, 32, &mut m)
        .pad(32)
        .zeros(32);
    case! { c, "second tensor past end", two, m.offset, E::TensorOutOfBounds { .. } }
    overlap_cases(c);
}

fn overlap_cases(c: &mut Vec<Case>) {
    let mut m = InfoMarks::default();
    let same = Raw::gguf(2, 0).tensor("a", &[8], F32_T, 0);
    let same = same
        .tensor_at("b", &[8], F32_T, 0, &mut m)
        .pad(32)
        .zeros(64);
    case! { c, "same offset", same, m.offset, E::TensorOverlap { .. } }
    // a covers [0, 64); b starts at 32.
    let part = Raw::gguf(2, 0).tensor("a", &[16], F32_T, 0);
    let part = part
        .tensor_at("b", &[8], F32_T, 32, &mut m)
        .pad(32)
        .zeros(96);
    case! { c, "partial overlap", part, m.offset, E::TensorOverlap { .. } }
    // Listed out of order: b covers [0, 128) and a sits at 64.
    let order = Raw::gguf(2, 0).tensor_at("a", &[8], F32_T, 64, &mut m);
    let order = order.tensor("b", &[32], F32_T, 0).pad(32).zeros(128);
    case! { c, "overlap listed out of order", order, m.offset, E::TensorOverlap { .. } }
    // a [0, 32), b [64, 96), c [32, 96): b overlaps c once sorted by offset.
    let three = Raw::gguf(3, 0).tensor("a", &[8], F32_T, 0);
    let three = three.tensor_at("b", &[8], F32_T, 64, &mut m);
    let three = three.tensor("c", &[16], F32_T, 32).pad(32).zeros(96);
    case! { c, "overlap among three", three, m.offset, E::TensorOverlap { .. } }
}

/// Writer output (key "k" = U8, tensor "t" [8] F32) with one field patched.
pub fn patched_writer_cases(c: &mut Vec<Case>) {
    let mut w = GgufWriter::new();
    w.add_metadata("k", 1u8).unwrap();
    w.add_tensor("t", &[8], GgmlType::F32, vec![0u8; 32])
        .unwrap();
    let file = Raw(w.to_bytes());
    // Header 24, KV 8+1+4+1, then the info: name 8+1, n_dims 4, one dim 8, type 4, offset 8.
    let (n_dims_at, type_at, offset_at) = (47, 59, 63);
    let v1 = file.clone().patch_u32(4, 1);
    case! { c, "writer file, version 1", v1, 4, E::UnsupportedVersion { version: 1, .. } }
    let n_dims = file.clone().patch_u32(n_dims_at, 0);
    case! { c, "writer file, n_dims 0", n_dims, n_dims_at, E::BadDimCount { n_dims: 0, .. } }
    let ty = file.clone().patch_u32(type_at, 4);
    case! { c, "writer file, type 4", ty, type_at, E::UnknownTensorType { type_id: 4, .. } }
    let q4 = file.clone().patch_u32(type_at, 2);
    case! { c, "writer file, Q4_0 row of 8", q4, 51, E::RowNotBlockMultiple { row: 8, .. } }
    let off = file.clone().patch_u32(offset_at, 16);
    case! { c, "writer file, offset 16", off, offset_at, E::MisalignedTensor { .. } }
    let past = file.patch_u32(offset_at, 32);
    case! { c, "writer file, offset 32", past, offset_at, E::TensorOutOfBounds { .. } }
}
