//===- Npy.h - NumPy .npy files of float32 ----------------------*- C++ -*-===//
//
// The .npy flavours csa writes and reads: little-endian float32 ('<f4'),
// C order (and, for the decision files, whole '<i4' and '|u1' arrays). `csa-run --logits-out` writes it (NpyF32Writer), `csa-diff` reads
// it (NpyF32Reader). The format (numpy.lib.format, versions 1.0, 2.0, 3.0):
//
//   "\x93NUMPY" major minor      6 + 2 bytes
//   header length                uint16 LE (1.0) or uint32 LE (2.0, 3.0)
//   header                       a Python dict literal,
//                                {'descr': '<f4', 'fortran_order': False, 'shape': (3, 512), }
//                                padded with spaces and ended by '\n'
//   data                         prod(shape) float32, C order
//
// The reader is strict: the magic, a known version, exactly the three keys,
// descr '<f4', fortran_order False, a shape of non-negative integers, and a
// file exactly as long as header and data. Any other file is an error that
// names what is wrong, never a crash. The writer writes version 1.0 with the
// header padded so that the data starts at a multiple of 64 bytes, as numpy
// does.
//
// Plain C++17 with Abseil, no LLVM.
//
//===----------------------------------------------------------------------===//
#ifndef CSA_RUNTIME_SUPPORT_NPY_H
#define CSA_RUNTIME_SUPPORT_NPY_H

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

namespace csa::npy {

/// The version 1.0 header (magic to '\n') of a C-order '<f4' array of
/// `shape`; its size is a multiple of 64.
std::string f32Header(const std::vector<int64_t> &shape);

/// The same header for dtype `descr` ("<f4", "<i4", "|u1", ...): the
/// executor's decision files (runtime/executor/Decisions.h).
std::string header(const std::string &descr, const std::vector<int64_t> &shape);

/// A validated header: the array's shape and where its data starts.
struct F32Header {
  int major = 1, minor = 0;
  std::vector<int64_t> shape;
  uint64_t dataOffset = 0; ///< bytes before the first element
  uint64_t elements = 0;   ///< prod(shape)
};

/// Validates the first bytes of a file of `fileSize` bytes (`prefix` holds
/// at least min(fileSize, the whole header) of them). The error message says
/// what is wrong, without the file's name.
absl::StatusOr<F32Header> parseF32Header(const std::string &prefix,
                                         uint64_t fileSize);

/// The same for dtype `descr` ('<f4', '<i4' or '|u1'): F32Header's fields
/// hold for any of them.
absl::StatusOr<F32Header> parseHeader(const std::string &prefix, uint64_t fileSize,
                                      const std::string &descr);

/// A whole '<i4' or '|u1' .npy array (the executor's decision files:
/// top-k sets, HSI pools, MoE expert ids), widened to int32.
struct NpyInts {
  std::vector<int64_t> shape;
  std::vector<int32_t> values;
};

/// Reads `path`, which must be a valid '<i4' or '|u1' .npy; errors name the
/// file.
absl::StatusOr<NpyInts> readInts(const std::string &path);

/// Reads a '<f4' .npy file row by row (a row: the last dimension).
class NpyF32Reader {
public:
  /// Opens and validates `path`; errors name the file.
  static absl::StatusOr<NpyF32Reader> open(const std::string &path);

  const F32Header &header() const { return header_; }
  const std::string &path() const { return path_; }
  /// The number of rows (prod of all but the last dimension) and a row's
  /// length (the last dimension; 1 for a scalar).
  uint64_t rows() const;
  uint64_t rowLength() const;
  /// Row `index` into `out` (resized to rowLength()).
  absl::Status readRow(uint64_t index, std::vector<float> &out);

private:
  std::string path_;
  F32Header header_;
  std::ifstream in_;
};

/// Writes a '<f4' .npy file of a shape known up front, rows in any order,
/// to a temporary name beside `path` (PATH.tmp.PID); commit() renames it to
/// `path`. Destroyed without commit() (an error, an early return), it
/// removes the temporary file, so a failed run leaves no partial file.
class NpyF32Writer {
public:
  NpyF32Writer() = default;
  NpyF32Writer(const NpyF32Writer &) = delete;
  NpyF32Writer &operator=(const NpyF32Writer &) = delete;
  ~NpyF32Writer();

  /// Creates the temporary file and writes the header; the data reads as
  /// zeros until written.
  absl::Status create(const std::string &path, const std::vector<int64_t> &shape);
  /// Writes row `index` (of the rows of the last dimension); `row` must hold
  /// exactly the last dimension's floats.
  absl::Status writeRow(uint64_t index, const std::vector<float> &row);
  /// Flushes, closes and renames the temporary file to the path.
  absl::Status commit();

  bool active() const { return !temporary_.empty(); }
  const std::string &path() const { return path_; }

private:
  std::string path_, temporary_;
  std::vector<int64_t> shape_;
  uint64_t dataOffset_ = 0, rowLength_ = 0, rows_ = 0;
  std::ofstream out_;
};

} // namespace csa::npy

#endif // CSA_RUNTIME_SUPPORT_NPY_H
