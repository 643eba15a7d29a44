//! Rendering in a forked child with a capped address space. Fuel stops loops and output caps
//! stop printing, but a template can still grow a value without either (a string doubled in a
//! namespace 36 times wants 64 GiB): the child's allocation fails and it dies, the caller gets
//! [`TemplateError::MemoryExceeded`], and nothing in this process is touched.
use super::TemplateError;
use std::io::Read;
use std::os::fd::FromRawFd;

/// Seconds of CPU a render child may use: fuel ends runaway loops far sooner, this is a backstop.
const CPU_SECONDS: libc::rlim_t = 10;

/// Runs `render` in a child whose address space may grow by at most `budget` bytes.
pub(super) fn render_isolated(
    budget: usize,
    render: impl FnOnce() -> Result<String, TemplateError>,
) -> Result<String, TemplateError> {
    let mut fds = [0i32; 2];
    // SAFETY: `pipe` writes two descriptors into `fds`.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(unavailable("pipe"));
    }
    let limit = current_vm_bytes().saturating_add(budget);
    // SAFETY: the child only renders (allocating through the inherited, fork-safe allocator),
    // writes to its pipe and leaves with `_exit`; it touches no lock another thread may hold.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        // SAFETY: closing descriptors we own.
        unsafe {
            libc::close(fds[0]);
            libc::close(fds[1]);
        }
        return Err(unavailable("fork"));
    }
    if pid == 0 {
        child(fds, limit, render);
    }
    // SAFETY: the parent owns the read end from here on; the write end belongs to the child.
    unsafe { libc::close(fds[1]) };
    let mut reply = Vec::new();
    let read = unsafe { std::fs::File::from_raw_fd(fds[0]) }.read_to_end(&mut reply);
    let mut status = 0;
    // SAFETY: waiting for our own child.
    while unsafe { libc::waitpid(pid, &mut status, 0) } < 0 {
        if std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted {
            return Err(unavailable("waitpid"));
        }
    }
    if read.is_err() || !libc::WIFEXITED(status) || libc::WEXITSTATUS(status) != 0 {
        return Err(TemplateError::MemoryExceeded { limit: budget });
    }
    decode(&reply)
}

fn unavailable(what: &str) -> TemplateError {
    TemplateError::Render(format!(
        "the template sandbox could not start ({what}: {})",
        std::io::Error::last_os_error()
    ))
}

/// The child's whole life: limit itself, render, send the result, exit.
fn child(fds: [i32; 2], limit: usize, render: impl FnOnce() -> Result<String, TemplateError>) -> ! {
    // SAFETY: plain system calls on our own descriptors and limits; `_exit` skips atexit
    // handlers and buffered output that belong to the parent.
    unsafe {
        libc::close(fds[0]);
        let space = libc::rlimit {
            rlim_cur: limit as libc::rlim_t,
            rlim_max: limit as libc::rlim_t,
        };
        let cpu = libc::rlimit {
            rlim_cur: CPU_SECONDS,
            rlim_max: CPU_SECONDS,
        };
        if libc::setrlimit(libc::RLIMIT_AS, &space) != 0
            || libc::setrlimit(libc::RLIMIT_CPU, &cpu) != 0
        {
            libc::_exit(2);
        }
        // the allocator's failure report is the parent's to give, as an error
        let null = libc::open(c"/dev/null".as_ptr(), libc::O_WRONLY);
        if null >= 0 {
            libc::dup2(null, 2);
        }
        // a panic must end here, not unwind into the parent's frames this child copied
        std::panic::set_hook(Box::new(|_| {}));
        let rendered = std::panic::catch_unwind(std::panic::AssertUnwindSafe(render));
        let reply = match rendered {
            Ok(r) => encode(&r),
            Err(_) => libc::_exit(4),
        };
        let mut rest = &reply[..];
        while !rest.is_empty() {
            let n = libc::write(fds[1], rest.as_ptr().cast(), rest.len());
            if n <= 0 {
                libc::_exit(3);
            }
            rest = &rest[n as usize..];
        }
        libc::_exit(0)
    }
}

/// `VmSize` of this process: the child's limit starts from what is already mapped.
fn current_vm_bytes() -> usize {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmSize:"))
        .and_then(|v| v.split_whitespace().next()?.parse::<usize>().ok())
        .map_or(0, |kib| kib * 1024)
}

/// One tag byte, then the text (or the error's message / limit).
fn encode(r: &Result<String, TemplateError>) -> Vec<u8> {
    let (tag, body) = match r {
        Ok(s) => (0, s.clone()),
        Err(TemplateError::Syntax(m)) => (1, m.clone()),
        Err(TemplateError::Raised(m)) => (2, m.clone()),
        Err(TemplateError::Fuel { limit }) => (3, limit.to_string()),
        Err(TemplateError::OutputTooLarge { limit }) => (4, limit.to_string()),
        Err(TemplateError::InvalidInput(m)) => (5, m.clone()),
        Err(TemplateError::Render(m)) => (6, m.clone()),
        Err(TemplateError::MemoryExceeded { limit }) => (7, limit.to_string()),
    };
    let mut out = vec![tag];
    out.extend_from_slice(body.as_bytes());
    out
}

fn decode(reply: &[u8]) -> Result<String, TemplateError> {
    let Some((&tag, body)) = reply.split_first() else {
        return Err(TemplateError::Render(
            "the template sandbox sent nothing".into(),
        ));
    };
    let text = String::from_utf8_lossy(body).into_owned();
    let number = || text.parse().unwrap_or(0);
    match tag {
        0 => Ok(text),
        1 => Err(TemplateError::Syntax(text)),
        2 => Err(TemplateError::Raised(text)),
        3 => Err(TemplateError::Fuel {
            limit: number() as u64,
        }),
        4 => Err(TemplateError::OutputTooLarge { limit: number() }),
        5 => Err(TemplateError::InvalidInput(text)),
        7 => Err(TemplateError::MemoryExceeded { limit: number() }),
        _ => Err(TemplateError::Render(text)),
    }
}
