//===- Progress.h - A progress line on stderr for long work -----*- C++ -*-===//
//
// "what: 12.3 of 60.0 GB (20%), 1.2 GB/s, 39 s left", redrawn at most four
// times a second on one terminal line and ended with a newline. Shown when
// stderr is a terminal, unless the tool's --quiet; --progress forces it (for
// a log). add() may be called from several threads.
//
//===----------------------------------------------------------------------===//
#ifndef CSA_TOOLS_SUPPORT_PROGRESS_H
#define CSA_TOOLS_SUPPORT_PROGRESS_H

#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>

namespace csa::tools {

enum class ProgressMode { Auto, Always, Never };

class Progress {
public:
  /// `unit` "B" counts bytes (shown in GB), anything else items of that name.
  Progress(std::string what, uint64_t total, std::string unit, ProgressMode mode);
  ~Progress();
  void add(uint64_t done);
  /// Ends the line (also done by the destructor).
  void finish();
  bool shown() const { return shown_; }

private:
  void draw(bool last);
  std::string what_, unit_;
  uint64_t total_, done_ = 0;
  bool shown_, finished_ = false;
  std::chrono::steady_clock::time_point start_, lastDraw_;
  std::mutex mutex_;
};

} // namespace csa::tools

#endif // CSA_TOOLS_SUPPORT_PROGRESS_H
