//! NVRTC at load: a module's source compiled to a cubin for this GPU's architecture, cached on
//! disk under a key of everything that shapes the binary (source, options, architecture, NVRTC
//! version), so a second load of the same model compiles nothing.
use cudarc::nvrtc::{result, sys};
use ishizuki_core::{Error, Result};
use sha2::{Digest, Sha256};
use std::ffi::{c_char, c_int, CStr, CString};
use std::ops::RangeInclusive;
use std::path::{Path, PathBuf};

/// What the binary depends on besides the source.
#[derive(Clone, Debug)]
pub struct Target {
    /// Compute capability as `major * 10 + minor` (90 on Hopper).
    pub arch: u32,
    /// NVRTC's `(major, minor)`.
    pub nvrtc: (i32, i32),
    /// Kernel tuning constants overridden (`-DNAME=VALUE`), from [`tune_defines`].
    pub defines: Vec<(String, u32)>,
}

/// Device-side constants a run may override, for measuring variants without a rebuild, with
/// the values each takes; the host mirrors none of them.
pub const TUNABLE: [(&str, RangeInclusive<u32>); 3] = [
    ("Q8_AHEAD_GLU", 1..=8),
    ("ATTN_AHEAD", 1..=8),
    ("Q8_PREFETCH", 0..=1),
];

/// `ISHIZUKI_CUDA_TUNE=NAME=VALUE[,NAME=VALUE]` parsed: names and values from [`TUNABLE`].
pub fn tune_defines(spec: Option<&str>) -> Result<Vec<(String, u32)>> {
    let mut out = Vec::new();
    for item in spec.unwrap_or("").split(',').filter(|s| !s.is_empty()) {
        let bad = || {
            Error::Backend(format!(
                "cuda: ISHIZUKI_CUDA_TUNE: {item:?} is not one of {TUNABLE:?}"
            ))
        };
        let (name, value) = item.split_once('=').ok_or_else(bad)?;
        let value: u32 = value.parse().map_err(|_| bad())?;
        if !TUNABLE
            .iter()
            .any(|(n, range)| *n == name && range.contains(&value))
        {
            return Err(bad());
        }
        out.push((name.to_string(), value));
    }
    Ok(out)
}

impl Target {
    pub fn options(&self) -> Vec<String> {
        let mut o = vec![
            format!("--gpu-architecture=sm_{}", self.arch),
            "--std=c++17".into(),
            "-default-device".into(),
        ];
        o.extend(self.defines.iter().map(|(n, v)| format!("-D{n}={v}")));
        o
    }

    /// The cache key: source, options, architecture and NVRTC version.
    pub fn key(&self, source: &str) -> String {
        let mut h = Sha256::new();
        h.update(source.as_bytes());
        for o in self.options() {
            h.update([0]);
            h.update(o.as_bytes());
        }
        h.update(format!(
            "\0sm_{}\0nvrtc {}.{}",
            self.arch, self.nvrtc.0, self.nvrtc.1
        ));
        h.finalize()
            .iter()
            .take(16)
            .map(|b| format!("{b:02x}"))
            .collect()
    }
}

/// NVRTC's version, or an error when the library cannot be opened.
pub fn nvrtc_version() -> Result<(i32, i32)> {
    // SAFETY: probing for the library has no preconditions
    if !unsafe { sys::is_culib_present() } {
        return Err(Error::Backend(
            "cuda: NVRTC (libnvrtc.so.13) was not found".into(),
        ));
    }
    let (mut major, mut minor): (c_int, c_int) = (0, 0);
    // SAFETY: two out-parameters
    unsafe { sys::nvrtcVersion(&mut major, &mut minor) }
        .result()
        .map_err(|e| Error::Backend(format!("cuda: nvrtcVersion: {e:?}")))?;
    Ok((major, minor))
}

/// The cubin for `source` (named `name` in messages), from `cache` when it holds one.
pub fn cubin(name: &str, source: &str, target: &Target, cache: Option<&Path>) -> Result<Vec<u8>> {
    let path = cache.map(|dir| dir.join(format!("{name}-{}.cubin", target.key(source))));
    if let Some(bytes) = path.as_ref().and_then(|p| std::fs::read(p).ok()) {
        return Ok(bytes);
    }
    let bytes = compile(name, source, target)?;
    if let Some(path) = path {
        store(&path, &bytes);
    }
    Ok(bytes)
}

/// Writes through a temporary name so a reader never sees half a file; a cache that cannot be
/// written only costs the next load a compile.
fn store(path: &PathBuf, bytes: &[u8]) {
    let Some(dir) = path.parent() else { return };
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    let ok = std::fs::create_dir_all(dir).is_ok() && std::fs::write(&tmp, bytes).is_ok();
    if !ok || std::fs::rename(&tmp, path).is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
}

fn compile(name: &str, source: &str, target: &Target) -> Result<Vec<u8>> {
    let fail = |what: &str, e: &dyn std::fmt::Debug| {
        Error::Backend(format!("cuda: compiling {name}: {what}: {e:?}"))
    };
    let src = CString::new(source).map_err(|e| fail("source", &e))?;
    let prog_name = CString::new(format!("{name}.cu")).map_err(|e| fail("name", &e))?;
    let prog = result::create_program(&src, Some(&prog_name)).map_err(|e| fail("create", &e))?;
    let options = target.options();
    // SAFETY: `prog` is live until destroyed below; options are plain strings
    let compiled = unsafe { result::compile_program(prog, &options) };
    let out = match compiled {
        Ok(()) => get_cubin(prog).map_err(|e| fail("cubin", &e)),
        Err(e) => {
            // SAFETY: `prog` is live
            let log = unsafe { result::get_program_log(prog) }
                .map(|l| log_text(&l))
                .unwrap_or_default();
            Err(Error::Backend(format!(
                "cuda: compiling {name} failed ({e:?}):\n{log}"
            )))
        }
    };
    // SAFETY: created above, destroyed once
    let _ = unsafe { result::destroy_program(prog) };
    out
}

fn get_cubin(prog: sys::nvrtcProgram) -> std::result::Result<Vec<u8>, result::NvrtcError> {
    let mut size = 0usize;
    // SAFETY: `prog` compiled successfully; the buffer is the size NVRTC reports
    unsafe {
        sys::nvrtcGetCUBINSize(prog, &mut size).result()?;
        let mut buf = vec![0u8; size];
        sys::nvrtcGetCUBIN(prog, buf.as_mut_ptr() as *mut c_char).result()?;
        Ok(buf)
    }
}

fn log_text(raw: &[c_char]) -> String {
    let bytes: Vec<u8> = raw.iter().map(|&c| c as u8).collect();
    CStr::from_bytes_until_nul(&bytes)
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|_| String::from_utf8_lossy(&bytes).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cache_key_changes_with_source_arch_and_nvrtc() {
        let t = Target {
            arch: 90,
            nvrtc: (13, 0),
            defines: Vec::new(),
        };
        let base = t.key("a");
        assert_ne!(base, t.key("b"));
        assert_ne!(
            base,
            Target {
                arch: 89,
                ..t.clone()
            }
            .key("a")
        );
        assert_ne!(
            base,
            Target {
                nvrtc: (13, 1),
                ..t.clone()
            }
            .key("a")
        );
        let tuned = Target {
            defines: tune_defines(Some("Q8_AHEAD_GLU=4")).unwrap(),
            ..t.clone()
        };
        assert_ne!(base, tuned.key("a"));
        assert_eq!(base, t.key("a"));
    }

    #[test]
    fn tuning_takes_only_the_device_side_constants() {
        assert!(tune_defines(None).unwrap().is_empty());
        let d = tune_defines(Some("Q8_AHEAD_GLU=3,Q8_PREFETCH=0")).unwrap();
        assert_eq!(
            d,
            vec![
                ("Q8_AHEAD_GLU".to_string(), 3),
                ("Q8_PREFETCH".to_string(), 0)
            ]
        );
        for bad in [
            "Q8_AHEAD=2",
            "Q8_PREFETCH=2",
            "Q8_AHEAD_GLU=0",
            "Q8_AHEAD_GLU=9",
            "Q8_AHEAD_GLU",
            "x=1;",
        ] {
            assert!(
                matches!(tune_defines(Some(bad)), Err(Error::Backend(_))),
                "{bad}"
            );
        }
    }
}
