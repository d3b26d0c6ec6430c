// Polling for a condition another thread brings about.
#pragma once

#include <chrono>
#include <thread>

namespace gpucompute::test {

// Polls until `condition` holds or 10 s pass; whether it held.
template <typename Condition>
bool Eventually(Condition condition) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!condition()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return true;
}

}  // namespace gpucompute::test
