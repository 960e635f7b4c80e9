//===- ArtifactTestSupport.h - Artifact test helpers ------------*- C++ -*-===//
//
// File helpers, a small valid artifact (three layers of a tiny-like model: two
// SWA-only, one Full at ratio 2) and edits that keep the manifest's checksums
// right, so a test reaches the check it means; TempDir is shared.
//
//===----------------------------------------------------------------------===//
#ifndef CSA_TEST_UNIT_ARTIFACT_ARTIFACTTESTSUPPORT_H
#define CSA_TEST_UNIT_ARTIFACT_ARTIFACTTESTSUPPORT_H

#include "runtime/artifact/ArtifactWriter.h"
#include "runtime/artifact/Manifest.h"
#include "runtime/artifact/Plan.h"
#include "runtime/artifact/Sha256.h"

#include "test/unit/support/TempDir.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <sstream>
#include <string>
#include <unistd.h>

/// EXPECT that string `haystack` contains `needle` (no gmock needed).
#define EXPECT_CONTAINS(haystack, needle)                                      \
  do {                                                                         \
    const std::string csa_haystack(haystack), csa_needle(needle);              \
    EXPECT_NE(csa_haystack.find(csa_needle), std::string::npos)                \
        << "  actual: " << csa_haystack << "\n  wanted: " << csa_needle;       \
  } while (false)

namespace csa::test {

namespace fs = std::filesystem;

inline std::string readText(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

inline void writeText(const std::string &path, const std::string &text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
}

/// Bytes that stand in for a generated object (opaque to the library).
inline std::string fakeObject() {
  std::string bytes = "\x7f"
                      "ELF fake kernel object ";
  for (int i = 0; i < 3000; ++i)
    bytes.push_back(char(i * 31 + 7));
  return bytes;
}

inline nlohmann::json tinyConfig() {
  return {{"vocab_size", 1024},
          {"dim", 64},
          {"n_layers", 3},
          {"compress_ratios", {0, 0, 2}},
          {"max_seq_len", 4096}};
}

/// Layers 0, 1 SWA-only; layer 2 Full at ratio 2 with the released rows.
inline artifact::Plan tinyPlan() {
  using namespace artifact;
  Plan plan;
  plan.maxContext = 4096;
  for (int layer = 0; layer < 3; ++layer) {
    CacheBuffer swa;
    swa.id = "L" + std::to_string(layer) + ".swa";
    swa.layer = layer;
    swa.kind = CacheKind::SwaRing;
    swa.window = 128;
    swa.rowBytes = 528;
    swa.fixedBytes = 128 * 528;
    plan.caches.push_back(swa);
  }
  CacheBuffer global;
  global.id = "L2.global";
  global.layer = 2;
  global.kind = CacheKind::GlobalCache;
  global.ratio = 2;
  global.entryBytes = 356;
  global.mainRowBytes = 288;
  global.indexRowBytes = 68;
  plan.caches.push_back(global);
  CacheBuffer state;
  state.id = "L2.compressor";
  state.layer = 2;
  state.kind = CacheKind::CompressorState;
  state.ratio = 2;
  state.fixedBytes = 2 * 2 * 512 * 4;
  plan.caches.push_back(state);
  plan.transients = {{"x", 4096}, {"h", 8192}};

  auto calls = [](const std::string &entry) {
    std::vector<KernelCall> list;
    list.push_back(
        {entry + "_embed",
         "kernels/host.so",
         {KernelArg::input("tokens"), KernelArg::weight("embed.weight"),
          KernelArg::transient("x"), KernelArg::scalar("num_tokens")},
         nlohmann::json::object()});
    list.push_back(
        {entry + "_layer2_attn",
         "kernels/host.so",
         {KernelArg::transient("x"),
          KernelArg::weight("layers.2.attn.wkv.weight"),
          KernelArg::weight("layers.2.attn.wkv.scale"),
          KernelArg::cache("L2.swa"), KernelArg::cache("L2.global"),
          KernelArg::cache("L2.compressor"), KernelArg::scalar("position"),
          KernelArg::constant(2), KernelArg::transient("h")},
         {{"grid", {4, 1, 1}}}});
    list.push_back(
        {entry + "_head",
         "kernels/host.so",
         {KernelArg::transient("h"), KernelArg::weight("head.weight"),
          KernelArg::output("logits")},
         nlohmann::json::object()});
    return list;
  };
  plan.prefill = calls("prefill");
  plan.decode = calls("decode");
  return plan;
}

inline artifact::WeightsManifest tinyWeights() {
  using checkpoint::DType;
  artifact::WeightsManifest weights;
  weights.tensors = {{"embed.weight", DType::BF16, {1024, 64}},
                     {"layers.2.attn.wkv.weight", DType::F8E4M3, {576, 64}},
                     {"layers.2.attn.wkv.scale", DType::F8E8M0, {18, 2}},
                     {"head.weight", DType::BF16, {1024, 64}}};
  weights.ignoredPrefixes = {"mtp."};
  return weights;
}

inline artifact::ArtifactWriter tinyWriter() {
  artifact::ArtifactWriter writer;
  writer.setModel("tiny", tinyConfig());
  writer.setSchedule(
      "WWF", nlohmann::json::array({{{"mode", "swa_only"}, {"ratio", 0}},
                                    {{"mode", "swa_only"}, {"ratio", 0}},
                                    {{"mode", "full"}, {"ratio", 2}}}));
  writer.setTarget(artifact::Target::HostX86_64);
  writer.setCreatedBy("csa-artifact-tests");
  writer.setPlan(tinyPlan());
  writer.setWeights(tinyWeights());
  EXPECT_TRUE(writer.addFile("kernels/host.so", fakeObject()).ok());
  return writer;
}

/// Writes the tiny artifact into `dir` (which may exist and be empty).
inline void writeTinyArtifact(const std::string &dir) {
  auto manifest = tinyWriter().write(dir);
  ASSERT_TRUE(manifest.ok()) << manifest.status();
}

inline nlohmann::json readJson(const std::string &path) {
  return nlohmann::json::parse(readText(path));
}

/// Rewrites the manifest through `edit` (no checksum is updated).
inline void editManifest(const std::string &dir,
                         const std::function<void(nlohmann::json &)> &edit) {
  nlohmann::json manifest = readJson(dir + "/manifest.json");
  edit(manifest);
  writeText(dir + "/manifest.json", manifest.dump(2));
}

/// Replaces listed file `path` by `text` and updates its size and checksum
/// in the manifest, so only the content's own checks can fail.
inline void rewriteListed(const std::string &dir, const std::string &path,
                          const std::string &text) {
  writeText(dir + "/" + path, text);
  editManifest(dir, [&](nlohmann::json &manifest) {
    for (auto &file : manifest["files"])
      if (file["path"] == path) {
        file["bytes"] = text.size();
        file["sha256"] = artifact::sha256Hex(text);
      }
  });
}

/// Edits a listed JSON file, keeping the manifest consistent.
inline void editListedJson(const std::string &dir, const std::string &path,
                           const std::function<void(nlohmann::json &)> &edit) {
  nlohmann::json value = readJson(dir + "/" + path);
  edit(value);
  rewriteListed(dir, path, value.dump(2));
}

} // namespace csa::test

#endif // CSA_TEST_UNIT_ARTIFACT_ARTIFACTTESTSUPPORT_H
