//===- Progress.cpp - Progress on stderr for long work --------------------===//

#include "tools/support/Progress.h"

#include <cstdio>
#include <unistd.h>

namespace csa::tools {

namespace {
double secondsBetween(std::chrono::steady_clock::time_point a,
                      std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}
} // namespace

Progress::Progress(std::string what, uint64_t total, std::string unit, ProgressMode mode)
    : what_(std::move(what)), unit_(std::move(unit)), total_(total),
      shown_(mode == ProgressMode::Always ||
             (mode == ProgressMode::Auto && ::isatty(STDERR_FILENO))),
      delayed_(mode == ProgressMode::Auto), start_(std::chrono::steady_clock::now()),
      lastDraw_(start_) {}

Progress::~Progress() { finish(); }

void Progress::add(uint64_t done) {
  if (!shown_)
    return;
  std::lock_guard<std::mutex> lock(mutex_);
  done_ += done;
  const auto now = std::chrono::steady_clock::now();
  if (delayed_ && now - start_ < kProgressDelay)
    return;
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
  // Auto: work that ended within the delay leaves no line.
  if (delayed_ && !drawn_ && std::chrono::steady_clock::now() - start_ < kProgressDelay)
    return;
  draw(true);
}

void Progress::draw(bool last) {
  drawn_ = true;
  const double seconds = secondsBetween(start_, std::chrono::steady_clock::now());
  const bool bytes = unit_ == "B";
  const double scale = bytes ? 1e-9 : 1.0;
  const char *shown = bytes ? "GB" : unit_.c_str();
  const double rate = seconds > 0 ? double(done_) / seconds : 0;
  const double left = rate > 0 && total_ > done_ ? double(total_ - done_) / rate : 0;
  std::fprintf(stderr, "\r%s: %.*f of %.*f %s (%.0f%%), %.*f %s/s, %.*f s %s\033[K%s",
               what_.c_str(), bytes ? 1 : 0, double(done_) * scale, bytes ? 1 : 0,
               double(total_) * scale, shown,
               total_ ? 100.0 * double(done_) / double(total_) : 100.0, bytes ? 2 : 1,
               rate * scale, shown, last && seconds < 10 ? 2 : 0, last ? seconds : left,
               last ? "in all" : "left", last ? "\n" : "");
  std::fflush(stderr);
}

Stages::Stages(std::string tool, ProgressMode mode)
    : tool_(std::move(tool)),
      shown_(mode == ProgressMode::Always ||
             (mode == ProgressMode::Auto && ::isatty(STDERR_FILENO))),
      terminal_(::isatty(STDERR_FILENO)), delayed_(mode == ProgressMode::Auto),
      start_(std::chrono::steady_clock::now()), stageStart_(start_) {
  // On a terminal the line's times run on between stages.
  if (shown_ && terminal_)
    ticker_ = std::thread([this] { tick(); });
}

Stages::~Stages() { finish(); }

void Stages::tick() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stop_) {
    wake_.wait_for(lock, std::chrono::milliseconds(250));
    const auto now = std::chrono::steady_clock::now();
    if (!stop_ && !stage_.empty() && (!delayed_ || now - start_ >= kProgressDelay))
      draw(now);
  }
}

void Stages::begin(std::string stage) {
  if (!shown_)
    return;
  std::lock_guard<std::mutex> lock(mutex_);
  if (finished_)
    return;
  const auto now = std::chrono::steady_clock::now();
  endStage(now);
  stage_ = std::move(stage);
  stageStart_ = now;
  if (terminal_ && (drawn_ || !delayed_))
    draw(now);
}

void Stages::endStage(std::chrono::steady_clock::time_point now) {
  // Not a terminal (--progress into a log): a line per stage as it ends.
  if (!stage_.empty() && !terminal_) {
    std::fprintf(stderr, "%s: %s: %.2f s (%.2f s in all)\n", tool_.c_str(), stage_.c_str(),
                 secondsBetween(stageStart_, now), secondsBetween(start_, now));
    std::fflush(stderr);
  }
  stage_.clear();
}

void Stages::draw(std::chrono::steady_clock::time_point now) {
  drawn_ = true;
  std::fprintf(stderr, "\r%s: %s, %.1f s (this stage %.1f s)\033[K", tool_.c_str(),
               stage_.c_str(), secondsBetween(start_, now), secondsBetween(stageStart_, now));
  std::fflush(stderr);
}

void Stages::clearLine() {
  if (!shown_ || !terminal_)
    return;
  std::lock_guard<std::mutex> lock(mutex_);
  if (drawn_ && !finished_) {
    std::fprintf(stderr, "\r\033[K");
    std::fflush(stderr);
  }
}

void Stages::finish() {
  if (!shown_)
    return;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  if (ticker_.joinable())
    ticker_.join();
  std::lock_guard<std::mutex> lock(mutex_);
  if (finished_)
    return;
  finished_ = true;
  const auto now = std::chrono::steady_clock::now();
  endStage(now);
  if (terminal_ && !drawn_)
    return; // Auto: done within the delay
  std::fprintf(stderr, "%s%s: done in %.2f s%s\n", terminal_ ? "\r" : "", tool_.c_str(),
               secondsBetween(start_, now), terminal_ ? "\033[K" : "");
  std::fflush(stderr);
}

} // namespace csa::tools
