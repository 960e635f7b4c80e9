//===- Dumps.cpp - Dump folders: .npy arrays and their index --------------===//
#include "runtime/support/Dumps.h"

#include "runtime/support/Npy.h"

#include "absl/strings/str_cat.h"

#include <cstdio>
#include <fstream>
#include <unistd.h>

namespace csa::npy {

namespace {

/// `text` as a JSON string (the names csa writes need no more than quotes
/// and backslashes escaped; control characters are written as \u00XX).
std::string jsonString(const std::string &text) {
  std::string out = "\"";
  for (char c : text) {
    if (c == '"' || c == '\\')
      out += '\\';
    if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", unsigned(static_cast<unsigned char>(c)));
      out += buf;
      continue;
    }
    out += c;
  }
  return out + "\"";
}

} // namespace

absl::Status writeArray(const std::string &path, const std::string &descr,
                        const std::vector<int64_t> &shape, const void *data, size_t bytes) {
  const std::string tmp = absl::StrCat(path, ".tmp.", getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    const std::string h = header(descr, shape);
    out.write(h.data(), std::streamsize(h.size()));
    out.write(static_cast<const char *>(data), std::streamsize(bytes));
    if (!out)
      return absl::InternalError(absl::StrCat("cannot write the dump file ", tmp));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    return absl::InternalError(absl::StrCat("cannot rename ", tmp, " to ", path));
  }
  return absl::OkStatus();
}

absl::Status startDumpIndex(const std::string &dir) {
  const std::string path = absl::StrCat(dir, "/", kDumpIndex);
  std::ofstream out(path, std::ios::trunc);
  if (!out)
    return absl::InternalError(absl::StrCat("cannot write the dump index ", path));
  return absl::OkStatus();
}

absl::Status appendDumpIndex(const std::string &dir, const DumpEntry &e) {
  const std::string path = absl::StrCat(dir, "/", kDumpIndex);
  std::ofstream out(path, std::ios::app);
  out << "{\"file\": " << jsonString(e.file) << ", \"call\": " << e.call
      << ", \"entry\": " << jsonString(e.entry) << ", \"block\": " << jsonString(e.block)
      << ", \"what\": " << jsonString(e.what) << "}\n";
  if (!out)
    return absl::InternalError(absl::StrCat("cannot append to the dump index ", path));
  return absl::OkStatus();
}

} // namespace csa::npy
