// Writes the seed corpus of gpucompute_request_fuzzer: valid (and a few
// deliberately invalid) requests of every type in the fuzzer's input format
// (tests/fuzz/fuzz_common.h). Usage: gpucompute_fuzz_seeds OUT_DIR
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"
#include "gpucompute/v1/gpucompute.pb.h"
#include "tests/fuzz/fuzz_common.h"

namespace gpucompute::fuzz {
namespace {

std::string out_dir;
int written = 0;

void Write(Target target, const std::string& name, const std::string& payload) {
  std::string bytes(1, static_cast<char>(target));
  bytes += payload;
  const std::string path = out_dir + "/" + name;
  std::ofstream file(path, std::ios::binary | std::ios::trunc);
  file.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!file) {
    std::fprintf(stderr, "make_seeds: cannot write %s\n", path.c_str());
    std::exit(1);
  }
  ++written;
}

template <typename Message>
void WriteMessage(Target target, const std::string& name, const Message& message) {
  Write(target, name, message.SerializeAsString());
}

// Values 0.5 * (i + 1) * scale: valid latitudes, frequencies, weights, non-zero rows.
void Fill(v1::Tensor* t, v1::DType dtype, std::vector<int64_t> shape, double scale = 1.0) {
  t->set_dtype(dtype);
  int64_t n = 1;
  for (int64_t e : shape) {
    t->add_shape(e);
    n *= e;
  }
  std::string data;
  for (int64_t i = 0; i < n; ++i) {
    const double v = 0.5 * static_cast<double>(i + 1) * scale;
    if (dtype == v1::FLOAT32) {
      const float f = static_cast<float>(v);
      data.append(reinterpret_cast<const char*>(&f), 4);
    } else {
      data.append(reinterpret_cast<const char*>(&v), 8);
    }
  }
  t->set_data(data);
}

void DiscountProductSeeds() {
  v1::DiscountProductRequest r;
  Fill(r.mutable_factors()->mutable_tensor(), v1::FLOAT64, {2, 3});
  Fill(r.mutable_values()->mutable_tensor(), v1::FLOAT64, {4, 2, 3});
  WriteMessage(kDiscountProduct, "discount_inline_f64", r);

  r.Clear();
  Fill(r.mutable_factors()->mutable_tensor(), v1::FLOAT32, {3});
  Fill(r.mutable_values()->mutable_tensor(), v1::FLOAT32, {2, 3});
  r.mutable_output()->set_chunk_bytes(4096);
  WriteMessage(kDiscountProduct, "discount_inline_f32", r);

  r.Clear();
  r.mutable_factors()->set_buffer_id("$0");
  r.mutable_values()->set_buffer_id("$2");
  WriteMessage(kDiscountProduct, "discount_buffers", r);

  r.Clear();
  r.mutable_factors()->set_buffer_id("$5");
  r.mutable_values()->set_buffer_id("$4");
  WriteMessage(kDiscountProduct, "discount_scalar_buffer", r);

  r.Clear();
  Fill(r.mutable_factors()->mutable_tensor(), v1::FLOAT64, {3, 1});
  r.mutable_values()->set_buffer_id("$4");
  WriteMessage(kDiscountProduct, "discount_mixed", r);

  r.Clear();
  Fill(r.mutable_factors()->mutable_tensor(), v1::FLOAT64, {5, 1, 2, 1});
  Fill(r.mutable_values()->mutable_tensor(), v1::FLOAT64, {3, 1, 4});
  WriteMessage(kDiscountProduct, "discount_strided", r);

  r.Clear();
  r.mutable_factors()->set_buffer_id("$9");  // another principal's: NOT_FOUND
  r.mutable_values()->set_buffer_id("$0");
  WriteMessage(kDiscountProduct, "discount_foreign", r);

  r.Clear();
  Fill(r.mutable_factors()->mutable_tensor(), v1::FLOAT64, {3, 5});
  Fill(r.mutable_values()->mutable_tensor(), v1::FLOAT64, {2, 4, 5});
  WriteMessage(kDiscountProduct, "discount_no_broadcast", r);
}

void HaversineSeeds() {
  v1::HaversineGridRequest r;
  v1::LatLonMesh* m = r.mutable_mesh();
  m->set_lat_start(29);
  m->set_lat_stop(31);
  m->set_n_lat(10);
  m->set_lon_start(99);
  m->set_lon_stop(101);
  m->set_n_lon(10);
  v1::GeoPoint* ref = r.add_references();
  ref->set_lat(30);
  ref->set_lon(101);
  WriteMessage(kHaversineGrid, "haversine_mesh", r);

  m->set_dtype(v1::FLOAT32);
  m->set_lat_start(-90);
  m->set_lat_stop(90);
  m->set_lon_start(-180);
  m->set_lon_stop(180);
  ref = r.add_references();
  ref->set_lat(-45);
  ref->set_lon(-170);
  r.set_radius(1.0);
  WriteMessage(kHaversineGrid, "haversine_mesh_f32", r);

  r.Clear();
  Fill(r.mutable_points()->mutable_lat()->mutable_tensor(), v1::FLOAT64, {5}, 10);
  Fill(r.mutable_points()->mutable_lon()->mutable_tensor(), v1::FLOAT64, {5}, -20);
  ref = r.add_references();
  ref->set_lat(1);
  ref->set_lon(2);
  WriteMessage(kHaversineGrid, "haversine_points", r);

  r.Clear();
  r.mutable_points()->mutable_lat()->set_buffer_id("$0");
  r.mutable_points()->mutable_lon()->set_buffer_id("$0");
  ref = r.add_references();
  ref->set_lat(90);
  ref->set_lon(0);
  WriteMessage(kHaversineGrid, "haversine_points_buffers", r);

  r.Clear();
  Fill(r.mutable_points()->mutable_lat()->mutable_tensor(), v1::FLOAT32, {2, 3}, 20);
  Fill(r.mutable_points()->mutable_lon()->mutable_tensor(), v1::FLOAT32, {2, 3}, 50);
  r.add_references()->set_lat(-10);
  r.add_references()->set_lon(179);
  r.set_radius(6378.137);
  WriteMessage(kHaversineGrid, "haversine_points_f32", r);
}

void NormalizeSeeds() {
  v1::NormalizeRequest r;
  Fill(r.mutable_input()->mutable_tensor(), v1::FLOAT64, {3, 4});
  WriteMessage(kNormalize, "normalize_sum", r);

  r.Clear();
  Fill(r.mutable_input()->mutable_tensor(), v1::FLOAT32, {2, 5});
  r.set_norm(v1::NORM_L2);
  WriteMessage(kNormalize, "normalize_l2_f32", r);

  r.Clear();
  r.mutable_input()->set_buffer_id("$2");
  r.set_norm(v1::NORM_L1);
  WriteMessage(kNormalize, "normalize_l1_buffer", r);

  r.Clear();
  r.mutable_input()->set_buffer_id("$3");
  r.set_norm(v1::NORM_MAX_ABS);
  WriteMessage(kNormalize, "normalize_maxabs_buffer", r);

  r.Clear();
  r.mutable_input()->set_buffer_id("$4");
  WriteMessage(kNormalize, "normalize_rank3_buffer", r);

  r.Clear();
  Fill(r.mutable_input()->mutable_tensor(), v1::FLOAT64, {2, 2}, 0);  // zero rows: error
  WriteMessage(kNormalize, "normalize_zero_row", r);
}

void LombScargleSeeds() {
  v1::LombScargleRequest r;
  Fill(r.mutable_x()->mutable_tensor(), v1::FLOAT64, {16});
  Fill(r.mutable_y()->mutable_tensor(), v1::FLOAT64, {16}, 0.3);
  r.mutable_freq_grid()->set_start(0.1);
  r.mutable_freq_grid()->set_stop(3);
  r.mutable_freq_grid()->set_count(20);
  WriteMessage(kLombScargle, "lombscargle_grid", r);

  r.Clear();
  r.mutable_x()->set_buffer_id("$0");
  r.mutable_y()->set_buffer_id("$2");
  r.mutable_freqs()->set_buffer_id("$0");
  r.mutable_weights()->set_buffer_id("$0");
  r.set_precenter(true);
  r.set_normalize(true);
  WriteMessage(kLombScargle, "lombscargle_buffers_weights", r);

  r.Clear();
  r.mutable_x()->set_buffer_id("$1");
  r.mutable_y()->set_buffer_id("$3");
  r.mutable_weights()->set_buffer_id("$3");
  r.mutable_freq_grid()->set_start(0.5);
  r.mutable_freq_grid()->set_stop(5);
  r.mutable_freq_grid()->set_count(7);
  r.set_floating_mean(true);
  WriteMessage(kLombScargle, "lombscargle_f32_floating_mean", r);

  r.Clear();
  Fill(r.mutable_x()->mutable_tensor(), v1::FLOAT64, {2, 8});
  Fill(r.mutable_y()->mutable_tensor(), v1::FLOAT64, {2, 8}, -1);
  Fill(r.mutable_freqs()->mutable_tensor(), v1::FLOAT64, {5});
  r.set_normalize(true);
  WriteMessage(kLombScargle, "lombscargle_batched_freqs", r);

  r.Clear();
  Fill(r.mutable_x()->mutable_tensor(), v1::FLOAT64, {4});
  Fill(r.mutable_y()->mutable_tensor(), v1::FLOAT64, {4});
  Fill(r.mutable_weights()->mutable_tensor(), v1::FLOAT64, {4}, 0);  // zero sum: error
  r.mutable_freq_grid()->set_start(1);
  r.mutable_freq_grid()->set_stop(2);
  r.mutable_freq_grid()->set_count(3);
  WriteMessage(kLombScargle, "lombscargle_zero_weights", r);
}

// Upload streams: records "tag 0x0a, length, UploadRequest"; "0x10 0x00" ends a stream.
class UploadWriter {
 public:
  void Header(v1::DType dtype, std::vector<int64_t> shape, const std::string& name) {
    v1::UploadRequest r;
    r.mutable_header()->set_dtype(dtype);
    for (int64_t e : shape) r.mutable_header()->add_shape(e);
    r.mutable_header()->set_name(name);
    Add(r);
  }
  void Data(const std::string& bytes) {
    v1::UploadRequest r;
    r.set_data(bytes);
    Add(r);
  }
  void NextStream() { out_ += std::string("\x10\x00", 2); }
  const std::string& bytes() const { return out_; }

 private:
  void Add(const v1::UploadRequest& r) {
    const std::string m = r.SerializeAsString();
    google::protobuf::io::StringOutputStream stream(&out_);
    google::protobuf::io::CodedOutputStream coded(&stream);
    coded.WriteTag(0x0a);
    coded.WriteVarint32(static_cast<uint32_t>(m.size()));
    coded.WriteString(m);
  }
  std::string out_;
};

void UploadSeeds() {
  {
    UploadWriter w;
    w.Header(v1::FLOAT64, {2, 3}, "a");
    w.Data(std::string(24, '\x01'));
    w.Data(std::string(24, '\x02'));
    Write(kUpload, "upload_one", w.bytes());
  }
  {
    UploadWriter w;
    w.Header(v1::FLOAT32, {4}, "alice's");
    w.Data(std::string(16, 'a'));
    w.NextStream();
    w.Header(v1::FLOAT64, {2}, "bob's");
    w.Data(std::string(8, 'b'));
    w.Data(std::string(8, 'c'));
    w.NextStream();
    w.Data(std::string(8, 'd'));  // data before the header: INVALID_ARGUMENT
    Write(kUpload, "upload_streams", w.bytes());
  }
  {
    UploadWriter w;
    w.Header(v1::FLOAT64, {100000}, "over the principal quota");
    w.NextStream();
    w.Header(v1::FLOAT32, {3}, "short");
    w.Data(std::string(4, 'x'));
    Write(kUpload, "upload_quota_short", w.bytes());
  }
}

void StreamingSeeds() {
  v1::StreamingComputeRequest discount;
  v1::StreamingComputeHeader* h = discount.mutable_header();
  h->set_operation(v1::STREAMING_DISCOUNT_PRODUCT);
  h->set_dtype(v1::FLOAT32);
  h->add_shape(10);
  h->add_shape(4);
  Fill(h->mutable_factors()->mutable_tensor(), v1::FLOAT32, {4});
  WriteMessage(kStreaming, "streaming_discount", discount);
  v1::StreamingComputeRequest points;
  h = points.mutable_header();
  h->set_operation(v1::STREAMING_HAVERSINE_POINTS);
  h->set_dtype(v1::FLOAT64);
  h->add_shape(7);
  h->add_shape(3);
  h->add_references()->set_lat(10);
  h->add_references()->set_lon(-20);
  WriteMessage(kStreaming, "streaming_haversine_points", points);
  v1::StreamingComputeRequest normalize;
  h = normalize.mutable_header();
  h->set_operation(v1::STREAMING_NORMALIZE);
  h->set_dtype(v1::FLOAT64);
  h->add_shape(3);
  h->add_shape(5);
  h->add_shape(6);
  h->set_norm(v1::NORM_L2);
  WriteMessage(kStreaming, "streaming_normalize", normalize);
}

}  // namespace
}  // namespace gpucompute::fuzz

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUT_DIR\n", argv[0]);
    return 2;
  }
  using namespace gpucompute::fuzz;
  out_dir = argv[1];
  DiscountProductSeeds();
  HaversineSeeds();
  NormalizeSeeds();
  LombScargleSeeds();
  UploadSeeds();
  StreamingSeeds();
  std::printf("make_seeds: wrote %d seeds to %s\n", written, out_dir.c_str());
  return 0;
}
