//! Every kernel launch goes through `Launcher::launch`, so a forward can be recorded without
//! running it: its launches (kernel, shape, arguments) become a fingerprint, and a step whose
//! fingerprint equals one captured before replays that CUDA graph instead of launching each
//! kernel. A forward's addresses (workspace, KV planes, metadata) are stable from one decode
//! step to the next and its per-step values (positions, n_kv) live in device memory, so a
//! decode step records the same fingerprint every time.
use crate::device::cuda_err;
use cudarc::driver::{sys, CudaFunction, CudaGraph, CudaStream, LaunchConfig, PushKernelArg};
use ishizuki_core::{Error, Result};
use std::cell::RefCell;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock, RwLockReadGuard};

/// Captured steps kept (different sequences' KV planes or row counts); the oldest goes first.
const MAX_GRAPHS: usize = 16;
/// Hashes of recent uncaptured steps remembered.
const SEEN: usize = 32;

/// One kernel argument, by value.
#[derive(Clone, Copy, Debug)]
pub enum Arg {
    U64(u64),
    I32(i32),
    F32(f32),
}

impl Arg {
    /// The parameter's bytes as a u64 (a 4-byte one in the low half).
    fn value(self) -> u64 {
        match self {
            Arg::U64(v) => v,
            Arg::I32(v) => v as u32 as u64,
            Arg::F32(v) => v.to_bits() as u64,
        }
    }

    fn bits(self) -> u64 {
        match self {
            Arg::U64(v) => v,
            Arg::I32(v) => v as u32 as u64 | 1 << 32,
            Arg::F32(v) => v.to_bits() as u64 | 2 << 32,
        }
    }
}

/// A forward being recorded on this thread: the launcher's address and the launches so far.
struct Recording {
    launcher: usize,
    launches: Vec<u64>,
    /// A host read (a dump) happened inside the step, which a graph cannot replay.
    uncapturable: bool,
}

thread_local! {
    static RECORDING: RefCell<Option<Recording>> = const { RefCell::new(None) };
    /// The launcher (address) whose stream this thread is capturing.
    static CAPTURING: RefCell<usize> = const { RefCell::new(0) };
}

/// A captured graph; CUDA graphs may be used from any thread when calls are serialised, which
/// the launcher's mutex does.
struct Captured(CudaGraph);

// SAFETY: a Captured is only touched under the launcher's `graphs` mutex
unsafe impl Send for Captured {}

/// What a step's launch record calls for.
#[derive(Debug, PartialEq)]
enum Verdict<'a, G> {
    /// A graph captured from the same launches.
    Replay(&'a G),
    /// Seen once before: capture it.
    Capture,
    /// New: run it kernel by kernel (and remember it).
    Run,
}

/// Captured steps by their whole launch record (compared exactly, never by hash alone), and the
/// hashes of recent uncaptured records: a record is captured the second time it is seen, so
/// one-off shapes (a draft verification of an unusual length) never pay for a capture.
struct GraphCache<G> {
    graphs: Vec<(Vec<u64>, G)>,
    seen: VecDeque<u64>,
}

impl<G> GraphCache<G> {
    fn new() -> Self {
        GraphCache {
            graphs: Vec::new(),
            seen: VecDeque::new(),
        }
    }

    fn verdict(&mut self, launches: &[u64]) -> Verdict<'_, G> {
        if let Some(i) = self.graphs.iter().position(|(l, _)| l == launches) {
            return Verdict::Replay(&self.graphs[i].1);
        }
        let hash = launches.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &v| {
            (h ^ v).wrapping_mul(0x0100_0000_01b3).rotate_left(29)
        });
        if let Some(i) = self.seen.iter().position(|&h| h == hash) {
            self.seen.remove(i);
            return Verdict::Capture;
        }
        if self.seen.len() == SEEN {
            self.seen.pop_front();
        }
        self.seen.push_back(hash);
        Verdict::Run
    }

    /// Keeps `graph` for `launches`, dropping the oldest past MAX_GRAPHS.
    fn insert(&mut self, launches: Vec<u64>, graph: G) {
        if self.graphs.len() == MAX_GRAPHS {
            self.graphs.remove(0);
        }
        self.graphs.push((launches, graph));
    }
}

pub struct Launcher {
    stream: Arc<CudaStream>,
    /// Held shared by every stream use, exclusively by a capture, so no other thread's work
    /// lands in a graph being captured.
    gate: RwLock<()>,
    graphs: Mutex<GraphCache<Captured>>,
    /// Set when a capture failed: steps then run launch by launch.
    no_graphs: AtomicBool,
    captured: AtomicUsize,
    replayed: AtomicUsize,
    /// Kernels launched with programmatic stream serialization (PDL): each may start while
    /// the one before it finishes, and waits for it (`PDL_ENTER`) before touching memory.
    pdl: bool,
    /// (address, rows, width) of the activations whose 8-bit form the quantization scratch
    /// holds, written by the last launch; any other launch or stream use forgets it.
    quantized: Mutex<Option<(u64, usize, usize)>>,
}

impl Launcher {
    pub fn new(stream: Arc<CudaStream>, graphs: bool, pdl: bool) -> Launcher {
        Launcher {
            stream,
            pdl,
            gate: RwLock::new(()),
            graphs: Mutex::new(GraphCache::new()),
            no_graphs: AtomicBool::new(!graphs),
            captured: AtomicUsize::new(0),
            replayed: AtomicUsize::new(0),
            quantized: Mutex::new(None),
        }
    }

    /// Notes that the launch just made left `key`'s activations quantized in the scratch.
    pub fn set_quantized(&self, key: (u64, usize, usize)) {
        *self.quantized.lock().unwrap_or_else(|e| e.into_inner()) = Some(key);
    }

    /// Whether the scratch holds `key`'s quantized activations (forgotten once asked).
    pub fn take_quantized(&self, key: (u64, usize, usize)) -> bool {
        let mut q = self.quantized.lock().unwrap_or_else(|e| e.into_inner());
        q.take() == Some(key)
    }

    fn forget_quantized(&self) {
        *self.quantized.lock().unwrap_or_else(|e| e.into_inner()) = None;
    }

    /// Steps captured as graphs, and graph launches (a capture's first run included).
    pub fn graph_counts(&self) -> (usize, usize) {
        let c = self.captured.load(Ordering::Relaxed);
        (c, self.replayed.load(Ordering::Relaxed))
    }

    fn id(&self) -> usize {
        self as *const Launcher as usize
    }

    /// The shared hold on the stream (none while this thread captures it).
    pub fn hold(&self) -> Option<RwLockReadGuard<'_, ()>> {
        self.forget_quantized();
        if CAPTURING.with(|c| *c.borrow()) == self.id() {
            return None;
        }
        Some(self.gate.read().unwrap_or_else(|e| e.into_inner()))
    }

    /// Whether this thread is recording a fingerprint for this launcher; a host read calls
    /// this to mark the step as one that must run launch by launch.
    pub fn note_host_read(&self) -> bool {
        RECORDING.with(|r| match r.borrow_mut().as_mut() {
            Some(rec) if rec.launcher == self.id() => {
                rec.uncapturable = true;
                true
            }
            _ => false,
        })
    }

    /// Launches `f` on the stream, or adds it to this thread's fingerprint when recording.
    ///
    /// # Safety
    /// `args` must match `f`'s parameters and every pointer in them must cover what the
    /// kernel reads and writes under `cfg`.
    pub unsafe fn launch(&self, f: &CudaFunction, cfg: LaunchConfig, args: &[Arg]) -> Result<()> {
        self.forget_quantized();
        let recorded = RECORDING.with(|r| match r.borrow_mut().as_mut() {
            Some(rec) if rec.launcher == self.id() => {
                let l = &mut rec.launches;
                l.push(f as *const CudaFunction as u64);
                let (g, b) = (cfg.grid_dim, cfg.block_dim);
                l.extend([g.0, g.1, g.2, b.0, b.1, b.2, cfg.shared_mem_bytes].map(u64::from));
                l.push(args.len() as u64);
                l.extend(args.iter().map(|a| a.bits()));
                true
            }
            _ => false,
        });
        if recorded {
            return Ok(());
        }
        let _hold = self.hold();
        if self.pdl {
            // SAFETY: the caller's contract
            return unsafe { self.launch_pdl(f, cfg, args) };
        }
        let mut b = self.stream.launch_builder(f);
        for a in args {
            match a {
                Arg::U64(v) => b.arg(v),
                Arg::I32(v) => b.arg(v),
                Arg::F32(v) => b.arg(v),
            };
        }
        // SAFETY: the caller's contract
        unsafe { b.launch(cfg) }.map_err(cuda_err)?;
        Ok(())
    }

    /// `launch` through cuLaunchKernelEx with programmatic stream serialization allowed.
    ///
    /// # Safety
    /// As `launch`; every kernel waits on its predecessor (`PDL_ENTER`) before its first access.
    unsafe fn launch_pdl(&self, f: &CudaFunction, cfg: LaunchConfig, args: &[Arg]) -> Result<()> {
        self.stream.context().bind_to_thread().map_err(cuda_err)?;
        // each parameter's bytes (little-endian: a 4-byte one is the low half of its u64)
        let mut values: Vec<u64> = args.iter().map(|a| a.value()).collect();
        let mut params: Vec<*mut std::ffi::c_void> =
            values.iter_mut().map(|v| v as *mut u64 as *mut _).collect();
        // SAFETY: plain data; zero is a valid bit pattern for the attribute
        let mut attr: sys::CUlaunchAttribute = unsafe { std::mem::zeroed() };
        attr.id = sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
        attr.value.programmaticStreamSerializationAllowed = 1;
        let (g, b) = (cfg.grid_dim, cfg.block_dim);
        let config = sys::CUlaunchConfig {
            gridDimX: g.0,
            gridDimY: g.1,
            gridDimZ: g.2,
            blockDimX: b.0,
            blockDimY: b.1,
            blockDimZ: b.2,
            sharedMemBytes: cfg.shared_mem_bytes,
            hStream: self.stream.cu_stream(),
            attrs: &mut attr,
            numAttrs: 1,
        };
        let null = std::ptr::null_mut();
        // SAFETY: params point at live values matching f's parameters (the caller's contract)
        unsafe { sys::cuLaunchKernelEx(&config, f.cu_function(), params.as_mut_ptr(), null) }
            .result()
            .map_err(cuda_err)
    }

    /// Runs one forward's ops (`record`): as a graph replay when its launches equal a captured
    /// step's, else captured (then replayed) when `capturable`, else launch by launch.
    pub fn step(&self, capturable: bool, record: &mut dyn FnMut() -> Result<()>) -> Result<()> {
        if !capturable || self.no_graphs.load(Ordering::Relaxed) {
            return record();
        }
        let (launches, uncapturable) = self.fingerprint(record)?;
        if uncapturable {
            return record();
        }
        let mut graphs = self.graphs.lock().unwrap_or_else(|e| e.into_inner());
        match graphs.verdict(&launches) {
            Verdict::Replay(c) => {
                let _hold = self.hold();
                self.replayed.fetch_add(1, Ordering::Relaxed);
                return c.0.launch().map_err(cuda_err);
            }
            Verdict::Run => return record(),
            Verdict::Capture => {}
        }
        match self.capture(record) {
            Ok(graph) => {
                let _hold = self.hold();
                graph.launch().map_err(cuda_err)?;
                self.captured.fetch_add(1, Ordering::Relaxed);
                self.replayed.fetch_add(1, Ordering::Relaxed);
                graphs.insert(launches, Captured(graph));
                Ok(())
            }
            Err(e) => {
                // run this and every later step launch by launch
                self.no_graphs.store(true, Ordering::Relaxed);
                eprintln!("cuda: graph capture failed ({e}); launching kernels one by one");
                record()
            }
        }
    }

    /// `record`'s launches, not run, and whether it read the host.
    fn fingerprint(&self, record: &mut dyn FnMut() -> Result<()>) -> Result<(Vec<u64>, bool)> {
        RECORDING.with(|r| {
            *r.borrow_mut() = Some(Recording {
                launcher: self.id(),
                launches: Vec::with_capacity(1 << 13),
                uncapturable: false,
            })
        });
        // ends the recording however record() ends, a panic included, so no later launch on
        // this thread is swallowed
        struct Stop;
        impl Drop for Stop {
            fn drop(&mut self) {
                RECORDING.with(|r| r.borrow_mut().take());
            }
        }
        let stop = Stop;
        let result = record();
        let rec = RECORDING.with(|r| r.borrow_mut().take());
        drop(stop);
        result?;
        let rec = rec.ok_or_else(|| Error::Backend("cuda: the step recording vanished".into()))?;
        Ok((rec.launches, rec.uncapturable))
    }

    /// `record` captured into a graph, the stream held exclusively meanwhile.
    fn capture(&self, record: &mut dyn FnMut() -> Result<()>) -> Result<CudaGraph> {
        let _only = self.gate.write().unwrap_or_else(|e| e.into_inner());
        let mode = sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL;
        self.stream.begin_capture(mode).map_err(cuda_err)?;
        // a panic in record() must not leave the stream capturing, nor this thread marked
        struct OpenCapture<'a>(Option<&'a Arc<CudaStream>>);
        impl Drop for OpenCapture<'_> {
            fn drop(&mut self) {
                CAPTURING.with(|c| *c.borrow_mut() = 0);
                if let Some(stream) = self.0 {
                    let _ = stream.end_capture(sys::CUgraphInstantiate_flags(0));
                }
            }
        }
        let mut open = OpenCapture(Some(&self.stream));
        CAPTURING.with(|c| *c.borrow_mut() = self.id());
        let result = record();
        open.0 = None;
        drop(open);
        let graph = self
            .stream
            .end_capture(sys::CUgraphInstantiate_flags(0))
            .map_err(cuda_err);
        result?;
        graph?.ok_or_else(|| Error::Backend("cuda: the captured step is empty".into()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_is_run_then_captured_then_replayed_and_only_on_exact_equality() {
        let mut cache = GraphCache::new();
        let (a, b) = (vec![1, 2, 3], vec![1, 2, 4]);
        assert_eq!(cache.verdict(&a), Verdict::Run);
        assert_eq!(cache.verdict(&b), Verdict::Run);
        assert_eq!(cache.verdict(&a), Verdict::Capture);
        cache.insert(a.clone(), "a");
        assert_eq!(cache.verdict(&a), Verdict::Replay(&"a"));
        assert_eq!(cache.verdict(&b), Verdict::Capture);
        cache.insert(b.clone(), "b");
        assert_eq!(cache.verdict(&b), Verdict::Replay(&"b"));
        // a longer record with the same prefix is another step
        assert_eq!(cache.verdict(&[1, 2, 3, 0]), Verdict::Run);
    }

    #[test]
    fn the_oldest_graph_and_sighting_go_first() {
        let mut cache = GraphCache::new();
        for i in 0..MAX_GRAPHS as u64 + 1 {
            cache.insert(vec![i], i);
        }
        assert_eq!(
            cache.verdict(&[0]),
            Verdict::Run,
            "the first graph was dropped"
        );
        assert_eq!(cache.verdict(&[1]), Verdict::Replay(&1));
        assert_eq!(
            cache.verdict(&[MAX_GRAPHS as u64]),
            Verdict::Replay(&(MAX_GRAPHS as u64))
        );
        let mut cache = GraphCache::<()>::new();
        for i in 100..100 + SEEN as u64 + 1 {
            assert_eq!(cache.verdict(&[i]), Verdict::Run);
        }
        // the first sighting was forgotten, the second remembered
        assert_eq!(cache.verdict(&[100]), Verdict::Run);
        assert_eq!(cache.verdict(&[102]), Verdict::Capture);
    }
}
