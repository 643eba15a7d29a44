//! Round trips through the writer and reader, the writer's exact byte layout, and the real models.
use super::*;
use std::path::PathBuf;

/// Deterministic filler so tensor data differs between tensors and positions.
fn pattern(len: u64, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

fn sample_metadata() -> Vec<(String, Value)> {
    let scalars = vec![
        ("t.u8", Value::U8(200)),
        ("t.i8", Value::I8(-100)),
        ("t.u16", Value::U16(60000)),
        ("t.i16", Value::I16(-30000)),
        ("t.u32", Value::U32(4_000_000_000)),
        ("t.i32", Value::I32(-2_000_000_000)),
        ("t.f32", Value::F32(-1.5e-3)),
        ("t.bool", Value::Bool(true)),
        ("t.false", Value::Bool(false)),
        ("t.string", Value::from("héllo, 世界 \u{1F600}")),
        ("t.empty_string", Value::from("")),
        ("t.u64", Value::U64(u64::MAX)),
        ("t.i64", Value::I64(i64::MIN)),
        ("t.f64", Value::F64(std::f64::consts::PI)),
        ("general.architecture", Value::from("llama")),
        (
            "tokenizer.ggml.tokens",
            Value::from(vec!["<s>", "", "▁the", "\n"]),
        ),
        ("t.scores", Value::from(vec![0.0f32, -1.25, 3.5])),
        ("t.empty_array", Value::Array(vec![])),
        ("t.bools", Value::from(vec![true, false, true])),
    ];
    let nested = Value::Array(vec![
        Value::from(vec![1i32, 2, 3]),
        Value::from(vec!["a", "b"]),
        Value::Array(vec![]),
        Value::Array(vec![Value::from(vec![7u64])]),
    ]);
    let mut all: Vec<(String, Value)> = scalars
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect();
    all.push(("t.nested".to_owned(), nested));
    all
}

struct SampleTensor {
    name: &'static str,
    dims: Vec<u64>,
    ty: GgmlType,
}

fn sample_tensors() -> Vec<SampleTensor> {
    use GgmlType::*;
    let t = |name, dims: &[u64], ty| SampleTensor {
        name,
        dims: dims.to_vec(),
        ty,
    };
    vec![
        t("token_embd.weight", &[8, 3], F32),
        t("blk.0.attn_q.weight", &[64, 2], Q4_0),
        t("blk.0.ffn_up.weight", &[256, 2, 1], Q4_K),
        t("blk.0.odd.weight", &[3], F16),
        t("blk.0.iq.weight", &[256], IQ2_XXS),
        t("blk.0.tq.weight", &[256, 1, 1, 2], TQ1_0),
        t("blk.0.mx.weight", &[32, 5], MXFP4),
        t("output_norm.weight", &[7], I8),
    ]
}

fn build(alignment: Option<u32>) -> (GgufWriter<'static>, Vec<(String, Value)>, Vec<Vec<u8>>) {
    let mut w = GgufWriter::new();
    let mut metadata = sample_metadata();
    if let Some(a) = alignment {
        metadata.insert(3, (ALIGNMENT_KEY.to_owned(), Value::U32(a)));
    }
    for (k, v) in &metadata {
        w.add_metadata(k.clone(), v.clone()).unwrap();
    }
    let mut datas = Vec::new();
    for (i, t) in sample_tensors().into_iter().enumerate() {
        let n = t.ty.row_bytes(t.dims.iter().product()).unwrap();
        let data = pattern(n, i as u8);
        w.add_tensor(t.name, &t.dims, t.ty, data.clone()).unwrap();
        datas.push(data);
    }
    (w, metadata, datas)
}

fn assert_round_trip(alignment: Option<u32>) {
    let (w, metadata, datas) = build(alignment);
    let bytes = w.to_bytes();
    let f = GgufFile::from_bytes(bytes.clone()).unwrap();
    let align = alignment.map_or(DEFAULT_ALIGNMENT, u64::from);
    assert_eq!(f.version, GGUF_VERSION);
    assert_eq!(f.alignment, align);
    assert_eq!(f.metadata, metadata);
    assert_eq!(f.data_offset % align, 0);
    assert_eq!(bytes.len() as u64 % align, 0);
    let expected = sample_tensors();
    assert_eq!(f.tensors.len(), expected.len());
    for ((info, want), data) in f.tensors.iter().zip(&expected).zip(&datas) {
        assert_eq!(
            (info.name.as_str(), &info.dims, info.ty),
            (want.name, &want.dims, want.ty)
        );
        assert_eq!(info.offset % align, 0, "{}", info.name);
        assert_eq!(info.n_bytes, data.len() as u64);
        assert_eq!(f.tensor_data(info), &data[..]);
        assert_eq!(f.tensor(want.name), Some(info));
    }
}

#[test]
fn round_trip_default_alignment() {
    assert_round_trip(None);
}

#[test]
fn round_trip_custom_alignments() {
    for a in [1, 8, 64, 4096] {
        assert_round_trip(Some(a));
    }
}

#[test]
fn round_trip_through_a_file_and_mmap() {
    let (w, metadata, datas) = build(Some(64));
    let path = std::env::temp_dir().join(format!("ishizuki-gguf-rt-{}.gguf", std::process::id()));
    let written = w.write_file(&path).unwrap();
    let f = GgufFile::open(&path);
    std::fs::remove_file(&path).unwrap();
    let f = f.unwrap();
    assert_eq!(written, f.bytes().len() as u64);
    assert_eq!(f.metadata, metadata);
    let read: Vec<&[u8]> = f.tensors.iter().map(|t| f.tensor_data(t)).collect();
    assert_eq!(read, datas.iter().map(Vec::as_slice).collect::<Vec<_>>());
}

#[test]
fn typed_accessors() {
    let (w, _, _) = build(None);
    let f = GgufFile::from_bytes(w.to_bytes()).unwrap();
    assert_eq!(f.architecture(), Some("llama"));
    assert_eq!(f.get_u64("t.u32"), Some(4_000_000_000));
    assert_eq!(f.get_u64("t.i8"), None);
    assert_eq!(f.get_f64("t.f64"), Some(std::f64::consts::PI));
    assert_eq!(f.get_bool("t.bool"), Some(true));
    assert_eq!(f.get_array("t.scores").map(<[Value]>::len), Some(3));
    let tokens = f.get("tokenizer.ggml.tokens").and_then(Value::as_str_array);
    assert_eq!(tokens, Some(vec!["<s>", "", "▁the", "\n"]));
    assert!(f.get("missing").is_none());
    assert_eq!(
        f.tensor_bytes("output_norm.weight").map(<[u8]>::len),
        Some(7)
    );
}

#[test]
fn foreign_tensor_info_is_refused() {
    let (w, _, _) = build(None);
    let f = GgufFile::from_bytes(w.to_bytes()).unwrap();
    let mut info = f.tensors[0].clone();
    info.n_bytes = u64::MAX / 2;
    assert!(matches!(
        f.try_tensor_data(&info),
        Err(GgufError::ForeignTensor { .. })
    ));
    assert_eq!(f.tensor_data(&info), &[] as &[u8]);
    // located: this file's bytes of the tensor, none for a place another file located
    let own = &f.tensors[0];
    let at = f.locate(f.tensor_position(&own.name).unwrap()).unwrap();
    assert_eq!(f.data_at(at), Some(f.tensor_data(own)));
    assert!(!f.tensor_data(own).is_empty());
    assert!(f.locate(f.tensors.len()).is_none());
    let twin = GgufFile::from_bytes(w.to_bytes()).unwrap();
    assert_eq!(twin.data_at(at), None);
    info.name = "nope".into();
    assert!(matches!(
        f.try_tensor_data(&info),
        Err(GgufError::ForeignTensor { .. })
    ));
}

/// The exact bytes of a one-key, one-tensor file, spelled out field by field.
#[test]
fn writer_byte_layout() {
    let mut w = GgufWriter::new();
    w.add_metadata("k", Value::U16(0x0102)).unwrap();
    w.add_tensor("t", &[2], GgmlType::F32, vec![1, 2, 3, 4, 5, 6, 7, 8])
        .unwrap();
    let mut want = Vec::new();
    want.extend_from_slice(b"GGUF");
    want.extend_from_slice(&3u32.to_le_bytes());
    want.extend_from_slice(&1u64.to_le_bytes()); // n_tensors
    want.extend_from_slice(&1u64.to_le_bytes()); // n_kv
    want.extend_from_slice(&1u64.to_le_bytes());
    want.push(b'k');
    want.extend_from_slice(&2u32.to_le_bytes()); // U16
    want.extend_from_slice(&[0x02, 0x01]);
    want.extend_from_slice(&1u64.to_le_bytes());
    want.push(b't');
    want.extend_from_slice(&1u32.to_le_bytes()); // n_dims
    want.extend_from_slice(&2u64.to_le_bytes());
    want.extend_from_slice(&0u32.to_le_bytes()); // F32
    want.extend_from_slice(&0u64.to_le_bytes()); // offset
    assert_eq!(want.len(), 72);
    want.resize(96, 0); // header padded to 32
    want.extend_from_slice(&[1, 2, 3, 4, 5, 6, 7, 8]);
    want.resize(128, 0); // data padded to 32
    assert_eq!(w.to_bytes(), want);
}

#[test]
fn writer_refuses_what_the_reader_would_reject() {
    use GgufWriteError as E;
    let mut w = GgufWriter::new();
    w.add_metadata("a", 1u8).unwrap();
    assert!(matches!(
        w.add_metadata("a", 2u8),
        Err(E::DuplicateKey { .. })
    ));
    assert!(matches!(
        w.add_metadata(ALIGNMENT_KEY, 24u32),
        Err(E::BadAlignment { .. })
    ));
    assert!(matches!(
        w.add_metadata(ALIGNMENT_KEY, 32u64),
        Err(E::BadAlignment { .. })
    ));
    let mixed = Value::Array(vec![Value::U8(1), Value::I8(1)]);
    assert!(matches!(
        w.add_metadata("m", mixed),
        Err(E::MixedArray { .. })
    ));
    let mut deep = Value::U8(0);
    for _ in 0..=MAX_ARRAY_DEPTH {
        deep = Value::Array(vec![deep]);
    }
    assert!(matches!(
        w.add_metadata("d", deep),
        Err(E::NestingTooDeep { .. })
    ));
    let f32 = GgmlType::F32;
    assert!(matches!(
        w.add_tensor("t", &[], f32, vec![]),
        Err(E::BadDimCount { .. })
    ));
    let five = [1u64; 5];
    assert!(matches!(
        w.add_tensor("t", &five, f32, vec![0; 4]),
        Err(E::BadDimCount { .. })
    ));
    assert!(matches!(
        w.add_tensor("t", &[1, 0], f32, vec![]),
        Err(E::ZeroDim { axis: 1, .. })
    ));
    let q = GgmlType::Q4_0;
    assert!(matches!(
        w.add_tensor("t", &[16], q, vec![0; 9]),
        Err(E::RowNotBlockMultiple { .. })
    ));
    let huge = [1u64 << 62, 4];
    assert!(matches!(
        w.add_tensor("t", &huge, f32, vec![]),
        Err(E::SizeOverflow { .. })
    ));
    assert!(matches!(
        w.add_tensor("t", &[2], f32, vec![0; 7]),
        Err(E::DataSize { .. })
    ));
    w.add_tensor("t", &[2], f32, vec![0; 8]).unwrap();
    assert!(matches!(
        w.add_tensor("t", &[2], f32, vec![0; 8]),
        Err(E::DuplicateTensor { .. })
    ));
    // Nothing refused was kept: the file still parses with one key and one tensor.
    let f = GgufFile::from_bytes(w.to_bytes()).unwrap();
    assert_eq!((f.metadata.len(), f.tensors.len()), (1, 1));
}

#[test]
fn empty_file_without_tensors_or_metadata() {
    let bytes = GgufWriter::new().to_bytes();
    assert_eq!(bytes.len(), 32);
    let f = GgufFile::from_bytes(bytes).unwrap();
    assert!(f.metadata.is_empty() && f.tensors.is_empty());
    // A zero-tensor file may end right after the header, without padding.
    let f = GgufFile::from_bytes(GgufWriter::new().to_bytes()[..24].to_vec()).unwrap();
    assert_eq!(f.data_offset, 32);
}

/// A file written by gguf-py (tests/fixtures/make_gguf_py_small.py), an independent writer.
#[test]
fn reads_gguf_py_output() {
    let f =
        GgufFile::from_bytes(include_bytes!("../../tests/fixtures/gguf_py_small.gguf").to_vec())
            .unwrap();
    assert_eq!((f.version, f.alignment, f.data_offset), (3, 64, 704));
    let expect = [
        ("general.architecture", Value::from("llama")),
        (ALIGNMENT_KEY, Value::U32(64)),
        ("t.u8", Value::U8(200)),
        ("t.i8", Value::I8(-100)),
        ("t.u16", Value::U16(60000)),
        ("t.i16", Value::I16(-30000)),
        ("t.u32", Value::U32(4_000_000_000)),
        ("t.i32", Value::I32(-2_000_000_000)),
        ("t.f32", Value::F32(1.5)),
        ("t.bool", Value::Bool(true)),
        ("t.str", Value::from("héllo 世界")),
        ("t.u64", Value::U64(u64::MAX)),
        ("t.i64", Value::I64(i64::MIN)),
        ("t.f64", Value::F64(2.25)),
        ("t.tokens", Value::from(vec!["<s>", "", "▁the"])),
        ("t.ints", Value::from(vec![1i32, -2, 3])),
        ("t.nested", Value::from(vec![vec![1i32, 2], vec![3]])),
    ];
    let got: Vec<(&str, &Value)> = f.metadata.iter().map(|(k, v)| (k.as_str(), v)).collect();
    let want: Vec<(&str, &Value)> = expect.iter().map(|(k, v)| (*k, v)).collect();
    assert_eq!(got, want);
    let shapes: Vec<(&str, &[u64], GgmlType, u64)> = f
        .tensors
        .iter()
        .map(|t| (t.name.as_str(), t.dims.as_slice(), t.ty, t.offset))
        .collect();
    use GgmlType::*;
    assert_eq!(
        shapes,
        [
            ("a", &[3, 2][..], F32, 0),
            ("b", &[3], F16, 64),
            ("q", &[32, 2], Q8_0, 128)
        ]
    );
    let a: Vec<f32> = f
        .tensor_bytes("a")
        .unwrap()
        .chunks(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect();
    assert_eq!(a, [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]);
    // f16 bits of 0.5, -1.0, 2.0.
    assert_eq!(
        f.tensor_bytes("b").unwrap(),
        [0x00, 0x38, 0x00, 0xbc, 0x00, 0x40]
    );
    // Q8_0 block: f16 scale 1/127 (0x2008), then quants -127, -123, ...
    let q = f.tensor_bytes("q").unwrap();
    assert_eq!((q.len(), &q[..4]), (68, &[0x08, 0x20, 0x81, 0x85][..]));
}

/// Re-writing gguf-py's file with our writer gives back the same bytes.
#[test]
fn writer_matches_gguf_py_byte_for_byte() {
    let original = include_bytes!("../../tests/fixtures/gguf_py_small.gguf");
    let f = GgufFile::from_bytes(original.to_vec()).unwrap();
    let mut w = GgufWriter::new();
    for (k, v) in &f.metadata {
        w.add_metadata(k.clone(), v.clone()).unwrap();
    }
    for t in &f.tensors {
        w.add_tensor(t.name.clone(), &t.dims, t.ty, f.tensor_data(t))
            .unwrap();
    }
    assert_eq!(w.to_bytes(), original);
}

/// Padding for a large alignment is streamed, and counted in the returned length.
#[test]
fn writer_streams_large_alignment_padding() {
    let mut w = GgufWriter::new();
    w.add_metadata(ALIGNMENT_KEY, 1u32 << 20).unwrap();
    w.add_tensor("t", &[1], GgmlType::F32, vec![0u8; 4])
        .unwrap();
    let mut counted = 0u64;
    let counter = CountingWriter {
        inner: std::io::sink(),
        n: &mut counted,
    };
    let written = w.write(counter).unwrap();
    assert_eq!((written, counted), (2 << 20, 2 << 20));
}

struct CountingWriter<'a, W> {
    inner: W,
    n: &'a mut u64,
}

impl<W: std::io::Write> std::io::Write for CountingWriter<'_, W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        *self.n += n as u64;
        Ok(n)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

#[test]
fn open_reports_typed_errors_for_empty_and_missing_files() {
    let path =
        std::env::temp_dir().join(format!("ishizuki-gguf-empty-{}.gguf", std::process::id()));
    std::fs::write(&path, b"").unwrap();
    let empty = GgufFile::open(&path);
    std::fs::remove_file(&path).unwrap();
    assert!(matches!(empty, Err(GgufError::Truncated { offset: 0, .. })));
    assert!(matches!(GgufFile::open(&path), Err(GgufError::Io(_))));
}

fn model_path(file: &str) -> Option<PathBuf> {
    let dir =
        std::env::var_os("ISHIZUKI_TEST_MODELS").unwrap_or_else(|| "/work/cache/models".into());
    let path = PathBuf::from(dir).join(file);
    if path.is_file() {
        Some(path)
    } else {
        println!(
            "skipping: {} not found (set ISHIZUKI_TEST_MODELS)",
            path.display()
        );
        None
    }
}

fn check_real_model(file: &str, n_tensors: usize, arch: &str) {
    let Some(path) = model_path(file) else {
        return;
    };
    let f = GgufFile::open(&path).unwrap();
    assert_eq!(f.tensors.len(), n_tensors);
    assert_eq!(f.architecture(), Some(arch));
    assert!(f
        .get_array("tokenizer.ggml.tokens")
        .is_some_and(|t| t.len() > 1000));
    let mut covered = 0u64;
    for t in &f.tensors {
        let n = t.ty.row_bytes(t.n_elements()).unwrap();
        assert_eq!(f.try_tensor_data(t).unwrap().len() as u64, n, "{}", t.name);
        covered += n;
    }
    // Tensors fill the data section except for alignment padding.
    let data_len = f.bytes().len() as u64 - f.data_offset;
    assert!(covered <= data_len && data_len - covered < f.alignment * n_tensors as u64);
    assert_rewrites_identically(&f);
}

/// Metadata and tensors written back through `GgufWriter` give the original file's bytes.
fn assert_rewrites_identically(f: &GgufFile) {
    let mut w = GgufWriter::new();
    for (k, v) in &f.metadata {
        w.add_metadata(k.clone(), v.clone()).unwrap();
    }
    for t in &f.tensors {
        w.add_tensor(t.name.clone(), &t.dims, t.ty, f.tensor_data(t))
            .unwrap();
    }
    let rewritten = w.to_bytes();
    assert_eq!(rewritten.len(), f.bytes().len());
    assert!(rewritten == f.bytes(), "rewritten bytes differ");
}

#[test]
fn real_model_smollm2() {
    check_real_model("SmolLM2-135M-Instruct.Q4_1.gguf", 272, "llama");
}

#[test]
fn real_model_gemma3() {
    check_real_model("gemma-3-270m-q4_k_m.gguf", 236, "gemma3");
}
