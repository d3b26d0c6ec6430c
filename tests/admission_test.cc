#include "server/admission.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gpucompute {
namespace {

using ::testing::HasSubstr;

TEST(AdmissionTest, PerConnectionLimitNamesTheFlag) {
  Admission admission(10, 2);
  auto a = admission.Enter("ipv4:1");
  auto b = admission.Enter("ipv4:1");
  ASSERT_TRUE(a.ok() && b.ok());
  auto c = admission.Enter("ipv4:1");
  EXPECT_EQ(c.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(c.status().message()), HasSubstr("max_in_flight_per_connection 2"));
  EXPECT_TRUE(admission.Enter("ipv4:2").ok());  // another connection still gets in
}

TEST(AdmissionTest, GlobalLimitAndTicketsReturnTheirSlot) {
  Admission admission(2, 10);
  {
    auto a = admission.Enter("p1");
    auto b = admission.Enter("p2");
    ASSERT_TRUE(a.ok() && b.ok());
    EXPECT_EQ(admission.in_flight(), 2);
    auto c = admission.Enter("p3");
    EXPECT_EQ(c.status().code(), absl::StatusCode::kResourceExhausted);
    EXPECT_THAT(std::string(c.status().message()), HasSubstr("max_in_flight 2"));
  }
  EXPECT_EQ(admission.in_flight(), 0);
  EXPECT_TRUE(admission.Enter("p3").ok());
}

TEST(AdmissionTest, MovedTicketReleasesOnce) {
  Admission admission(1, 1);
  {
    Admission::Ticket outer;
    {
      auto ticket = admission.Enter("p");
      ASSERT_TRUE(ticket.ok());
      outer = *std::move(ticket);
    }
    EXPECT_EQ(admission.in_flight(), 1);
  }
  EXPECT_EQ(admission.in_flight(), 0);
}

TEST(DeviceQueuesTest, EachDeviceHasItsOwnBoundNamedInTheMessage) {
  DeviceQueues queues(2);
  auto a = queues.Enter(0, "cuda:0");
  auto b = queues.Enter(0, "cuda:0");
  ASSERT_TRUE(a.ok() && b.ok());
  auto c = queues.Enter(0, "cuda:0");
  EXPECT_EQ(c.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(c.status().message(),
            "device cuda:0 has 2 operations queued or running (max_device_queue_depth 2)");
  EXPECT_TRUE(queues.Enter(1, "cuda:1").ok());  // the other device still takes work
  EXPECT_EQ(queues.depth(0), 2);
}

TEST(DeviceQueuesTest, SlotsReturnOnceEvenWhenMoved) {
  DeviceQueues queues(1);
  {
    DeviceQueues::Slot outer;
    {
      auto slot = queues.Enter(-1, "cpu");
      ASSERT_TRUE(slot.ok()) << slot.status().message();
      outer = *std::move(slot);
    }
    EXPECT_EQ(queues.depth(-1), 1);
    EXPECT_FALSE(queues.Enter(-1, "cpu").ok());
  }
  EXPECT_EQ(queues.depth(-1), 0);
  EXPECT_TRUE(queues.Enter(-1, "cpu").ok());
}

}  // namespace
}  // namespace gpucompute
