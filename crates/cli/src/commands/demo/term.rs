//! What the chat asks of the terminal: its size, quiet keys while a reply streams, and the
//! process's memory.
use std::io::IsTerminal;

/// Columns and rows of the terminal on stdout; `$COLUMNS`/`$LINES` or 80x24 where there is none.
pub fn size() -> (usize, usize) {
    // SAFETY: TIOCGWINSZ writes one winsize into the struct we own
    let mut ws: libc::winsize = unsafe { std::mem::zeroed() };
    let ok = unsafe { libc::ioctl(libc::STDOUT_FILENO, libc::TIOCGWINSZ, &mut ws) } == 0;
    if ok && ws.ws_col > 0 && ws.ws_row > 0 {
        return (ws.ws_col as usize, ws.ws_row as usize);
    }
    let env = |name: &str, default: usize| {
        std::env::var(name)
            .ok()
            .and_then(|v| v.parse().ok())
            .filter(|&n: &usize| n > 0)
            .unwrap_or(default)
    };
    (env("COLUMNS", 80), env("LINES", 24))
}

pub fn width() -> usize {
    size().0
}

/// Turns off echo and line mode on a terminal stdin while a reply streams, so keys typed
/// meanwhile do not tear the rendered text; Ctrl-C still signals. Restores (and drops what was
/// typed) when dropped.
pub struct QuietKeys {
    saved: Option<libc::termios>,
}

impl QuietKeys {
    pub fn new() -> QuietKeys {
        if !std::io::stdin().is_terminal() {
            return QuietKeys { saved: None };
        }
        // SAFETY: tcgetattr/tcsetattr read and write a termios we own, on fd 0
        unsafe {
            let mut t: libc::termios = std::mem::zeroed();
            if libc::tcgetattr(libc::STDIN_FILENO, &mut t) != 0 {
                return QuietKeys { saved: None };
            }
            let saved = t;
            t.c_lflag &= !(libc::ECHO | libc::ICANON);
            libc::tcsetattr(libc::STDIN_FILENO, libc::TCSANOW, &t);
            QuietKeys { saved: Some(saved) }
        }
    }
}

impl Drop for QuietKeys {
    fn drop(&mut self) {
        if let Some(saved) = &self.saved {
            // SAFETY: restores the termios read in `new`, on fd 0
            unsafe {
                libc::tcflush(libc::STDIN_FILENO, libc::TCIFLUSH);
                libc::tcsetattr(libc::STDIN_FILENO, libc::TCSANOW, saved);
            }
        }
    }
}

/// Resident memory of this process (`VmRSS`), in bytes.
pub fn resident_bytes() -> Option<usize> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kib: usize = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// `1.5 GiB`, `469 MiB`, `12 KiB`.
pub fn human_bytes(n: usize) -> String {
    const UNITS: [&str; 4] = ["B", "KiB", "MiB", "GiB"];
    let mut v = n as f64;
    let mut unit = 0;
    while v >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    if unit >= 3 {
        format!("{v:.1} {}", UNITS[unit])
    } else {
        format!("{v:.0} {}", UNITS[unit])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn human_bytes_picks_the_unit() {
        assert_eq!(human_bytes(512), "512 B");
        assert_eq!(human_bytes(491_400_064), "469 MiB");
        assert_eq!(human_bytes(3 << 30), "3.0 GiB");
    }

    #[test]
    fn resident_memory_is_read() {
        assert!(resident_bytes().is_some_and(|n| n > 0));
    }
}
