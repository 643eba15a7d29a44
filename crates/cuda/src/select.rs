//! Each row's k best logits selected on the device (`top_k_f32`), so a top-k sampler reads
//! back (1 + 2k) words a row instead of the row.
use crate::device::{cuda_err, grown};
use crate::step::Arg;
use crate::CudaBackend;
use cudarc::driver::LaunchConfig;
use ishizuki_core::backend::{check_top_k, Candidate};
use ishizuki_core::{Buffer, Error, Result};

/// Threads of `top_k_f32`'s block, one block per row (`select.cu`).
pub(crate) const SELECT_THREADS: u32 = 1024;

/// Words of one row's answer: its count, then k ids, then k logits' bits.
fn row_words(k: usize) -> usize {
    1 + 2 * k
}

impl CudaBackend {
    /// `Backend::top_k` on the device: one launch, one copy back.
    pub(crate) fn select_top_k(
        &self,
        x: &Buffer,
        rows: usize,
        width: usize,
        k: usize,
    ) -> Result<Vec<Vec<Candidate>>> {
        check_top_k(k)?;
        let xp = self.buf(x, rows * width, "top_k")?;
        if rows == 0 || k == 0 {
            return Ok(vec![Vec::new(); rows]);
        }
        let width_i32 = i32::try_from(width)
            .map_err(|_| Error::Shape(format!("top_k: a row of {width} is too wide")))?;
        let words = rows * row_words(k);
        let mut slot = self.readback.lock().unwrap_or_else(|e| e.into_inner());
        let _hold = self.launcher.hold();
        let out = grown(&self.stream, &mut slot, words)?;
        let args = [
            Arg::U64(xp),
            Arg::U64(self.ptr(out)),
            Arg::I32(width_i32),
            Arg::I32(k as i32),
        ];
        drop(_hold);
        let cfg = LaunchConfig {
            grid_dim: (rows as u32, 1, 1),
            block_dim: (SELECT_THREADS, 1, 1),
            shared_mem_bytes: 0,
        };
        // SAFETY: x holds rows x width; out holds rows x (1 + 2k) words
        unsafe { self.go(&self.ops.top_k, cfg, &args)? };
        let mut host = vec![0u32; words];
        let _hold = self.launcher.hold();
        self.stream
            .memcpy_dtoh(&out.slice(..words), &mut host)
            .map_err(cuda_err)?;
        self.stream.synchronize().map_err(cuda_err)?;
        unpack_top_k(&host, rows, width, k)
    }
}

/// The kernel's rows as candidates; a count above k or an id past the row is a fault.
fn unpack_top_k(words: &[u32], rows: usize, width: usize, k: usize) -> Result<Vec<Vec<Candidate>>> {
    let fault = |what: String| Error::Backend(format!("cuda: top_k answered {what}"));
    if words.len() < rows * row_words(k) {
        return Err(fault(format!("{} words for {rows} rows", words.len())));
    }
    words
        .chunks_exact(row_words(k))
        .take(rows)
        .map(|row| {
            let count = row[0] as usize;
            if count > k {
                return Err(fault(format!("{count} candidates for k = {k}")));
            }
            let (ids, bits) = (&row[1..1 + count], &row[1 + k..1 + k + count]);
            ids.iter()
                .zip(bits)
                .map(|(&id, &b)| {
                    if id as usize >= width {
                        return Err(fault(format!("id {id} in a row of {width}")));
                    }
                    Ok(Candidate {
                        id,
                        logit: f32::from_bits(b),
                    })
                })
                .collect()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_unpack_to_their_counts_and_bad_answers_are_faults() {
        let k = 3;
        // row 0: two candidates; row 1: none
        let words = [
            2,
            7,
            1,
            0,
            2.5f32.to_bits(),
            (-1.0f32).to_bits(),
            0,
            0,
            0,
            0,
            0,
            0,
            0,
            0,
        ];
        let rows = unpack_top_k(&words, 2, 10, k).unwrap();
        assert_eq!(
            rows[0],
            vec![
                Candidate { id: 7, logit: 2.5 },
                Candidate { id: 1, logit: -1.0 }
            ]
        );
        assert!(rows[1].is_empty());
        let mut over = words;
        over[0] = 4;
        assert!(unpack_top_k(&over, 2, 10, k).is_err(), "count above k");
        assert!(unpack_top_k(&words, 2, 5, k).is_err(), "id past the row");
        assert!(
            unpack_top_k(&words[..10], 2, 10, k).is_err(),
            "short answer"
        );
    }
}
