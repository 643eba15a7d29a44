//! Zeroed anonymous memory asked to be backed by transparent huge pages: streaming a repacked
//! weight through 4 KiB pages costs a page walk every 4 KiB once the TLB is exhausted, and many
//! kernels only grant huge pages to memory that asks (`transparent_hugepage=madvise`).
use std::ptr::NonNull;
use std::sync::{Arc, Mutex};

const HUGE_PAGE: usize = 2 << 20;
/// Address space reserved per arena chunk; only the pages written are ever resident.
const CHUNK: usize = 256 << 20;
/// Alignment of every arena slice (one cache line, as the packed tiles' loads need).
const SLICE_ALIGN: usize = 64;

/// Owned, zero-initialized, page-aligned bytes.
pub struct HugeBuf {
    /// Start of the usable bytes (2 MiB aligned when the buffer is at least that large).
    ptr: NonNull<u8>,
    len: usize,
    /// The whole mapping, as `munmap` needs it.
    map: NonNull<u8>,
    map_len: usize,
}

// SAFETY: the buffer is plain owned memory; access follows `&`/`&mut` borrows of `self`.
unsafe impl Send for HugeBuf {}
unsafe impl Sync for HugeBuf {}

impl HugeBuf {
    /// `len` zero bytes, or None when the kernel refuses the mapping.
    pub fn zeroed(len: usize) -> Option<HugeBuf> {
        let align = if len >= HUGE_PAGE { HUGE_PAGE } else { 1 };
        // mmap refuses an empty mapping
        let map_len = len.max(1) + align - 1;
        // SAFETY: a fresh private anonymous mapping; nothing else refers to it.
        let map = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if map == libc::MAP_FAILED {
            return None;
        }
        let map = NonNull::new(map.cast::<u8>())?;
        let offset = (map.as_ptr() as usize).next_multiple_of(align) - map.as_ptr() as usize;
        // SAFETY: `offset + len <= map_len`, so the start stays inside the mapping.
        let ptr = unsafe { map.add(offset) };
        if align == HUGE_PAGE {
            // SAFETY: advice on our own mapping; a refusal (no THP) leaves small pages.
            let _ = unsafe { libc::madvise(ptr.as_ptr().cast(), len, libc::MADV_HUGEPAGE) };
        }
        Some(HugeBuf {
            ptr,
            len,
            map,
            map_len,
        })
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl std::ops::Deref for HugeBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: `len` mapped, initialized (zero-filled) bytes owned by `self`.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl std::ops::DerefMut for HugeBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `deref`, borrowed mutably through `self`.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for HugeBuf {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `zeroed`, unmapped once.
        unsafe { libc::munmap(self.map.as_ptr().cast(), self.map_len) };
    }
}

/// Hands out slices of huge-page chunks, so many weights of a few hundred KiB (a layer's
/// projections) share 2 MiB pages instead of each getting small pages of its own.
#[derive(Default)]
pub struct HugeArena {
    /// The chunk being filled and its first free byte.
    current: Mutex<Option<(Arc<HugeBuf>, usize)>>,
}

impl HugeArena {
    /// `len` zero bytes, 64-byte aligned, or None when the kernel refuses a mapping.
    pub fn alloc(&self, len: usize) -> Option<HugeSlice> {
        let mut current = self.current.lock().unwrap_or_else(|e| e.into_inner());
        let fits = |(chunk, used): &(Arc<HugeBuf>, usize)| used + len <= chunk.len();
        if !current.as_ref().is_some_and(fits) {
            if len > CHUNK / 4 {
                // a large weight gets a chunk of its own and the current one stays open
                let chunk = Arc::new(HugeBuf::zeroed(len)?);
                return Some(HugeSlice {
                    chunk,
                    start: 0,
                    len,
                });
            }
            *current = Some((Arc::new(HugeBuf::zeroed(CHUNK)?), 0));
        }
        let (chunk, used) = current.as_mut().expect("set above");
        let start = *used;
        *used = (start + len).next_multiple_of(SLICE_ALIGN);
        Some(HugeSlice {
            chunk: chunk.clone(),
            start,
            len,
        })
    }
}

/// Bytes of an arena chunk that belong to one owner alone.
pub struct HugeSlice {
    chunk: Arc<HugeBuf>,
    start: usize,
    len: usize,
}

impl HugeSlice {
    /// Bytes of the chunk mapped after this slice (later slices, or free room): a reader that
    /// streams slices in allocation order may prefetch into them.
    pub fn mapped_after(&self) -> usize {
        self.chunk.len() - self.start - self.len
    }
}

impl std::ops::Deref for HugeSlice {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: `start..start + len` lies inside the chunk and no other slice overlaps it.
        unsafe { std::slice::from_raw_parts(self.chunk.ptr.as_ptr().add(self.start), self.len) }
    }
}

impl std::ops::DerefMut for HugeSlice {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `deref`; the range is this slice's alone, borrowed mutably through it.
        unsafe { std::slice::from_raw_parts_mut(self.chunk.ptr.as_ptr().add(self.start), self.len) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zeroed_aligned_and_writable() {
        for len in [0, 1, 4096, 3 << 20] {
            let mut b = HugeBuf::zeroed(len).expect("mapping");
            assert_eq!(b.len(), len);
            assert!(b.iter().all(|&v| v == 0));
            assert_eq!(b.as_ptr() as usize % 4096, 0);
            if len >= HUGE_PAGE {
                assert_eq!(b.as_ptr() as usize % HUGE_PAGE, 0);
            }
            if len > 0 {
                b[len - 1] = 7;
                assert_eq!(b[len - 1], 7);
            }
        }
    }

    #[test]
    fn arena_slices_are_disjoint_aligned_and_outlive_the_arena() {
        let arena = HugeArena::default();
        let sizes = [100, 1, 4096, CHUNK / 4 + 1, 5000, CHUNK / 4];
        let mut slices: Vec<HugeSlice> = sizes.iter().map(|&n| arena.alloc(n).unwrap()).collect();
        for (i, s) in slices.iter_mut().enumerate() {
            assert_eq!(s.as_ptr() as usize % SLICE_ALIGN, 0);
            assert!(s.iter().all(|&v| v == 0));
            s.fill(i as u8 + 1);
        }
        drop(arena);
        for (i, s) in slices.iter().enumerate() {
            assert_eq!(s.len(), sizes[i]);
            assert!(s.iter().all(|&v| v == i as u8 + 1), "slice {i} overwritten");
        }
    }
}
