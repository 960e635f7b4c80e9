//===- SafetensorsTest.cpp - Reading and writing safetensors files --------===//
//
// Round trips of every dtype, the layout the writer produces, zero-copy views,
// and one test per kind of corruption with the message it must give.
//
//===----------------------------------------------------------------------===//
#include "CheckpointTestSupport.h"

#include "runtime/checkpoint/DType.h"
#include "runtime/checkpoint/Safetensors.h"
#include "runtime/checkpoint/SafetensorsWriter.h"

#include <nlohmann/json.hpp>

#include <cstring>
#include <fstream>
#include <unistd.h>

namespace csa::test {
namespace {

using namespace csa::checkpoint;
using nlohmann::json;

TEST(DType, NamesAndSizes) {
  struct Case {
    DType dtype;
    const char *name;
    uint64_t size;
  };
  const Case cases[] = {
      {DType::BF16, "BF16", 2},      {DType::F16, "F16", 2},
      {DType::F32, "F32", 4},        {DType::F64, "F64", 8},
      {DType::I8, "I8", 1},          {DType::I16, "I16", 2},
      {DType::I32, "I32", 4},        {DType::I64, "I64", 8},
      {DType::U8, "U8", 1},          {DType::Bool, "BOOL", 1},
      {DType::F8E4M3, "F8_E4M3", 1}, {DType::F8E8M0, "F8_E8M0", 1},
  };
  ASSERT_EQ(std::size(cases), std::size(kAllDTypes));
  for (const Case &c : cases) {
    EXPECT_STREQ(dtypeName(c.dtype), c.name);
    EXPECT_EQ(dtypeSize(c.dtype), c.size) << c.name;
    ASSERT_TRUE(parseDType(c.name).has_value()) << c.name;
    EXPECT_EQ(*parseDType(c.name), c.dtype);
  }
  EXPECT_FALSE(parseDType("bf16").has_value()); // the format is case-sensitive
  EXPECT_FALSE(parseDType("F8_E5M2").has_value());
  EXPECT_FALSE(parseDType("").has_value());
}

/// Distinct bytes for tensor number `t`.
std::vector<uint8_t> pattern(uint64_t bytes, int t) {
  std::vector<uint8_t> data(bytes);
  for (uint64_t i = 0; i < bytes; ++i)
    data[i] = uint8_t(i * 7 + t * 31 + 1);
  return data;
}

TEST(Safetensors, RoundTripOfEveryDType) {
  TempDir dir;
  SafetensorsWriter writer;
  std::vector<std::vector<uint8_t>> written;
  int t = 0;
  for (DType dtype : kAllDTypes) {
    // Odd shapes, so the tensors after a 1-byte one are unaligned.
    std::vector<int64_t> shape = {3, 5};
    written.push_back(pattern(15 * dtypeSize(dtype), t));
    ASSERT_TRUE(writer
                    .add(std::string("t.") + dtypeName(dtype), dtype, shape,
                         written.back())
                    .ok());
    ++t;
  }
  ASSERT_TRUE(writer.add("scalar", DType::F32, {}, pattern(4, 99)).ok());
  ASSERT_TRUE(
      writer.add("empty", DType::BF16, {0, 7}, std::vector<uint8_t>{}).ok());
  writer.setMetadata("format", "pt");
  const std::string path = dir / "all.safetensors";
  ASSERT_TRUE(writer.write(path).ok());

  auto file = SafetensorsFile::open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ((*file)->tensors().size(), std::size(kAllDTypes) + 2);
  EXPECT_EQ((*file)->metadata().at("format"), "pt");
  t = 0;
  for (DType dtype : kAllDTypes) {
    const TensorView *view =
        (*file)->find(std::string("t.") + dtypeName(dtype));
    ASSERT_NE(view, nullptr) << dtypeName(dtype);
    EXPECT_EQ(view->dtype, dtype);
    EXPECT_EQ(view->shape, (std::vector<int64_t>{3, 5}));
    EXPECT_EQ(view->numElements(), 15u);
    ASSERT_EQ(view->bytes, written[t].size());
    EXPECT_EQ(0, std::memcmp(view->data, written[t].data(), view->bytes));
    EXPECT_EQ(view->file, path);
    ++t;
  }
  const TensorView *scalar = (*file)->find("scalar");
  ASSERT_NE(scalar, nullptr);
  EXPECT_TRUE(scalar->shape.empty());
  EXPECT_EQ(scalar->numElements(), 1u);
  const TensorView *empty = (*file)->find("empty");
  ASSERT_NE(empty, nullptr);
  EXPECT_EQ(empty->bytes, 0u);
  EXPECT_EQ((*file)->find("missing"), nullptr);
}

TEST(Safetensors, WriterLayout) {
  TempDir dir;
  SafetensorsWriter writer;
  ASSERT_TRUE(writer.add("a", DType::U8, {3}, {1, 2, 3}).ok());
  ASSERT_TRUE(writer.add("b", DType::BF16, {2}, {4, 5, 6, 7}).ok());
  const std::string path = dir / "layout.safetensors";
  ASSERT_TRUE(writer.write(path).ok());
  std::vector<uint8_t> bytes = readBytes(path);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i)
    n = (n << 8) | bytes[i];
  // Header padded with spaces so that the data starts 8-byte aligned.
  EXPECT_EQ((8 + n) % 8, 0u);
  EXPECT_EQ(n, writer.header().size());
  std::string header(bytes.begin() + 8, bytes.begin() + 8 + long(n));
  json parsed = json::parse(header);
  EXPECT_EQ(parsed["a"]["data_offsets"], json::array({0, 3}));
  EXPECT_EQ(parsed["b"]["data_offsets"], json::array({3, 7}));
  EXPECT_EQ(parsed["b"]["dtype"], "BF16");
  EXPECT_EQ(parsed["b"]["shape"], json::array({2}));
  EXPECT_EQ(bytes.size(), 8 + n + 7);
  EXPECT_EQ(std::vector<uint8_t>(bytes.end() - 7, bytes.end()),
            (std::vector<uint8_t>{1, 2, 3, 4, 5, 6, 7}));
  // Nothing is left behind under the temporary name.
  EXPECT_FALSE(fs::exists(path + ".partial"));
}

TEST(Safetensors, ViewsPointIntoTheImage) {
  const std::string header =
      R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
      R"("y":{"dtype":"U8","shape":[3],"data_offsets":[8,11]}})";
  std::vector<uint8_t> image = makeImage(header, 11);
  auto file = SafetensorsFile::parse(image.data(), image.size(), "mem");
  ASSERT_TRUE(file.ok()) << file.status();
  const uint8_t *data = image.data() + 8 + header.size();
  EXPECT_EQ((*file)->find("x")->data, data);
  EXPECT_EQ((*file)->find("y")->data, data + 8);
  EXPECT_EQ((*file)->find("y")->data[2], 10); // byte 10 of the data section
  EXPECT_EQ((*file)->headerBytes(), header.size());
}

TEST(Safetensors, MappedViewsReadTheFile) {
  TempDir dir;
  SafetensorsWriter writer;
  std::vector<uint8_t> big = pattern(1 << 20, 3);
  ASSERT_TRUE(writer.add("small", DType::I8, {5}, pattern(5, 1)).ok());
  ASSERT_TRUE(writer.add("big", DType::F32, {1 << 18}, big).ok());
  const std::string path = dir / "mapped.safetensors";
  ASSERT_TRUE(writer.write(path).ok());
  auto file = SafetensorsFile::open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  std::vector<uint8_t> bytes = readBytes(path);
  const TensorView *view = (*file)->find("big");
  const uint64_t offset = 8 + (*file)->headerBytes() + 5;
  EXPECT_EQ(0, std::memcmp(view->data, bytes.data() + offset, big.size()));
  EXPECT_EQ(0, std::memcmp(view->data, big.data(), big.size()));
  // Consecutive tensors are contiguous in the mapping.
  EXPECT_EQ((*file)->find("small")->data + 5, view->data);
  EXPECT_EQ((*file)->fileBytes(), bytes.size());
}

TEST(Safetensors, FillerStreamsInChunks) {
  TempDir dir;
  SafetensorsWriter writer;
  // Larger than one chunk: the filler sees chunk offsets, in order.
  const uint64_t bytes = kWriteChunkBytes + 12345;
  std::vector<std::pair<uint64_t, uint64_t>> calls;
  ASSERT_TRUE(writer
                  .add("streamed", DType::U8, {int64_t(bytes)},
                       [&](uint64_t offset, uint64_t size, uint8_t *dst) {
                         calls.push_back({offset, size});
                         for (uint64_t i = 0; i < size; ++i)
                           dst[i] = uint8_t((offset + i) % 251);
                       })
                  .ok());
  ASSERT_TRUE(writer.write(dir / "s.safetensors").ok());
  ASSERT_EQ(calls.size(), 2u);
  EXPECT_EQ(calls[0], std::make_pair(uint64_t(0), kWriteChunkBytes));
  EXPECT_EQ(calls[1], std::make_pair(kWriteChunkBytes, uint64_t(12345)));
  auto file = SafetensorsFile::open(dir / "s.safetensors");
  ASSERT_TRUE(file.ok()) << file.status();
  const TensorView *view = (*file)->find("streamed");
  for (uint64_t i :
       {uint64_t(0), kWriteChunkBytes - 1, kWriteChunkBytes, bytes - 1})
    EXPECT_EQ(view->data[i], uint8_t(i % 251)) << i;
}

TEST(Safetensors, WriterRejectsBadTensors) {
  SafetensorsWriter writer;
  EXPECT_TRUE(failsWith(writer.add("x", DType::F32, {2}, {1, 2, 3}),
                        {"tensor 'x'", "needs 8 bytes, got 3"}));
  EXPECT_TRUE(
      failsWith(writer.add("x", DType::F32, {-1}, std::vector<uint8_t>{}),
                {"negative dimension"}));
  EXPECT_TRUE(failsWith(
      writer.add("__metadata__", DType::U8, {0}, std::vector<uint8_t>{}),
      {"cannot be a tensor name"}));
  ASSERT_TRUE(writer.add("x", DType::U8, {1}, {1}).ok());
  EXPECT_TRUE(failsWith(writer.add("x", DType::U8, {1}, {1}),
                        {"tensor 'x' added twice"}));
  EXPECT_TRUE(failsWith(writer.write("/nonexistent-dir/x.safetensors"),
                        {"/nonexistent-dir/x.safetensors", "cannot create"}));
}

//===----------------------------------------------------------------------===//
// Corruption: one test per kind, each checking the message
//===----------------------------------------------------------------------===//

/// A valid two-tensor file on disk, and helpers to damage copies of it.
class Corruption : public ::testing::Test {
protected:
  void SetUp() override {
    SafetensorsWriter writer;
    ASSERT_TRUE(writer.add("first", DType::BF16, {4, 4}, pattern(32, 1)).ok());
    ASSERT_TRUE(writer.add("second", DType::F32, {8}, pattern(32, 2)).ok());
    good = dir / "good.safetensors";
    ASSERT_TRUE(writer.write(good).ok());
    bytes = readBytes(good);
    headerBytes = writer.header().size();
  }

  absl::Status openImage(const std::vector<uint8_t> &image) {
    const std::string path = dir / "bad.safetensors";
    writeBytes(path, image);
    return SafetensorsFile::open(path).status();
  }
  absl::Status openHeader(const std::string &header, uint64_t dataBytes) {
    return openImage(makeImage(header, dataBytes));
  }

  TempDir dir;
  std::string good;
  std::vector<uint8_t> bytes;
  uint64_t headerBytes = 0;
};

TEST_F(Corruption, GoodFileOpens) {
  EXPECT_TRUE(SafetensorsFile::open(good).ok());
}

TEST_F(Corruption, MissingFile) {
  EXPECT_TRUE(
      failsWith(SafetensorsFile::open(dir / "nope.safetensors").status(),
                {"nope.safetensors: cannot open"}));
  EXPECT_TRUE(failsWith(SafetensorsFile::open(dir.path()).status(),
                        {"not a regular file"}));
}

TEST_F(Corruption, TruncatedInTheLengthField) {
  for (size_t keep : {0, 1, 4, 7}) {
    std::vector<uint8_t> cut(bytes.begin(), bytes.begin() + long(keep));
    EXPECT_TRUE(failsWith(openImage(cut),
                          {"bad.safetensors", std::to_string(keep) + " bytes",
                           "shorter than the 8-byte header length field"}))
        << keep;
  }
}

TEST_F(Corruption, TruncatedInTheHeader) {
  for (size_t keep : {size_t(8), size_t(9), size_t(8 + headerBytes / 2),
                      size_t(8 + headerBytes - 1)}) {
    std::vector<uint8_t> cut(bytes.begin(), bytes.begin() + long(keep));
    EXPECT_TRUE(failsWith(openImage(cut), {"bad.safetensors", "header length",
                                           "extends past the end of the file"}))
        << keep;
  }
}

TEST_F(Corruption, TruncatedInTheData) {
  // At the start of the data, inside the first tensor, inside the second
  // and one byte short: the message names the first tensor that was cut.
  const size_t data = 8 + headerBytes;
  struct Cut {
    size_t keep;
    const char *tensor;
  };
  for (const Cut &cut :
       {Cut{data, "first"}, Cut{data + 17, "first"}, Cut{data + 40, "second"},
        Cut{bytes.size() - 1, "second"}}) {
    std::vector<uint8_t> image(bytes.begin(), bytes.begin() + long(cut.keep));
    EXPECT_TRUE(failsWith(
        openImage(image),
        {"bad.safetensors", std::string("tensor '") + cut.tensor + "'",
         "extend past the end of the data section", "truncated"}))
        << cut.keep;
  }
}

TEST_F(Corruption, HeaderLengthCorrupt) {
  std::vector<uint8_t> image = bytes;
  image[5] = 0x01; // 2^40 + ...: absurd
  EXPECT_TRUE(
      failsWith(openImage(image), {"bad.safetensors", "exceeds the limit",
                                   "corrupt length field"}));
  image = bytes;
  uint64_t tooLong = bytes.size(); // plausible, but beyond the file
  for (int i = 0; i < 8; ++i)
    image[i] = uint8_t(tooLong >> (8 * i));
  EXPECT_TRUE(
      failsWith(openImage(image), {"extends past the end of the file"}));
  image = bytes;
  const uint64_t shorter = headerBytes - 10; // cuts the JSON short
  for (int i = 0; i < 8; ++i)
    image[i] = uint8_t(shorter >> (8 * i));
  EXPECT_TRUE(failsWith(openImage(image), {"header is not valid JSON"}));
}

TEST_F(Corruption, HeaderNotJson) {
  EXPECT_TRUE(
      failsWith(openHeader("{\"a\": not json}   ", 0),
                {"bad.safetensors: header is not valid JSON", "parse error"}));
  EXPECT_TRUE(failsWith(openHeader("[1, 2]  ", 0),
                        {"header is not a JSON object (got array)"}));
}

TEST_F(Corruption, UnknownDType) {
  EXPECT_TRUE(failsWith(
      openHeader(R"({"w":{"dtype":"F4","shape":[2],"data_offsets":[0,1]}})", 1),
      {"bad.safetensors: tensor 'w': unknown dtype 'F4'"}));
  EXPECT_TRUE(
      failsWith(openHeader(R"({"w":{"shape":[2],"data_offsets":[0,1]}})", 1),
                {"tensor 'w': 'dtype' must be a string"}));
}

TEST_F(Corruption, BadShape) {
  EXPECT_TRUE(failsWith(
      openHeader(R"({"w":{"dtype":"U8","shape":[-2],"data_offsets":[0,2]}})",
                 2),
      {"tensor 'w': 'shape' must be a list of non-negative integers"}));
  EXPECT_TRUE(failsWith(
      openHeader(R"({"w":{"dtype":"U8","shape":"2","data_offsets":[0,2]}})", 2),
      {"tensor 'w': 'shape' must be a list"}));
  EXPECT_TRUE(failsWith(
      openHeader(R"({"w":{"dtype":"F64","shape":[4294967296,4294967296],)"
                 R"("data_offsets":[0,2]}})",
                 2),
      {"tensor 'w': shape [4294967296, 4294967296] is too large"}));
}

TEST_F(Corruption, BadOffsets) {
  EXPECT_TRUE(failsWith(
      openHeader(R"({"w":{"dtype":"U8","shape":[2],"data_offsets":[2,0]}})", 2),
      {"tensor 'w': 'data_offsets' must be [begin, end]"}));
  EXPECT_TRUE(failsWith(
      openHeader(R"({"w":{"dtype":"U8","shape":[2],"data_offsets":[0]}})", 2),
      {"tensor 'w': 'data_offsets' must be [begin, end]"}));
}

TEST_F(Corruption, OffsetsDoNotMatchShape) {
  EXPECT_TRUE(failsWith(
      openHeader(
          R"({"w":{"dtype":"BF16","shape":[3,4],"data_offsets":[0,20]}})", 20),
      {"bad.safetensors: tensor 'w': shape [3, 4] of BF16 needs 24 bytes but "
       "data_offsets [0, 20] hold 20"}));
}

TEST_F(Corruption, OverlappingOffsets) {
  EXPECT_TRUE(failsWith(
      openHeader(R"({"a":{"dtype":"U8","shape":[8],"data_offsets":[0,8]},)"
                 R"("b":{"dtype":"U8","shape":[8],"data_offsets":[4,12]}})",
                 12),
      {"bad.safetensors: tensor 'b': data_offsets [4, 12] overlap tensor 'a' "
       "[0, 8]"}));
}

TEST_F(Corruption, GapAndTrailingBytes) {
  EXPECT_TRUE(failsWith(
      openHeader(R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},)"
                 R"("b":{"dtype":"U8","shape":[4],"data_offsets":[6,10]}})",
                 10),
      {"bytes [4, 6) of the data section belong to no tensor",
       "before tensor 'b'"}));
  EXPECT_TRUE(failsWith(
      openHeader(R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]}})", 9),
      {"5 bytes after the last tensor belong to no tensor"}));
}

TEST_F(Corruption, BadMetadata) {
  EXPECT_TRUE(failsWith(openHeader(R"({"__metadata__":{"format":1}})", 0),
                        {"'__metadata__' entry 'format' must be a string"}));
  EXPECT_TRUE(failsWith(openHeader(R"({"__metadata__":[1]})", 0),
                        {"'__metadata__' must be an object of strings"}));
  EXPECT_TRUE(failsWith(openHeader(R"({"w":[1]})", 0),
                        {"tensor 'w': entry must be an object"}));
}

TEST_F(Corruption, EmptyFileWithNoTensorsIsValid) {
  std::vector<uint8_t> image = makeImage("{}      ", 0);
  auto file = SafetensorsFile::parse(image.data(), image.size(), "m");
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_TRUE((*file)->tensors().empty());
}

// A mapped file truncated under the process: the read that faults ends it
// with an error naming the file (exit 1), not a SIGBUS death.
TEST(MappedFileDeathTest, TruncationWhileMappedIsAClearError) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  TempDir dir;
  const std::string path = dir / "weights.bin";
  {
    std::ofstream out(path, std::ios::binary);
    std::string bytes(3 * 4096, 'x');
    out << bytes;
  }
  EXPECT_EXIT(
      {
        auto file = MappedFile::open(path);
        if (!file.ok())
          std::_Exit(3);
        if (::truncate(path.c_str(), 0) != 0)
          std::_Exit(4);
        volatile uint8_t byte = (*file)->data()[2 * 4096];
        (void)byte;
        std::_Exit(5); // the read did not fault
      },
      ::testing::ExitedWithCode(1), "weights.bin: the file was truncated or changed while it was mapped");
  // Mappings that are gone leave the handler with nothing to name.
  auto file = MappedFile::open(path);
  ASSERT_TRUE(file.ok());
}

} // namespace
} // namespace csa::test
