//===- Executor.h - Runs an artifact's plan on the CPU -----------*- C++ -*-===//
//
// The CPU backend of the runtime: loads the artifact's generated host kernels
// (dlopen of kernels/host.so), binds the checkpoint's tensors, and carries out
// the plan's steps for `prefill` and `decode`, calling `_mlir_ciface_<kernel>`
// with memref descriptors. All arithmetic on values happens in the generated
// kernels; the executor allocates transients, evaluates index expressions,
// keeps the per-sequence caches and moves bytes (gathering the rows a step
// reads, as the op's semantics in docs/semantics.md say).
//
// Caches (`Sequence`) hold the released byte formats: SWA rings of FP8 rows,
// global caches of FP4 main-KV + index-key entries (grown as entries arrive,
// up to the plan's max_context), compressor states (fp32 partial groups).
//
// Plain C++17, no LLVM.
//
//===----------------------------------------------------------------------===//
#ifndef CSA_RUNTIME_EXECUTOR_EXECUTOR_H
#define CSA_RUNTIME_EXECUTOR_EXECUTOR_H

#include "runtime/artifact/Artifact.h"

#include "absl/status/statusor.h"

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace csa::checkpoint {
class Checkpoint;
} // namespace csa::checkpoint

namespace csa::runtime {

/// One cache buffer of one sequence.
struct CacheState {
  std::vector<uint8_t> bytes;
  /// Global caches: entries whose main-KV / index-key rows were written.
  int64_t mainEntries = 0, indexEntries = 0;
  /// SWA rings: the first and one past the last position appended (-1, 0:
  /// none yet).
  int64_t ringStart = -1, ringEnd = 0;
};

/// The per-sequence state: caches, position, token history (Engram hashes
/// the n-grams ending at each position).
struct Sequence {
  int64_t position = 0;
  std::vector<int32_t> history;
  std::map<std::string, CacheState> caches;
  /// Non-zero while the caches' current bytes stay on a GPU between runs
  /// (ExecutorOptions::keepCachesOnDevice): the id of the executor holding
  /// them, and each cache buffer's host address then. The host bytes are
  /// stale until Executor::syncToHost; a copy of the Sequence (other
  /// addresses) is rejected by the executor instead of running on them.
  uint64_t cachesHeldBy = 0;
  std::map<std::string, const void *> cachesHeldAt;
  /// Positions the global caches are sized for (Executor::reserve; kept by
  /// a prefill, which starts from fresh caches).
  int64_t reservedPositions = 0;

  /// Bytes the caches have allocated (global caches grow by doubling).
  uint64_t cacheBytes() const;
  /// Bytes in use: rings and states whole, global caches up to their
  /// entries (the released formats' bytes for this many tokens).
  uint64_t cacheBytesInUse(const artifact::Plan &plan) const;
};

/// What the GPU path did in a run (zeros on the CPU).
struct GpuActivity {
  int64_t launches = 0;          ///< kernel launches
  int64_t graphLaunches = 0;     ///< CUDA graphs launched (cudaGraphs)
  int64_t graphsBuilt = 0;       ///< graphs created and instantiated
  int64_t graphNodesUpdated = 0; ///< launches changed in a kept graph
  int64_t branchLaunches = 0;    ///< launches recorded on a graph's branch
  int64_t uploads = 0, downloads = 0;
  int64_t deviceAllocations = 0; ///< cuMemAlloc calls (blocks are reused)
  /// Host seconds blocked waiting for the GPU (downloads, synchronize) and
  /// spent in copies to it; the rest of a step's wall time is host work.
  double waitSeconds = 0, uploadSeconds = 0;
  double launchSeconds = 0; ///< in the driver's launch calls (graphs)
};

struct StepTiming {
  int64_t steps = 0;   ///< plan steps run
  double seconds = 0;  ///< wall time of the entry point
  /// The most bytes live transients held at once so far (buffers are
  /// returned to a pool after each transient's last use).
  uint64_t peakTransientBytes = 0;
  GpuActivity gpu;
};

struct ExecutorOptions {
  /// Where the kernels run. Cuda runs the artifact's PTX (compiled with
  /// csa-compile --with-ptx) through the CUDA driver on a stream of its
  /// own: buffers stay on the device between kernels and come back where the
  /// host reads them (top-k sets, MoE counts, logits, caches at the end of a
  /// step); see cudaGraphs and docs/gpu.md.
  /// Auto: Cuda when the CUDA driver and the artifact's PTX are there, else
  /// the CPU (Executor::device says which, deviceNote why); a GPU that is
  /// there but fails (a JIT error) is an error, not a fallback.
  enum class Device { Cpu, Cuda, Auto };
  Device device = Device::Cpu;
  /// Cuda: a sequence's caches stay on the device at the end of a run (the
  /// next run of that sequence uses them there) instead of coming back to
  /// the Sequence and being uploaded again; Executor::syncToHost brings them
  /// back (and frees their device copies) where the host needs them.
  bool keepCachesOnDevice = false;
  /// Cuda: each run of launches between two host reads goes to the GPU as
  /// one CUDA graph, kept and updated in place for the next step (a decode
  /// step reads top-k sets and MoE counts back, so it is a chain of graphs;
  /// runtime/cuda/LaunchGraphs.h). Off: every kernel is its own launch.
  bool cudaGraphs = true;
  /// Cuda graphs: a run is issued once it holds this many launches (>= 2),
  /// so the GPU starts while the host records the rest.
  int64_t graphMaxLaunches = 8;
  /// Cuda graphs: when > 0, each run of an entry point (a decode step) is
  /// this many graphs instead, whatever its launch count (LaunchGraphOptions::
  /// partsPerRun): 1 makes a decode step one CUDA graph.
  int64_t graphPartsPerRun = 0;
  /// Cuda graphs: a step the plan lets overlap the steps after it
  /// (overlaps_until, mHC's mix) is a branch of the graph beside them,
  /// joined where its results are first read (off: every step after the one
  /// before, to time both in one run).
  bool overlapSteps = true;
  /// Cuda graphs, a batch step (decodeBatch): the steps that run once a
  /// sequence put each sequence's launches on a graph lane of its own (the
  /// lanes no branch of the plan holds there, sequence i on the
  /// (i mod lanes)-th), joined before the step's results are read: the
  /// sequences' attention, index and cache launches run side by side
  /// instead of one after another. On by default since the forty-third
  /// session: on an H100, tiny (5 prompts) and `h200-full` at batch 1 and 16
  /// gave the same logits bit for bit with and without it, and batch 16's
  /// step went from 164 to 155 ms (bench/RESULTS.md). Off: one after
  /// another (csa-run --gpu-sequence-lanes=false).
  bool sequenceLanes = true;
  /// Cuda graphs: the launches of a graph depend on each other
  /// programmatically (LaunchGraphOptions::programmatic): the next kernel's
  /// blocks are resident before the one before ends.
  bool programmaticLaunch = true;
  /// Cuda: the driver library to open (empty: libcuda.so.1; the null driver
  /// of runtime/cuda/null runs the host side without a GPU).
  std::string cudaLibrary;
  /// Cuda: MiB of device heap for the generated kernels' per-thread scratch
  /// (device-side malloc), 1 to kMaxDeviceHeapMiB.
  int64_t deviceHeapMiB = 1024;
  static constexpr int64_t kMaxDeviceHeapMiB = 65536;
  /// The CPU path's worker threads (>= 1; 0: every core this process may
  /// use): the rows of a linear and the routed experts of a csa.moe run
  /// split among them. The bits are the same for every count (each row's
  /// sums keep their order; the experts' outputs are added in ascending
  /// id on one thread). Kernels on the GPU path are not split.
  int64_t threads = 0;
  static constexpr int64_t kMaxThreads = 1024;
  /// Times every plan step (synchronizing the GPU after each), summed by
  /// step over the executor's life: Executor::profile(). Slows the run.
  bool profile = false;

  // Device::Cuda knobs for checking and bisecting (csa-run --gpu-*; the
  // CSA_CUDA_* environment variables are aliases: fromEnvironment()).
  /// The "device" is separate host memory and the host kernels run on it:
  /// the GPU path's buffer bookkeeping and CUDA graph batching without a GPU
  /// (a forgotten download leaves stale bytes and changes the output).
  bool emulateGpu = false;
  /// Synchronize after every launch, so that a fault names its kernel.
  bool syncEachLaunch = false;
  /// Print every copy, allocation and changed graph launch to stderr.
  bool traceGpu = false;
  /// Emulated with CUDA graphs: every graph is checked before it goes out
  /// (LaunchGraphs::hazards): two launches touching the same bytes, one of
  /// them writing, with no path of edges between them fail the run, naming
  /// both. The emulated launches run in program order, so a missing edge
  /// that a GPU would race on changes nothing there; this finds it. Each
  /// launch's memref spans are copied before it and compared after (slow).
  bool checkGraphHazards = false;
  /// Kernels whose name starts with one of these stay on the CPU.
  std::vector<std::string> hostKernelPrefixes;
  /// Run the row-tiled forms of the linears from their min_rows on (off:
  /// always the per-output forms, to time both in one run).
  bool rowTiles = true;
  /// Run csa.moe past decode's rows as grouped launches from the device
  /// routing where the grouped linears have their tensor-core form (off:
  /// one launch an expert from lists built on the host, to time both).
  bool groupedPrefillMoe = true;

  // Decisions (runtime/executor/Decisions.h): the top-k sets, HSI pools and
  // MoE routing of every step.
  /// Write them to this directory (the run reads each back from the device).
  std::string dumpDecisions;
  /// Read them from this directory (a dump of the same artifact, prompt and
  /// flags) in place of the run's own; a missing file or another shape is
  /// an error naming the file.
  std::string forceDecisions;
  /// Write every block's output (each csa.hc_update's hc streams, the
  /// residual state a block leaves: float32 [rows, hc, dim], widened from
  /// bf16 exactly) to this directory as r<run>_<entry>-<step>_hidden.npy,
  /// named like the decisions (the run reads each back from the device).
  std::string dumpHidden;
  /// Limit both dumps to the steps of these layers (the plan's "layer" of a
  /// step: the block from a csa.hc_mix to its csa.hc_update; steps outside
  /// every layer, such as the embedding and the head, are then not dumped).
  /// Empty: every step.
  std::vector<int64_t> dumpLayers;
  /// Limit both dumps to rows [dumpRowsBegin, dumpRowsEnd) of each step's
  /// rows (numpy's slice: negative values count from the end; no end: to the
  /// last row). A dump limited so cannot be forced back in (its shapes are
  /// not the run's), which --force-decisions reports naming the file.
  int64_t dumpRowsBegin = 0;
  std::optional<int64_t> dumpRowsEnd;

  /// The Engram layers' raw -> compressed token map: vocab_size entries, each
  /// in [0, engram_compressed_vocab_size) (runtime/tokenizer/EngramTokenMap.h
  /// builds the released one from a tokenizer). Empty: t mod
  /// engram_compressed_vocab_size, for random weights; csa-run asks for that
  /// by name (--engram-token-map=modulo) when a checkpoint has no tokenizer.
  std::vector<int64_t> engramTokenMap;

  /// Tensors of the checkpoint that the artifact does not use (another
  /// schedule's) are skipped instead of refused; unusedWeights() lists them.
  bool allowUnusedWeights = false;

  /// Recall analysis (csa-run --analyze=recall): after each sparse
  /// attention step with a global cache, how much of the dense softmax mass
  /// over every compressed entry visible to each query row its selected set
  /// captures, and the most a set of as many entries could (Executor::
  /// recall()). Reads the queries, the sets and the whole cache back on the
  /// GPU path, and costs rows x heads x visible entries x dim of host work.
  bool analyzeRecall = false;

  /// Long work as it goes, for a progress line (csa-run --progress): after
  /// each plan step of a prefill ("prefill": steps done of the entry point's
  /// steps) and as the weights go to the GPU ("weights": bytes done of
  /// all the weights' bytes). Called on the thread that runs the executor;
  /// empty: never.
  std::function<void(const char *what, uint64_t done, uint64_t total)> onProgress;

  /// The defaults with the environment's aliases applied: CSA_CUDA_EMULATE=1,
  /// CSA_CUDA_SYNC, CSA_CUDA_TRACE, CSA_CUDA_HOST_KERNELS=prefix,...,
  /// CSA_CUDA_NO_TILES, CSA_CUDA_LIBRARY=path, CSA_CUDA_MALLOC_HEAP_MB=N (a
  /// count from 1 to 65536; another value is ignored).
  static ExecutorOptions fromEnvironment();
};

/// One row of Executor::recall(): a sparse attention step with a global
/// cache (a Full, Reindex or Reuse layer) in one run. For each query row
/// (position p) the visible entries are the first min(held, (p + 1) / ratio)
/// of the cache it reads; over them each head's softmax of scale * q . kv
/// (the attention's logits, without the window rows and the sink) gives a
/// mass per entry, averaged over the heads. `recall` is the mass of the
/// row's selected entries; `ceiling` the most mass any set of as many
/// visible entries holds (the top entries by mass: no selection rule can
/// beat it, so ceiling - recall is what the indexer, the HSI pool or reuse
/// lost). Rows that see no entry are not counted.
struct RecallEntry {
  int64_t run = 0;     ///< the executor's call (Decisions.h's run)
  std::string entry;   ///< "prefill" or "decode"
  int64_t layer = 0;   ///< the step's layer (Executor::stepLayer)
  int64_t firstPosition = 0; ///< the position of the step's first row
  int64_t rows = 0;    ///< rows counted (that see at least one entry)
  int64_t k = 0;       ///< the top-k width
  double visible = 0;  ///< mean visible entries a counted row
  double selected = 0; ///< mean selected (valid, visible) entries a row
  double recall = 0;   ///< mean over the counted rows
  double recallMin = 0;
  double ceiling = 0;  ///< mean over the counted rows
};

/// One row of Executor::profile() (a plan op and the kernels it runs, over
/// every step that runs them) or of Executor::layerProfile() (the same, in
/// one entry point and one layer).
struct ProfileEntry {
  std::string step; ///< "op kernel" (kernels joined by '+')
  std::string op;   ///< the op alone: "csa.linear"
  /// layerProfile(): "prefill" or "decode"; empty in profile().
  std::string entry;
  /// layerProfile(): the layer the steps belong to (Executor::stepLayer:
  /// from the weights and caches a step names), or kBeforeLayers (the
  /// embedding) or kAfterLayers (the final norm and lm_head); kBeforeLayers
  /// in profile().
  int64_t layer = kBeforeLayers;
  static constexpr int64_t kBeforeLayers = -1, kAfterLayers = -2;
  int64_t calls = 0;
  double seconds = 0;
  /// Of `seconds`, the host's time in the step's driver (on the GPU path:
  /// building arguments and recording launches, before the profile waits
  /// for the GPU).
  double hostSeconds = 0;
  /// The GPU path's copies during the step (0 on the CPU).
  uint64_t bytesToDevice = 0, bytesToHost = 0;
};

class Executor {
public:
  /// Opens the kernels of `artifact` (which must stay alive) and binds the
  /// tensors of `checkpoint` (which must outlive the executor) after
  /// checkWeights. Errors name the missing kernel, tensor or file.
  static absl::StatusOr<std::unique_ptr<Executor>>
  create(const artifact::Artifact &artifact,
         const checkpoint::Checkpoint &checkpoint,
         const ExecutorOptions &options = {});
  ~Executor();

  /// A fresh sequence with its caches allocated (rings zeroed, compressor
  /// scores at -inf, global caches empty).
  Sequence newSequence() const;

  /// A sequence as if `position` tokens had been run, for decode latency at
  /// long contexts without running the prompt: the history holds random token ids,
  /// SWA rings are full and global caches hold position / ratio entries, all
  /// rows random values encoded in their byte formats (valid codes and
  /// scales); compressor states hold random values for the partial group.
  /// Its logits mean nothing; its work per step is a real sequence's.
  absl::StatusOr<Sequence> syntheticSequence(int64_t position,
                                             uint64_t seed) const;

  /// Sizes `sequence`'s global caches for `positions` tokens now (they grow
  /// by doubling otherwise, each time a device allocation and a copy inside
  /// a step): a caller that knows how long the sequence will get (csa-run:
  /// context, prompt and new tokens) asks once, and no step of the run
  /// allocates for its caches. Capped at the plan's max_context; never
  /// shrinks. An error for a sequence whose caches a device holds (reserve
  /// before its first run, or after syncToHost).
  absl::Status reserve(Sequence &sequence, int64_t positions) const;

  /// Runs the prompt at position 0; returns the last position's logits.
  absl::StatusOr<std::vector<float>> prefill(Sequence &sequence,
                                             const std::vector<int32_t> &tokens);
  /// Runs `tokens` after the sequence's last position with the prefill's
  /// steps (chunked prefill, a new turn of a conversation); returns the last
  /// position's logits. On the CPU a prompt prefilled in chunks gives the
  /// logits of one prefill when each chunk after the first is longer than
  /// bounded replay's tail (shorter chunks run the replayed layers on all
  /// their rows, as decode steps do); docs/semantics.md says why. After an
  /// error the sequence's caches may hold part of the chunk: prefill again.
  absl::StatusOr<std::vector<float>> extend(Sequence &sequence,
                                            const std::vector<int32_t> &tokens);
  /// Runs one token at the sequence's position; returns its logits.
  absl::StatusOr<std::vector<float>> decode(Sequence &sequence, int32_t token);
  /// One decode step of several sequences at once: tokens[i] at sequence
  /// i's position (each its own position, caches and history). The steps
  /// that read no sequence state (linears, norms, mHC, MoE, the head) run
  /// once on a row a sequence, so each weight is read once for all of them;
  /// the steps that do (caches, positions, Engram's history) run once a
  /// sequence on its row. Returns the logits [sequences, vocab], row i
  /// sequence i's. On the CPU each row equals decode() of that sequence bit
  /// for bit (every kernel there computes a row from that row alone); on
  /// the GPU the row count may choose other kernel forms (the tolerance
  /// contract). Not with the decision or hidden-state dumps, forced
  /// decisions or the recall analysis (their files are per sequence: decode
  /// the sequences one by one). On an error no sequence has advanced, but
  /// caches may hold the step's rows: prefill again.
  absl::StatusOr<std::vector<float>> decodeBatch(const std::vector<Sequence *> &sequences,
                                                 const std::vector<int32_t> &tokens);
  /// decode() of each sequence (decodeBatch() where there are several) for
  /// a caller that samples greedily and needs no logits: each sequence's
  /// greedy token, sampling::greedyToken's pick of its logits (the same
  /// errors where a logit is NaN or +inf, or every logit -inf). Where the
  /// plan's head has its greedy kernel and the logits are on the GPU, the
  /// kernel picks there and only the ids come back (a row that needs the
  /// error's words brings its logits too).
  absl::StatusOr<std::vector<int32_t>> decodeGreedy(const std::vector<Sequence *> &sequences,
                                                    const std::vector<int32_t> &tokens);

  /// Brings the caches of `sequence` back from the device
  /// (ExecutorOptions::keepCachesOnDevice) and frees their device copies, so
  /// that its host bytes are current; nothing to do for a sequence held on no
  /// device. An error names a sequence held by another executor, or a copy.
  absl::Status syncToHost(Sequence &sequence);
  /// Reads the statuses of the GPU's launches that decode steps left unread
  /// (a decode step reads nothing back but its logits; the statuses, which
  /// say whether every cache store stayed inside its cache, are read every
  /// few dozen steps and here). An error names the kernel and its step. Call
  /// it when a generation ends.
  absl::Status checkDeviceStatuses();
  /// GPU: starts (or stops) the profilers' capture range once the work
  /// issued so far has finished, so that `ncu --profile-from-start off`
  /// records only the steps run in between. An error on the CPU, and where
  /// the device (emulation) or the driver has no profiler range.
  absl::Status profilerRange(bool start);
  /// GPU: copies every weight to the device now (the first run does it
  /// otherwise, inside its time) and returns the bytes copied; 0 when they
  /// are there already or the executor runs on the CPU.
  absl::StatusOr<uint64_t> uploadWeights();

  const artifact::Plan &plan() const;
  int64_t vocabSize() const;
  /// The checkpoint's tensors this artifact does not use
  /// (ExecutorOptions::allowUnusedWeights).
  const std::vector<std::string> &unusedWeights() const;
  /// ExecutorOptions::analyzeRecall: a row per sparse attention step with a
  /// global cache of every run so far, in the order they ran.
  const std::vector<RecallEntry> &recall() const;
  /// Where the kernels run: Cpu or Cuda (ExecutorOptions::Device::Auto
  /// resolved).
  ExecutorOptions::Device device() const;
  /// Auto that runs on the CPU: why the GPU is not used ("no NVIDIA
  /// driver: ..."); empty otherwise.
  const std::string &deviceNote() const;
  /// The CPU path's worker threads (ExecutorOptions::threads, 0 resolved).
  int64_t threads() const;
  /// Timing of the last entry point run.
  const StepTiming &lastTiming() const;
  /// With ExecutorOptions::profile: time per step (op and kernel, host work
  /// and the GPU's included) over every run so far, slowest first.
  std::vector<ProfileEntry> profile() const;
  /// With ExecutorOptions::profile: the same time by entry point, layer and
  /// op with its kernels, in plan order (prefill's steps, then decode's;
  /// within an entry, by the first step of each row): the steps of a layer
  /// that run the same kernels are one row. Steps that never ran are left
  /// out.
  std::vector<ProfileEntry> layerProfile() const;
  /// Starts the profile afresh (after a warm-up).
  void resetProfile();
  /// The layer that step `index` of an entry point (`decode`: decode's, else
  /// prefill's) belongs to, as layerProfile() counts it. The plan records no
  /// layers; a step belongs to the layer of the weights it reads
  /// ("layers.N. ...") or of the caches it names (their plan `layer`); a step
  /// that names neither (an mHC update, a RoPE, the collapse after the last
  /// layer) belongs to the step before it; other weights ("embed.weight",
  /// "norm.weight", "head.weight") are before the layers up to the first
  /// layer's step and after them from then on.
  int64_t stepLayer(bool decode, size_t index) const;

private:
  struct Impl;
  explicit Executor(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl;
};

} // namespace csa::runtime

#endif // CSA_RUNTIME_EXECUTOR_EXECUTOR_H
