//===- ArtifactTest.cpp - Writing, opening and checking artifacts ---------===//
//
// The write/open round trip, then one test per kind of bad artifact, each
// asserting the message a user sees: missing manifest, bad JSON, wrong
// format, newer version, missing / truncated / corrupted / unlisted files,
// manifest, plan and weights schema errors (through open), weights for
// another model, a context longer than the plan.
//
//===----------------------------------------------------------------------===//
#include "ArtifactTestSupport.h"

#include "runtime/artifact/Artifact.h"
#include "runtime/checkpoint/SafetensorsWriter.h"

#include <gtest/gtest.h>

namespace csa::artifact {
namespace {

using nlohmann::json;
using test::TempDir;

/// Opens `dir`, expects failure with `code`, returns the message.
std::string openError(const std::string &dir, absl::StatusCode code) {
  auto artifact = Artifact::open(dir);
  EXPECT_FALSE(artifact.ok()) << "opened " << dir;
  if (artifact.ok())
    return "";
  EXPECT_EQ(artifact.status().code(), code) << artifact.status();
  return std::string(artifact.status().message());
}

class ArtifactFile : public ::testing::Test {
protected:
  void SetUp() override { test::writeTinyArtifact(dir()); }
  std::string dir() const { return tmp_ / "a"; }
  std::string at(const std::string &path) const { return dir() + "/" + path; }
  std::string prefix() const { return "artifact " + dir() + ": "; }
  TempDir tmp_;
};

TEST_F(ArtifactFile, RoundTrip) {
  auto artifact = Artifact::open(dir());
  ASSERT_TRUE(artifact.ok()) << artifact.status();
  const Manifest &m = artifact->manifest();
  EXPECT_EQ(m.format, "csa-artifact");
  EXPECT_EQ(m.formatVersion, 1);
  EXPECT_EQ(m.model, "tiny");
  EXPECT_EQ(m.modelHash, sha256Hex(test::tinyConfig().dump()));
  EXPECT_EQ(m.modelHash, sha256Hex(canonicalJson(test::tinyConfig())));
  EXPECT_EQ(m.schedule, "WWF");
  EXPECT_TRUE(isSha256Hex(m.scheduleHash));
  EXPECT_EQ(m.target, Target::HostX86_64);
  EXPECT_EQ(m.createdBy, "csa-artifact-tests");
  // Every file but the manifest, sorted, with its size and checksum.
  ASSERT_EQ(m.files.size(), 3u);
  EXPECT_EQ(m.files[0].path, "kernels/host.so");
  EXPECT_EQ(m.files[1].path, "plan.json");
  EXPECT_EQ(m.files[2].path, "weights.json");
  for (const FileEntry &file : m.files) {
    EXPECT_EQ(file.bytes, test::fs::file_size(at(file.path))) << file.path;
    EXPECT_EQ(file.sha256, *sha256File(at(file.path))) << file.path;
  }
  EXPECT_EQ(m.files[0].sha256, sha256Hex(test::fakeObject()));
  EXPECT_EQ(planToJson(artifact->plan()), planToJson(test::tinyPlan()));
  EXPECT_EQ(weightsToJson(artifact->weights()),
            weightsToJson(test::tinyWeights()));
  EXPECT_EQ(artifact->plan().decode[1].attrs, (json{{"grid", {4, 1, 1}}}));
  EXPECT_EQ(artifact->pathOf("kernels/host.so"), at("kernels/host.so"));
  // The writer leaves nothing beside the artifact (no staging directory).
  std::vector<std::string> beside;
  for (const auto &entry : test::fs::directory_iterator(tmp_.path()))
    beside.push_back(entry.path().filename().string());
  EXPECT_EQ(beside, std::vector<std::string>{"a"});
}

TEST_F(ArtifactFile, ManifestIsReadableJson) {
  json manifest = test::readJson(at("manifest.json"));
  EXPECT_EQ(manifest["format"], "csa-artifact");
  EXPECT_EQ(manifest["format_version"], 1);
  EXPECT_EQ(manifest["target"], "host-x86_64");
  EXPECT_EQ(manifest["files"][0]["path"], "kernels/host.so");
}

TEST_F(ArtifactFile, ChecksumsCanBeSkipped) {
  std::string object = test::readText(at("kernels/host.so"));
  object[100] ^= 1;
  test::writeText(at("kernels/host.so"), object);
  OpenOptions options;
  options.verifyChecksums = false;
  EXPECT_TRUE(Artifact::open(dir(), options).ok());
  EXPECT_FALSE(Artifact::open(dir()).ok());
}

TEST_F(ArtifactFile, WriterReplacesAnArtifact) {
  ArtifactWriter writer = test::tinyWriter();
  writer.setCreatedBy("second");
  ASSERT_TRUE(writer.write(dir()).ok());
  auto artifact = Artifact::open(dir());
  ASSERT_TRUE(artifact.ok()) << artifact.status();
  EXPECT_EQ(artifact->manifest().createdBy, "second");
}

TEST(ArtifactWriter, RefusesToReplaceOtherDirectories) {
  TempDir tmp;
  test::fs::create_directories(tmp / "data");
  test::writeText(tmp / "data/precious.txt", "x");
  auto written = test::tinyWriter().write(tmp / "data");
  ASSERT_FALSE(written.ok());
  EXPECT_EQ(written.status().message(),
            "refusing to replace " + (tmp / "data") +
                ": it exists and is not an artifact (no manifest.json)");
  EXPECT_TRUE(test::fs::exists(tmp / "data/precious.txt"));
}

TEST(ArtifactWriter, RejectsPathsOutsideKernels) {
  ArtifactWriter writer;
  for (const char *path :
       {"../x.so", "/tmp/x.so", "plan.json", "kernels/../plan.json",
        "kernels//a", "kernels/", "manifest.json", "kernels\\a"})
    EXPECT_FALSE(writer.addFile(path, "x").ok()) << path;
  EXPECT_TRUE(writer.addFile("kernels/sm_90a/attn.cubin", "x").ok());
}

// The writer opens what it wrote: an inconsistent plan never becomes an
// artifact.
TEST(ArtifactWriter, ValidatesBeforeInstalling) {
  TempDir tmp;
  ArtifactWriter writer = test::tinyWriter();
  Plan plan = test::tinyPlan();
  plan.decode[0].args[1] = KernelArg::weight("layers.9.attn.wq_a.weight");
  writer.setPlan(plan);
  auto written = writer.write(tmp / "a");
  ASSERT_FALSE(written.ok());
  EXPECT_CONTAINS(std::string(written.status().message()),
                  "plan.json: entry_points.decode[0].args[1].weight: "
                  "tensor 'layers.9.attn.wq_a.weight' is not in "
                  "weights.json");
  EXPECT_FALSE(test::fs::exists(tmp / "a"));

  ArtifactWriter unnamed = test::tinyWriter();
  unnamed.setCreatedBy("");
  written = unnamed.write(tmp / "b");
  ASSERT_FALSE(written.ok());
  EXPECT_CONTAINS(std::string(written.status().message()),
                  "manifest.json: created_by: must not be empty");
}

TEST(ArtifactOpen, MissingDirectory) {
  TempDir tmp;
  EXPECT_EQ(openError(tmp / "nope", absl::StatusCode::kNotFound),
            "artifact " + (tmp / "nope") + ": no such directory");
  test::writeText(tmp / "file", "x");
  EXPECT_CONTAINS(openError(tmp / "file", absl::StatusCode::kInvalidArgument),
                  "not a directory");
}

TEST_F(ArtifactFile, MissingManifest) {
  test::fs::remove(at("manifest.json"));
  EXPECT_EQ(openError(dir(), absl::StatusCode::kNotFound),
            prefix() + "no manifest.json (not an artifact, or its compile "
                       "did not finish)");
}

TEST_F(ArtifactFile, ManifestNotJson) {
  test::writeText(at("manifest.json"), "{\"format\": \"csa-artifact\",");
  EXPECT_CONTAINS(openError(dir(), absl::StatusCode::kDataLoss),
                  prefix() + "manifest.json: not valid JSON: ");
  test::writeText(at("manifest.json"), "[1, 2]");
  EXPECT_EQ(openError(dir(), absl::StatusCode::kInvalidArgument),
            prefix() + "manifest.json: (top level): must be an object, got "
                       "array");
}

TEST_F(ArtifactFile, WrongFormat) {
  test::editManifest(dir(), [](json &m) { m["format"] = "gguf"; });
  EXPECT_EQ(openError(dir(), absl::StatusCode::kInvalidArgument),
            prefix() + "manifest.json: format: not a csa artifact: format is "
                       "'gguf', expected 'csa-artifact'");
  test::editManifest(dir(), [](json &m) { m.erase("format"); });
  EXPECT_EQ(openError(dir(), absl::StatusCode::kInvalidArgument),
            prefix() + "manifest.json: format: missing (required)");
}

TEST_F(ArtifactFile, NewerFormatVersion) {
  // A newer manifest may have any other shape: the version is checked first.
  test::editManifest(dir(), [](json &m) {
    m["format_version"] = 2;
    m["something_new"] = true;
    m.erase("files");
  });
  EXPECT_EQ(openError(dir(), absl::StatusCode::kFailedPrecondition),
            prefix() + "manifest.json: artifact format version 2 is newer "
                       "than this runtime's 1; rebuild the runtime or "
                       "recompile");
}

TEST_F(ArtifactFile, BadFormatVersion) {
  test::editManifest(dir(), [](json &m) { m["format_version"] = "1"; });
  EXPECT_EQ(openError(dir(), absl::StatusCode::kInvalidArgument),
            prefix() + "manifest.json: format_version: must be an integer, "
                       "got string");
  test::editManifest(dir(), [](json &m) { m["format_version"] = 0; });
  EXPECT_EQ(openError(dir(), absl::StatusCode::kInvalidArgument),
            prefix() + "manifest.json: format_version: must be at least 1, "
                       "got 0");
}

TEST_F(ArtifactFile, ManifestFieldErrors) {
  struct Case {
    std::function<void(json &)> edit;
    std::string message;
  };
  std::vector<Case> cases = {
      {[](json &m) { m["model_hash"] = "ABC"; },
       "manifest.json: model_hash: 'ABC' is not 64 lowercase hex digits (a "
       "SHA-256)"},
      {[](json &m) { m.erase("schedule"); },
       "manifest.json: schedule: missing (required)"},
      {[](json &m) { m["schedule"] = "WW F"; },
       "manifest.json: schedule: 'WW F' is not a compact schedule string "
       "(printable ASCII, no spaces)"},
      {[](json &m) { m["target"] = "nvptx-sm_80"; },
       "manifest.json: target: unknown target 'nvptx-sm_80' (expected "
       "host-x86_64 or nvptx-sm_90a)"},
      {[](json &m) { m["modle"] = "tiny"; },
       "manifest.json: modle: unknown field (expected one of: format, "
       "format_version, model, model_hash, schedule, schedule_hash, target, "
       "created_by, command, files)"},
      {[](json &m) { m["files"][0]["path"] = "../host.so"; },
       "manifest.json: files[0].path: '../host.so' is not a relative path "
       "inside the artifact"},
      {[](json &m) { m["files"][1]["bytes"] = -4; },
       "manifest.json: files[1].bytes: must be at least 0, got -4"},
      {[](json &m) { m["files"][2]["sha256"] = 7; },
       "manifest.json: files[2].sha256: must be a string, got number"},
      {[](json &m) { m["files"][2] = m["files"][1]; },
       "manifest.json: files[2].path: 'plan.json' is listed twice (also "
       "files[1])"},
      {[](json &m) { m["files"].erase(2); },
       "manifest.json: files: does not list weights.json (every artifact has "
       "one)"},
  };
  const std::string original = test::readText(at("manifest.json"));
  for (const Case &c : cases) {
    test::writeText(at("manifest.json"), original);
    test::editManifest(dir(), c.edit);
    EXPECT_EQ(openError(dir(), absl::StatusCode::kInvalidArgument),
              prefix() + c.message);
  }
}

TEST_F(ArtifactFile, MissingFile) {
  test::fs::remove(at("kernels/host.so"));
  EXPECT_EQ(openError(dir(), absl::StatusCode::kNotFound),
            prefix() + "file 'kernels/host.so' listed in manifest.json is "
                       "missing");
}

TEST_F(ArtifactFile, TruncatedFile) {
  std::string object = test::readText(at("kernels/host.so"));
  test::writeText(at("kernels/host.so"), object.substr(0, 1000));
  EXPECT_EQ(openError(dir(), absl::StatusCode::kDataLoss),
            prefix() +
                "file 'kernels/host.so' is truncated: 1000 bytes on "
                "disk, manifest.json says " +
                std::to_string(object.size()));
}

TEST_F(ArtifactFile, GrownFile) {
  std::string plan = test::readText(at("plan.json"));
  test::writeText(at("plan.json"), plan + " ");
  EXPECT_EQ(openError(dir(), absl::StatusCode::kDataLoss),
            prefix() + "file 'plan.json' has " +
                std::to_string(plan.size() + 1) +
                " bytes on disk, manifest.json says " +
                std::to_string(plan.size()) + " (changed after the compile?)");
}

TEST_F(ArtifactFile, FlippedByteNamesTheFile) {
  for (const char *path : {"kernels/host.so", "plan.json", "weights.json"}) {
    std::string original = test::readText(at(path));
    std::string flipped = original;
    flipped[flipped.size() / 2] ^= 0x20;
    test::writeText(at(path), flipped);
    EXPECT_EQ(openError(dir(), absl::StatusCode::kDataLoss),
              prefix() + "file '" + path + "' is corrupted: its SHA-256 is " +
                  sha256Hex(flipped) + ", manifest.json says " +
                  sha256Hex(original));
    test::writeText(at(path), original);
  }
  EXPECT_TRUE(Artifact::open(dir()).ok());
}

TEST_F(ArtifactFile, FileChangedAfterOpenIsNotRead) {
  // Loaders read a file once and use those bytes (readVerified): a file
  // swapped after open() is refused, however it was changed.
  auto artifact = Artifact::open(dir());
  ASSERT_TRUE(artifact.ok()) << artifact.status();
  const std::string original = test::readText(at("kernels/host.so"));
  auto read = artifact->readVerified("kernels/host.so");
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(*read, original);
  std::string flipped = original;
  flipped[flipped.size() / 2] ^= 0x20; // same size
  for (const std::string &changed : {flipped, original + "x"}) {
    test::writeText(at("kernels/host.so"), changed);
    auto again = artifact->readVerified("kernels/host.so");
    ASSERT_FALSE(again.ok());
    EXPECT_EQ(again.status().code(), absl::StatusCode::kDataLoss);
    EXPECT_EQ(again.status().message(),
              prefix() + "file 'kernels/host.so' changed after the artifact was opened (its "
                         "size or SHA-256 is no longer manifest.json's); nothing of it was loaded");
  }
  test::writeText(at("kernels/host.so"), original);
  auto unlisted = artifact->readVerified("kernels/other.so");
  ASSERT_FALSE(unlisted.ok());
  EXPECT_EQ(unlisted.status().message(),
            prefix() + "'kernels/other.so' is not listed in manifest.json");
}

TEST_F(ArtifactFile, KernelRecordMustBeTheArtifactsModel) {
  auto artifact = Artifact::open(dir());
  ASSERT_TRUE(artifact.ok()) << artifact.status();
  const Manifest &m = artifact->manifest();
  // A record whose config hashes to the manifest's model_hash: the writer
  // hashed canonicalJson of the config it was given.
  const std::string config = test::tinyConfig().dump(2);
  EXPECT_TRUE(artifact->checkKernelRecord("kernels/host.so", config.c_str(), m.schedule.c_str()).ok());
  EXPECT_EQ(artifact->checkKernelRecord("kernels/host.so", config.c_str(), "W.").message(),
            prefix() + "kernels/host.so was built for schedule 'W.', the artifact's is '" +
                m.schedule + "'");
  EXPECT_NE(artifact->checkKernelRecord("kernels/host.so", "{\"dim\": 1}", m.schedule.c_str())
                .message()
                .find("was built for another model config"),
            std::string::npos);
  EXPECT_NE(artifact->checkKernelRecord("kernels/host.so", nullptr, nullptr)
                .message()
                .find("records no model config and schedule"),
            std::string::npos);
  EXPECT_NE(artifact->checkKernelRecord("kernels/host.so", "{not json", m.schedule.c_str())
                .message()
                .find("not valid JSON"),
            std::string::npos);
}

TEST(ArtifactOpen, CommandIsRecordedAndChecked) {
  test::TempDir tmp;
  const std::string dir = tmp / "a";
  auto writer = test::tinyWriter();
  writer.setCommand({"csa-compile", "--variant=tiny", "-o", "a"});
  ASSERT_TRUE(writer.write(dir).ok());
  auto artifact = Artifact::open(dir);
  ASSERT_TRUE(artifact.ok()) << artifact.status();
  EXPECT_EQ(artifact->manifest().command,
            (std::vector<std::string>{"csa-compile", "--variant=tiny", "-o", "a"}));
  test::editManifest(dir, [](json &m) { m["command"][1] = 7; });
  EXPECT_EQ(openError(dir, absl::StatusCode::kInvalidArgument),
            "artifact " + dir + ": manifest.json: command[1]: expected a string");
  // Optional: an artifact without it opens, with no command.
  test::editManifest(dir, [](json &m) { m.erase("command"); });
  auto without = Artifact::open(dir);
  ASSERT_TRUE(without.ok()) << without.status();
  EXPECT_TRUE(without->manifest().command.empty());
}

TEST(ArtifactOpen, ConfigMustHashToTheModelHash) {
  test::TempDir tmp;
  const std::string dir = tmp / "a";
  auto writer = test::tinyWriter();
  ASSERT_TRUE(writer.addFile("config.json", test::tinyConfig().dump(2) + "\n").ok());
  ASSERT_TRUE(writer.write(dir).ok());
  ASSERT_TRUE(Artifact::open(dir).ok());
  // Edited and re-signed: the file's checksum holds, its hash is not the
  // model's.
  std::string hash;
  test::editListedJson(dir, "config.json", [&](json &config) {
    config["dim"] = 65;
    hash = sha256Hex(canonicalJson(config));
  });
  EXPECT_EQ(openError(dir, absl::StatusCode::kDataLoss),
            "artifact " + dir + ": config.json hashes to " + hash +
                ", manifest.json's model_hash is " + sha256Hex(canonicalJson(test::tinyConfig())) +
                " (one of them was edited)");
}

TEST_F(ArtifactFile, UnlistedFile) {
  test::writeText(at("kernels/stale.so"), "old");
  EXPECT_EQ(openError(dir(), absl::StatusCode::kDataLoss),
            prefix() + "file 'kernels/stale.so' is not listed in "
                       "manifest.json (remove it or recompile)");
}

TEST_F(ArtifactFile, ListedPathIsADirectory) {
  test::fs::remove(at("kernels/host.so"));
  test::fs::create_directories(at("kernels/host.so"));
  EXPECT_EQ(openError(dir(), absl::StatusCode::kDataLoss),
            prefix() + "'kernels/host.so' listed in manifest.json is not a "
                       "regular file");
}

// Plan schema errors surface through open with the artifact and the file
// named (PlanTest.cpp has one case per rule).
TEST_F(ArtifactFile, PlanSchemaError) {
  test::editListedJson(dir(), "plan.json", [](json &plan) {
    plan["entry_points"]["decode"][1]["args"][3] = {{"cache", "L3.swa"}};
  });
  EXPECT_EQ(openError(dir(), absl::StatusCode::kInvalidArgument),
            prefix() + "plan.json: entry_points.decode[1].args[3].cache: "
                       "unknown cache buffer 'L3.swa' (not in caches)");
}

TEST_F(ArtifactFile, PlanNotJson) {
  test::rewriteListed(dir(), "plan.json", "{\"version\": 1,,}");
  EXPECT_CONTAINS(openError(dir(), absl::StatusCode::kDataLoss),
                  prefix() + "plan.json: not valid JSON: ");
}

TEST_F(ArtifactFile, NewerPlanVersion) {
  test::editListedJson(dir(), "plan.json", [](json &plan) {
    plan = {{"version", 7}};
  });
  EXPECT_EQ(openError(dir(), absl::StatusCode::kFailedPrecondition),
            prefix() + "plan.json: plan version 7 is newer than this "
                       "runtime's 6; rebuild the runtime or recompile");
}

TEST_F(ArtifactFile, KernelObjectNotInArtifact) {
  test::editListedJson(dir(), "plan.json", [](json &plan) {
    plan["entry_points"]["prefill"][2]["object"] = "kernels/missing.so";
  });
  EXPECT_EQ(openError(dir(), absl::StatusCode::kInvalidArgument),
            prefix() + "plan.json: entry_points.prefill[2].object: "
                       "'kernels/missing.so' is not a file of the artifact "
                       "(not in manifest.json files)");
  test::editListedJson(dir(), "plan.json", [](json &plan) {
    plan["entry_points"]["prefill"][2]["object"] = "weights.json";
  });
  EXPECT_EQ(openError(dir(), absl::StatusCode::kInvalidArgument),
            prefix() + "plan.json: entry_points.prefill[2].object: "
                       "'weights.json' is not under kernels/");
}

TEST_F(ArtifactFile, WeightArgumentNotInWeights) {
  test::editListedJson(dir(), "weights.json", [](json &weights) {
    weights["tensors"].erase(3); // head.weight
  });
  EXPECT_EQ(openError(dir(), absl::StatusCode::kInvalidArgument),
            prefix() + "plan.json: entry_points.prefill[2].args[1].weight: "
                       "tensor 'head.weight' is not in weights.json");
}

TEST_F(ArtifactFile, WeightsSchemaErrors) {
  struct Case {
    std::function<void(json &)> edit;
    std::string message;
  };
  std::vector<Case> cases = {
      {[](json &w) { w["tensors"][1]["dtype"] = "FP8"; },
       "weights.json: tensors[1].dtype: unknown dtype 'FP8' (safetensors "
       "spelling: BF16, F32, F8_E4M3, ...)"},
      {[](json &w) { w["tensors"][2]["shape"][1] = -2; },
       "weights.json: tensors[2].shape[1]: must be at least 0, got -2"},
      {[](json &w) { w["tensors"][3]["name"] = "embed.weight"; },
       "weights.json: tensors[3].name: tensor 'embed.weight' is listed twice "
       "(also tensors[0])"},
      {[](json &w) { w["tensors"][0].erase("shape"); },
       "weights.json: tensors[0].shape: missing (required)"},
      {[](json &w) { w["ignored_prefixes"] = {"embed."}; },
       "weights.json: tensors[0]: tensor 'embed.weight' is under an ignored "
       "prefix"},
      {[](json &w) { w["version"] = 2; },
       "weights.json: weights manifest version 2 is newer than this "
       "runtime's 1; rebuild the runtime or recompile"},
  };
  const std::string manifest = test::readText(at("manifest.json"));
  const std::string weights = test::readText(at("weights.json"));
  for (const Case &c : cases) {
    test::writeText(at("manifest.json"), manifest);
    test::writeText(at("weights.json"), weights);
    test::editListedJson(dir(), "weights.json", c.edit);
    auto artifact = Artifact::open(dir());
    ASSERT_FALSE(artifact.ok());
    EXPECT_EQ(artifact.status().message(), prefix() + c.message);
  }
}

// "A clear error, never a crash": seeded random byte edits, truncations and
// insertions in each JSON file (checksums kept consistent so the parsers see
// the damage) either open or fail with a message.
TEST_F(ArtifactFile, RandomDamageNeverCrashes) {
  const std::string manifest = test::readText(at("manifest.json"));
  uint64_t state = 12345;
  auto next = [&state]() { // SplitMix64
    uint64_t z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  };
  const std::string alphabet = "{}[]\",:0123456789-.eE \\nutfalsx";
  int failures = 0;
  for (const char *path : {"manifest.json", "plan.json", "weights.json"}) {
    const std::string original = test::readText(at(path));
    for (int trial = 0; trial < 60; ++trial) {
      std::string damaged = original;
      size_t where = size_t(next() % damaged.size());
      switch (next() % 3) {
      case 0:
        damaged[where] = alphabet[next() % alphabet.size()];
        break;
      case 1:
        damaged.resize(where);
        break;
      default:
        damaged.insert(where, 1, alphabet[next() % alphabet.size()]);
        break;
      }
      test::writeText(at("manifest.json"), manifest);
      if (std::string(path) == "manifest.json")
        test::writeText(at(path), damaged);
      else
        test::rewriteListed(dir(), path, damaged);
      auto artifact = Artifact::open(dir());
      if (!artifact.ok()) {
        ++failures;
        EXPECT_FALSE(artifact.status().message().empty());
      }
    }
    test::writeText(at(path), original);
  }
  test::writeText(at("manifest.json"), manifest);
  EXPECT_GT(failures, 120) << failures; // most edits break something
  EXPECT_TRUE(Artifact::open(dir()).ok());
}

/// Writes a checkpoint of `weights` (zero bytes) plus `extra` tensors.
std::string writeCheckpoint(const TempDir &tmp, const WeightsManifest &weights,
                            const std::vector<WeightEntry> &extra = {}) {
  checkpoint::CheckpointWriter writer;
  std::vector<WeightEntry> all = weights.tensors;
  all.insert(all.end(), extra.begin(), extra.end());
  for (const WeightEntry &entry : all) {
    uint64_t count = 1;
    for (int64_t d : entry.shape)
      count *= uint64_t(d);
    EXPECT_TRUE(writer
                    .add(entry.name, entry.dtype, entry.shape,
                         std::vector<uint8_t>(
                             count * checkpoint::dtypeSize(entry.dtype), 0))
                    .ok());
  }
  auto written = writer.write(tmp / "ckpt");
  EXPECT_TRUE(written.ok()) << written.status();
  return tmp / "ckpt";
}

class ArtifactCheckWeights : public ArtifactFile {
protected:
  void SetUp() override {
    ArtifactFile::SetUp();
    auto opened = Artifact::open(dir());
    ASSERT_TRUE(opened.ok()) << opened.status();
    artifact_.emplace(std::move(*opened));
  }
  /// checkWeights of a checkpoint of `weights` + `extra`.
  absl::Status check(const WeightsManifest &weights,
                     const std::vector<WeightEntry> &extra = {}) {
    TempDir ckptDir;
    auto ckpt =
        checkpoint::Checkpoint::open(writeCheckpoint(ckptDir, weights, extra));
    EXPECT_TRUE(ckpt.ok()) << ckpt.status();
    return checkWeights(*artifact_, *ckpt);
  }
  std::string header(const std::string &ckpt) const {
    return "checkpoint " + ckpt + " does not match artifact " + dir() +
           " (model 'tiny', schedule 'WWF'): weights for another model? ";
  }
  std::optional<Artifact> artifact_;
};

TEST_F(ArtifactCheckWeights, Matching) {
  EXPECT_TRUE(check(test::tinyWeights()).ok());
  // Tensors under an ignored prefix (DSpark layers) do not matter.
  EXPECT_TRUE(check(test::tinyWeights(),
                    {{"mtp.0.attn.wq_a.weight", checkpoint::DType::BF16, {4}}})
                  .ok());
}

TEST_F(ArtifactCheckWeights, AnotherModelNamesTheFirstMismatch) {
  WeightsManifest other = test::tinyWeights();
  other.tensors[1].shape = {1152, 64}; // layers.2.attn.wkv.weight
  other.tensors[3].shape = {2048, 64}; // head.weight
  TempDir ckptDir;
  std::string path = writeCheckpoint(ckptDir, other);
  auto ckpt = checkpoint::Checkpoint::open(path);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  absl::Status status = checkWeights(*artifact_, *ckpt);
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(status.message(),
            header(path) +
                "tensor 'layers.2.attn.wkv.weight' is F8_E4M3 [1152, 64] in "
                "the checkpoint, the artifact expects F8_E4M3 [576, 64] (and "
                "1 more mismatches)");
}

TEST_F(ArtifactCheckWeights, Dtype) {
  WeightsManifest other = test::tinyWeights();
  other.tensors[0].dtype = checkpoint::DType::F32;
  absl::Status status = check(other);
  EXPECT_CONTAINS(std::string(status.message()),
                  "tensor 'embed.weight' is F32 [1024, 64] in the "
                  "checkpoint, the artifact expects BF16 [1024, 64]");
}

TEST_F(ArtifactCheckWeights, MissingTensor) {
  WeightsManifest fewer = test::tinyWeights();
  fewer.tensors.erase(fewer.tensors.begin() + 2);
  absl::Status status = check(fewer);
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_CONTAINS(std::string(status.message()),
                  "weights for another model? tensor "
                  "'layers.2.attn.wkv.scale' (F8_E8M0 [18, 2]) is not "
                  "in the checkpoint");
}

TEST_F(ArtifactCheckWeights, ExtraTensor) {
  absl::Status status = check(
      test::tinyWeights(),
      {{"layers.3.attn.wkv.weight", checkpoint::DType::F8E4M3, {576, 64}}});
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_CONTAINS(std::string(status.message()),
                  "weights for another model? the checkpoint has "
                  "tensor 'layers.3.attn.wkv.weight', which the "
                  "artifact does not use");
}

TEST_F(ArtifactFile, ContextLongerThanThePlan) {
  auto artifact = Artifact::open(dir());
  ASSERT_TRUE(artifact.ok()) << artifact.status();
  EXPECT_TRUE(checkContext(artifact->plan(), 0).ok());
  EXPECT_TRUE(checkContext(artifact->plan(), 4096).ok());
  absl::Status status = checkContext(artifact->plan(), 5000);
  EXPECT_EQ(status.code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(status.message(),
            "context of 5000 tokens is longer than the plan allows "
            "(max_context 4096); shorten the input or recompile for a "
            "context of at least 5000 tokens");
  EXPECT_EQ(checkContext(artifact->plan(), -1).code(),
            absl::StatusCode::kInvalidArgument);
}

} // namespace
} // namespace csa::artifact
