//===- Npy.cpp - NumPy .npy files of float32 -------------------------------===//
//
// See Npy.h.
//
//===----------------------------------------------------------------------===//
#include "runtime/support/Npy.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <limits>
#include <unistd.h>

namespace csa::npy {
namespace {

namespace fs = std::filesystem;

constexpr char kMagic[] = "\x93NUMPY";
constexpr size_t kMagicSize = 6;
/// The largest header read (numpy's own reader refuses more than 10000
/// bytes by default).
constexpr uint64_t kMaxHeader = 1 << 20;

std::string shapeText(const std::vector<int64_t> &shape) {
  if (shape.size() == 1)
    return absl::StrCat("(", shape[0], ",)");
  return absl::StrCat("(", absl::StrJoin(shape, ", "), ")");
}

/// `text` with anything but printable ASCII as \xNN, at most 120 bytes.
std::string printable(const std::string &text) {
  std::string out;
  for (size_t i = 0; i < text.size() && i < 120; ++i) {
    unsigned char c = static_cast<unsigned char>(text[i]);
    if (c >= 0x20 && c < 0x7f && c != '\\') {
      out += char(c);
    } else {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    }
  }
  if (text.size() > 120)
    out += "...";
  return out;
}

/// The header dict: {'descr': '<f4', 'fortran_order': False, 'shape': (...), }
/// in any key order, each key once, nothing else.
class DictParser {
public:
  explicit DictParser(const std::string &text) : text_(text) {}

  absl::Status parse(std::string &descr, bool &fortran, std::vector<int64_t> &shape) {
    bool haveDescr = false, haveFortran = false, haveShape = false;
    skip();
    if (!eat('{'))
      return expected("'{'");
    skip();
    while (!peek('}')) {
      std::string key;
      if (absl::Status st = string(key); !st.ok())
        return st;
      skip();
      if (!eat(':'))
        return expected("':'");
      skip();
      if (key == "descr") {
        if (haveDescr)
          return duplicate(key);
        haveDescr = true;
        if (absl::Status st = string(descr); !st.ok())
          return st;
      } else if (key == "fortran_order") {
        if (haveFortran)
          return duplicate(key);
        haveFortran = true;
        if (word("True"))
          fortran = true;
        else if (word("False"))
          fortran = false;
        else
          return expected("True or False for 'fortran_order'");
      } else if (key == "shape") {
        if (haveShape)
          return duplicate(key);
        haveShape = true;
        if (absl::Status st = tuple(shape); !st.ok())
          return st;
      } else {
        return malformed(absl::StrCat("unknown key '", printable(key),
                                      "' (a .npy header has 'descr', "
                                      "'fortran_order' and 'shape')"));
      }
      skip();
      if (eat(',')) {
        skip();
        continue;
      }
      if (!peek('}'))
        return expected("',' or '}'");
    }
    ++pos_; // '}'
    skip();
    if (pos_ != text_.size())
      return expected("the end of the header after '}'");
    for (auto [have, name] : {std::pair{haveDescr, "descr"},
                              std::pair{haveFortran, "fortran_order"},
                              std::pair{haveShape, "shape"}})
      if (!have)
        return malformed(absl::StrCat("no '", name, "' key"));
    return absl::OkStatus();
  }

private:
  void skip() {
    while (pos_ < text_.size() &&
           (text_[pos_] == ' ' || text_[pos_] == '\t' || text_[pos_] == '\n' ||
            text_[pos_] == '\r'))
      ++pos_;
  }
  bool peek(char c) const { return pos_ < text_.size() && text_[pos_] == c; }
  bool eat(char c) {
    if (!peek(c))
      return false;
    ++pos_;
    return true;
  }
  bool word(const char *w) {
    size_t n = std::strlen(w);
    if (text_.compare(pos_, n, w) != 0)
      return false;
    pos_ += n;
    return true;
  }
  absl::Status string(std::string &out) {
    if (!peek('\'') && !peek('"'))
      return expected("a quoted string");
    char quote = text_[pos_++];
    size_t end = text_.find(quote, pos_);
    if (end == std::string::npos)
      return malformed("a string is not closed");
    out = text_.substr(pos_, end - pos_);
    if (out.find('\\') != std::string::npos)
      return malformed("an escape in a string");
    pos_ = end + 1;
    return absl::OkStatus();
  }
  absl::Status tuple(std::vector<int64_t> &shape) {
    if (!eat('('))
      return expected("a tuple '(' for 'shape'");
    skip();
    bool comma = false;
    while (!peek(')')) {
      size_t start = pos_;
      int64_t value = 0;
      while (pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9') {
        if (value > (int64_t(1) << 56))
          return malformed("a dimension of 'shape' is too large");
        value = value * 10 + (text_[pos_] - '0');
        ++pos_;
      }
      if (pos_ == start)
        return expected("a non-negative integer in 'shape'");
      if (text_[start] == '0' && pos_ - start > 1)
        return malformed("a dimension of 'shape' has a leading zero");
      shape.push_back(value);
      skip();
      comma = eat(',');
      skip();
      if (!comma && !peek(')'))
        return expected("',' or ')' in 'shape'");
    }
    ++pos_; // ')'
    if (shape.size() == 1 && !comma)
      return malformed("'shape' is not a tuple: a 1-element tuple is written (N,)");
    return absl::OkStatus();
  }
  absl::Status expected(const std::string &what) const {
    return malformed(absl::StrCat("expected ", what, " at offset ", pos_));
  }
  absl::Status duplicate(const std::string &key) const {
    return malformed(absl::StrCat("the key '", key, "' appears twice"));
  }
  absl::Status malformed(const std::string &why) const {
    return absl::InvalidArgumentError(absl::StrCat(
        "malformed .npy header: ", why, ": \"", printable(text_), "\""));
  }

  const std::string &text_;
  size_t pos_ = 0;
};

uint32_t floatBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

float bitsFloat(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

} // namespace

std::string f32Header(const std::vector<int64_t> &shape) { return header("<f4", shape); }

std::string header(const std::string &descr, const std::vector<int64_t> &shape) {
  std::string dict = absl::StrCat("{'descr': '", descr, "', 'fortran_order': False, 'shape': ",
                                  shapeText(shape), ", }");
  size_t total = kMagicSize + 4 + dict.size() + 1;
  size_t padded = (total + 63) / 64 * 64;
  dict.append(padded - total, ' ');
  dict += '\n';
  std::string out(kMagic, kMagicSize);
  out += char(1);
  out += char(0);
  out += char(dict.size() & 0xff);
  out += char((dict.size() >> 8) & 0xff);
  return out + dict;
}

namespace {

/// Bytes an element of the dtypes csa reads, and their names for messages.
uint64_t elementBytes(const std::string &descr) { return descr == "|u1" ? 1 : 4; }
const char *descrName(const std::string &descr) {
  return descr == "<i4" ? "little-endian int32" : descr == "|u1" ? "uint8" : "little-endian float32";
}

} // namespace

absl::StatusOr<F32Header> parseF32Header(const std::string &prefix,
                                         uint64_t fileSize) {
  return parseHeader(prefix, fileSize, "<f4");
}

absl::StatusOr<F32Header> parseHeader(const std::string &prefix, uint64_t fileSize,
                                      const std::string &expectedDescr) {
  const uint64_t width = elementBytes(expectedDescr);
  auto invalid = [](const std::string &m) { return absl::InvalidArgumentError(m); };
  const size_t have = std::min<size_t>(prefix.size(), kMagicSize);
  if (fileSize < kMagicSize || prefix.compare(0, have, kMagic, have) != 0 ||
      have < kMagicSize)
    return invalid("not a .npy file: it does not start with the magic \\x93NUMPY");
  if (fileSize < 8 || prefix.size() < 8)
    return invalid(absl::StrCat("truncated .npy file: ", fileSize,
                                " bytes, too short for the version"));
  F32Header h;
  h.major = static_cast<unsigned char>(prefix[6]);
  h.minor = static_cast<unsigned char>(prefix[7]);
  if (h.minor != 0 || h.major < 1 || h.major > 3)
    return invalid(absl::StrCat("unsupported .npy version ", h.major, ".", h.minor,
                                " (1.0, 2.0 and 3.0 are read)"));
  const size_t lengthBytes = h.major == 1 ? 2 : 4;
  if (fileSize < 8 + lengthBytes || prefix.size() < 8 + lengthBytes)
    return invalid(absl::StrCat("truncated .npy file: ", fileSize,
                                " bytes, too short for the header length"));
  uint64_t length = 0;
  for (size_t i = 0; i < lengthBytes; ++i)
    length |= uint64_t(static_cast<unsigned char>(prefix[8 + i])) << (8 * i);
  const uint64_t headerEnd = 8 + lengthBytes + length;
  if (length > kMaxHeader)
    return invalid(absl::StrCat("malformed .npy header: its length is ", length,
                                " bytes (at most ", kMaxHeader, " are read)"));
  if (headerEnd > fileSize || headerEnd > prefix.size())
    return invalid(absl::StrCat("truncated .npy header: it is ", length,
                                " bytes, the file has ", fileSize - 8 - lengthBytes,
                                " after the header length"));
  std::string text = prefix.substr(8 + lengthBytes, length);
  if (text.empty() || text.back() != '\n')
    return invalid(absl::StrCat("malformed .npy header: it does not end with a newline: \"",
                                printable(text), "\""));
  std::string descr;
  bool fortran = false;
  if (absl::Status st = DictParser(text).parse(descr, fortran, h.shape); !st.ok())
    return st;
  if (descr != expectedDescr)
    return invalid(absl::StrCat("dtype '", printable(descr), "', not '", expectedDescr, "' (",
                                descrName(expectedDescr), ")"));
  if (fortran)
    return invalid("fortran_order is True; only C order (False) is read");
  uint64_t elements = 1;
  const uint64_t limit = std::numeric_limits<uint64_t>::max() / 8;
  for (int64_t d : h.shape) {
    if (d != 0 && elements > limit / uint64_t(d))
      return invalid(absl::StrCat("shape ", shapeText(h.shape), " is too large"));
    elements *= uint64_t(d);
  }
  h.elements = elements;
  h.dataOffset = headerEnd;
  const uint64_t dataBytes = fileSize - headerEnd;
  if (dataBytes < elements * width)
    return invalid(absl::StrCat("truncated .npy data: shape ", shapeText(h.shape), " needs ",
                                elements * width, " bytes, the file has ", dataBytes));
  if (dataBytes > elements * width)
    return invalid(absl::StrCat(".npy file has ", dataBytes - elements * width,
                                " bytes after the data of shape ", shapeText(h.shape)));
  return h;
}

namespace {

/// Opens `path`, a regular file, into `in` and reads its first bytes (as
/// many as any header takes); the file's size goes to `size`.
absl::StatusOr<std::string> openPrefix(const std::string &path, std::ifstream &in,
                                       uint64_t &size) {
  std::error_code ec;
  fs::file_status status = fs::status(path, ec);
  if (ec || !fs::exists(status))
    return absl::NotFoundError(absl::StrCat(path, ": no such file"));
  if (!fs::is_regular_file(status))
    return absl::InvalidArgumentError(absl::StrCat(path, ": not a regular file"));
  size = fs::file_size(path, ec);
  if (ec)
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", ec.message()));
  in.open(path, std::ios::binary);
  if (!in)
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": cannot open: ", std::strerror(errno)));
  std::string prefix(std::min<uint64_t>(size, 12 + kMaxHeader), '\0');
  if (!in.read(prefix.data(), std::streamsize(prefix.size())))
    return absl::InvalidArgumentError(absl::StrCat(path, ": cannot read"));
  return prefix;
}

} // namespace

absl::StatusOr<NpyF32Reader> NpyF32Reader::open(const std::string &path) {
  NpyF32Reader r;
  r.path_ = path;
  uint64_t size = 0;
  auto prefix = openPrefix(path, r.in_, size);
  if (!prefix.ok())
    return prefix.status();
  auto header = parseF32Header(*prefix, size);
  if (!header.ok())
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", header.status().message()));
  r.header_ = *header;
  return r;
}

uint64_t NpyF32Reader::rowLength() const {
  return header_.shape.empty() ? 1 : uint64_t(header_.shape.back());
}

uint64_t NpyF32Reader::rows() const {
  uint64_t n = 1;
  for (size_t i = 0; i + 1 < header_.shape.size(); ++i)
    n *= uint64_t(header_.shape[i]);
  return n;
}

absl::Status NpyF32Reader::readRow(uint64_t index, std::vector<float> &out) {
  const uint64_t n = rowLength();
  if (index >= rows())
    return absl::OutOfRangeError(absl::StrCat(path_, ": row ", index, " of ", rows()));
  std::vector<unsigned char> bytes(n * 4);
  in_.clear();
  in_.seekg(std::streamoff(header_.dataOffset + index * n * 4));
  if (!in_.read(reinterpret_cast<char *>(bytes.data()), std::streamsize(bytes.size())))
    return absl::DataLossError(absl::StrCat(path_, ": cannot read row ", index));
  out.resize(n);
  for (uint64_t i = 0; i < n; ++i)
    out[i] = bitsFloat(uint32_t(bytes[4 * i]) | uint32_t(bytes[4 * i + 1]) << 8 |
                       uint32_t(bytes[4 * i + 2]) << 16 |
                       uint32_t(bytes[4 * i + 3]) << 24);
  return absl::OkStatus();
}

NpyF32Writer::~NpyF32Writer() {
  if (temporary_.empty())
    return;
  out_.close();
  std::error_code ec;
  fs::remove(temporary_, ec);
}

absl::Status NpyF32Writer::create(const std::string &path,
                                  const std::vector<int64_t> &shape) {
  std::error_code ec;
  if (fs::is_directory(path, ec))
    return absl::InvalidArgumentError(absl::StrCat(path, ": is a directory"));
  path_ = path;
  shape_ = shape;
  rowLength_ = shape.empty() ? 1 : uint64_t(shape.back());
  rows_ = 1;
  for (size_t i = 0; i + 1 < shape.size(); ++i)
    rows_ *= uint64_t(shape[i]);
  const std::string header = f32Header(shape);
  dataOffset_ = header.size();
  const std::string temporary = absl::StrCat(path, ".tmp.", ::getpid());
  out_.open(temporary, std::ios::binary | std::ios::trunc);
  if (!out_)
    return absl::InvalidArgumentError(absl::StrCat(
        "cannot create ", temporary, ": ", std::strerror(errno)));
  temporary_ = temporary;
  out_.write(header.data(), std::streamsize(header.size()));
  // The whole length up front (the data reads as zeros until written).
  const uint64_t total = dataOffset_ + rows_ * rowLength_ * 4;
  if (total > dataOffset_) {
    out_.seekp(std::streamoff(total - 1));
    out_.put('\0');
  }
  if (!out_)
    return absl::DataLossError(absl::StrCat("cannot write ", temporary));
  return absl::OkStatus();
}

absl::Status NpyF32Writer::writeRow(uint64_t index, const std::vector<float> &row) {
  if (temporary_.empty())
    return absl::FailedPreconditionError(absl::StrCat(path_, ": not open"));
  if (index >= rows_ || row.size() != rowLength_)
    return absl::InvalidArgumentError(absl::StrCat(
        path_, ": row ", index, " of ", row.size(), " floats; the file has ", rows_,
        " rows of ", rowLength_));
  std::string bytes(row.size() * 4, '\0');
  for (size_t i = 0; i < row.size(); ++i) {
    const uint32_t u = floatBits(row[i]);
    for (int k = 0; k < 4; ++k)
      bytes[4 * i + k] = char((u >> (8 * k)) & 0xff);
  }
  out_.seekp(std::streamoff(dataOffset_ + index * rowLength_ * 4));
  out_.write(bytes.data(), std::streamsize(bytes.size()));
  if (!out_)
    return absl::DataLossError(absl::StrCat("cannot write ", temporary_));
  return absl::OkStatus();
}

absl::Status NpyF32Writer::commit() {
  if (temporary_.empty())
    return absl::FailedPreconditionError(absl::StrCat(path_, ": not open"));
  out_.flush();
  out_.close();
  if (out_.fail())
    return absl::DataLossError(absl::StrCat("cannot write ", temporary_));
  std::error_code ec;
  fs::rename(temporary_, path_, ec);
  if (ec)
    return absl::InvalidArgumentError(absl::StrCat(
        "cannot rename ", temporary_, " to ", path_, ": ", ec.message()));
  temporary_.clear();
  return absl::OkStatus();
}

absl::StatusOr<NpyInts> readInts(const std::string &path) {
  std::ifstream in;
  uint64_t size = 0;
  auto prefix = openPrefix(path, in, size);
  if (!prefix.ok())
    return prefix.status();
  // The dtype decides how the rest is read: int32 or uint8.
  const bool bytes = prefix->find("'descr': '|u1'") != std::string::npos;
  auto header = parseHeader(*prefix, size, bytes ? "|u1" : "<i4");
  if (!header.ok())
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", header.status().message()));
  NpyInts out;
  out.shape = header->shape;
  const uint64_t width = bytes ? 1 : 4;
  std::vector<unsigned char> raw(header->elements * width);
  in.clear();
  in.seekg(std::streamoff(header->dataOffset));
  if (!raw.empty() && !in.read(reinterpret_cast<char *>(raw.data()), std::streamsize(raw.size())))
    return absl::DataLossError(absl::StrCat(path, ": cannot read its data"));
  out.values.resize(header->elements);
  for (uint64_t i = 0; i < header->elements; ++i)
    out.values[i] = bytes ? int32_t(raw[i])
                          : int32_t(uint32_t(raw[4 * i]) | uint32_t(raw[4 * i + 1]) << 8 |
                                    uint32_t(raw[4 * i + 2]) << 16 | uint32_t(raw[4 * i + 3]) << 24);
  return out;
}

} // namespace csa::npy
