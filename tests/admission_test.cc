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

}  // namespace
}  // namespace gpucompute
