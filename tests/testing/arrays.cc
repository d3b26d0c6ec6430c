#include "tests/testing/arrays.h"

#include <string>

#include "gtest/gtest.h"
#include "tests/testing/tensors.h"

namespace gpucompute::test {

int HomeDevice(const Backend& backend) {
  const std::string name = backend.Devices().front().name;
  return name.rfind("cuda:", 0) == 0 ? std::stoi(name.substr(5)) : kHostDevice;
}

std::shared_ptr<Array> Make(Backend& backend, DType dtype, const Shape& shape, const void* host) {
  absl::StatusOr<std::shared_ptr<Array>> array =
      backend.Allocate(dtype, shape, HomeDevice(backend));
  EXPECT_TRUE(array.ok()) << array.status();
  if (!array.ok()) return nullptr;
  if (host != nullptr && (*array)->bytes() > 0) {
    const absl::Status status = backend.CopyToArray(host, 0, (*array)->bytes(), **array);
    EXPECT_TRUE(status.ok()) << status;
  }
  return *array;
}

std::shared_ptr<Array> Poisoned(Backend& backend, DType dtype, const Shape& shape) {
  std::vector<unsigned char> nan(static_cast<size_t>(ElementCount(shape)) * ElementSize(dtype),
                                 0xff);
  return Make(backend, dtype, shape, nan.data());
}

template <typename T>
std::vector<T> Read(Backend& backend, const Array& array) {
  std::vector<T> values(static_cast<size_t>(array.bytes() / sizeof(T)));
  if (!values.empty()) {
    const absl::Status status = backend.CopyFromArray(array, 0, array.bytes(), values.data());
    EXPECT_TRUE(status.ok()) << status;
  }
  return values;
}
template std::vector<float> Read<float>(Backend&, const Array&);
template std::vector<double> Read<double>(Backend&, const Array&);

}  // namespace gpucompute::test
