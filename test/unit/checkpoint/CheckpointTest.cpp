//===- CheckpointTest.cpp - Sharded checkpoints ---------------------------===//
//
// The sharded writer and reader: round trips through one file and through
// several shards with an index, lazy shard mapping, and the errors of a
// damaged index or shard set, each naming the tensor and the file.
//
//===----------------------------------------------------------------------===//
#include "CheckpointTestSupport.h"

#include "runtime/checkpoint/Checkpoint.h"
#include "runtime/checkpoint/SafetensorsWriter.h"

#include <nlohmann/json.hpp>

#include <cstring>
#include <map>

namespace csa::test {
namespace {

using namespace csa::checkpoint;
using nlohmann::json;

/// Ten tensors of 100 bytes each ("t0".."t9"), contents derived from the
/// name, plus the bytes each holds.
std::map<std::string, std::vector<uint8_t>> addTensors(CheckpointWriter &writer,
                                                       int count = 10) {
  std::map<std::string, std::vector<uint8_t>> written;
  for (int t = 0; t < count; ++t) {
    std::vector<uint8_t> data(100);
    for (size_t i = 0; i < data.size(); ++i)
      data[i] = uint8_t(i + 13 * t);
    std::string name = "t" + std::to_string(t);
    EXPECT_TRUE(writer.add(name, DType::BF16, {10, 5}, data).ok());
    written[name] = data;
  }
  return written;
}

void expectContents(
    const Checkpoint &checkpoint,
    const std::map<std::string, std::vector<uint8_t>> &written) {
  std::vector<std::string> names;
  for (const auto &[name, data] : written)
    names.push_back(name);
  EXPECT_EQ(checkpoint.names(), names);
  for (const auto &[name, data] : written) {
    auto view = checkpoint.tensor(name);
    ASSERT_TRUE(view.ok()) << view.status();
    EXPECT_EQ(view->name, name);
    EXPECT_EQ(view->dtype, DType::BF16);
    EXPECT_EQ(view->shape, (std::vector<int64_t>{10, 5}));
    ASSERT_EQ(view->bytes, data.size());
    EXPECT_EQ(0, std::memcmp(view->data, data.data(), data.size())) << name;
  }
}

TEST(Checkpoint, SingleFileRoundTrip) {
  TempDir dir;
  CheckpointWriter writer;
  auto written = addTensors(writer);
  auto files = writer.write(dir.path());
  ASSERT_TRUE(files.ok()) << files.status();
  ASSERT_EQ(files->size(), 1u);
  EXPECT_EQ(fs::path(files->front()).filename(), "model.safetensors");
  EXPECT_FALSE(fs::exists(dir / "model.safetensors.index.json"));

  // As a directory and as the file itself.
  for (const std::string &path : {dir.path(), dir / "model.safetensors"}) {
    auto checkpoint = Checkpoint::open(path);
    ASSERT_TRUE(checkpoint.ok()) << checkpoint.status();
    EXPECT_FALSE(checkpoint->isSharded());
    EXPECT_EQ(checkpoint->path(), path);
    expectContents(*checkpoint, written);
    EXPECT_TRUE(checkpoint->validate().ok());
    EXPECT_EQ(checkpoint->files().size(), 1u);
  }
}

TEST(Checkpoint, ShardedRoundTrip) {
  TempDir dir;
  CheckpointWriterOptions options;
  options.shardBytes = 350; // three tensors per shard: 4 shards
  CheckpointWriter writer(options);
  writer.setMetadata("format", "pt");
  auto written = addTensors(writer);
  auto files = writer.write(dir.path());
  ASSERT_TRUE(files.ok()) << files.status();
  ASSERT_EQ(files->size(), 5u); // 4 shards + index
  for (int s = 0; s < 4; ++s)
    EXPECT_TRUE(fs::exists(dir / shardFileName(s, 4)));
  EXPECT_EQ(shardFileName(0, 48), "model-00001-of-00048.safetensors");

  json index = json::parse(readBytes(dir / "model.safetensors.index.json"));
  EXPECT_EQ(index["metadata"]["total_size"], 1000);
  EXPECT_EQ(index["weight_map"]["t0"], "model-00001-of-00004.safetensors");
  EXPECT_EQ(index["weight_map"]["t3"], "model-00002-of-00004.safetensors");
  EXPECT_EQ(index["weight_map"]["t9"], "model-00004-of-00004.safetensors");

  auto checkpoint = Checkpoint::open(dir.path());
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status();
  EXPECT_TRUE(checkpoint->isSharded());
  expectContents(*checkpoint, written);
  EXPECT_TRUE(checkpoint->validate().ok());
  EXPECT_EQ(checkpoint->files().size(), 4u);
  auto file = checkpoint->fileOf("t4");
  ASSERT_TRUE(file.ok());
  EXPECT_EQ(fs::path(*file).filename(), "model-00002-of-00004.safetensors");
}

TEST(Checkpoint, TensorLargerThanTheBudgetGetsItsOwnShard) {
  TempDir dir;
  CheckpointWriterOptions options;
  options.shardBytes = 50;
  CheckpointWriter writer(options);
  addTensors(writer, 3);
  auto files = writer.write(dir.path());
  ASSERT_TRUE(files.ok()) << files.status();
  EXPECT_EQ(files->size(), 4u);
}

TEST(Checkpoint, AlwaysIndex) {
  TempDir dir;
  CheckpointWriterOptions options;
  options.alwaysIndex = true;
  CheckpointWriter writer(options);
  auto written = addTensors(writer, 2);
  ASSERT_TRUE(writer.write(dir.path()).ok());
  EXPECT_TRUE(fs::exists(dir / "model-00001-of-00001.safetensors"));
  auto checkpoint = Checkpoint::open(dir.path());
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status();
  EXPECT_TRUE(checkpoint->isSharded());
  expectContents(*checkpoint, written);
}

TEST(Checkpoint, WriterKeepsAnExistingCheckpointUnlessAskedToOverwrite) {
  TempDir dir;
  CheckpointWriterOptions options;
  options.shardBytes = 350;
  {
    CheckpointWriter writer(options);
    addTensors(writer);
    ASSERT_TRUE(writer.write(dir.path()).ok());
  }
  CheckpointWriter again;
  auto written = addTensors(again, 2);
  EXPECT_TRUE(
      failsWith(again.write(dir.path()), {"already holds a checkpoint"}));
  CheckpointWriterOptions overwrite;
  overwrite.overwrite = true;
  CheckpointWriter replacing(overwrite);
  written = addTensors(replacing, 2);
  ASSERT_TRUE(replacing.write(dir.path()).ok());
  // The old shards and index are gone, so the single file is what opens.
  EXPECT_FALSE(fs::exists(dir / "model.safetensors.index.json"));
  EXPECT_FALSE(fs::exists(dir / shardFileName(0, 4)));
  auto checkpoint = Checkpoint::open(dir.path());
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status();
  expectContents(*checkpoint, written);
}

/// A 4-shard checkpoint for the error tests.
class ShardedErrors : public ::testing::Test {
protected:
  void SetUp() override {
    CheckpointWriterOptions options;
    options.shardBytes = 350;
    CheckpointWriter writer(options);
    addTensors(writer);
    ASSERT_TRUE(writer.write(dir.path()).ok());
    index = json::parse(readBytes(dir / "model.safetensors.index.json"));
  }
  void writeIndex(const json &j) {
    writeText(dir / "model.safetensors.index.json", j.dump());
  }
  TempDir dir;
  json index;
};

TEST_F(ShardedErrors, TensorNotFound) {
  auto checkpoint = Checkpoint::open(dir.path());
  ASSERT_TRUE(checkpoint.ok());
  EXPECT_TRUE(failsWith(checkpoint->tensor("nope"),
                        {"tensor 'nope' not found in " + dir.path()}));
  EXPECT_FALSE(checkpoint->contains("nope"));
  EXPECT_TRUE(checkpoint->contains("t1"));
}

TEST_F(ShardedErrors, MissingShard) {
  fs::remove(dir / shardFileName(1, 4));
  auto checkpoint =
      Checkpoint::open(dir.path()); // opening reads the index only
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status();
  EXPECT_TRUE(checkpoint->tensor("t0").ok());
  EXPECT_TRUE(failsWith(
      checkpoint->tensor("t4"),
      {"tensor 't4': shard 'model-00002-of-00004.safetensors' listed in",
       "model.safetensors.index.json is missing"}));
  EXPECT_TRUE(
      failsWith(checkpoint->validate(),
                {"shard 'model-00002-of-00004.safetensors'", "is missing"}));
}

TEST_F(ShardedErrors, TensorMissingFromItsShard) {
  index["weight_map"]["ghost"] = "model-00003-of-00004.safetensors";
  writeIndex(index);
  auto checkpoint = Checkpoint::open(dir.path());
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status();
  EXPECT_TRUE(failsWith(
      checkpoint->tensor("ghost"),
      {"model-00003-of-00004.safetensors: tensor 'ghost' is listed in "
       "model.safetensors.index.json but not in this shard"}));
  EXPECT_TRUE(failsWith(checkpoint->validate(), {"tensor 'ghost'"}));
}

TEST_F(ShardedErrors, TensorInAShardButNotInTheIndex) {
  index["weight_map"].erase("t5");
  writeIndex(index);
  auto checkpoint = Checkpoint::open(dir.path());
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status();
  EXPECT_TRUE(failsWith(checkpoint->validate(),
                        {"model-00002-of-00004.safetensors: tensor 't5' is "
                         "not listed in"}));
  index["weight_map"]["t5"] = "model-00001-of-00004.safetensors";
  writeIndex(index);
  checkpoint = Checkpoint::open(dir.path());
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status();
  EXPECT_TRUE(failsWith(checkpoint->tensor("t5"), {"not in this shard"}));
}

TEST_F(ShardedErrors, CorruptShardNamesTheTensorAndFile) {
  std::string shard = dir / shardFileName(2, 4);
  std::vector<uint8_t> bytes = readBytes(shard);
  bytes.resize(bytes.size() - 3);
  writeBytes(shard, bytes);
  auto checkpoint = Checkpoint::open(dir.path());
  ASSERT_TRUE(checkpoint.ok());
  EXPECT_TRUE(failsWith(checkpoint->tensor("t6"),
                        {"tensor 't6': ", shard, "tensor 't8'",
                         "extend past the end of the data section"}));
}

TEST_F(ShardedErrors, BadIndex) {
  const std::string indexPath = dir / "model.safetensors.index.json";
  writeText(indexPath, "{\"weight_map\": ");
  EXPECT_TRUE(
      failsWith(Checkpoint::open(dir.path()), {indexPath, "not valid JSON"}));
  writeText(indexPath, "[]");
  EXPECT_TRUE(failsWith(Checkpoint::open(dir.path()),
                        {"an index is a JSON object, got array"}));
  writeText(indexPath, R"({"metadata": {}})");
  EXPECT_TRUE(failsWith(Checkpoint::open(dir.path()),
                        {"'weight_map' must be an object"}));
  writeText(indexPath, R"({"weight_map": {"a": 3}})");
  EXPECT_TRUE(failsWith(Checkpoint::open(dir.path()),
                        {"tensor 'a': shard must be a file name, got number"}));
  writeText(indexPath, R"({"weight_map": {"a": "../x.safetensors"}})");
  EXPECT_TRUE(failsWith(Checkpoint::open(dir.path()),
                        {"tensor 'a': shard '../x.safetensors' is not a file "
                         "name inside the checkpoint directory"}));
}

TEST(Checkpoint, NotACheckpoint) {
  TempDir dir;
  EXPECT_TRUE(failsWith(Checkpoint::open(dir.path()),
                        {dir.path(), "not a checkpoint directory",
                         "model.safetensors.index.json", "model.safetensors"}));
  EXPECT_TRUE(failsWith(Checkpoint::open(dir / "missing"),
                        {"missing: no such checkpoint file or directory"}));
  writeText(dir / "model.safetensors", "garbage!garbage!");
  EXPECT_TRUE(failsWith(Checkpoint::open(dir.path()),
                        {"model.safetensors: header length"}));
}

} // namespace
} // namespace csa::test
