// Polling for a condition another thread brings about.
#pragma once

#include <chrono>
#include <thread>

namespace gpucompute::test {

// Polls until `condition` holds or `timeout` passes; whether it held.
template <typename Condition>
bool Eventually(Condition condition, std::chrono::seconds timeout = std::chrono::seconds(10)) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!condition()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return true;
}

// Polls `read` until it returns `want` or `timeout` passes; the last value read, so
// that an assertion on it prints what it was.
template <typename Read, typename Want>
auto EventuallyEquals(Read read, const Want& want, std::chrono::seconds timeout = std::chrono::seconds(10)) {
  decltype(read()) got{};
  Eventually([&] { return (got = read()) == want; }, timeout);
  return got;
}

}  // namespace gpucompute::test
