#include "server/buffer_store.h"

#include <memory>
#include <set>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/cpu/cpu_backend.h"
#include "tests/testing/arrays.h"

namespace gpucompute {
namespace {

using ::testing::HasSubstr;

class BufferStoreTest : public ::testing::Test {
 protected:
  std::shared_ptr<Array> Make(int64_t elements) {
    return test::Make(*backend_, DType::kFloat32, {elements}, nullptr);
  }

  std::unique_ptr<Backend> backend_ = CreateCpuBackend(1);
  BufferStore store_{1000};
};

TEST_F(BufferStoreTest, CommitStoresUnderAFreshUnguessableId) {
  auto reservation = store_.Reserve(400, "upload 'a'");
  ASSERT_TRUE(reservation.ok()) << reservation.status().message();
  auto stored = store_.Commit(*std::move(reservation), "a", Make(100));
  ASSERT_TRUE(stored.ok()) << stored.status().message();
  EXPECT_EQ(stored->id.size(), 32u);
  EXPECT_EQ(stored->id.find_first_not_of("0123456789abcdef"), std::string::npos);
  auto found = store_.Get(stored->id, "buffer_id");
  ASSERT_TRUE(found.ok()) << found.status().message();
  EXPECT_EQ(found->name, "a");
  EXPECT_EQ(store_.used_bytes(), 400u);
  EXPECT_EQ(store_.count(), 1u);
}

TEST_F(BufferStoreTest, IdsDoNotRepeat) {
  std::set<std::string> ids;
  for (int i = 0; i < 1000; ++i) ids.insert(NewBufferId("0a1b2c3d"));
  EXPECT_EQ(ids.size(), 1000u);
}

TEST_F(BufferStoreTest, OverQuotaIsResourceExhaustedNamingTheQuota) {
  auto first = store_.Reserve(800, "upload 'a'");
  ASSERT_TRUE(first.ok());
  auto second = store_.Reserve(300, "upload 'b'");
  EXPECT_EQ(second.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(second.status().message()),
              HasSubstr("upload 'b' needs 300 bytes but the buffer quota (buffer_quota_bytes 1000) "
                        "has 200 bytes left"));
}

TEST_F(BufferStoreTest, DroppedReservationReturnsItsBytes) {
  {
    auto reservation = store_.Reserve(1000, "x");
    ASSERT_TRUE(reservation.ok());
    EXPECT_EQ(store_.used_bytes(), 1000u);
  }
  EXPECT_EQ(store_.used_bytes(), 0u);
  EXPECT_TRUE(store_.Reserve(1000, "y").ok());
}

TEST_F(BufferStoreTest, DeleteFreesAndUnknownIdsAreNotFound) {
  auto stored = store_.Commit(*store_.Reserve(40, "a"), "a", Make(10));
  ASSERT_TRUE(stored.ok());
  auto freed = store_.Delete(stored->id);
  ASSERT_TRUE(freed.ok());
  EXPECT_EQ(*freed, 40u);
  EXPECT_EQ(store_.used_bytes(), 0u);
  EXPECT_EQ(store_.Delete(stored->id).status().code(), absl::StatusCode::kNotFound);
  auto missing = store_.Get("feed", "values.buffer_id");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(missing.status().message()),
              HasSubstr("values.buffer_id 'feed' is not a stored buffer"));
}

TEST_F(BufferStoreTest, IdsCarryTheInstanceAndForeignIdsNameTheirOwner) {
  BufferStore here(1 << 20, 0, 0, 0, "0a1b2c3d");
  BufferStore other(1 << 20, 0, 0, 0, "ffee0011");
  auto mine = here.Commit(*here.Reserve(40, "a"), "a", Make(10));
  ASSERT_TRUE(mine.ok()) << mine.status().message();
  EXPECT_EQ(mine->id.substr(0, kInstanceIdLength), "0a1b2c3d");
  EXPECT_EQ(mine->id.size(), kBufferIdLength);
  EXPECT_EQ(IssuingInstance(mine->id), "0a1b2c3d");
  EXPECT_EQ(IssuingInstance("feed"), "");
  EXPECT_EQ(IssuingInstance(std::string(32, 'G')), "");
  for (const absl::Status& status :
       {other.Get(mine->id, "input.buffer_id").status(), other.Delete(mine->id).status()}) {
    EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition) << status.message();
    EXPECT_THAT(std::string(status.message()),
                HasSubstr("was stored by replica instance 0a1b2c3d, not by this one (instance "
                          "ffee0011)"));
  }
  EXPECT_TRUE(here.Get(mine->id, "id").ok());  // the owner still has it
  // A well-formed id of this instance that was never issued is simply unknown.
  EXPECT_EQ(here.Get("0a1b2c3d" + std::string(24, '0'), "id").status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_NE(NewInstanceId(), NewInstanceId());
}

TEST_F(BufferStoreTest, ArrayOutlivesDeleteWhileARequestHoldsIt) {
  auto stored = store_.Commit(*store_.Reserve(40, "a"), "a", Make(10));
  ASSERT_TRUE(stored.ok());
  std::shared_ptr<Array> in_use = store_.Get(stored->id, "id")->array;
  ASSERT_TRUE(store_.Delete(stored->id).ok());
  in_use->data_as<float>()[9] = 1.0f;  // still valid memory
  EXPECT_EQ(in_use->size(), 10);
}

TEST_F(BufferStoreTest, ListIsInCreationOrder) {
  for (const char* name : {"first", "second", "third"}) {
    ASSERT_TRUE(store_.Commit(*store_.Reserve(4, name), name, Make(1)).ok());
  }
  const auto listed = store_.List();
  ASSERT_EQ(listed.size(), 3u);
  EXPECT_EQ(listed[0].name, "first");
  EXPECT_EQ(listed[2].name, "third");
}

}  // namespace
}  // namespace gpucompute
