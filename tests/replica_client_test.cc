// Three servers on 127.0.0.2, .3 and .4 behind one "ipv4:" target, through
// client::ReplicaClient: buffers reach their owner, stateless calls spread over
// the replicas, operands on two replicas are refused, and a stopped replica's
// buffers are DATA_LOSS while the others carry on.
#include "client/replica_client.h"

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/buffer_id.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/server_fixture.h"
#include "tests/testing/tensors.h"

namespace gpucompute::test {
namespace {

using ::testing::HasSubstr;

constexpr const char* kHosts[] = {"127.0.0.2", "127.0.0.3", "127.0.0.4"};

v1::Tensor Row(std::vector<double> values) {
  const int64_t shape[] = {1, static_cast<int64_t>(values.size())};
  return *client::MakeTensor(std::span<const double>(values), shape);
}

class ReplicaClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::vector<std::string> addresses;
    for (const char* host : kHosts) {
      ServerConfig config = LoopbackConfig();
      config.address = absl::StrCat(host, ":0");
      config.grace_period = absl::Milliseconds(100);
      absl::StatusOr<std::unique_ptr<TestServer>> server = TestServer::Start(config);
      ASSERT_TRUE(server.ok()) << server.status().message();
      addresses.push_back((*server)->target());
      servers_.push_back(*std::move(server));
    }
    target_ = absl::StrCat("ipv4:", absl::StrJoin(addresses, ","));
    absl::StatusOr<std::unique_ptr<client::ReplicaClient>> replicas =
        client::ReplicaClient::Connect(target_);
    ASSERT_TRUE(replicas.ok()) << replicas.status().message();
    replicas_ = *std::move(replicas);
  }

  // Uploads `count` rows round-robin; their ids by instance.
  std::map<std::string, std::vector<std::string>> UploadRows(int count) {
    std::map<std::string, std::vector<std::string>> by_instance;
    for (int i = 0; i < count; ++i) {
      absl::StatusOr<v1::BufferInfo> info = replicas_->Upload("row", Row({1.0 + i, 3.0}));
      EXPECT_TRUE(info.ok()) << info.status().message();
      if (info.ok()) by_instance[std::string(IssuingInstance(info->id()))].push_back(info->id());
    }
    return by_instance;
  }

  std::vector<std::unique_ptr<TestServer>> servers_;
  std::string target_;
  std::unique_ptr<client::ReplicaClient> replicas_;
};

TEST_F(ReplicaClientTest, BuffersReachTheirOwnerAndStatelessCallsSpread) {
  ASSERT_EQ(replicas_->Replicas().size(), 3u);
  const auto by_instance = UploadRows(6);
  ASSERT_EQ(by_instance.size(), 3u);
  for (const auto& [instance, ids] : by_instance) {
    EXPECT_EQ(ids.size(), 2u) << instance;
    for (const std::string& id : ids) {
      v1::NormalizeRequest normalize;
      *normalize.mutable_input() = client::BufferOperand(id);
      normalize.mutable_output()->set_keep_on_device(true);
      absl::StatusOr<client::Result> kept = replicas_->Normalize(normalize);
      ASSERT_TRUE(kept.ok()) << kept.status().message();
      const std::string& kept_id = kept->trailer.stored_buffer().id();
      EXPECT_EQ(IssuingInstance(kept_id), instance);  // kept where its input lives
      absl::StatusOr<client::Result> row = replicas_->Download(id);
      absl::StatusOr<client::Result> normalized = replicas_->Download(kept_id);
      ASSERT_TRUE(row.ok() && normalized.ok()) << row.status() << normalized.status();
      const std::vector<double> x = Values(*row);
      ExpectNear(Values(*normalized), {x[0] / (x[0] + x[1]), x[1] / (x[0] + x[1])}, 1e-15, 0);
      ASSERT_TRUE(replicas_->Delete(kept_id).ok());
    }
  }
  v1::DiscountProductRequest inline_only;
  *inline_only.mutable_factors() = client::TensorOperand(Row({2.0, 4.0}));
  *inline_only.mutable_values() = client::TensorOperand(Row({0.5, 0.25}));
  for (int i = 0; i < 6; ++i) {
    absl::StatusOr<client::Result> product = replicas_->DiscountProduct(inline_only);
    ASSERT_TRUE(product.ok()) << product.status().message();
    EXPECT_EQ(Values(*product), (std::vector<double>{1.0, 1.0}));
  }
  absl::StatusOr<v1::ListResponse> all = replicas_->List();
  ASSERT_TRUE(all.ok()) << all.status().message();
  EXPECT_EQ(all->buffers_size(), 6);
}

TEST_F(ReplicaClientTest, OperandsOnTwoReplicasAreFailedPrecondition) {
  const auto by_instance = UploadRows(2);
  ASSERT_EQ(by_instance.size(), 2u);
  v1::DiscountProductRequest request;
  *request.mutable_factors() = client::BufferOperand(by_instance.begin()->second[0]);
  *request.mutable_values() = client::BufferOperand(by_instance.rbegin()->second[0]);
  absl::StatusOr<client::Result> result = replicas_->DiscountProduct(request);
  EXPECT_EQ(result.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(result.status().message()),
              HasSubstr("the request's buffers are stored on 2 replicas"));
}

TEST_F(ReplicaClientTest, AStoppedReplicaLosesOnlyItsBuffers) {
  const auto by_instance = UploadRows(6);
  ASSERT_EQ(by_instance.size(), 3u);
  const std::string victim = replicas_->Replicas().begin()->first;
  for (auto& server : servers_) {
    if (server->server().instance_id() == victim) server.reset();
  }
  for (const auto& [instance, ids] : by_instance) {
    for (const std::string& id : ids) {
      absl::StatusOr<client::Result> row = replicas_->Download(id);
      if (instance != victim) {
        EXPECT_TRUE(row.ok()) << row.status().message();
        continue;
      }
      EXPECT_EQ(row.status().code(), absl::StatusCode::kDataLoss) << row.status().message();
      EXPECT_THAT(std::string(row.status().message()),
                  HasSubstr(absl::StrCat("buffer ", id, " was stored by replica instance ", victim,
                                         ", which none of the 2 replicas")));
    }
  }
  EXPECT_EQ(replicas_->Replicas().size(), 2u);
  EXPECT_EQ(UploadRows(4).size(), 2u);  // stateless calls go on with the survivors
}

TEST_F(ReplicaClientTest, ARestartedReplicaDoesNotTakeItsPredecessorsBuffers) {
  const auto by_instance = UploadRows(3);
  const std::string address = servers_[0]->target();
  const std::string old_instance = servers_[0]->server().instance_id();
  servers_[0].reset();
  ServerConfig config = LoopbackConfig();
  config.address = address;  // the same address, a new process: a new instance id
  absl::StatusOr<std::unique_ptr<TestServer>> successor = TestServer::Start(config);
  ASSERT_TRUE(successor.ok()) << successor.status().message();
  servers_[0] = *std::move(successor);
  ASSERT_NE(servers_[0]->server().instance_id(), old_instance);
  // The successor answers FAILED_PRECONDITION for the old ids; the client sees the
  // old instance is gone.
  absl::StatusOr<client::Result> lost = replicas_->Download(by_instance.at(old_instance)[0]);
  EXPECT_EQ(lost.status().code(), absl::StatusCode::kDataLoss) << lost.status().message();
  EXPECT_EQ(replicas_->Replicas().size(), 3u);
  EXPECT_FALSE(replicas_->Replicas().contains(old_instance));
}

TEST(ResolveReplicaTargetsTest, SplitsListsAndLooksUpNames) {
  EXPECT_EQ(*client::ResolveReplicaTargets("ipv4:127.0.0.2:1,127.0.0.3:2"),
            (std::vector<std::string>{"ipv4:127.0.0.2:1", "ipv4:127.0.0.3:2"}));
  absl::StatusOr<std::vector<std::string>> numeric =
      client::ResolveReplicaTargets("dns:///127.0.0.1:7");
  ASSERT_TRUE(numeric.ok()) << numeric.status().message();
  EXPECT_EQ(*numeric, std::vector<std::string>{"ipv4:127.0.0.1:7"});
  EXPECT_EQ(client::ResolveReplicaTargets("localhost").status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(NamedBufferIdsTest, FindsOperandsAtAnyDepth) {
  v1::HaversineGridRequest request;
  *request.mutable_points()->mutable_lat() = client::BufferOperand("a");
  *request.mutable_points()->mutable_lon() = client::TensorOperand(Row({1.0}));
  EXPECT_EQ(client::NamedBufferIds(request), std::vector<std::string>{"a"});
  v1::LombScargleRequest ls;
  *ls.mutable_x() = client::BufferOperand("x");
  *ls.mutable_weights() = client::BufferOperand("w");
  EXPECT_EQ(client::NamedBufferIds(ls), (std::vector<std::string>{"x", "w"}));
}

}  // namespace
}  // namespace gpucompute::test
