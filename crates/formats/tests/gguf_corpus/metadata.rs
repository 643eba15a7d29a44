//! Cases breaking the header, metadata strings, value types, arrays, keys and alignment.
use super::*;

pub fn header_cases(c: &mut Vec<Case>) {
    case! { c, "empty file", Raw::default(), 0, E::Truncated { need: 4, available: 0, .. } }
    case! { c, "magic cut short", Raw(b"GGU".to_vec()), 0, E::Truncated { need: 4, .. } }
    let swapped = |magic: &[u8]| Raw(magic.to_vec()).u32(3).u64(0).u64(0);
    case! { c, "magic GGML", swapped(b"GGML"), 0, E::BadMagic { found: [b'G', b'G', b'M', b'L'] } }
    case! { c, "lowercase magic", swapped(b"gguf"), 0, E::BadMagic { .. } }
    case! { c, "byte-swapped magic", swapped(b"FUGG"), 0, E::BadMagic { .. } }
    case! { c, "no version", Raw(b"GGUF".to_vec()), 4, E::Truncated { need: 4, .. } }
    case! { c, "version 0", Raw::header(0, 0, 0), 4, E::UnsupportedVersion { version: 0, .. } }
    case! { c, "version 1", Raw::header(1, 0, 0), 4, E::UnsupportedVersion { version: 1, .. } }
    case! { c, "version 4", Raw::header(4, 0, 0), 4, E::UnsupportedVersion { version: 4, .. } }
    let big_endian = Raw::header(0x0300_0000, 0, 0);
    case! { c, "big-endian version", big_endian, 4, E::UnsupportedVersion { .. } }
    let no_counts = Raw(b"GGUF".to_vec()).u32(3);
    case! { c, "no tensor count", no_counts.clone(), 8, E::Truncated { need: 8, available: 0, .. } }
    let cut = no_counts.clone().u32(0);
    case! { c, "tensor count cut", cut, 8, E::Truncated { need: 8, available: 4, .. } }
    case! { c, "no kv count", no_counts.u64(0), 16, E::Truncated { need: 8, .. } }
    let all = Raw::gguf(u64::MAX, 0).zeros(64);
    case! { c, "n_tensors u64::MAX", all, 8, E::TooManyTensors { count: u64::MAX, .. } }
    // 127 bytes left hold at most 3 tensor infos of >= 32 bytes.
    let over = Raw::gguf(4, 0).zeros(127);
    case! { c, "n_tensors one over", over, 8, E::TooManyTensors { available: 127, .. } }
    case! { c, "n_kv u64::MAX", Raw::gguf(0, u64::MAX), 16, E::TooManyKvs { .. } }
    // 38 bytes left hold at most 2 KVs of >= 13 bytes.
    let over = Raw::gguf(0, 3).zeros(38);
    case! { c, "n_kv one over", over, 16, E::TooManyKvs { count: 3, available: 38, .. } }
    case! { c, "n_kv without metadata", Raw::gguf(0, 1), 16, E::TooManyKvs { available: 0, .. } }
    let mut at = 0;
    let second_missing = Raw::gguf(0, 2)
        .kv("k", STRING)
        .str(&[b'x'; 20])
        .mark(&mut at);
    case! { c, "second kv missing", second_missing, at, E::Truncated { available: 0, .. } }
}

/// Offset of the value of the first KV when its key is "k": header, key length, key, type.
pub const K_VALUE: u64 = 24 + 8 + 1 + 4;

pub fn string_cases(c: &mut Vec<Case>) {
    let huge = Raw::gguf(0, 1).u64(u64::MAX).zeros(16);
    case! { c, "key length u64::MAX", huge, 24, E::StringOutOfBounds { len: u64::MAX, .. } }
    let over = Raw::gguf(0, 1).u64(14).bytes(&[b'a'; 13]);
    case! { c, "key one byte past end", over, 24,
    E::StringOutOfBounds { len: 14, available: 13, .. } }
    let bad = Raw::gguf(0, 1).str(&[0xff, 0xfe]).u32(U8).u8(0);
    case! { c, "key not utf-8", bad, 24, E::InvalidUtf8 { .. } }
    let overlong = Raw::gguf(0, 1).str(&[b'k', 0xc0, 0x80]).u32(U8).u8(0);
    case! { c, "key overlong nul", overlong, 24, E::InvalidUtf8 { .. } }
    let surrogate = Raw::gguf(0, 1).kv("k", STRING).str(&[0xed, 0xa0, 0x80]);
    case! { c, "value lone surrogate", surrogate, K_VALUE, E::InvalidUtf8 { .. } }
    let partial = Raw::gguf(0, 1).kv("k", STRING).str(&[b'a', 0xe4, 0xb8]);
    case! { c, "value cut utf-8 sequence", partial, K_VALUE, E::InvalidUtf8 { .. } }
    let over = Raw::gguf(0, 1).kv("k", STRING).u64(100).bytes(b"abc");
    case! { c, "value past end", over, K_VALUE,
    E::StringOutOfBounds { len: 100, available: 3, .. } }
    let mut at = 0;
    let elem = Raw::gguf(0, 1)
        .kv("k", ARRAY)
        .array(STRING, 2)
        .str(b"ab")
        .mark(&mut at);
    let elem = elem.u64(50).bytes(b"cd");
    case! { c, "array string past end", elem, at, E::StringOutOfBounds { len: 50, .. } }
    let elem = Raw::gguf(0, 1)
        .kv("k", ARRAY)
        .array(STRING, 2)
        .str(b"ok")
        .mark(&mut at);
    case! { c, "array string not utf-8", elem.str(&[0x80]), at, E::InvalidUtf8 { .. } }
}

pub fn value_type_cases(c: &mut Vec<Case>) {
    let ty_at = 24 + 8 + 1;
    let t13 = Raw::gguf(0, 1).kv("k", 13).u8(0);
    case! { c, "value type 13", t13, ty_at, E::UnknownValueType { type_id: 13, .. } }
    let tmax = Raw::gguf(0, 1).kv("k", u32::MAX).u8(0);
    case! { c, "value type max", tmax, ty_at, E::UnknownValueType { type_id: u32::MAX, .. } }
    let elem = Raw::gguf(0, 1).kv("k", ARRAY).array(13, 1).u8(0);
    case! { c, "array element type 13", elem, K_VALUE, E::UnknownValueType { type_id: 13, .. } }
    let b2 = Raw::gguf(0, 1).kv("k", BOOL).u8(2);
    case! { c, "bool 2", b2, K_VALUE, E::InvalidBool { byte: 2, .. } }
    let mut at = 0;
    let arr = Raw::gguf(0, 1)
        .kv("k", ARRAY)
        .array(BOOL, 3)
        .u8(1)
        .u8(0)
        .mark(&mut at);
    case! { c, "bool 0xff in array", arr.u8(0xff), at, E::InvalidBool { byte: 0xff, .. } }
    let cut = Raw::gguf(0, 1).kv("k", U64).bytes(&[1, 2, 3]);
    case! { c, "u64 value cut", cut, K_VALUE, E::Truncated { need: 8, available: 3, .. } }
    let cut = Raw::gguf(0, 1).kv("k", U16).u8(1);
    case! { c, "u16 value cut", cut, K_VALUE, E::Truncated { need: 2, available: 1, .. } }
    let cut = Raw::gguf(0, 1).kv("kk", I32).bytes(&[1, 2]);
    case! { c, "i32 value cut", cut, K_VALUE + 1, E::Truncated { need: 4, .. } }
    let cut = Raw::gguf(0, 1).str(b"keyname").mark(&mut at).bytes(&[1, 2]);
    case! { c, "value type cut", cut, at, E::Truncated { need: 4, available: 2, .. } }
    let cut = Raw::gguf(0, 1).kv("k", ARRAY).u32(U8).bytes(&[1, 2, 3]);
    case! { c, "array length cut", cut, K_VALUE + 4, E::Truncated { need: 8, .. } }
}

pub fn array_cases(c: &mut Vec<Case>) {
    let len_at = K_VALUE + 4;
    let huge = Raw::gguf(0, 1).kv("k", ARRAY).array(U8, u64::MAX).zeros(8);
    case! { c, "u8 array u64::MAX", huge, len_at, E::ArrayOutOfBounds { len: u64::MAX, .. } }
    let u32s = Raw::gguf(0, 1).kv("k", ARRAY).array(U32, 3).zeros(11);
    case! { c, "u32 array one over", u32s, len_at,
    E::ArrayOutOfBounds { len: 3, elem: ValueType::U32, available: 11, .. } }
    let f64s = Raw::gguf(0, 1).kv("k", ARRAY).array(F64, 2).zeros(15);
    case! { c, "f64 array one byte short", f64s, len_at, E::ArrayOutOfBounds { .. } }
    let strs = Raw::gguf(0, 1).kv("k", ARRAY).array(STRING, 5).zeros(39);
    case! { c, "string array count past end", strs, len_at,
    E::ArrayOutOfBounds { elem: ValueType::String, .. } }
    let arrs = Raw::gguf(0, 1).kv("k", ARRAY).array(ARRAY, 2).zeros(23);
    case! { c, "array of arrays count past end", arrs, len_at,
    E::ArrayOutOfBounds { elem: ValueType::Array, .. } }
    let inner = Raw::gguf(0, 1)
        .kv("k", ARRAY)
        .array(ARRAY, 1)
        .array(U8, 100)
        .zeros(5);
    case! { c, "inner array past end", inner, len_at + 12, E::ArrayOutOfBounds { len: 100, .. } }
    let mut at = 0;
    let too_deep = nested_headers(MAX_ARRAY_DEPTH)
        .mark(&mut at)
        .array(U8, 1)
        .u8(0);
    case! { c, "nesting one level too deep", too_deep, at, E::NestingTooDeep { .. } }
    let very_deep = nested_headers(100_000).array(U8, 0);
    let deep_at = K_VALUE + 12 * MAX_ARRAY_DEPTH as u64;
    case! { c, "nesting 100000 levels", very_deep, deep_at, E::NestingTooDeep { .. } }
}

/// A KV "k" whose value opens `levels` nested one-element arrays of arrays.
pub fn nested_headers(levels: usize) -> Raw {
    let r = Raw::gguf(0, 1).kv("k", ARRAY);
    (0..levels).fold(r, |r, _| r.array(ARRAY, 1))
}

pub fn key_cases(c: &mut Vec<Case>) {
    let mut at = 0;
    let dup = Raw::gguf(0, 2)
        .kv("a", U8)
        .u8(1)
        .mark(&mut at)
        .kv("a", U8)
        .u8(2);
    case! { c, "duplicate key", dup, at, E::DuplicateKey { .. } }
    let dup = Raw::gguf(0, 2)
        .kv("a", U8)
        .u8(1)
        .mark(&mut at)
        .kv("a", STRING)
        .str(b"x");
    case! { c, "duplicate key other type", dup, at, E::DuplicateKey { .. } }
    let dup = Raw::gguf(0, 3)
        .kv("a.b", U8)
        .u8(1)
        .kv("b", U8)
        .u8(1)
        .mark(&mut at);
    let dup = dup.kv("a.b", U8).u8(1);
    case! { c, "duplicate key after others", dup, at, E::DuplicateKey { .. } }
    let align = |ty: u32| Raw::gguf(0, 1).kv("general.alignment", ty);
    let value_at = 24 + 8 + 17 + 4;
    let a64 = align(U64).u64(32);
    case! { c, "alignment u64", a64, value_at, E::AlignmentType { found: ValueType::U64, .. } }
    let astr = align(STRING).str(b"32");
    case! { c, "alignment string", astr, value_at, E::AlignmentType { .. } }
    let ai32 = align(I32).u32(32);
    case! { c, "alignment i32", ai32, value_at, E::AlignmentType { found: ValueType::I32, .. } }
    let au16 = align(U16).bytes(&[32, 0]);
    case! { c, "alignment u16", au16, value_at, E::AlignmentType { .. } }
    let zero = align(U32).u32(0);
    case! { c, "alignment 0", zero, value_at, E::AlignmentNotPowerOfTwo { value: 0, .. } }
    let a48 = align(U32).u32(48);
    case! { c, "alignment 48", a48, value_at, E::AlignmentNotPowerOfTwo { value: 48, .. } }
    let a3 = align(U32).u32(3);
    case! { c, "alignment 3", a3, value_at, E::AlignmentNotPowerOfTwo { value: 3, .. } }
    let odd = align(U32).u32(0x8000_0001);
    case! { c, "alignment 2^31+1", odd, value_at, E::AlignmentNotPowerOfTwo { .. } }
}
