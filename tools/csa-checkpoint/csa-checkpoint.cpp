//===- csa-checkpoint.cpp - Generate, check and list checkpoints ----------===//
//
//   csa-checkpoint generate (--variant=NAME | CONFIG.json) [--schedule=STR]
//                  --out=DIR [--seed=N] [--shard-mb=N] [--index] [--force]
//   csa-checkpoint check DIR [--variant=NAME | --config=FILE] [--schedule=STR]
//   csa-checkpoint list DIR
//
// Plain C++ (no LLVM): the flags are Abseil flags read through
// tools/support/Flags.h, each command accepting its own.
//
//===----------------------------------------------------------------------===//
#include "tools/support/Flags.h"
#include "tools/support/LastResort.h"
#include "tools/support/Version.h"
#include "tools/support/Progress.h"
#include "models/config/ModelConfig.h"
#include "models/schedule/Schedule.h"
#include "models/variants/Variants.h"
#include "models/weights/RandomCheckpoint.h"
#include "models/weights/WeightManifest.h"
#include "runtime/checkpoint/Checkpoint.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <map>
#include <sstream>
#include <string>
#include <vector>

// The flags (tools/support/Flags.h: --flag=value or --flag value); each
// command accepts its own.
ABSL_FLAG(std::string, variant, "", "a built-in model variant (generate, check)");
ABSL_FLAG(std::string, config, "", "the config to check against (check)");
ABSL_FLAG(std::string, schedule, "", "a schedule string in place of the config's");
ABSL_FLAG(std::string, out, "", "the folder to write (generate)");
ABSL_FLAG(uint64_t, seed, 0, "random seed; same seed, same bytes (generate)");
ABSL_FLAG(double, shard_mb, 4096, "shard budget in MiB, fractions allowed (generate)");
ABSL_FLAG(bool, index, false,
          "write model.safetensors.index.json even for one shard (generate)");
ABSL_FLAG(bool, force, false, "replace a checkpoint already in the folder (generate)");
ABSL_FLAG(bool, progress, false, "the bytes written so far on stderr, always (generate)");
ABSL_FLAG(bool, quiet, false, "no progress line (generate)");

namespace {

namespace fs = std::filesystem;
using csa::checkpoint::Checkpoint;

constexpr const char *kUsage = R"(usage:
  csa-checkpoint generate (--variant=NAME | CONFIG.json) [--schedule=STR]
                 --out=DIR [--seed=N] [--shard-mb=N] [--index] [--force]
                 [--progress | --quiet]
      Writes a random checkpoint of the model in the official layout (names,
      shapes, dtypes, FP8/FP4 block scales) plus DIR/config.json (and, with
      Engram layers, the modulo Engram token map engram_token_map.json).
      --progress    the bytes written so far on stderr (default: when stderr
                    is a terminal; --quiet: never)
      --seed=N      random seed (default 0); same seed, same bytes
      --shard-mb=N  shard budget in MiB (default 4096; fractions allowed)
      --index       write model.safetensors.index.json even for one shard
      --force       replace a checkpoint already in DIR
  csa-checkpoint check DIR [--variant=NAME | --config=FILE] [--schedule=STR]
      Checks every tensor of DIR against the weight manifest of the config
      (default DIR/config.json): names, dtypes, shapes, shards.
  csa-checkpoint list DIR
      Prints name, dtype, shape and shard of every tensor.
)";

int fail(const std::string &message) {
  std::cerr << "csa-checkpoint: error: " << message << "\n";
  return 1;
}

/// Reads the flags of `command` (argv[2..]) into the Abseil flags; false
/// with `status` set when the tool is to exit (--help, or an error).
bool parseCommand(int argc, char **argv, const std::string &command,
                  std::vector<std::string> known, std::vector<std::string> &positional,
                  int &status) {
  csa::tools::CommandLine flags("csa-checkpoint", kUsage);
  flags.describe(FLAGS_seed, "must be a non-negative integer")
      .range<double>(FLAGS_shard_mb, std::numeric_limits<double>::min(), 1e9,
                     "must be a positive number of MiB")
      .only(command, std::move(known));
  if (!flags.parse(argc, argv, 2)) {
    status = flags.exitCode();
    return false;
  }
  positional = flags.positional();
  return true;
}

/// The model a command works on: config, schedule, where they came from.
struct Model {
  csa::ModelConfig config;
  csa::Schedule schedule;
  std::string origin;
  nlohmann::json originalConfig; ///< the flat config file, if one was read
};

absl::StatusOr<Model> resolveModel(const std::string &variant,
                                   const std::string &configPath,
                                   const std::string &scheduleString) {
  Model model;
  if (!variant.empty()) {
    auto named = csa::loadVariant(variant);
    if (!named.ok())
      return named.status();
    model.config = named->config;
    model.schedule = named->schedule;
    model.origin = "variant '" + variant + "'";
  } else {
    auto config = csa::loadModelConfig(configPath);
    if (!config.ok())
      return config.status();
    auto schedule = csa::scheduleFromConfig(*config);
    if (!schedule.ok())
      return schedule.status();
    model.config = *config;
    model.schedule = *schedule;
    model.origin = configPath;
    std::ifstream in(configPath, std::ios::binary);
    std::stringstream text;
    text << in.rdbuf();
    model.originalConfig =
        nlohmann::json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  }
  if (!scheduleString.empty()) {
    auto schedule = csa::scheduleFromString(model.config, scheduleString);
    if (!schedule.ok())
      return schedule.status();
    model.schedule = *schedule;
  }
  return model;
}

/// "1,234,567".
std::string grouped(uint64_t n) {
  std::string digits = std::to_string(n), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i && (digits.size() - i) % 3 == 0)
      out += ',';
    out += digits[i];
  }
  return out;
}

/// Orders "layers.2" before "layers.10": digit runs compare as numbers.
bool naturalLess(const std::string &a, const std::string &b) {
  size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    if (std::isdigit((unsigned char)a[i]) &&
        std::isdigit((unsigned char)b[j])) {
      size_t i0 = i, j0 = j;
      while (i < a.size() && std::isdigit((unsigned char)a[i]))
        ++i;
      while (j < b.size() && std::isdigit((unsigned char)b[j]))
        ++j;
      std::string x = a.substr(i0, i - i0), y = b.substr(j0, j - j0);
      x.erase(0, std::min(x.find_first_not_of('0'), x.size()));
      y.erase(0, std::min(y.find_first_not_of('0'), y.size()));
      if (x.size() != y.size())
        return x.size() < y.size();
      if (x != y)
        return x < y;
      continue;
    }
    if (a[i] != b[j])
      return a[i] < b[j];
    ++i;
    ++j;
  }
  return a.size() - i < b.size() - j;
}

int runGenerate(int argc, char **argv) {
  std::vector<std::string> positional;
  int status = 0;
  if (!parseCommand(argc, argv, "generate",
                    {"variant", "schedule", "out", "seed", "shard-mb", "index", "force",
                     "progress", "quiet"},
                    positional, status))
    return status;
  const std::string variant = absl::GetFlag(FLAGS_variant);
  if (positional.size() > 1)
    return fail("generate takes one config file, got " + std::to_string(positional.size()));
  const std::string configPath = positional.empty() ? std::string() : positional[0];
  if (variant.empty() == configPath.empty())
    return fail("generate needs either a config file or --variant=NAME "
                "(one of them)");
  const std::string out = absl::GetFlag(FLAGS_out);
  if (out.empty())
    return fail("generate needs --out=DIR");

  csa::RandomCheckpointOptions options;
  options.seed = absl::GetFlag(FLAGS_seed);
  options.writer.shardBytes = std::max<uint64_t>(
      1, uint64_t(absl::GetFlag(FLAGS_shard_mb) * double(1 << 20)));
  options.writer.alwaysIndex = absl::GetFlag(FLAGS_index);
  options.writer.overwrite = absl::GetFlag(FLAGS_force);

  auto model = resolveModel(variant, configPath, absl::GetFlag(FLAGS_schedule));
  if (!model.ok())
    return fail(std::string(model.status().message()));
  options.origin = model->origin;
  options.originalConfig = model->originalConfig;
  // Progress on stderr (a terminal, or --progress; not with --quiet): a
  // released-size checkpoint takes minutes.
  auto manifest = csa::weightManifest(model->config, model->schedule, options.manifest);
  if (!manifest.ok())
    return fail(std::string(manifest.status().message()));
  csa::tools::Progress progress(
      "writing " + out, csa::manifestTotals(*manifest).bytes, "B",
      absl::GetFlag(FLAGS_quiet)      ? csa::tools::ProgressMode::Never
      : absl::GetFlag(FLAGS_progress) ? csa::tools::ProgressMode::Always
                                      : csa::tools::ProgressMode::Auto);
  options.writer.onWritten = [&progress](uint64_t bytes) { progress.add(bytes); };
  auto result =
      csa::writeRandomCheckpoint(model->config, model->schedule, out, options);
  progress.finish();
  if (!result.ok())
    return fail(std::string(result.status().message()));
  std::cout << "generated " << model->origin << ", schedule "
            << model->schedule.letters() << ", seed " << options.seed << ": "
            << grouped(result->totals.tensors) << " tensors, "
            << grouped(result->totals.parameters) << " parameters, "
            << grouped(result->totals.bytes) << " bytes\n";
  for (const std::string &file : result->files)
    std::cout << "  " << file << "\n";
  return 0;
}

int runCheck(int argc, char **argv) {
  std::vector<std::string> positional;
  int status = 0;
  if (!parseCommand(argc, argv, "check", {"variant", "config", "schedule"}, positional,
                    status))
    return status;
  if (positional.size() != 1)
    return fail("check needs one checkpoint directory (or file)");
  const std::string dir = positional[0];
  const std::string variant = absl::GetFlag(FLAGS_variant);
  std::string configPath = absl::GetFlag(FLAGS_config);
  if (!variant.empty() && !configPath.empty())
    return fail("give either --variant or --config, not both");
  if (variant.empty() && configPath.empty()) {
    fs::path base(dir);
    if (!fs::is_directory(base))
      base = base.parent_path();
    configPath = (base / "config.json").string();
    if (!fs::exists(configPath))
      return fail(configPath + ": no config.json beside the checkpoint; give "
                               "--variant=NAME or --config=FILE");
  }
  auto model = resolveModel(variant, configPath, absl::GetFlag(FLAGS_schedule));
  if (!model.ok())
    return fail(std::string(model.status().message()));
  auto manifest = csa::weightManifest(model->config, model->schedule);
  if (!manifest.ok())
    return fail(std::string(manifest.status().message()));

  auto checkpoint = Checkpoint::open(dir);
  if (!checkpoint.ok())
    return fail(std::string(checkpoint.status().message()));
  if (absl::Status s = checkpoint->validate(); !s.ok())
    return fail(std::string(s.message()));
  if (absl::Status s = csa::checkAgainstManifest(*checkpoint, *manifest);
      !s.ok())
    return fail(absl::StrCat(s.message(), "\n  (the manifest of ",
                             model->origin, ", schedule ",
                             model->schedule.letters(), ")"));
  csa::ManifestTotals totals = csa::manifestTotals(*manifest);
  std::cout << dir << ": OK: " << grouped(totals.tensors)
            << " tensors match the weight manifest of " << model->origin
            << " (schedule " << model->schedule.letters()
            << "): " << grouped(totals.parameters) << " parameters, "
            << grouped(totals.bytes) << " bytes in "
            << checkpoint->files().size() << " file(s)\n";
  return 0;
}

int runList(int argc, char **argv) {
  std::vector<std::string> positional;
  int status = 0;
  if (!parseCommand(argc, argv, "list", {}, positional, status))
    return status;
  if (positional.size() != 1)
    return fail("list needs one checkpoint directory (or file)");
  auto checkpoint = Checkpoint::open(positional[0]);
  if (!checkpoint.ok())
    return fail(std::string(checkpoint.status().message()));
  std::vector<std::string> names = checkpoint->names();
  std::sort(names.begin(), names.end(), naturalLess);

  struct Row {
    std::string name, dtype, shape, file;
  };
  std::vector<Row> rows;
  size_t widths[3] = {4, 5, 5};
  uint64_t bytes = 0;
  for (const std::string &name : names) {
    auto view = checkpoint->tensor(name);
    if (!view.ok())
      return fail(std::string(view.status().message()));
    Row row{name, csa::checkpoint::dtypeName(view->dtype),
            csa::checkpoint::formatShape(view->shape),
            fs::path(view->file).filename().string()};
    widths[0] = std::max(widths[0], row.name.size());
    widths[1] = std::max(widths[1], row.dtype.size());
    widths[2] = std::max(widths[2], row.shape.size());
    bytes += view->bytes;
    rows.push_back(std::move(row));
  }
  auto pad = [](const std::string &s, size_t w) {
    return s + std::string(w - s.size() + 2, ' ');
  };
  std::cout << pad("name", widths[0]) << pad("dtype", widths[1])
            << pad("shape", widths[2]) << "file\n";
  for (const Row &r : rows)
    std::cout << pad(r.name, widths[0]) << pad(r.dtype, widths[1])
              << pad(r.shape, widths[2]) << r.file << "\n";
  std::cout << grouped(rows.size()) << " tensors, " << grouped(bytes)
            << " bytes in " << checkpoint->files().size() << " file(s)\n";
  return 0;
}

int run(int argc, char **argv) {
  if (argc < 2)
    return fail(std::string("no command given\n") + kUsage);
  const std::string command = argv[1];
  if (command == "--help" || command == "-h" || command == "help") {
    csa::tools::CommandLine("csa-checkpoint", kUsage).printHelp(std::cout);
    return 0;
  }
  if (command == "generate")
    return runGenerate(argc, argv);
  if (command == "check")
    return runCheck(argc, argv);
  if (command == "list")
    return runList(argc, argv);
  return fail("unknown command '" + command +
              "' (generate, check or list; see csa-checkpoint --help)");
}

} // namespace

int main(int argc, char **argv) {
  csa::tools::installLastResortHandler("csa-checkpoint");
  if (csa::tools::answerVersion(argc, argv, "csa-checkpoint"))
    return 0;
  // Errors are statuses; an exception here is a bug, but still a message.
  try {
    return run(argc, argv);
  } catch (const std::exception &e) {
    return fail(std::string("internal error: ") + e.what());
  }
}
