//===- csa-compile.cpp - The csa ahead-of-time compiler driver ------------===//
//
// Config (+ schedule) in; the IR of a named stage, or the cost report, out.
//
//   csa-compile --variant=released --report
//   csa-compile config.json --schedule='WWF.....C...R...' --emit=graph -o g.mlir
//   csa-compile --variant=tiny --dump-dir=build/stages
//   csa-compile --variant=tiny --emit=artifact -o tiny.csa    (then csa-run)
//
// Accepts the standard MLIR flags of a pass-running tool:
// --mlir-print-ir-after-all, --mlir-timing, --mlir-print-debuginfo, ...
//
//===----------------------------------------------------------------------===//
#include "tools/support/LastResort.h"
#include "tools/support/Progress.h"
#include "tools/support/Version.h"
#include "llvm/Config/llvm-config.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/raw_ostream.h"
#include "dialects/csa/CsaDialect.h"
#include "codegen/gpu/NvptxBackend.h"
#include "codegen/host/HostBackend.h"
#include "codegen/host/HostPlan.h"
#include "codegen/host/KernelSelection.h"
#include "tools/csa-compile/HostArtifact.h"
#include "models/graph/GraphBuilder.h"
#include "models/variants/Variants.h"
#include "passes/CostAnalysis.h"
#include "passes/InputIr.h"
#include "tools/csa-compile/Sweep.h"
#include "passes/Passes.h"
#include "passes/Pipelines.h"

#include "mlir/IR/AsmState.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Support/FileUtilities.h"
#include "mlir/Support/Timing.h"
#include "mlir/Transforms/Passes.h"
#include "llvm/ADT/ScopeExit.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/PrettyStackTrace.h"
#include "runtime/support/AtomicFile.h"
#include "llvm/Support/WithColor.h"

#include <fstream>
#include <optional>
#include <sstream>

using namespace mlir;
namespace cl = llvm::cl;

namespace {

cl::OptionCategory category("csa-compile options");

/// This run's argv, recorded in an artifact's manifest (provenance).
std::vector<std::string> commandLine;

cl::opt<std::string> configPath(cl::Positional,
                                cl::desc("[config.json | stage.mlir]"),
                                cl::init(""), cl::cat(category));
cl::opt<std::string>
    variantName("variant",
                cl::desc("Named model variant (see --list-variants); default "
                         "'released' when no config file is given"),
                cl::init(""), cl::cat(category));
cl::opt<bool> listVariants("list-variants",
                           cl::desc("List the named variants and exit"),
                           cl::cat(category));
cl::opt<std::string> scheduleString(
    "schedule",
    cl::desc("Layer schedule, one letter per layer: W SWA-only, F Full, "
             "C Full + HSI candidate pool, R Reindex, . Reuse; a letter may "
             "carry a ratio (F1). See docs/schedules.md"),
    cl::init(""), cl::cat(category));
cl::opt<std::string> scheduleJson(
    "schedule-json",
    cl::desc("JSON file with per-layer overrides of the schedule"),
    cl::init(""), cl::cat(category));

/// The stages, in pipeline order (docs/pipeline.md).
enum class Stage {
  Graph, Expanded, Fused, Tiled,
  Host, LLVM, Object, Artifact, // the CPU target
  Gpu, Ptx                      // the NVPTX target
};
cl::opt<Stage> emitStage(
    "emit", cl::desc("Stage whose IR is printed (default: expanded)"),
    cl::init(Stage::Expanded),
    cl::values(clEnumValN(Stage::Graph, "graph",
                          "one csa op per model block (attention layers carry "
                          "their CSA2 mode and sources)"),
               clEnumValN(Stage::Expanded, "expanded",
                          "modes expanded into primitives, caches allocated "
                          "and planned"),
               clEnumValN(Stage::Fused, "fused",
                          "kernel boundaries chosen: csa.fusion regions "
                          "(csa-fuse-kernels)"),
               clEnumValN(Stage::Tiled, "tiled",
                          "the target's tile parameters recorded on each "
                          "matrix-product op (csa-tile-kernels)"),
               clEnumValN(Stage::Host, "host",
                          "the CPU kernels the expanded graph needs, as "
                          "scf/arith/memref IR"),
               clEnumValN(Stage::LLVM, "llvm", "those kernels as LLVM IR"),
               clEnumValN(Stage::Object, "object",
                          "those kernels as a shared object (-o lib.so; "
                          "lib.so.json lists them)"),
               clEnumValN(Stage::Artifact, "artifact",
                          "the artifact csa-run executes: kernels, plan, "
                          "weight manifest (-o DIR)"),
               clEnumValN(Stage::Gpu, "gpu",
                          "the kernels in a gpu.module, lowered to the NVVM "
                          "and LLVM dialects"),
               clEnumValN(Stage::Ptx, "ptx",
                          "the kernels as PTX for --chip (-o DIR: "
                          "kernels.ptx, kernels.json)")),
    cl::cat(category));
cl::opt<Stage> compileFrom(
    "compile-from",
    cl::desc("Read the positional file as the IR of this stage and continue "
             "from there (instead of reading a config)"),
    cl::values(clEnumValN(Stage::Graph, "graph", "graph-stage IR"),
               clEnumValN(Stage::Expanded, "expanded", "expanded-stage IR"),
               clEnumValN(Stage::Fused, "fused", "fused-stage IR"),
               clEnumValN(Stage::Tiled, "tiled", "tiled-stage IR")),
    cl::cat(category));
cl::opt<std::string> indexPublication(
    "index-publication",
    cl::desc("Whose index keys a decode step of a ratio > 1 Full layer scores against when its "
             "group is not complete: owner (its own, as the engines; the default) or release "
             "(the last published ones, as the released model.py; needs the last Full layer "
             "at ratio 1)"),
    cl::value_desc("owner|release"), cl::cat(category));
cl::opt<std::string> mainKvFormat(
    "main-kv-format",
    cl::desc("The main (compressed) KV rows: fp4 (the released V41_FP4 row, 288 B at the "
             "released widths; the default) or fp8 (V4's row: E4M3 NoPE channels, bf16 RoPE "
             "channels, 584 B)"),
    cl::value_desc("fp4|fp8"), cl::cat(category));
cl::opt<std::string> indexKeyFormat(
    "index-key-format",
    cl::desc("The index-key rows: fp4 (the released row, 68 B at the released widths; the "
             "default) or fp8 (E4M3 values and one fp32 scale, 132 B); the indexer's queries "
             "go through the same format"),
    cl::value_desc("fp4|fp8"), cl::cat(category));
cl::opt<bool> sanitizeKernels(
    "sanitize-kernels",
    cl::desc("--emit=artifact|object: instrument the host kernels with AddressSanitizer "
             "(every load and store checked; the kernels then need a csa-run built with "
             "CSA_SANITIZE=ON, as tools/scripts/sanitize.sh builds)"),
    cl::cat(category));
cl::opt<bool> noBoundedReplay(
    "no-bounded-replay",
    cl::desc("Ablation: every prefill layer runs on every prompt token (no "
             "csa-bounded-replay)"),
    cl::cat(category));
cl::opt<bool> noCed(
    "no-ced",
    cl::desc("Ablation of CED: the decoder layers that reuse the ratio-1 KV "
             "source become Full layers of their own (every layer a KV "
             "source, so no bounded replay: every layer on every token)"),
    cl::cat(category));
cl::opt<int64_t> tileRows(
    "tile-rows",
    cl::desc("Rows per tile of the host matrix products (csa-tile-kernels "
             "rows; default 0: the target's, 8; 1: untiled)"),
    cl::init(0), cl::cat(category));
cl::opt<int64_t> replayStartLayer(
    "replay-start-layer",
    cl::desc("First prefill layer that runs on the tail only (default: after "
             "the last Full layer)"),
    cl::init(-1), cl::cat(category));
cl::opt<int64_t> replayTail(
    "replay-tail",
    cl::desc("Prompt tokens the late prefill layers keep (default: the "
             "attention window)"),
    cl::init(-1), cl::cat(category));
cl::opt<std::string> chip("chip",
                         cl::desc("NVPTX target of --emit=gpu|ptx"),
                         cl::init("sm_90a"), cl::cat(category));
cl::opt<int> ptxVersion("ptx-version",
                        cl::desc("PTX ISA version of --emit=ptx, times 10 "
                                 "(80: PTX 8.0)"),
                        cl::init(80), cl::cat(category));
cl::opt<int64_t> linearBlock(
    "linear-block",
    cl::desc("--emit=gpu|ptx|artifact --with-ptx: the most threads of a "
             "per-output linear kernel's block, a multiple of 32 (a warp an "
             "output; default 256)"),
    cl::init(csa::codegen::NvptxOptions{}.linearBlockSize), cl::cat(category));
cl::opt<bool> linearSplitK(
    "linear-split-k",
    cl::desc("--emit=gpu|ptx|artifact --with-ptx: linears whose K splits into "
             "16-byte words run in the split-K form (the weight at HBM speed, "
             "within the dot-product tolerance of docs/semantics.md); "
             "=false: the per-output form, the host kernel's bits"),
    cl::init(csa::codegen::NvptxOptions{}.linearSplitK), cl::cat(category));
cl::opt<int64_t> linearOutputsPerBlock(
    "linear-outputs-per-block",
    cl::desc("--emit=gpu|ptx|artifact --with-ptx: outputs a split-K linear's "
             "block computes (default 0: from the output count and the GPU's "
             "multiprocessors, 4 to 16; at most 64, where the block's "
             "partials fit its shared memory)"),
    cl::init(csa::codegen::NvptxOptions{}.linearOutputsPerBlock), cl::cat(category));
cl::opt<int64_t> linearOutputsInFlight(
    "linear-outputs-in-flight",
    cl::desc("--emit=gpu|ptx|artifact --with-ptx: outputs whose weight loads a "
             "split-K linear's thread issues at once (default 0: 16 words in "
             "flight a thread, 4 to 8 outputs)"),
    cl::init(csa::codegen::NvptxOptions{}.linearOutputsInFlight), cl::cat(category));
cl::opt<int64_t> linearSplitKRows(
    "linear-split-k-rows",
    cl::desc("--emit=gpu|ptx|artifact --with-ptx: split-K linears also get a "
             "batch variant, <name>_rows<R>, a block per R rows that decodes "
             "each weight word once for all of them (a power of two up to 16; "
             "default 1: none), run from --linear-split-k-rows-min rows"),
    cl::init(csa::codegen::NvptxOptions{}.linearSplitKRows), cl::cat(category));
cl::opt<int64_t> linearSplitKRowsMin(
    "linear-split-k-rows-min",
    cl::desc("--emit=gpu|ptx|artifact --with-ptx: rows from which the split-K "
             "batch variant runs (default 2; the tensor-core or row-tiled "
             "form still takes over from its own min_rows)"),
    cl::init(csa::codegen::NvptxOptions{}.linearSplitKRowsMin), cl::cat(category));
cl::opt<int64_t> groupedSplitKRowsMin(
    "grouped-split-k-rows-min",
    cl::desc("--emit=gpu|ptx|artifact --with-ptx: slots (tokens x experts a "
             "token) from which the routed experts' batch variant runs "
             "(--linear-split-k-rows: a block per (expert, output tile) "
             "gathering the expert's slots; default 32)"),
    cl::init(csa::codegen::NvptxOptions{}.groupedSplitKRowsMin), cl::cat(category));
cl::opt<bool> linearPrefetchL2(
    "linear-prefetch-l2",
    cl::desc("--emit=gpu|ptx|artifact --with-ptx: split-K linears prefetch a "
             "block's weight rows and scales into L2 first, an ungrouped one "
             "before it waits for the kernel upstream (its weights stream in "
             "while that kernel runs)"),
    cl::init(csa::codegen::NvptxOptions{}.linearPrefetchL2), cl::cat(category));
cl::opt<bool> attentionWarpForm(
    "attention-warp-form",
    cl::desc("sparse attention in the warp form (a warp a selected row, one "
             "softmax step a chunk, a block per (row, head); within the "
             "tolerance contract of docs/semantics.md) instead of the default "
             "split form; =false: the head form, the host kernel's bits"),
    cl::init(csa::codegen::NvptxOptions{}.attentionWarpForm), cl::cat(category));
cl::list<std::string> fusions(
    "fusions", cl::CommaSeparated,
    cl::desc("The kernel regions csa-fuse-kernels forms: rope_quantize_store, "
             "hc_collapse_norm (default: all), or none (every op its own "
             "kernel: to compare a model with and without a fusion)"),
    cl::value_desc("PATTERN,...|none"), cl::cat(category));
cl::opt<std::string> attentionForm(
    "attention-form",
    cl::desc("sparse attention's GPU form for ops without one: mma (the "
             "default: tensor cores, 16 heads a block, where the heads and "
             "channels fit; split elsewhere), split (the warp form over "
             "slices of the indices, several blocks a head at decode), warp "
             "or head (see #csa.attention_form); overrides --attention-warp-form"),
    cl::init(""), cl::cat(category));
cl::opt<int64_t> attentionSplits(
    "attention-splits",
    cl::desc("--emit=gpu|ptx|artifact --with-ptx: blocks per (row, head) of "
             "sparse attention's split form (1 to 16; default 0: as many as "
             "fill the GPU in one wave at one row)"),
    cl::init(csa::codegen::NvptxOptions{}.attentionSplits), cl::cat(category));
cl::opt<bool> linearFp4ThroughE4m3(
    "linear-fp4-through-e4m3",
    cl::desc("--emit=gpu|ptx|artifact --with-ptx: split-K FP4 linears decode "
             "their weights four at a time to E4M3 bytes, then by "
             "cvt.rn.f16x2.e4m3x2; =false: through f16 bit patterns (both "
             "exact, the same products)"),
    cl::init(csa::codegen::NvptxOptions{}.linearFp4ThroughE4m3), cl::cat(category));
cl::opt<bool> linearTensorCores(
    "linear-tensor-cores",
    cl::desc("--emit=gpu|ptx|artifact --with-ptx: prefill linears (from "
             "--tile-min-rows rows) on tensor cores, bf16 mma.sync with the FP8/FP4 codes "
             "exact in bf16 and the scales on each 32-block's partial, within "
             "the dot-product tolerance, where format and shape allow; "
             "=false: the row-tiled form (the host kernel's bits)"),
    cl::init(csa::codegen::NvptxOptions{}.linearTensorCores), cl::cat(category));
cl::opt<int64_t> tileMinRows(
    "tile-min-rows",
    cl::desc("--emit=gpu|ptx|artifact --with-ptx: the fewest rows the row-tiled "
             "and tensor-core forms (linears, mHC's sums) replace the decode "
             "forms from (1 to 4096; below, a batch decode step's rows run in "
             "the split-K form)"),
    cl::init(csa::codegen::NvptxOptions{}.tileMinRows), cl::cat(category));
cl::opt<int64_t> groupedMmaMinSlots(
    "grouped-mma-min-slots",
    cl::desc("--emit=gpu|ptx|artifact --with-ptx: the fewest slots (a step's rows "
             "times the routed experts a row) from which the routed experts' "
             "linears take the tensor-core grouped form, a block an expert and "
             "output tile (1 to 1048576; below, the split-K grouped form, which "
             "reads an expert's weights once a slot)"),
    cl::init(csa::codegen::NvptxOptions{}.groupedMmaMinSlots), cl::cat(category));
cl::opt<int64_t> mmaKBlocks(
    "mma-k-blocks",
    cl::desc("--emit=gpu|ptx|artifact --with-ptx: the tensor-core linears stage "
             "this many 32-blocks of K between two barriers, at most (1, 2, 4 "
             "or 8; the most that divides a group's K blocks; the same bits)"),
    cl::init(csa::codegen::NvptxOptions{}.mmaKBlocks), cl::cat(category));
cl::opt<bool> mmaPrefetch(
    "mma-prefetch",
    cl::desc("--emit=gpu|ptx|artifact --with-ptx: the tensor-core FP8/FP4 linears "
             "issue a stage's global loads one stage ahead, carried in registers "
             "(the same bits)"),
    cl::init(csa::codegen::NvptxOptions{}.mmaPrefetch), cl::cat(category));
cl::opt<bool> mmaFp8(
    "mma-fp8",
    cl::desc("--emit=gpu|ptx|artifact --with-ptx: the tensor-core FP8/FP4 linears "
             "stage E4M3 codes and multiply a 32-block with one mma.m16n8k32 e4m3, "
             "the scales on its partial (within the dot-product tolerance; PTX 8.4)"),
    cl::init(csa::codegen::NvptxOptions{}.mmaFp8), cl::cat(category));
cl::opt<bool> withPtx(
    "with-ptx",
    cl::desc("--emit=artifact: also put the kernels' PTX for --chip into the "
             "artifact (kernels/kernels.ptx, kernels/kernels.json), for "
             "csa-run --device=cuda"),
    cl::cat(category));
cl::opt<std::string> outputPath("o", cl::desc("Output file (default: stdout)"),
                                cl::value_desc("file"), cl::init("-"),
                                cl::cat(category));
cl::opt<std::string> dumpDir(
    "dump-dir",
    cl::desc("Write the IR of every stage run to <dir>/<stage>.mlir"),
    cl::value_desc("dir"), cl::init(""), cl::cat(category));

enum class ReportFormat { None, Text, Json, Csv };
cl::opt<ReportFormat> report(
    "report",
    cl::desc("Print the cost report (of the graph stage) instead of IR"),
    cl::init(ReportFormat::None), cl::ValueOptional,
    cl::values(clEnumValN(ReportFormat::Text, "", "text (default)"),
               clEnumValN(ReportFormat::Text, "text", "text"),
               clEnumValN(ReportFormat::Json, "json", "JSON"),
               clEnumValN(ReportFormat::Csv, "csv", "CSV (--sweep only)")),
    cl::cat(category));
cl::opt<std::string> sweepPath(
    "sweep",
    cl::desc("Cost every variant a sweep file lists (JSON: docs/cost-model.md) "
             "and print one row each: a table, or --report=csv|json"),
    cl::value_desc("file"), cl::init(""), cl::cat(category));
cl::opt<bool> progressFlag(
    "progress",
    cl::desc("The stage the compiler is in and its time on stderr, always "
             "(default: on a terminal, once the run has taken 2 s; a line per "
             "stage when stderr is not a terminal)"),
    cl::cat(category));
cl::opt<bool> quietFlag("quiet", cl::desc("No progress line (wins over --progress)"),
                        cl::cat(category));
cl::list<int64_t> contexts(
    "context", cl::desc("Context lengths for the report's decode costs "
                        "(default 4096,32768,131072,1048576)"),
    cl::CommaSeparated, cl::cat(category));

/// The NVPTX target's options from the command line (--emit=gpu|ptx and
/// --with-ptx).
csa::codegen::NvptxOptions nvptxOptions() {
  csa::codegen::NvptxOptions options;
  options.chip = chip;
  options.ptxVersion = ptxVersion;
  options.linearBlockSize = linearBlock;
  options.linearSplitK = linearSplitK;
  options.attentionWarpForm = attentionWarpForm;
  options.linearFp4ThroughE4m3 = linearFp4ThroughE4m3;
  options.linearTensorCores = linearTensorCores;
  options.tileMinRows = tileMinRows;
  options.groupedMmaMinSlots = groupedMmaMinSlots;
  options.mmaKBlocks = mmaKBlocks;
  options.mmaPrefetch = mmaPrefetch;
  options.mmaFp8 = mmaFp8;
  options.linearOutputsInFlight = linearOutputsInFlight;
  options.linearSplitKRows = linearSplitKRows;
  options.linearSplitKRowsMin = linearSplitKRowsMin;
  options.groupedSplitKRowsMin = groupedSplitKRowsMin;
  options.linearPrefetchL2 = linearPrefetchL2;
  options.attentionSplits = attentionSplits;
  options.linearOutputsPerBlock = linearOutputsPerBlock;
  return options;
}

/// The progress line (--progress, --quiet; tools/support/Progress.h): the
/// stage the run is in. Ended before anything else goes to stderr.
std::optional<csa::tools::Stages> progress;
void stage(const char *name) {
  if (progress)
    progress->begin(name);
}
void endProgress() {
  if (progress)
    progress->finish();
}

int fail(const llvm::Twine &message) {
  endProgress();
  llvm::WithColor::error(llvm::errs(), "csa-compile") << message << "\n";
  return 1;
}

absl::StatusOr<std::string> readFile(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    return absl::NotFoundError(path + ": cannot open file");
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

/// The variant the flags describe: a named variant or a config file, then the
/// schedule string, then the JSON overrides.
/// What names a model to build: the command line's flags or a sweep row.
struct VariantRequest {
  std::string configPath, variantName, scheduleString, scheduleJson;
  bool noCed = false;
};

absl::StatusOr<csa::ModelVariant> resolveVariantFrom(const VariantRequest &request) {
  const std::string &configPath = request.configPath, &variantName = request.variantName,
                    &scheduleString = request.scheduleString,
                    &scheduleJson = request.scheduleJson;
  const bool noCed = request.noCed;
  if (!configPath.empty() && !variantName.empty())
    return absl::InvalidArgumentError(
        "give either a config file or --variant, not both");
  csa::ModelVariant variant;
  if (!configPath.empty()) {
    auto config = csa::loadModelConfig(configPath);
    if (!config.ok())
      return config.status();
    auto schedule = csa::scheduleFromConfig(*config);
    if (!schedule.ok())
      return schedule.status();
    // A model folder is named by itself (its name may hold dots: V4.1).
    llvm::StringRef trimmed = llvm::StringRef(configPath).rtrim('/');
    const std::string modelName = llvm::sys::fs::is_directory(configPath)
                                      ? llvm::sys::path::filename(trimmed).str()
                                      : llvm::sys::path::stem(configPath).str();
    variant = {modelName, *config, *schedule};
  } else {
    auto named = csa::loadVariant(variantName.empty() ? "released" : variantName);
    if (!named.ok())
      return named.status();
    variant = *named;
  }
  if (!scheduleString.empty()) {
    auto schedule = csa::scheduleFromString(variant.config, scheduleString);
    if (!schedule.ok())
      return schedule.status();
    variant.schedule = *schedule;
  }
  if (noCed)
    variant.schedule = csa::makeNoCed(variant.schedule);
  if (!scheduleJson.empty()) {
    auto text = readFile(scheduleJson);
    if (!text.ok())
      return text.status();
    if (absl::Status s = csa::applyScheduleOverrides(
            variant.config, variant.schedule, *text, scheduleJson);
        !s.ok())
      return s;
  }
  csa::applyScheduleToConfig(variant.schedule, variant.config);
  return variant;
}

/// The graph options of the format flags (as --main-kv-format and
/// --index-key-format take them; empty: the released format).
absl::StatusOr<csa::GraphOptions> graphOptions(const std::string &mainKv,
                                               const std::string &indexKey) {
  csa::GraphOptions options;
  if (mainKv.empty() || mainKv == "fp4")
    options.mainKvFormat = csa::GraphOptions::MainKvFormat::Fp4;
  else if (mainKv == "fp8")
    options.mainKvFormat = csa::GraphOptions::MainKvFormat::Fp8;
  else
    return absl::InvalidArgumentError("--main-kv-format needs fp4 or fp8, got '" + mainKv + "'");
  if (indexKey.empty() || indexKey == "fp4")
    options.indexKeyFormat = csa::GraphOptions::IndexKeyFormat::Fp4;
  else if (indexKey == "fp8")
    options.indexKeyFormat = csa::GraphOptions::IndexKeyFormat::Fp8;
  else
    return absl::InvalidArgumentError("--index-key-format needs fp4 or fp8, got '" + indexKey +
                                       "'");
  return options;
}

absl::StatusOr<csa::ModelVariant> resolveVariant() {
  return resolveVariantFrom(
      {configPath, variantName, scheduleString, scheduleJson, noCed});
}

LogicalResult writeOutput(llvm::StringRef path, llvm::StringRef text);

/// csa-compile --sweep: each row built and costed on its graph stage.
int runSweep(const std::string &outputPath) {
  auto file = csa::sweep::parseFile(sweepPath);
  if (!file)
    return fail(llvm::toString(file.takeError()));
  MLIRContext context;
  csa::loadGraphDialects(context);
  auto cost = [&](const csa::sweep::Row &row) -> llvm::Expected<csa::ModelCost> {
    auto variant = resolveVariantFrom(
        {row.config, row.variant, row.schedule, row.scheduleJson, row.noCed});
    if (!variant.ok())
      return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                     std::string(variant.status().message()));
    auto options = graphOptions(row.mainKvFormat, row.indexKeyFormat);
    if (!options.ok())
      return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                     std::string(options.status().message()));
    OwningOpRef<ModuleOp> module = csa::buildModelGraph(context, *variant, *options);
    PassManager pm(&context);
    csa::buildGraphCleanupPipeline(pm);
    if (failed(verify(*module)) || failed(pm.run(*module)))
      return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                     "its graph does not verify (see the diagnostics above)");
    csa::ReplayChoice replay;
    replay.enabled = !row.noBoundedReplay && !row.noCed;
    replay.startLayer = row.replayStartLayer;
    replay.tail = row.replayTail;
    return csa::analyzeCost(*module, file->contexts, "", {file->prefillTokens}, replay);
  };
  const csa::sweep::Format format = report == ReportFormat::Json  ? csa::sweep::Format::Json
                                    : report == ReportFormat::Csv ? csa::sweep::Format::Csv
                                                                  : csa::sweep::Format::Text;
  std::string text;
  llvm::raw_string_ostream out(text);
  if (llvm::Error e = csa::sweep::run(*file, cost, format, out))
    return fail(llvm::toString(std::move(e)));
  return failed(writeOutput(outputPath, text)) ? 1 : 0;
}

/// Writes the host artifact of the expanded `module` into `directory`:
/// kernels/host.so (from the lowered `kernels`), plan.json, weights.json
/// (the weight manifest of the config the IR carries in csa.config), and
/// config.json (so that csa-run --random-weights can make weights for it).
llvm::Error writeHostArtifact(ModuleOp module,
                              const csa::codegen::KernelSelection &selection,
                              ModuleOp kernels, const std::string &directory,
                              const std::string &ptx,
                              const std::string &ptxListing) {
  auto fail = [](const llvm::Twine &what) {
    return llvm::createStringError(what.str());
  };
  csa::HostArtifactParts parts;
  parts.command = commandLine;
  {
    llvm::raw_string_ostream os(parts.graphText);
    module->print(os, OpPrintingFlags().printGenericOpForm().enableDebugInfo(false));
  }
  auto configAttr = module->getAttrOfType<StringAttr>("csa.config");
  if (!configAttr)
    return fail("the IR has no csa.config attribute (the model config an "
                "artifact is compiled for); compile from a config or "
                "--variant, or add it to the module");
  parts.configText = configAttr.getValue().str();
  if (auto model = module->getAttrOfType<StringAttr>("csa.model"))
    parts.model = model.getValue().str();
  if (auto letters = module->getAttrOfType<StringAttr>("csa.schedule"))
    parts.schedule = letters.getValue().str();
  if (auto publication = module->getAttrOfType<StringAttr>("csa.index_publication"))
    parts.indexPublication = publication.getValue().str();
  stage("building the plan");
  auto plan = csa::codegen::buildHostPlan(module, selection);
  if (!plan)
    return plan.takeError();
  parts.plan = std::move(*plan);

  // The kernels, linked into a shared object.
  llvm::SmallString<128> object, shared;
  if (std::error_code ec = llvm::sys::fs::createTemporaryFile("csa-host", "o", object))
    return fail("cannot create a temporary file: " + ec.message());
  if (std::error_code ec = llvm::sys::fs::createTemporaryFile("csa-host", "so", shared))
    return fail("cannot create a temporary file: " + ec.message());
  llvm::scope_exit cleanup([&] {
    llvm::sys::fs::remove(object);
    llvm::sys::fs::remove(shared);
  });
  // The library's own record of the model it is for (the manifest's).
  auto letters = csa::artifactScheduleLetters(parts.configText);
  if (!letters.ok())
    return fail(std::string(letters.status().message()));
  csa::codegen::recordKernelTarget(kernels, parts.configText, *letters);
  stage("emitting the host object");
  if (llvm::Error e = csa::codegen::emitHostObject(kernels, object.str().str(),
                                                   {/*addressSanitizer=*/sanitizeKernels}))
    return e;
  stage("linking the host kernels");
  if (llvm::Error e = csa::codegen::linkSharedObject({object.str().str()},
                                                     shared.str().str()))
    return e;
  auto library = llvm::MemoryBuffer::getFile(shared);
  if (!library)
    return fail("cannot read the linked kernels: " + library.getError().message());
  parts.library = (*library)->getBuffer().str();
  parts.ptx = ptx;
  parts.ptxListing = ptxListing;
  {
    llvm::raw_string_ostream os(parts.listing);
    csa::codegen::printKernelSelectionJson(selection, os);
  }
  stage("writing the artifact");
  if (absl::Status st = csa::writeHostArtifact(parts, directory); !st.ok())
    return fail(std::string(st.message()));
  return llvm::Error::success();
}

const char *stageName(Stage stage) {
  switch (stage) {
  case Stage::Graph:
    return "graph";
  case Stage::Expanded:
    return "expanded";
  case Stage::Fused:
    return "fused";
  case Stage::Tiled:
    return "tiled";
  default:
    return "host";
  }
}

/// A module as csa-opt prints one (ending with a newline), so that the two
/// tools' stages compare byte for byte.
void printStage(ModuleOp module, llvm::raw_ostream &os) {
  module.print(os);
  os << "\n";
}

/// Writes an output: `-` is stdout (its write errors checked), anything
/// else is replaced whole or not at all (runtime/support/AtomicFile.h).
LogicalResult writeOutput(llvm::StringRef path, llvm::StringRef text) {
  stage("writing the output");
  if (path == "-") {
    endProgress();
    llvm::outs() << text;
    llvm::outs().flush();
    if (llvm::outs().has_error()) {
      llvm::errs() << "csa-compile: error: cannot write the output to stdout: "
                   << llvm::outs().error().message() << "\n";
      llvm::outs().clear_error();
      return failure();
    }
    return success();
  }
  if (absl::Status st = csa::support::writeFileAtomically(path.str(), {text.data(), text.size()});
      !st.ok()) {
    endProgress();
    llvm::errs() << "csa-compile: error: " << std::string(st.message()) << "\n";
    return failure();
  }
  return success();
}

LogicalResult writeStage(ModuleOp module, llvm::StringRef path) {
  std::string text;
  llvm::raw_string_ostream os(text);
  printStage(module, os);
  return writeOutput(path, text);
}

} // namespace

int main(int argc, char **argv) {
  csa::tools::installLastResortHandler("csa-compile");
  // --version: csa's line (its commit), then the LLVM it is built on.
  llvm::cl::SetVersionPrinter([](llvm::raw_ostream &os) {
    os << csa::tools::versionLine("csa-compile") << "\nLLVM " << LLVM_VERSION_STRING << "\n";
  });
  commandLine.assign(argv, argv + argc);
  llvm::InitLLVM init(argc, argv);
  llvm::setBugReportMsg("csa-compile crashed; please report the command line "
                        "and config to the csa issue tracker.\n");
  registerAsmPrinterCLOptions();
  registerMLIRContextCLOptions();
  registerPassManagerCLOptions();
  registerDefaultTimingManagerCLOptions();
  // LLVM's code generators register hundreds of general options; --help
  // shows csa's own, --help-hidden everything (the MLIR flags included).
  cl::HideUnrelatedOptions(category);
  cl::ParseCommandLineOptions(
      argc, argv,
      "csa ahead-of-time compiler for DeepSeek-V4.1-Flash variants\n\n"
      "Also accepts the standard MLIR flags (--mlir-timing,\n"
      "--mlir-print-ir-after-all, --mlir-print-debuginfo, ...): see "
      "--help-hidden.\n");

  // The progress line, from here on (--list-variants and --help are
  // immediate).
  if (!listVariants)
    progress.emplace("csa-compile", csa::tools::progressMode(progressFlag, quietFlag));
  llvm::scope_exit ended([] { endProgress(); });

  if (listVariants) {
    for (const csa::VariantInfo &v : csa::namedVariants())
      llvm::outs() << llvm::formatv("{0,-16} {1}\n", v.name, v.description);
    return 0;
  }
  if (std::string problem = csa::codegen::nvptxOptionsProblem(nvptxOptions());
      !problem.empty())
    return fail("--" + problem);
  for (int64_t context : contexts)
    if (context < 1)
      return fail("--context lengths must be >= 1, got " +
                  llvm::Twine(context));

  if (!sweepPath.empty()) {
    if (!configPath.empty() || !variantName.empty() || !scheduleString.empty() ||
        !scheduleJson.empty() || noCed || compileFrom.getNumOccurrences())
      return fail("--sweep names its variants in the file; drop the config, --variant, "
                  "--schedule, --schedule-json, --no-ced and --compile-from");
    if (contexts.getNumOccurrences())
      return fail("--sweep takes its contexts from the file (\"contexts\": [...])");
    stage("costing the sweep's variants");
    return runSweep(outputPath);
  }
  if (report == ReportFormat::Csv)
    return fail("--report=csv is the sweep's (--sweep=FILE); the report is text or json");

  MLIRContext context;
  csa::loadGraphDialects(context);
  // A diagnostic starts on a line of its own (the default handler, after
  // this one, prints it).
  context.getDiagEngine().registerHandler([](Diagnostic &) {
    if (progress)
      progress->clearLine();
    return failure();
  });
  OwningOpRef<ModuleOp> module;
  std::string name;
  Stage stage = Stage::Graph;
  if (compileFrom.getNumOccurrences()) {
    if (configPath.empty())
      return fail("--compile-from needs the stage's .mlir file");
    if (!variantName.empty() || !scheduleString.empty() ||
        !scheduleJson.empty() || noCed || mainKvFormat.getNumOccurrences() ||
        indexKeyFormat.getNumOccurrences())
      return fail("--compile-from reads IR; --variant, --schedule, "
                  "--schedule-json, --no-ced and the row formats describe a model to "
                  "build instead (the IR's cache types hold the formats)");
    if (emitStage < compileFrom)
      return fail("--emit names a stage before --compile-from's");
    stage = compileFrom;
    ::stage("reading the IR");
    // Verified by verifyInputIr, which first rejects what upstream
    // verifiers crash on.
    module = parseSourceFile<ModuleOp>(configPath,
                                       ParserConfig(&context, /*verifyAfterParse=*/false));
    if (module && failed(csa::verifyInputIr(*module)))
      module = nullptr;
    if (!module)
      return fail("cannot read '" + configPath + "' as " +
                  stageName(stage) +
                  "-stage IR (see the diagnostics above)");
    name = llvm::sys::path::stem(configPath).str();
  } else {
    ::stage("building the graph");
    auto variant = resolveVariant();
    if (!variant.ok())
      return fail(std::string(variant.status().message()));
    auto options = graphOptions(mainKvFormat, indexKeyFormat);
    if (!options.ok())
      return fail(std::string(options.status().message()));
    module = csa::buildModelGraph(context, *variant, *options);
    name = variant->name + " (" + variant->config.source + ")";
    // The config travels with the IR, so that an artifact can be written
    // from any stage read back with --compile-from.
    module->getOperation()->setAttr(
        "csa.config",
        StringAttr::get(&context, csa::artifactConfigText(variant->config)));
  }
  if (indexPublication.getNumOccurrences()) {
    if (indexPublication != "owner" && indexPublication != "release")
      return fail("--index-publication needs owner or release, got '" + indexPublication + "'");
    // On the module, so that a stage dumped after it keeps the choice.
    module->getOperation()->setAttr("csa.index_publication",
                                    StringAttr::get(&context, indexPublication));
  }
  if (failed(verify(*module)))
    return fail("the " +
                std::string(stageName(stage)) +
                "-stage IR does not verify (see the diagnostics above)");
  if (stage == Stage::Graph) {
    // The graph stage has no attention ops left once expanded: the report
    // reads it here.
    bool hasGraph = false;
    module->walk([&](csa::AttentionOp) { hasGraph = true; });
    if (compileFrom.getNumOccurrences() && !hasGraph)
      return fail("'" + configPath + "' holds no csa.attention ops; is it "
                  "really graph-stage IR?");
  } else if (report != ReportFormat::None) {
    return fail("the cost report reads the graph stage; --compile-from=" +
                std::string("expanded IR has no graph ops left"));
  }

  if (!dumpDir.empty())
    if (std::error_code ec = llvm::sys::fs::create_directories(dumpDir))
      return fail("cannot create --dump-dir '" + dumpDir + "': " +
                  ec.message());
  auto dump = [&](llvm::StringRef stageName) -> LogicalResult {
    if (dumpDir.empty())
      return success();
    llvm::SmallString<256> path(dumpDir);
    llvm::sys::path::append(path, stageName + ".mlir");
    return writeStage(*module, path);
  };

  DefaultTimingManager timing;
  applyDefaultTimingManagerCLOptions(timing);
  TimingScope rootTiming = timing.getRootScope();
  auto runPipeline = [&](llvm::function_ref<void(PassManager &)> build)
      -> LogicalResult {
    PassManager pm(&context);
    if (failed(applyPassManagerCLOptions(pm)))
      return failure();
    pm.enableTiming(rootTiming);
    build(pm);
    return pm.run(*module);
  };

  // Stage graph: cleanup of the built graph.
  if (stage == Stage::Graph) {
    ::stage("the graph stage");
    if (failed(runPipeline(csa::buildGraphCleanupPipeline)))
      return fail("the graph pipeline failed");
    if (failed(dump("graph")))
      return 1;
  }

  // The cost report is computed on the graph stage.
  std::optional<csa::ModelCost> cost;
  if (report != ReportFormat::None) {
    std::vector<int64_t> lengths(contexts.begin(), contexts.end());
    if (lengths.empty())
      lengths = csa::defaultReportContexts();
    csa::ReplayChoice replay;
    replay.enabled = !noBoundedReplay && !noCed;
    replay.startLayer = replayStartLayer;
    replay.tail = replayTail;
    ::stage("the cost report");
    auto analysed =
        csa::analyzeCost(*module, lengths, "", csa::prefillReportLengths(lengths), replay);
    if (!analysed)
      return fail(llvm::toString(analysed.takeError()));
    cost = std::move(*analysed);
  }

  // The IR stages in order: each runs its passes once, when the requested
  // stage is at or past it, and dumps its IR (--dump-dir).
  enum class StageResult { Done, Skipped, Failed };
  auto advance = [&](Stage target, const char *stageLabel,
                     llvm::function_ref<void(PassManager &)> build) {
    if (stage >= target || emitStage < target || report != ReportFormat::None)
      return StageResult::Skipped;
    ::stage((llvm::Twine("the ") + stageLabel + " stage").str().c_str());
    if (failed(runPipeline(build))) {
      fail(llvm::Twine("the ") + stageLabel + " pipeline failed");
      return StageResult::Failed;
    }
    stage = target;
    return failed(dump(stageLabel)) ? StageResult::Failed : StageResult::Done;
  };
  // The IR stages through the pipelines csa-opt registers under the same
  // names (passes/Pipelines.h), so each dump can be reproduced there.
  // Stage expanded: modes into primitives, caches planned.
  if (advance(Stage::Expanded, "expanded", [](PassManager &pm) {
        csa::StagePipelineOptions options;
        options.boundedReplay = !noBoundedReplay && !noCed;
        options.replayStartLayer = replayStartLayer;
        options.replayTail = replayTail;
        csa::buildGraphToExpandedPipeline(pm, options);
      }) == StageResult::Failed)
    return 1;
  // Stage fused: kernel boundaries.
  if (advance(Stage::Fused, "fused", [](PassManager &pm) {
        csa::StagePipelineOptions options;
        options.fusions.assign(fusions.begin(), fusions.end());
        csa::buildExpandedToFusedPipeline(pm, options);
      }) == StageResult::Failed)
    return 1;
  // Stage tiled: the target's tile parameters on every matrix product (ops
  // that already carry one keep it).
  if (advance(Stage::Tiled, "tiled", [](PassManager &pm) {
        csa::StagePipelineOptions options;
        options.target = "host";
        options.rows = tileRows;
        options.linearForm = linearSplitK ? "split_k" : "per_output";
        options.attentionForm =
            !attentionForm.empty()                  ? std::string(attentionForm)
            : attentionWarpForm.getNumOccurrences() ? (attentionWarpForm ? "warp" : "head")
                                                    : "mma";
        csa::buildFusedToTiledPipeline(pm, options);
      }) == StageResult::Failed)
    return 1;

  // Stages host, llvm, object, artifact: the kernels of the tiled graph.
  OwningOpRef<ModuleOp> kernels;
  std::optional<csa::codegen::KernelSelection> selection;
  if (emitStage >= Stage::Host && report == ReportFormat::None) {
    ::stage("selecting the host kernels");
    kernels = ModuleOp::create(UnknownLoc::get(&context));
    auto selected = csa::codegen::selectHostKernels(*module, *kernels);
    if (!selected)
      return fail(llvm::toString(selected.takeError()));
    selection = std::move(*selected);
    if (failed(verify(*kernels)))
      return fail("internal error: the host kernels do not verify (please "
                  "report)");
    if (!dumpDir.empty()) {
      llvm::SmallString<256> path(dumpDir);
      llvm::sys::path::append(path, "host.mlir");
      if (failed(writeStage(*kernels, path)))
        return 1;
    }
  }
  // The NVPTX target: the same kernels, mapped to threads, to PTX.
  if ((emitStage == Stage::Gpu || emitStage == Stage::Ptx) && kernels) {
    const csa::codegen::NvptxOptions options = nvptxOptions();
    std::vector<csa::codegen::PtxKernel> gpuKernels;
    ::stage("lowering the kernels to NVVM");
    if (failed(csa::codegen::lowerKernelsToNvvm(*kernels, options, gpuKernels)))
      return fail("lowering the kernels to NVVM failed (see the diagnostics "
                  "above)");
    if (!dumpDir.empty()) {
      llvm::SmallString<256> path(dumpDir);
      llvm::sys::path::append(path, "gpu.mlir");
      if (failed(writeStage(*kernels, path)))
        return 1;
    }
    if (emitStage == Stage::Gpu)
      return failed(writeStage(*kernels, outputPath)) ? 1 : 0;
    if (outputPath == "-")
      return fail("--emit=ptx writes a directory: give -o DIR");
    ::stage("emitting PTX");
    auto ptx = csa::codegen::emitPtx(*kernels, options);
    if (!ptx)
      return fail(llvm::toString(ptx.takeError()));
    ::stage("writing the PTX directory");
    // A PTX directory is built beside the target and swapped in whole; a
    // directory that holds something else is not replaced.
    if (llvm::sys::fs::is_directory(outputPath)) {
      std::error_code ec;
      llvm::sys::fs::directory_iterator it(outputPath, ec), end;
      llvm::SmallString<256> ptxFile(outputPath);
      llvm::sys::path::append(ptxFile, "kernels.ptx");
      if (!ec && it != end && !llvm::sys::fs::exists(ptxFile))
        return fail("refusing to replace " + outputPath +
                    ": it exists and is not a PTX directory (no kernels.ptx)");
    } else if (llvm::sys::fs::exists(outputPath)) {
      return fail("refusing to replace " + outputPath + ": --emit=ptx writes a directory");
    }
    auto staging = csa::support::makeStagingDirectory(outputPath);
    if (!staging.ok())
      return fail(std::string(staging.status().message()));
    for (auto [file, text] :
         {std::pair<const char *, std::string>{"kernels.ptx", *ptx},
          {"kernels.json", csa::codegen::kernelsJson(gpuKernels, options)}}) {
      if (absl::Status st = csa::support::writeStagedFile(*staging + "/" + file, text); !st.ok()) {
        csa::support::discardStagingDirectory(*staging);
        return fail(std::string(st.message()));
      }
    }
    if (absl::Status st = csa::support::commitDirectory(*staging, outputPath); !st.ok())
      return fail(std::string(st.message()));
    return 0;
  }
  // --with-ptx: the GPU form of the same kernels, made before the host
  // lowering consumes them.
  std::string ptxText, ptxListing;
  if (emitStage == Stage::Artifact && withPtx && kernels) {
    OwningOpRef<ModuleOp> gpuKernels = kernels->clone();
    const csa::codegen::NvptxOptions options = nvptxOptions();
    std::vector<csa::codegen::PtxKernel> info;
    ::stage("lowering the kernels to NVVM");
    if (failed(csa::codegen::lowerKernelsToNvvm(*gpuKernels, options, info)))
      return fail("lowering the kernels to NVVM failed (see the diagnostics "
                  "above)");
    ::stage("emitting PTX");
    auto ptx = csa::codegen::emitPtx(*gpuKernels, options);
    if (!ptx)
      return fail(llvm::toString(ptx.takeError()));
    ptxText = std::move(*ptx);
    ptxListing = csa::codegen::kernelsJson(info, options);
  }
  if (emitStage >= Stage::LLVM && kernels) {
    ::stage("lowering the host kernels to LLVM");
    if (failed(csa::codegen::lowerHostKernelsToLLVM(*kernels)))
      return fail("lowering the host kernels to LLVM failed");
  }
  if (emitStage == Stage::Artifact && kernels) {
    if (outputPath == "-")
      return fail("--emit=artifact writes a directory: give -o DIR (e.g. "
                  "-o tiny.csa)");
    llvm::StringRef parent = llvm::sys::path::parent_path(outputPath);
    if (!parent.empty() && !llvm::sys::fs::is_directory(parent))
      return fail("cannot write " + outputPath + ": directory '" + parent.str() +
                  "' does not exist");
    if (llvm::Error e = writeHostArtifact(*module, *selection, *kernels,
                                          outputPath, ptxText, ptxListing))
      return fail(llvm::toString(std::move(e)));
    return 0;
  }
  if (emitStage == Stage::Object && kernels) {
    if (outputPath == "-")
      return fail("--emit=object writes a shared object: give -o lib.so");
    llvm::StringRef parent = llvm::sys::path::parent_path(outputPath);
    if (!parent.empty() && !llvm::sys::fs::is_directory(parent))
      return fail("cannot write " + outputPath + ": directory '" + parent.str() +
                  "' does not exist");
    // The object and the library under temporary names beside the
    // target; the library renamed over it only once linked.
    llvm::SmallString<256> object, library;
    llvm::StringRef directory = parent.empty() ? llvm::StringRef(".") : parent;
    if (std::error_code ec = llvm::sys::fs::createUniqueFile(
            directory + "/." + llvm::sys::path::filename(outputPath) + ".%%%%%%.o", object))
      return fail("cannot create a temporary file beside " + outputPath + ": " + ec.message());
    if (std::error_code ec = llvm::sys::fs::createUniqueFile(
            directory + "/." + llvm::sys::path::filename(outputPath) + ".%%%%%%.so", library)) {
      llvm::sys::fs::remove(object);
      return fail("cannot create a temporary file beside " + outputPath + ": " + ec.message());
    }
    auto cleanUp = [&] {
      llvm::sys::fs::remove(object);
      llvm::sys::fs::remove(library);
    };
    ::stage("emitting the host object");
    if (llvm::Error e = csa::codegen::emitHostObject(*kernels, object.str().str(),
                                                     {/*addressSanitizer=*/sanitizeKernels})) {
      cleanUp();
      return fail(llvm::toString(std::move(e)));
    }
    ::stage("linking the host kernels");
    if (llvm::Error e = csa::codegen::linkSharedObject({object.str().str()}, library.str().str())) {
      cleanUp();
      return fail(llvm::toString(std::move(e)));
    }
    llvm::sys::fs::remove(object);
    if (std::error_code ec = llvm::sys::fs::rename(library, outputPath)) {
      cleanUp();
      return fail("cannot replace " + outputPath + ": " + ec.message());
    }
    std::string listing;
    llvm::raw_string_ostream os(listing);
    csa::codegen::printKernelSelectionJson(*selection, os);
    return failed(writeOutput(outputPath + ".json", listing)) ? 1 : 0;
  }

  std::string text;
  llvm::raw_string_ostream out(text);
  if (cost) {
    if (report == ReportFormat::Json) {
      csa::printCostJson(*cost, out);
    } else {
      out << "csa cost report: " << name << "\n";
      csa::printCostText(*cost, out);
    }
  } else if (emitStage == Stage::LLVM && kernels) {
    ::stage("translating to LLVM IR");
    auto ir = csa::codegen::translateToLLVMIR(*kernels);
    if (!ir)
      return fail(llvm::toString(ir.takeError()));
    out << *ir;
  } else if (emitStage == Stage::Host && kernels) {
    printStage(*kernels, out);
  } else {
    printStage(*module, out);
  }
  return failed(writeOutput(outputPath, text)) ? 1 : 0;
}
