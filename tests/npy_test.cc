// .npy reading and writing: byte-exact round trips, files written by NumPy,
// big-endian and Fortran-ordered files read into C order, and every rejected input.
#include "client/npy.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gpucompute::client {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// Written by NumPy 1.24 (f = io.BytesIO()).
// np.save(f, np.arange(6, dtype='<f4').reshape(2, 3) * 0.5 - 1)
constexpr char kNumpyFloat32_2x3[] =
    "\223NUMPY\001\000v\000{'descr': '<f4', 'fortran_order': False, 'shape': "
    "(2, 3), }                                                          \012"
    "\000\000\200\277\000\000\000\277\000\000\000\000\000\000\000\077\000\000"
    "\200\077\000\000\300\077";

// np.save(f, np.array(1.5))
constexpr char kNumpyFloat64Scalar[] =
    "\223NUMPY\001\000v\000{'descr': '<f8', 'fortran_order': False, 'shape': "
    "(), }                                                              \012"
    "\000\000\000\000\000\000\370\077";

// np.save(f, np.zeros((0, 3)))
constexpr char kNumpyFloat64Empty0x3[] =
    "\223NUMPY\001\000v\000{'descr': '<f8', 'fortran_order': False, 'shape': "
    "(0, 3), }                                                          \012";

// np.lib.format.write_array(f, np.array([1.0, -2.25]), version=(2, 0))
constexpr char kNumpyFloat64Version2[] =
    "\223NUMPY\002\000t\000\000\000{'descr': '<f8', 'fortran_order': False, '"
    "shape': (2,), }                                                         "
    " \012\000\000\000\000\000\000\360\077\000\000\000\000\000\000\002\300";

// np.lib.format.write_array(f, np.array([3, 4], dtype='<f4'), version=(3, 0))
constexpr char kNumpyFloat32Version3[] =
    "\223NUMPY\003\000t\000\000\000{'descr': '<f4', 'fortran_order': False, '"
    "shape': (2,), }                                                         "
    " \012\000\000@@\000\000\200@";

// np.save(f, np.arange(4, dtype='<i4'))
constexpr char kNumpyInt32[] =
    "\223NUMPY\001\000v\000{'descr': '<i4', 'fortran_order': False, 'shape': "
    "(4,), }                                                            \012"
    "\000\000\000\000\001\000\000\000\002\000\000\000\003\000\000\000";

// np.save(f, np.arange(2, dtype='>f8'))
constexpr char kNumpyBigEndian[] =
    "\223NUMPY\001\000v\000{'descr': '>f8', 'fortran_order': False, 'shape': "
    "(2,), }                                                            \012"
    "\000\000\000\000\000\000\000\000\077\360\000\000\000\000\000\000";

// np.save(f, np.asfortranarray(np.arange(4.0).reshape(2, 2)))
constexpr char kNumpyFortran[] =
    "\223NUMPY\001\000v\000{'descr': '<f8', 'fortran_order': True, 'shape': ("
    "2, 2), }                                                           \012"
    "\000\000\000\000\000\000\000\000\000\000\000\000\000\000\000@\000\000"
    "\000\000\000\000\360\077\000\000\000\000\000\000\010@";

template <size_t N>
std::string Bytes(const char (&literal)[N]) {
  return std::string(literal, N - 1);
}

template <typename T>
std::vector<T> ValuesOf(const NpyArray& array) {
  std::vector<T> values(array.data.size() / sizeof(T));
  std::memcpy(values.data(), array.data.data(), array.data.size());
  return values;
}

// Replaces the first occurrence of `from` with `to`, which must be as long, so
// that the header length and padding stay valid.
std::string Patch(std::string bytes, absl::string_view from, absl::string_view to) {
  const size_t pos = bytes.find(std::string(from));
  EXPECT_NE(pos, std::string::npos) << from;
  EXPECT_EQ(from.size(), to.size());
  bytes.replace(pos, from.size(), std::string(to));
  return bytes;
}

// A version 1.0 file with `header` (padded here) and `data`.
std::string NpyWithHeader(absl::string_view header, absl::string_view data) {
  std::string text(header);
  while ((10 + text.size() + 1) % 64 != 0) text.push_back(' ');
  text.push_back('\n');
  std::string out("\x93NUMPY\x01\x00", 8);
  out.push_back(static_cast<char>(text.size() & 0xff));
  out.push_back(static_cast<char>(text.size() >> 8));
  return absl::StrCat(out, text, data);
}

// Bytes that are not all valid numbers: NaN payloads and negative zero must
// survive unchanged.
std::string PatternBytes(size_t size) {
  std::string bytes(size, '\0');
  for (size_t i = 0; i < size; ++i) bytes[i] = static_cast<char>((i * 131 + 7) & 0xff);
  return bytes;
}

class NpyRoundTripTest
    : public ::testing::TestWithParam<std::tuple<v1::DType, std::vector<int64_t>>> {};

TEST_P(NpyRoundTripTest, SerializeThenParseIsByteExact) {
  const auto& [dtype, shape] = GetParam();
  const uint64_t bytes = *ByteCount(dtype, shape);
  const std::string data = PatternBytes(bytes);

  absl::StatusOr<std::string> file = SerializeNpy(dtype, shape, data);
  ASSERT_TRUE(file.ok()) << file.status().message();
  EXPECT_EQ(file->size() - bytes, (file->size() - bytes) / 64 * 64)
      << "header not padded to a multiple of 64 bytes";
  EXPECT_EQ(file->substr(0, 8), std::string("\x93NUMPY\x01\x00", 8));

  absl::StatusOr<NpyArray> parsed = ParseNpy(*file);
  ASSERT_TRUE(parsed.ok()) << parsed.status().message();
  EXPECT_EQ(parsed->dtype, dtype);
  EXPECT_EQ(parsed->shape, shape);
  EXPECT_EQ(parsed->data, data);
}

INSTANTIATE_TEST_SUITE_P(
    DTypesAndShapes, NpyRoundTripTest,
    ::testing::Combine(::testing::Values(v1::FLOAT32, v1::FLOAT64),
                       ::testing::Values(std::vector<int64_t>{}, std::vector<int64_t>{0},
                                         std::vector<int64_t>{5}, std::vector<int64_t>{2, 3},
                                         std::vector<int64_t>{4, 0, 3},
                                         std::vector<int64_t>{3, 1, 2, 1, 2, 1, 1, 2},
                                         std::vector<int64_t>{1000, 17})));

TEST(NpySerializeTest, HeaderMatchesNumPyDictFormat) {
  const std::vector<float> values = {1.0f, 2.0f, 3.0f};
  std::string data(reinterpret_cast<const char*>(values.data()), 12);
  absl::StatusOr<std::string> file = SerializeNpy(v1::FLOAT32, std::vector<int64_t>{3}, data);
  ASSERT_TRUE(file.ok()) << file.status().message();
  const std::string header_text = "{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }";
  EXPECT_EQ(file->substr(10, header_text.size()), header_text);
  const uint16_t header_length =
      static_cast<unsigned char>((*file)[8]) | static_cast<unsigned char>((*file)[9]) << 8;
  // 10 bytes of prelude + 57 of dict + '\n' padded to the next multiple of 64.
  EXPECT_EQ(header_length, 128 - 10);
  EXPECT_EQ((*file)[10 + header_length - 1], '\n');
  EXPECT_EQ(file->substr(128), data);
}

TEST(NpySerializeTest, RejectsDataOfTheWrongSize) {
  absl::StatusOr<std::string> file =
      SerializeNpy(v1::FLOAT64, std::vector<int64_t>{2, 3}, std::string(40, '\0'));
  ASSERT_FALSE(file.ok());
  EXPECT_EQ(file.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(file.status().message(), HasSubstr("needs 48 bytes, got 40"));
}

TEST(NpySerializeTest, RejectsRankAboveEight) {
  absl::StatusOr<std::string> file =
      SerializeNpy(v1::FLOAT32, std::vector<int64_t>(9, 1), std::string(4, '\0'));
  ASSERT_FALSE(file.ok());
  EXPECT_THAT(file.status().message(), HasSubstr("rank 9"));
}

TEST(NpySerializeTest, RejectsUnspecifiedDType) {
  absl::StatusOr<std::string> file =
      SerializeNpy(v1::DTYPE_UNSPECIFIED, std::vector<int64_t>{1}, std::string(4, '\0'));
  ASSERT_FALSE(file.ok());
  EXPECT_EQ(file.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(NpyNumPyFilesTest, Float32Matrix) {
  absl::StatusOr<NpyArray> array = ParseNpy(Bytes(kNumpyFloat32_2x3));
  ASSERT_TRUE(array.ok()) << array.status().message();
  EXPECT_EQ(array->dtype, v1::FLOAT32);
  EXPECT_THAT(array->shape, ElementsAre(2, 3));
  EXPECT_THAT(ValuesOf<float>(*array), ElementsAre(-1.0f, -0.5f, 0.0f, 0.5f, 1.0f, 1.5f));
}

TEST(NpyNumPyFilesTest, Float64Scalar) {
  absl::StatusOr<NpyArray> array = ParseNpy(Bytes(kNumpyFloat64Scalar));
  ASSERT_TRUE(array.ok()) << array.status().message();
  EXPECT_EQ(array->dtype, v1::FLOAT64);
  EXPECT_TRUE(array->shape.empty());
  EXPECT_THAT(ValuesOf<double>(*array), ElementsAre(1.5));
}

TEST(NpyNumPyFilesTest, EmptyAxis) {
  absl::StatusOr<NpyArray> array = ParseNpy(Bytes(kNumpyFloat64Empty0x3));
  ASSERT_TRUE(array.ok()) << array.status().message();
  EXPECT_THAT(array->shape, ElementsAre(0, 3));
  EXPECT_TRUE(array->data.empty());
}

TEST(NpyNumPyFilesTest, Version2) {
  absl::StatusOr<NpyArray> array = ParseNpy(Bytes(kNumpyFloat64Version2));
  ASSERT_TRUE(array.ok()) << array.status().message();
  EXPECT_THAT(array->shape, ElementsAre(2));
  EXPECT_THAT(ValuesOf<double>(*array), ElementsAre(1.0, -2.25));
}

TEST(NpyNumPyFilesTest, Version3) {
  absl::StatusOr<NpyArray> array = ParseNpy(Bytes(kNumpyFloat32Version3));
  ASSERT_TRUE(array.ok()) << array.status().message();
  EXPECT_EQ(array->dtype, v1::FLOAT32);
  EXPECT_THAT(ValuesOf<float>(*array), ElementsAre(3.0f, 4.0f));
}

TEST(NpyNumPyFilesTest, NotApplicableAndNativeByteOrderMeanLittleEndian) {
  absl::StatusOr<NpyArray> pipe = ParseNpy(Patch(Bytes(kNumpyFloat32_2x3), "'<f4'", "'|f4'"));
  ASSERT_TRUE(pipe.ok()) << pipe.status().message();
  EXPECT_EQ(pipe->dtype, v1::FLOAT32);
  EXPECT_THAT(ValuesOf<float>(*pipe), ElementsAre(-1.0f, -0.5f, 0.0f, 0.5f, 1.0f, 1.5f));

  absl::StatusOr<NpyArray> native = ParseNpy(Patch(Bytes(kNumpyFloat64Scalar), "'<f8'", "'=f8'"));
  ASSERT_TRUE(native.ok()) << native.status().message();
  EXPECT_EQ(native->dtype, v1::FLOAT64);
  EXPECT_THAT(ValuesOf<double>(*native), ElementsAre(1.5));
}

TEST(NpyNumPyFilesTest, OtherPythonLiteralSpellings) {
  // Keys in another order, double quotes, no spaces, Python 2 long extents.
  const std::string data(16, '\0');
  absl::StatusOr<NpyArray> array =
      ParseNpy(NpyWithHeader("{\"shape\":(2L,),\"fortran_order\":False,\"descr\":\"<f8\"}", data));
  ASSERT_TRUE(array.ok()) << array.status().message();
  EXPECT_EQ(array->dtype, v1::FLOAT64);
  EXPECT_THAT(array->shape, ElementsAre(2));
}

class NpyErrorTest : public ::testing::Test {
 protected:
  static void ExpectError(const std::string& bytes, absl::StatusCode code,
                          const std::string& message_part) {
    absl::StatusOr<NpyArray> array = ParseNpy(bytes);
    ASSERT_FALSE(array.ok()) << "parsed although it should fail with: " << message_part;
    EXPECT_EQ(array.status().code(), code) << array.status().message();
    EXPECT_THAT(array.status().message(), HasSubstr(message_part));
  }
};

TEST_F(NpyErrorTest, BadMagic) {
  std::string bytes = Bytes(kNumpyFloat32_2x3);
  bytes[1] = 'X';
  ExpectError(bytes, absl::StatusCode::kInvalidArgument, "bad magic");
  ExpectError("", absl::StatusCode::kInvalidArgument, "bad magic");
  ExpectError("PK\x03\x04 a zip file", absl::StatusCode::kInvalidArgument, "bad magic");
}

TEST_F(NpyErrorTest, UnsupportedVersion) {
  std::string bytes = Bytes(kNumpyFloat32_2x3);
  bytes[6] = 4;
  ExpectError(bytes, absl::StatusCode::kInvalidArgument, "version 4.0");
}

TEST_F(NpyErrorTest, UnsupportedDType) {
  ExpectError(Bytes(kNumpyInt32), absl::StatusCode::kInvalidArgument,
              "unsupported dtype '<i4' (supported: float32 and float64 in either byte order, "
              "'<f4', '<f8', '>f4', '>f8'): gpucompute computes in float32 or float64; convert "
              "with arr.astype(np.float32) or arr.astype(np.float64)");
  ExpectError(Patch(Bytes(kNumpyFloat32_2x3), "'<f4'", "'<f2'"), absl::StatusCode::kInvalidArgument,
              "unsupported dtype '<f2'");
  ExpectError(Patch(Bytes(kNumpyBigEndian), "'>f8'", "'>i8'"), absl::StatusCode::kInvalidArgument,
              "unsupported dtype '>i8'");
  ExpectError(Patch(Bytes(kNumpyBigEndian), "'>f8'", "'<c8'"), absl::StatusCode::kInvalidArgument,
              "unsupported dtype '<c8'");
  ExpectError(NpyWithHeader("{'descr': [('a', '<f8')], 'fortran_order': False, 'shape': (1,), }",
                            std::string(8, '\0')),
              absl::StatusCode::kInvalidArgument, "structured");
}

TEST_F(NpyErrorTest, TruncatedData) {
  const std::string bytes = Bytes(kNumpyFloat32_2x3);
  ExpectError(bytes.substr(0, bytes.size() - 3), absl::StatusCode::kDataLoss,
              "float32 (2, 3) needs 24 bytes, found 21");
}

TEST_F(NpyErrorTest, TruncatedHeader) {
  const std::string bytes = Bytes(kNumpyFloat32_2x3);
  ExpectError(bytes.substr(0, 50), absl::StatusCode::kDataLoss,
              "truncated .npy header: needs 128 bytes, found 50");
  ExpectError(bytes.substr(0, 9), absl::StatusCode::kDataLoss, "missing header length");
  ExpectError(bytes.substr(0, 7), absl::StatusCode::kDataLoss, "missing format version");
}

TEST_F(NpyErrorTest, TrailingBytes) {
  ExpectError(Bytes(kNumpyFloat32_2x3) + "xyz", absl::StatusCode::kInvalidArgument,
              "3 bytes after the data");
}

TEST_F(NpyErrorTest, RankAboveEight) {
  ExpectError(
      NpyWithHeader(
          "{'descr': '<f4', 'fortran_order': False, 'shape': (1, 1, 1, 1, 1, 1, 1, 1, 1), }",
          std::string(4, '\0')),
      absl::StatusCode::kInvalidArgument, "rank 9 exceeds the limit of 8");
}

TEST_F(NpyErrorTest, MalformedHeaders) {
  const std::string data(8, '\0');
  ExpectError(NpyWithHeader("{'descr': '<f8', 'fortran_order': False}", data),
              absl::StatusCode::kInvalidArgument, "missing key 'shape'");
  ExpectError(
      NpyWithHeader("{'descr': '<f8', 'fortran_order': False, 'shape': (1,), 'x': 1}", data),
      absl::StatusCode::kInvalidArgument, "unexpected key 'x'");
  ExpectError(NpyWithHeader(
                  "{'descr': '<f8', 'descr': '<f8', 'fortran_order': False, 'shape': (1,)}", data),
              absl::StatusCode::kInvalidArgument, "duplicate key 'descr'");
  ExpectError(NpyWithHeader("{'descr': '<f8', 'fortran_order': false, 'shape': (1,)}", data),
              absl::StatusCode::kInvalidArgument, "expected True or False");
  ExpectError(NpyWithHeader("{'descr': '<f8', 'fortran_order': False, 'shape': (-1,)}", data),
              absl::StatusCode::kInvalidArgument, "negative extent");
  ExpectError(NpyWithHeader("{'descr': '<f8', 'fortran_order': False, 'shape': (1)}", data),
              absl::StatusCode::kInvalidArgument, "trailing comma");
  ExpectError(NpyWithHeader("{'descr': '<f8', 'fortran_order': False, 'shape': [1]}", data),
              absl::StatusCode::kInvalidArgument, "expected a tuple");
  ExpectError(NpyWithHeader("{'descr': '<f8', 'fortran_order': False, 'shape': (1,)", data),
              absl::StatusCode::kInvalidArgument, "expected ',' or '}'");
  ExpectError(NpyWithHeader("{'descr': '<f8', 'fortran_order': False, 'shape': (1,)} x", data),
              absl::StatusCode::kInvalidArgument, "unexpected text after the dict");
  ExpectError(NpyWithHeader("{'descr: '<f8'}", data), absl::StatusCode::kInvalidArgument,
              "malformed .npy header");
  ExpectError(NpyWithHeader("{'descr': '<f8', 'fortran_order': False, "
                            "'shape': (99999999999999999999,)}",
                            data),
              absl::StatusCode::kInvalidArgument, "overflows int64");
  ExpectError(NpyWithHeader("{'descr': '<f8', 'fortran_order': False, "
                            "'shape': (4294967296, 4294967296)}",
                            data),
              absl::StatusCode::kInvalidArgument, "too large");
}

// Big-endian and Fortran-ordered files are read into little-endian C order,
// as the Python client converts such arrays before sending them.
TEST(NpyNumPyFilesTest, BigEndian) {
  absl::StatusOr<NpyArray> array = ParseNpy(Bytes(kNumpyBigEndian));
  ASSERT_TRUE(array.ok()) << array.status().message();
  EXPECT_EQ(array->dtype, v1::FLOAT64);
  EXPECT_THAT(ValuesOf<double>(*array), ElementsAre(0.0, 1.0));
}

TEST(NpyNumPyFilesTest, FortranOrder) {
  absl::StatusOr<NpyArray> array = ParseNpy(Bytes(kNumpyFortran));
  ASSERT_TRUE(array.ok()) << array.status().message();
  EXPECT_THAT(array->shape, ElementsAre(2, 2));
  EXPECT_THAT(ValuesOf<double>(*array), ElementsAre(0.0, 1.0, 2.0, 3.0));
}

// Swapping must move bytes, not convert values: NaN payloads and -0 survive.
TEST(NpyLayoutTest, BigEndianSwapIsBitExact) {
  const std::string little = PatternBytes(4 * 6);
  for (const char* descr : {"'>f4'", "'>f8'"}) {
    const size_t element_bytes = descr[3] == '4' ? 4 : 8;
    std::string big = little;
    for (size_t i = 0; i < big.size(); i += element_bytes) {
      std::reverse(big.begin() + i, big.begin() + i + element_bytes);
    }
    absl::StatusOr<NpyArray> array = ParseNpy(
        NpyWithHeader(absl::StrCat("{'descr': ", descr, ", 'fortran_order': False, 'shape': (",
                                   little.size() / element_bytes, ",), }"),
                      big));
    ASSERT_TRUE(array.ok()) << descr << ": " << array.status().message();
    EXPECT_EQ(array->data, little) << descr;
  }
}

// A (2, 3, 4) array whose element (i, j, k) is its C-order index i*12 + j*4 + k,
// written in Fortran order (i fastest), in either byte order.
template <typename T>
std::string Fortran2x3x4(bool big_endian) {
  std::string data;
  for (int k = 0; k < 4; ++k) {
    for (int j = 0; j < 3; ++j) {
      for (int i = 0; i < 2; ++i) {
        const T value = static_cast<T>(i * 12 + j * 4 + k);
        char bytes[sizeof(T)];
        std::memcpy(bytes, &value, sizeof(T));
        if (big_endian) std::reverse(std::begin(bytes), std::end(bytes));
        data.append(bytes, sizeof(T));
      }
    }
  }
  return NpyWithHeader(absl::StrCat("{'descr': '", big_endian ? ">" : "<", "f", sizeof(T),
                                    "', 'fortran_order': True, 'shape': (2, 3, 4), }"),
                       data);
}

template <typename T>
std::vector<T> Iota(size_t count) {
  std::vector<T> values(count);
  for (size_t i = 0; i < count; ++i) values[i] = static_cast<T>(i);
  return values;
}

TEST(NpyLayoutTest, FortranOrderRank3InBothByteOrders) {
  for (const bool big_endian : {false, true}) {
    absl::StatusOr<NpyArray> f32 = ParseNpy(Fortran2x3x4<float>(big_endian));
    ASSERT_TRUE(f32.ok()) << f32.status().message();
    EXPECT_EQ(f32->dtype, v1::FLOAT32);
    EXPECT_THAT(f32->shape, ElementsAre(2, 3, 4));
    EXPECT_EQ(ValuesOf<float>(*f32), Iota<float>(24)) << "big_endian " << big_endian;

    absl::StatusOr<NpyArray> f64 = ParseNpy(Fortran2x3x4<double>(big_endian));
    ASSERT_TRUE(f64.ok()) << f64.status().message();
    EXPECT_EQ(f64->dtype, v1::FLOAT64);
    EXPECT_EQ(ValuesOf<double>(*f64), Iota<double>(24)) << "big_endian " << big_endian;
  }
}

// Shapes where Fortran and C order are the same bytes, and empty arrays.
TEST(NpyLayoutTest, FortranOrderDegenerateShapes) {
  for (const std::vector<int64_t>& shape :
       {std::vector<int64_t>{}, std::vector<int64_t>{5}, std::vector<int64_t>{1, 5},
        std::vector<int64_t>{5, 1, 1}, std::vector<int64_t>{0, 3}, std::vector<int64_t>{3, 0, 2}}) {
    const std::string data = PatternBytes(*ByteCount(v1::FLOAT64, shape));
    absl::StatusOr<NpyArray> array = ParseNpy(NpyWithHeader(
        absl::StrCat("{'descr': '<f8', 'fortran_order': True, 'shape': ", ShapeToString(shape),
                     ", }"),
        data));
    ASSERT_TRUE(array.ok()) << ShapeToString(shape) << ": " << array.status().message();
    EXPECT_EQ(array->shape, shape);
    EXPECT_EQ(array->data, data) << ShapeToString(shape);
  }
}

class NpyFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           absl::StrCat("npy_test_", getpid(), "_",
                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string PathOf(absl::string_view name) const { return (dir_ / std::string(name)).string(); }

  static std::string ReadAll(const std::string& path) {
    std::ifstream file(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(file), {});
  }

  static void WriteAll(const std::string& path, const std::string& bytes) {
    std::ofstream(path, std::ios::binary) << bytes;
  }

  std::filesystem::path dir_;
};

TEST_F(NpyFileTest, WriteThenReadIsByteExact) {
  const std::vector<int64_t> shape = {3, 0, 2};
  for (const std::vector<int64_t>& s :
       {shape, std::vector<int64_t>{7, 5}, std::vector<int64_t>{}}) {
    const std::string data = PatternBytes(*ByteCount(v1::FLOAT64, s));
    const std::string path = PathOf("a.npy");
    absl::Status written = WriteNpyFile(path, v1::FLOAT64, s, data);
    ASSERT_TRUE(written.ok()) << written.message();
    EXPECT_EQ(ReadAll(path), *SerializeNpy(v1::FLOAT64, s, data));
    absl::StatusOr<NpyArray> array = ReadNpyFile(path);
    ASSERT_TRUE(array.ok()) << array.status().message();
    EXPECT_EQ(array->shape, s);
    EXPECT_EQ(array->data, data);
  }
}

TEST_F(NpyFileTest, ReadsNumPyFile) {
  const std::string path = PathOf("numpy.npy");
  WriteAll(path, Bytes(kNumpyFloat64Version2));
  absl::StatusOr<NpyArray> array = ReadNpyFile(path);
  ASSERT_TRUE(array.ok()) << array.status().message();
  EXPECT_THAT(ValuesOf<double>(*array), ElementsAre(1.0, -2.25));
}

TEST_F(NpyFileTest, ReadsBigEndianFortranFile) {
  const std::string path = PathOf("fortran.npy");
  WriteAll(path, Fortran2x3x4<double>(/*big_endian=*/true));
  absl::StatusOr<NpyArray> array = ReadNpyFile(path);
  ASSERT_TRUE(array.ok()) << array.status().message();
  EXPECT_THAT(array->shape, ElementsAre(2, 3, 4));
  EXPECT_EQ(ValuesOf<double>(*array), Iota<double>(24));
}

TEST_F(NpyFileTest, ErrorsNameThePath) {
  const std::string path = PathOf("short.npy");
  const std::string bytes = Bytes(kNumpyFloat32_2x3);
  WriteAll(path, bytes.substr(0, bytes.size() - 8));
  absl::StatusOr<NpyArray> array = ReadNpyFile(path);
  ASSERT_FALSE(array.ok());
  EXPECT_EQ(array.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(array.status().message(), HasSubstr(path));
  EXPECT_THAT(array.status().message(), HasSubstr("needs 24 bytes, found 16"));

  WriteAll(path, Bytes(kNumpyInt32));
  array = ReadNpyFile(path);
  ASSERT_FALSE(array.ok());
  EXPECT_THAT(array.status().message(), HasSubstr("unsupported dtype '<i4'"));
}

TEST_F(NpyFileTest, MissingFileIsNotFound) {
  absl::StatusOr<NpyArray> array = ReadNpyFile(PathOf("absent.npy"));
  ASSERT_FALSE(array.ok());
  EXPECT_EQ(array.status().code(), absl::StatusCode::kNotFound) << array.status().message();
  EXPECT_THAT(array.status().message(), HasSubstr("absent.npy"));
}

TEST_F(NpyFileTest, DirectoryIsRejected) {
  absl::StatusOr<NpyArray> array = ReadNpyFile(dir_.string());
  ASSERT_FALSE(array.ok());
  EXPECT_EQ(array.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(NpyFileTest, WriteIntoMissingDirectoryFails) {
  absl::Status written =
      WriteNpyFile(PathOf("no/such/dir.npy"), v1::FLOAT32, std::vector<int64_t>{}, "abcd");
  EXPECT_EQ(written.code(), absl::StatusCode::kNotFound) << written.message();
}

}  // namespace
}  // namespace gpucompute::client
