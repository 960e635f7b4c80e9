//===- Safetensors.cpp - Memory-mapped safetensors files ------------------===//
//
// Validation order: the length field, the JSON, then each entry on its own
// (dtype, shape, offsets, size, bounds), then the entries together (tiling).
// Checking bounds per entry first means a truncated file is reported as
// "tensor X extends past the end", naming the first tensor that was cut.
//
//===----------------------------------------------------------------------===//
#include "runtime/checkpoint/Safetensors.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include <nlohmann/json.hpp>
#include "runtime/support/JsonLimits.h"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace csa {
namespace checkpoint {

using nlohmann::json;

uint64_t TensorView::numElements() const {
  uint64_t n = 1;
  for (int64_t d : shape)
    n *= static_cast<uint64_t>(d);
  return n;
}

std::string formatShape(const std::vector<int64_t> &shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

//===----------------------------------------------------------------------===//
// MappedFile
//===----------------------------------------------------------------------===//

namespace {

/// The mappings a SIGBUS may come from: a file truncated (or replaced in
/// place) while mapped makes a read past its new end raise SIGBUS, which
/// would end the process without a word. The handler finds the mapping of
/// the faulting address and names its file (async-signal-safe: atomics,
/// write(2), _exit); a fault elsewhere gets the default action.
struct MappingSlot {
  std::atomic<uintptr_t> start{0};
  std::atomic<uintptr_t> end{0};
  std::atomic<const char *> path{nullptr};
};
constexpr size_t kMappingSlots = 1024;
MappingSlot mappingSlots[kMappingSlots];
std::atomic<bool> sigbusHandlerInstalled{false};

void writeAll(const char *text) {
  size_t n = std::strlen(text);
  while (n > 0) {
    ssize_t w = ::write(STDERR_FILENO, text, n);
    if (w <= 0)
      return;
    text += w;
    n -= size_t(w);
  }
}

void onSigbus(int signal, siginfo_t *info, void *) {
  const uintptr_t at = reinterpret_cast<uintptr_t>(info ? info->si_addr : nullptr);
  for (MappingSlot &slot : mappingSlots) {
    const uintptr_t start = slot.start.load(std::memory_order_acquire);
    if (start == 0 || at < start || at >= slot.end.load(std::memory_order_acquire))
      continue;
    writeAll("error: ");
    if (const char *path = slot.path.load(std::memory_order_acquire))
      writeAll(path);
    writeAll(": the file was truncated or changed while it was mapped (reading it raised "
             "SIGBUS); a checkpoint must not be modified while a run uses it\n");
    ::_exit(1);
  }
  ::signal(signal, SIG_DFL); // not ours: the default action on return
}

void installSigbusHandler() {
  if (sigbusHandlerInstalled.exchange(true))
    return;
  struct sigaction action {};
  action.sa_sigaction = onSigbus;
  action.sa_flags = SA_SIGINFO;
  sigemptyset(&action.sa_mask);
  ::sigaction(SIGBUS, &action, nullptr);
}

MappingSlot *registerMapping(const void *data, uint64_t size, const char *path) {
  installSigbusHandler();
  for (MappingSlot &slot : mappingSlots) {
    uintptr_t expected = 0;
    // Claimed with a placeholder start, published once end and path are set.
    if (!slot.start.compare_exchange_strong(expected, 1, std::memory_order_acq_rel))
      continue;
    slot.path.store(path, std::memory_order_release);
    const uintptr_t start = reinterpret_cast<uintptr_t>(data);
    slot.end.store(start + size, std::memory_order_release);
    slot.start.store(start, std::memory_order_release);
    return &slot;
  }
  return nullptr; // more mappings than slots: those keep the default action
}

void unregisterMapping(MappingSlot *slot) {
  if (!slot)
    return;
  slot->end.store(0, std::memory_order_release);
  slot->path.store(nullptr, std::memory_order_release);
  slot->start.store(0, std::memory_order_release);
}

} // namespace

absl::StatusOr<std::unique_ptr<MappedFile>>
MappedFile::open(const std::string &path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return absl::NotFoundError(
        absl::StrCat(path, ": cannot open: ", std::strerror(errno)));
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    return absl::InternalError(
        absl::StrCat(path, ": cannot stat: ", std::strerror(err)));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": not a regular file"));
  }
  std::unique_ptr<MappedFile> file(new MappedFile());
  file->path_ = path;
  file->size_ = static_cast<uint64_t>(st.st_size);
  if (file->size_ > 0) {
    void *p = ::mmap(nullptr, file->size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      int err = errno;
      ::close(fd);
      return absl::InternalError(
          absl::StrCat(path, ": cannot map: ", std::strerror(err)));
    }
    file->data_ = static_cast<const uint8_t *>(p);
    file->slot_ = registerMapping(file->data_, file->size_, file->path_.c_str());
  }
  ::close(fd); // the mapping keeps the file alive
  return file;
}

MappedFile::~MappedFile() {
  unregisterMapping(static_cast<MappingSlot *>(slot_));
  if (data_)
    ::munmap(const_cast<uint8_t *>(data_), size_);
}

//===----------------------------------------------------------------------===//
// SafetensorsFile
//===----------------------------------------------------------------------===//

namespace {

/// The value for a message: a scalar as JSON (cut at 40 characters), an
/// array or object by its size only (dump() recurses, and an untrusted header
/// can nest 10^5 deep).
std::string describe(const json &value) {
  if (value.is_array() || value.is_object())
    return absl::StrCat(value.type_name(), " of ", value.size(),
                        value.is_array() ? " elements" : " members");
  std::string text = value.dump();
  if (text.size() > 40)
    text = text.substr(0, 37) + "...";
  return text;
}

/// Reads a non-negative integer that fits in int64.
bool readNonNegative(const json &value, uint64_t &out) {
  if (value.is_number_unsigned()) {
    out = value.get<uint64_t>();
    return out <= uint64_t(INT64_MAX);
  }
  if (value.is_number_integer() && value.get<int64_t>() >= 0) {
    out = static_cast<uint64_t>(value.get<int64_t>());
    return true;
  }
  return false;
}

struct Entry {
  TensorView view;
  uint64_t begin = 0, end = 0;
};

} // namespace

absl::StatusOr<std::unique_ptr<SafetensorsFile>>
SafetensorsFile::open(const std::string &path) {
  auto mapping = MappedFile::open(path);
  if (!mapping.ok())
    return mapping.status();
  auto file = parse((*mapping)->data(), (*mapping)->size(), path);
  if (!file.ok())
    return file.status();
  (*file)->mapping_ = std::move(*mapping);
  return std::move(*file);
}

absl::StatusOr<std::unique_ptr<SafetensorsFile>>
SafetensorsFile::parse(const uint8_t *bytes, uint64_t size,
                       const std::string &path) {
  auto error = [&](const std::string &what) {
    return absl::DataLossError(absl::StrCat(path, ": ", what));
  };
  if (size < 8)
    return error(absl::StrCat("file is ", size,
                              " bytes, shorter than the 8-byte header length "
                              "field (not a safetensors file, or truncated)"));
  uint64_t headerBytes = 0;
  for (int i = 7; i >= 0; --i)
    headerBytes = (headerBytes << 8) | bytes[i]; // little-endian
  if (headerBytes > kMaxHeaderBytes)
    return error(absl::StrCat("header length ", headerBytes,
                              " exceeds the limit of ", kMaxHeaderBytes,
                              " bytes (corrupt length field?)"));
  if (headerBytes > size - 8)
    return error(absl::StrCat("header length ", headerBytes,
                              " extends past the end of the file (", size,
                              " bytes; truncated?)"));

  const char *text = reinterpret_cast<const char *>(bytes + 8);
  json root = json::parse(text, text + headerBytes, /*cb=*/nullptr,
                          /*allow_exceptions=*/false);
  if (root.is_discarded()) {
    std::string why = "parse error";
    try {
      json unreachable = json::parse(text, text + headerBytes);
      (void)unreachable;
    } catch (const json::exception &e) {
      why = e.what();
    }
    return error("header is not valid JSON: " + why);
  }
  if (support::jsonDepth(root) > support::kMaxJsonDepth)
    return error(absl::StrCat("header nested deeper than ", support::kMaxJsonDepth, " levels"));
  if (!root.is_object())
    return error(absl::StrCat("header is not a JSON object (got ",
                              root.type_name(), ")"));

  std::unique_ptr<SafetensorsFile> file(new SafetensorsFile());
  file->path_ = path;
  file->headerBytes_ = headerBytes;
  file->fileBytes_ = size;
  const uint64_t dataStart = 8 + headerBytes;
  const uint64_t dataBytes = size - dataStart;

  std::vector<Entry> entries;
  entries.reserve(root.size());
  for (auto it = root.begin(); it != root.end(); ++it) {
    const std::string &name = it.key();
    const json &value = it.value();
    if (name == "__metadata__") {
      if (!value.is_object())
        return error("'__metadata__' must be an object of strings, got " +
                     describe(value));
      for (auto m = value.begin(); m != value.end(); ++m) {
        if (!m.value().is_string())
          return error(absl::StrCat("'__metadata__' entry '", m.key(),
                                    "' must be a string, got ",
                                    describe(m.value())));
        file->metadata_[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    auto bad = [&](const std::string &what) {
      return error(absl::StrCat("tensor '", name, "': ", what));
    };
    if (!value.is_object())
      return bad("entry must be an object, got " + describe(value));
    auto dtypeIt = value.find("dtype");
    if (dtypeIt == value.end() || !dtypeIt->is_string())
      return bad("'dtype' must be a string");
    std::optional<DType> dtype = parseDType(dtypeIt->get<std::string>());
    if (!dtype)
      return bad("unknown dtype '" + dtypeIt->get<std::string>() + "'");

    Entry entry;
    entry.view.name = name;
    entry.view.dtype = *dtype;
    entry.view.file = path;
    auto shapeIt = value.find("shape");
    if (shapeIt == value.end() || !shapeIt->is_array())
      return bad("'shape' must be a list of non-negative integers");
    uint64_t expected = dtypeSize(*dtype);
    bool overflow = false;
    for (const json &dim : *shapeIt) {
      uint64_t d = 0;
      if (!readNonNegative(dim, d))
        return bad("'shape' must be a list of non-negative integers, got " +
                   describe(*shapeIt));
      entry.view.shape.push_back(static_cast<int64_t>(d));
      overflow |= __builtin_mul_overflow(expected, d, &expected);
    }
    if (overflow)
      return bad(absl::StrCat("shape ", formatShape(entry.view.shape),
                              " is too large"));

    auto offsetsIt = value.find("data_offsets");
    if (offsetsIt == value.end() || !offsetsIt->is_array() ||
        offsetsIt->size() != 2 ||
        !readNonNegative((*offsetsIt)[0], entry.begin) ||
        !readNonNegative((*offsetsIt)[1], entry.end) || entry.begin > entry.end)
      return bad("'data_offsets' must be [begin, end] with 0 <= begin <= "
                 "end, got " +
                 (offsetsIt == value.end() ? std::string("nothing")
                                           : describe(*offsetsIt)));
    const std::string range =
        absl::StrCat("[", entry.begin, ", ", entry.end, "]");
    if (entry.end - entry.begin != expected)
      return bad(absl::StrCat("shape ", formatShape(entry.view.shape), " of ",
                              dtypeName(*dtype), " needs ", expected,
                              " bytes but data_offsets ", range, " hold ",
                              entry.end - entry.begin));
    if (entry.end > dataBytes)
      return bad(absl::StrCat("data_offsets ", range,
                              " extend past the end of the data section (",
                              dataBytes, " bytes; file truncated?)"));
    entry.view.bytes = expected;
    entry.view.data = bytes + dataStart + entry.begin;
    entries.push_back(std::move(entry));
  }

  // The tensors must tile the data section: sorted by begin, each starts
  // where the previous one ended.
  std::stable_sort(
      entries.begin(), entries.end(), [](const Entry &a, const Entry &b) {
        return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
      });
  uint64_t cursor = 0;
  const Entry *previous = nullptr;
  for (const Entry &e : entries) {
    if (e.begin < cursor)
      return error(absl::StrCat("tensor '", e.view.name, "': data_offsets [",
                                e.begin, ", ", e.end, "] overlap tensor '",
                                previous->view.name, "' [", previous->begin,
                                ", ", previous->end, "]"));
    if (e.begin > cursor)
      return error(absl::StrCat("bytes [", cursor, ", ", e.begin,
                                ") of the data section belong to no tensor "
                                "(before tensor '",
                                e.view.name, "')"));
    cursor = e.end;
    previous = &e;
  }
  if (cursor != dataBytes)
    return error(absl::StrCat(dataBytes - cursor,
                              " bytes after the last tensor belong to no "
                              "tensor (data section is ",
                              dataBytes, " bytes, tensors end at ", cursor,
                              ")"));

  file->tensors_.reserve(entries.size());
  for (Entry &e : entries) {
    file->byName_.emplace(e.view.name, file->tensors_.size());
    file->tensors_.push_back(std::move(e.view));
  }
  return file;
}

const TensorView *SafetensorsFile::find(const std::string &name) const {
  auto it = byName_.find(name);
  return it == byName_.end() ? nullptr : &tensors_[it->second];
}

} // namespace checkpoint
} // namespace csa
