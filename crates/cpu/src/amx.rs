//! AMX support: detection, the kernel's permission to use tile data, and the tile
//! operations the GEMM needs, written in stable `asm!` (core::arch's AMX intrinsics are not
//! stable in our toolchain).

/// Whether this CPU has AMX-TILE and AMX-BF16, the OS saves tile state, and the kernel granted
/// this process tile data (`arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)`, Linux 5.16+).
/// The permission is process-wide, so it is asked for once, before any thread touches a tile.
pub fn usable() -> bool {
    #[cfg(all(target_arch = "x86_64", target_os = "linux"))]
    {
        // SAFETY: cpuid and xgetbv exist on every x86-64 CPU that reports OSXSAVE; the syscall
        // only changes this process's XSAVE permissions.
        unsafe { x86::cpu_has_amx_bf16() && x86::os_saves_tiles() && x86::request_tile_data() }
    }
    #[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
    false
}

#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
mod x86 {
    use std::arch::x86_64::{__cpuid, __cpuid_count, _xgetbv};

    const ARCH_REQ_XCOMP_PERM: libc::c_long = 0x1023;
    const XFEATURE_XTILEDATA: libc::c_long = 18;

    pub(super) unsafe fn cpu_has_amx_bf16() -> bool {
        if __cpuid(0).eax < 7 {
            return false;
        }
        let edx = __cpuid_count(7, 0).edx;
        let (amx_bf16, amx_tile) = (edx >> 22 & 1 == 1, edx >> 24 & 1 == 1);
        amx_tile && amx_bf16
    }

    /// XCR0 bits 17 (XTILECFG) and 18 (XTILEDATA): the OS context-switches tile state.
    pub(super) unsafe fn os_saves_tiles() -> bool {
        let osxsave = __cpuid(1).ecx >> 27 & 1 == 1;
        osxsave && xcr0() >> 17 & 3 == 3
    }

    #[target_feature(enable = "xsave")]
    unsafe fn xcr0() -> u64 {
        _xgetbv(0)
    }

    pub(super) unsafe fn request_tile_data() -> bool {
        libc::syscall(
            libc::SYS_arch_prctl,
            ARCH_REQ_XCOMP_PERM,
            XFEATURE_XTILEDATA,
        ) == 0
    }
}

/// A tile configuration (palette 1): `colsb` bytes per row and `rows` rows of each of the 8
/// tile registers, in `ldtilecfg`'s 64-byte memory layout.
#[repr(C, align(64))]
pub struct TileConfig {
    palette: u8,
    start_row: u8,
    reserved: [u8; 14],
    colsb: [u16; 16],
    rows: [u8; 16],
}

impl TileConfig {
    /// `shapes[i]` = (rows, bytes per row) of tile register `tmm<i>`.
    pub const fn new(shapes: [(u8, u16); 8]) -> TileConfig {
        let mut c = TileConfig {
            palette: 1,
            start_row: 0,
            reserved: [0; 14],
            colsb: [0; 16],
            rows: [0; 16],
        };
        let mut i = 0;
        while i < 8 {
            c.rows[i] = shapes[i].0;
            c.colsb[i] = shapes[i].1;
            i += 1;
        }
        c
    }

    /// Loads this configuration into the calling thread's tile registers (zeroing them).
    ///
    /// # Safety
    /// AMX must be `usable()`; release with `tile_release` before the thread idles.
    #[cfg(target_arch = "x86_64")]
    #[inline]
    pub unsafe fn load(&self) {
        std::arch::asm!("ldtilecfg [{}]", in(reg) self as *const TileConfig, options(nostack));
    }
}

/// Returns the tile registers to their initial state (cheaper context switches).
///
/// # Safety
/// AMX must be `usable()`.
#[cfg(target_arch = "x86_64")]
#[inline]
pub unsafe fn tile_release() {
    std::arch::asm!("tilerelease", options(nostack, nomem));
}
