#include "client/progress_bar.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_format.h"
#include "client/format.h"

namespace gpucompute::client {
namespace {

constexpr int kBarWidth = 30;
// Redrawing more often only costs terminal time.
constexpr absl::Duration kRedrawInterval = absl::Milliseconds(100);
// Transfers that finish sooner get no bar at all.
constexpr absl::Duration kFirstDrawDelay = absl::Milliseconds(500);

}  // namespace

ProgressBar::ProgressBar(std::string label, bool enabled, FILE* out)
    : label_(std::move(label)), enabled_(enabled), out_(out) {}

ProgressBar::~ProgressBar() {
  if (drawn_) std::fputc('\n', out_);
}

void ProgressBar::Update(uint64_t done_bytes, uint64_t total_bytes) {
  if (!enabled_) return;
  const absl::Time now = absl::Now();
  if (now - start_ < kFirstDrawDelay) return;
  // Always draw the final state so the bar ends at 100%.
  if (done_bytes < total_bytes && now - last_draw_ < kRedrawInterval) return;
  last_draw_ = now;
  Draw(done_bytes, total_bytes);
}

ProgressCallback ProgressBar::Callback() {
  return [this](uint64_t done_bytes, uint64_t total_bytes) { Update(done_bytes, total_bytes); };
}

void ProgressBar::Draw(uint64_t done_bytes, uint64_t total_bytes) {
  const double fraction =
      total_bytes == 0
          ? 1.0
          : std::min(1.0, static_cast<double>(done_bytes) / static_cast<double>(total_bytes));
  const int filled = static_cast<int>(fraction * kBarWidth);
  const double seconds = absl::ToDoubleSeconds(absl::Now() - start_);
  const uint64_t rate =
      seconds > 0 ? static_cast<uint64_t>(static_cast<double>(done_bytes) / seconds) : 0;
  // \r and a trailing clear-to-end-of-line redraw the same line.
  absl::FPrintF(out_, "\r%s [%s%s] %3.0f%% %s / %s  %s/s\x1b[K", label_, std::string(filled, '#'),
                std::string(kBarWidth - filled, ' '), fraction * 100, FormatBytes(done_bytes),
                FormatBytes(total_bytes), FormatBytes(rate));
  std::fflush(out_);
  drawn_ = true;
}

}  // namespace gpucompute::client
