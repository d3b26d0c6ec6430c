// A one-line progress bar for transfers, redrawn in place on a terminal. Short
// transfers (under half a second) draw nothing.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/result.h"

namespace gpucompute::client {

class ProgressBar {
 public:
  // Draws nothing unless `enabled`, so callers need not branch.
  ProgressBar(std::string label, bool enabled, FILE* out = stderr);
  // Ends the line if anything was drawn.
  ~ProgressBar();
  ProgressBar(const ProgressBar&) = delete;
  ProgressBar& operator=(const ProgressBar&) = delete;

  void Update(uint64_t done_bytes, uint64_t total_bytes);
  // For Client calls; valid while this bar lives.
  ProgressCallback Callback();

 private:
  void Draw(uint64_t done_bytes, uint64_t total_bytes);

  std::string label_;
  bool enabled_;
  FILE* out_;
  absl::Time start_ = absl::Now();
  absl::Time last_draw_ = absl::InfinitePast();
  bool drawn_ = false;
};

// Runs `call` with the callback of a bar that lives as long as the call.
template <typename Call>
auto WithProgressBar(std::string label, bool enabled, Call&& call) {
  ProgressBar bar(std::move(label), enabled);
  return std::forward<Call>(call)(bar.Callback());
}

}  // namespace gpucompute::client
