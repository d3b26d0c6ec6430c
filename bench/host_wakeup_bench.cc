// What waking a sleeping thread costs on this host (issue #13): at 1 request in flight
// every hop of a small request (client to server, server to client) wakes a thread
// that slept in epoll or a futex, and on a virtual machine an idle vCPU that halted
// must first be resumed. Two threads pass a token back and forth, N round trips a row:
//
//   host_wakeup_bench [--trips=N] [--idle_spinners] [--dma_latency_us=N] [--hold_s=N]
//
// Rows (p50 / p99 of one round trip, two wake-ups, in microseconds):
// - spin: each side spins on an atomic (no sleep: the floor);
// - futex: a mutex and condition variable;
// - eventfd: a blocking read on an eventfd each way;
// - tcp: 64 bytes each way over loopback TCP (TCP_NODELAY), blocking reads, as gRPC's
//   transports wait (in epoll, which sleeps the same way).
// --idle_spinners runs one SCHED_IDLE thread per CPU that spins, so no CPU halts
// while the two threads sleep (a woken thread preempts a SCHED_IDLE one at once);
// --dma_latency_us holds a /dev/cpu_dma_latency request (the PM QoS limit on
// C-state exit latency) while the rows run. --hold_s=N runs no rows: it holds the
// spinners and the request for N seconds, while another program (a server and its
// bench) is measured. Prints the host's cpuidle states first.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <sched.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

std::string ReadLine(const std::string& path) {
  std::ifstream f(path);
  std::string line;
  std::getline(f, line);
  return line;
}

void PrintHost() {
  std::printf("cpus %u, cpuidle driver '%s', governor '%s'\n", std::thread::hardware_concurrency(),
              ReadLine("/sys/devices/system/cpu/cpuidle/current_driver").c_str(),
              ReadLine("/sys/devices/system/cpu/cpuidle/current_governor_ro").c_str());
  for (int s = 0; s < 10; ++s) {
    const std::string dir = "/sys/devices/system/cpu/cpu0/cpuidle/state" + std::to_string(s) + "/";
    const std::string name = ReadLine(dir + "name");
    if (name.empty()) break;
    std::printf("  cpu0 idle state %d: %s, exit latency %s us\n", s, name.c_str(), ReadLine(dir + "latency").c_str());
  }
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line;
  bool model = false, hypervisor = false;
  while (std::getline(cpuinfo, line)) {
    if (!model && line.rfind("model name", 0) == 0) {
      std::printf("  %s\n", line.c_str());
      model = true;
    }
    if (line.rfind("flags", 0) == 0 && line.find(" hypervisor") != std::string::npos) hypervisor = true;
  }
  std::printf("  hypervisor flag: %s\n", hypervisor ? "yes" : "no");
}

struct Percentiles {
  double p50, p99;
};

// `trips` timed round trips after 1000 warm-ups; `trip` does one.
Percentiles Time(int trips, const std::function<void()>& trip) {
  for (int i = 0; i < 1000; ++i) trip();
  std::vector<double> us(trips);
  for (double& u : us) {
    const auto t0 = Clock::now();
    trip();
    u = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
  }
  std::sort(us.begin(), us.end());
  return {us[us.size() / 2], us[us.size() * 99 / 100]};
}

void Report(const char* name, Percentiles p) { std::printf("  %-8s p50 %7.1f us  p99 %7.1f us\n", name, p.p50, p.p99); }

// The echo side of each row runs on its own thread until told to stop.
void Spin(int trips) {
  std::atomic<uint64_t> ball{0};
  std::atomic<bool> stop{false};
  std::thread echo([&] {
    uint64_t seen = 0;
    while (!stop.load(std::memory_order_relaxed)) {
      const uint64_t v = ball.load(std::memory_order_acquire);
      if (v != seen && v % 2 == 1) {
        seen = v + 1;
        ball.store(seen, std::memory_order_release);
      }
    }
  });
  uint64_t next = 1;
  Report("spin", Time(trips, [&] {
           ball.store(next, std::memory_order_release);
           while (ball.load(std::memory_order_acquire) != next + 1) {
           }
           next += 2;
         }));
  stop = true;
  echo.join();
}

void Futex(int trips) {
  std::mutex mu;
  std::condition_variable cv;
  uint64_t ball = 0;
  bool stop = false;
  std::thread echo([&] {
    std::unique_lock lock(mu);
    while (true) {
      cv.wait(lock, [&] { return stop || ball % 2 == 1; });
      if (stop) return;
      ++ball;
      cv.notify_all();
    }
  });
  Report("futex", Time(trips, [&] {
           std::unique_lock lock(mu);
           ++ball;
           cv.notify_all();
           cv.wait(lock, [&] { return ball % 2 == 0; });
         }));
  {
    std::lock_guard lock(mu);
    stop = true;
  }
  cv.notify_all();
  echo.join();
}

void EventFd(int trips) {
  const int to_echo = eventfd(0, 0), to_main = eventfd(0, 0);
  std::thread echo([&] {
    uint64_t v = 0;
    while (read(to_echo, &v, sizeof v) == sizeof v && v == 1) {
      if (write(to_main, &v, sizeof v) != sizeof v) return;
    }
  });
  Report("eventfd", Time(trips, [&] {
           uint64_t v = 1;
           if (write(to_echo, &v, sizeof v) != sizeof v || read(to_main, &v, sizeof v) != sizeof v) std::abort();
         }));
  uint64_t stop = 2;
  if (write(to_echo, &stop, sizeof stop) != sizeof stop) std::abort();
  echo.join();
  close(to_echo);
  close(to_main);
}

bool ReadFull(int fd, char* p, size_t n) {
  while (n > 0) {
    const ssize_t got = read(fd, p, n);
    if (got <= 0) return false;
    p += got;
    n -= static_cast<size_t>(got);
  }
  return true;
}

void Tcp(int trips) {
  const int listener = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  if (bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 || listen(listener, 1) != 0 ||
      getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    std::perror("tcp listener");
    return;
  }
  const int client = socket(AF_INET, SOCK_STREAM, 0);
  if (connect(client, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    std::perror("tcp connect");
    return;
  }
  const int server = accept(listener, nullptr, nullptr);
  const int one = 1;
  setsockopt(client, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  setsockopt(server, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  std::thread echo([&] {
    char buf[64];
    while (ReadFull(server, buf, sizeof buf)) {
      if (write(server, buf, sizeof buf) != sizeof buf) return;
    }
  });
  char buf[64] = {};
  Report("tcp", Time(trips, [&] {
           if (write(client, buf, sizeof buf) != sizeof buf || !ReadFull(client, buf, sizeof buf)) std::abort();
         }));
  shutdown(client, SHUT_RDWR);
  echo.join();
  close(client);
  close(server);
  close(listener);
}

}  // namespace

int main(int argc, char** argv) {
  int trips = 20000;
  bool idle_spinners = false;
  int dma_latency_us = -1;
  int hold_s = 0;
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--trips=", 8) == 0) trips = std::max(100, std::atoi(argv[i] + 8));
    else if (std::strcmp(argv[i], "--idle_spinners") == 0) idle_spinners = true;
    else if (std::strncmp(argv[i], "--dma_latency_us=", 17) == 0) dma_latency_us = std::atoi(argv[i] + 17);
    else if (std::strncmp(argv[i], "--hold_s=", 9) == 0) hold_s = std::atoi(argv[i] + 9);
  }
  PrintHost();
  int qos_fd = -1;
  if (dma_latency_us >= 0) {
    qos_fd = open("/dev/cpu_dma_latency", O_WRONLY);
    const int32_t value = dma_latency_us;
    if (qos_fd < 0 || write(qos_fd, &value, sizeof value) != sizeof value) {
      std::printf("/dev/cpu_dma_latency: %s (the rows run without it)\n", std::strerror(errno));
    }
  }
  std::atomic<bool> stop_spinners{false};
  std::vector<std::thread> spinners;
  if (idle_spinners) {
    for (unsigned c = 0; c < std::thread::hardware_concurrency(); ++c) {
      spinners.emplace_back([&] {
        sched_param none{};
        pthread_setschedparam(pthread_self(), SCHED_IDLE, &none);
        while (!stop_spinners.load(std::memory_order_relaxed)) {
        }
      });
    }
  }
  if (hold_s > 0) {
    std::printf("holding%s%s for %d s\n", idle_spinners ? " SCHED_IDLE spinners" : "",
                qos_fd >= 0 ? " cpu_dma_latency" : "", hold_s);
    std::fflush(stdout);
    std::this_thread::sleep_for(std::chrono::seconds(hold_s));
  } else {
    std::printf("round trips (two wake-ups), %d a row%s%s:\n", trips, idle_spinners ? ", SCHED_IDLE spinners" : "",
                qos_fd >= 0 ? ", cpu_dma_latency held" : "");
    Spin(trips);
    Futex(trips);
    EventFd(trips);
    Tcp(trips);
  }
  stop_spinners = true;
  for (std::thread& t : spinners) t.join();
  if (qos_fd >= 0) close(qos_fd);
  return 0;
}
