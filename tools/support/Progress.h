//===- Progress.h - Progress on stderr for long work ------------*- C++ -*-===//
//
// Two kinds of progress line, both on stderr only (stdout stays the tool's
// output):
//
// Progress: a count, "what: 12.3 of 60.0 GB (20%), 1.2 GB/s, 39 s left",
// redrawn at most four times a second on one line and ended with a newline.
// add() may be called from several threads.
//
// Stages: the stage long work is in, "csa-compile: emitting PTX, 12.3 s
// (this stage 4.1 s)", redrawn in place four times a second on a terminal;
// with --progress and stderr not a terminal, one line per stage as it ends.
//
// ProgressMode (every tool's --progress and --quiet): Auto shows a line only
// when stderr is a terminal and the work has taken 2 s (short work stays
// silent); Always (--progress) shows it from the start, also into a file or
// a pipe (for a log); Never (--quiet) shows nothing.
//
//===----------------------------------------------------------------------===//
#ifndef CSA_TOOLS_SUPPORT_PROGRESS_H
#define CSA_TOOLS_SUPPORT_PROGRESS_H

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>

namespace csa::tools {

enum class ProgressMode { Auto, Always, Never };

/// --quiet wins over --progress; neither is Auto.
inline ProgressMode progressMode(bool progress, bool quiet) {
  return quiet ? ProgressMode::Never : progress ? ProgressMode::Always : ProgressMode::Auto;
}

/// Auto: nothing is drawn before the work has taken this long.
inline constexpr std::chrono::milliseconds kProgressDelay{2000};

class Progress {
public:
  /// `unit` "B" counts bytes (shown in GB), anything else items of that name.
  Progress(std::string what, uint64_t total, std::string unit, ProgressMode mode);
  ~Progress();
  void add(uint64_t done);
  /// Ends the line (also done by the destructor); Auto: only when one was
  /// drawn.
  void finish();
  bool shown() const { return shown_; }

private:
  void draw(bool last);
  std::string what_, unit_;
  uint64_t total_, done_ = 0;
  bool shown_, delayed_, drawn_ = false, finished_ = false;
  std::chrono::steady_clock::time_point start_, lastDraw_;
  std::mutex mutex_;
};

class Stages {
public:
  /// `tool` starts every line ("csa-compile").
  Stages(std::string tool, ProgressMode mode);
  ~Stages();
  /// Ends the stage before (if any) and starts `stage`.
  void begin(std::string stage);
  /// Ends the last stage and the line ("csa-compile: done in 17.2 s") where
  /// one was drawn; call it before printing an error (also done by the
  /// destructor).
  void finish();
  /// On a terminal, clears the line for a message (the next redraw brings
  /// it back).
  void clearLine();
  bool shown() const { return shown_; }

private:
  void endStage(std::chrono::steady_clock::time_point now);
  void draw(std::chrono::steady_clock::time_point now);
  void tick();
  std::string tool_, stage_;
  bool shown_, terminal_, delayed_, drawn_ = false, finished_ = false, stop_ = false;
  std::chrono::steady_clock::time_point start_, stageStart_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::thread ticker_;
};

} // namespace csa::tools

#endif // CSA_TOOLS_SUPPORT_PROGRESS_H
