//===- Progress.cpp - A progress line on stderr for long work -------------===//

#include "tools/support/Progress.h"

#include <cstdio>
#include <unistd.h>

namespace csa::tools {

Progress::Progress(std::string what, uint64_t total, std::string unit, ProgressMode mode)
    : what_(std::move(what)), unit_(std::move(unit)), total_(total),
      shown_(mode == ProgressMode::Always ||
             (mode == ProgressMode::Auto && ::isatty(STDERR_FILENO))),
      start_(std::chrono::steady_clock::now()), lastDraw_(start_) {}

Progress::~Progress() { finish(); }

void Progress::add(uint64_t done) {
  if (!shown_)
    return;
  std::lock_guard<std::mutex> lock(mutex_);
  done_ += done;
  const auto now = std::chrono::steady_clock::now();
  if (now - lastDraw_ >= std::chrono::milliseconds(250)) {
    lastDraw_ = now;
    draw(false);
  }
}

void Progress::finish() {
  if (!shown_)
    return;
  std::lock_guard<std::mutex> lock(mutex_);
  if (finished_)
    return;
  finished_ = true;
  draw(true);
}

void Progress::draw(bool last) {
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  const bool bytes = unit_ == "B";
  const double scale = bytes ? 1e-9 : 1.0;
  const char *shown = bytes ? "GB" : unit_.c_str();
  const double rate = seconds > 0 ? double(done_) / seconds : 0;
  const double left = rate > 0 && total_ > done_ ? double(total_ - done_) / rate : 0;
  std::fprintf(stderr, "\r%s: %.*f of %.*f %s (%.0f%%), %.*f %s/s, %s%.0f s %s\033[K%s",
               what_.c_str(), bytes ? 1 : 0, double(done_) * scale, bytes ? 1 : 0,
               double(total_) * scale, shown,
               total_ ? 100.0 * double(done_) / double(total_) : 100.0, bytes ? 2 : 1,
               rate * scale, shown, last ? "" : "", last ? seconds : left,
               last ? "in all" : "left", last ? "\n" : "");
  std::fflush(stderr);
}

} // namespace csa::tools
