#include "client/npy.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "common/error_reason.h"
#include "common/status_macros.h"

namespace gpucompute::client {
namespace {

// File layout: magic, major, minor version bytes, the header length (2 bytes
// little-endian in version 1.0, 4 bytes in 2.0 and 3.0), then the header: a
// Python dict literal padded with spaces and ending in '\n'; then the data.
constexpr absl::string_view kMagic = "\x93NUMPY";
constexpr size_t kHeaderAlignment = 64;
constexpr size_t kMaxPreludeBytes = 12;  // magic + version + 4-byte length
constexpr absl::string_view kSupportedDescrs =
    "supported: float32 and float64 in either byte order, '<f4', '<f8', '>f4', '>f8'";

// The fixed-size prelude before the header text, and the header's length.
struct Prelude {
  size_t prelude_bytes = 0;
  size_t header_bytes = 0;
  size_t DataOffset() const { return prelude_bytes + header_bytes; }
};

absl::StatusOr<Prelude> ParsePrelude(absl::string_view bytes) {
  if (bytes.size() < kMagic.size() || bytes.substr(0, kMagic.size()) != kMagic) {
    return absl::InvalidArgumentError("not a .npy file: bad magic (expected \"\\x93NUMPY\")");
  }
  if (bytes.size() < kMagic.size() + 2) {
    return absl::DataLossError("truncated .npy file: missing format version");
  }
  const auto major = static_cast<unsigned char>(bytes[6]);
  const auto minor = static_cast<unsigned char>(bytes[7]);
  if (major < 1 || major > 3 || minor != 0) {
    return absl::InvalidArgumentError(absl::StrCat("unsupported .npy format version ", major, ".",
                                                   minor, " (supported: 1.0, 2.0, 3.0)"));
  }
  Prelude prelude;
  const size_t length_bytes = major == 1 ? 2 : 4;
  prelude.prelude_bytes = kMagic.size() + 2 + length_bytes;
  if (bytes.size() < prelude.prelude_bytes) {
    return absl::DataLossError("truncated .npy file: missing header length");
  }
  for (size_t i = 0; i < length_bytes; ++i) {
    prelude.header_bytes |= static_cast<size_t>(static_cast<unsigned char>(bytes[8 + i]))
                            << (8 * i);
  }
  return prelude;
}

// The header dict: {'descr': '<f8', 'fortran_order': False, 'shape': (2, 3), }
// Only the Python literal forms NumPy writes are understood: quoted strings,
// True/False and tuples of non-negative integers.
class HeaderParser {
 public:
  explicit HeaderParser(absl::string_view text) : text_(text) {}

  struct Fields {
    std::string descr;
    bool fortran_order = false;
    Shape shape;
  };

  absl::StatusOr<Fields> Parse() {
    Fields fields;
    bool have_descr = false, have_fortran_order = false, have_shape = false;
    SkipSpace();
    if (!Consume('{')) return Error("expected '{'");
    while (true) {
      SkipSpace();
      if (Consume('}')) break;
      GC_ASSIGN_OR_RETURN(const std::string key, ParseString());
      SkipSpace();
      if (!Consume(':')) return Error(absl::StrCat("expected ':' after '", key, "'"));
      SkipSpace();
      if (key == "descr") {
        if (have_descr) return Error("duplicate key 'descr'");
        if (Peek() == '[') {
          return absl::InvalidArgumentError(absl::StrCat(
              "unsupported dtype: structured arrays are not supported (", kSupportedDescrs, ")"));
        }
        GC_ASSIGN_OR_RETURN(fields.descr, ParseString());
        have_descr = true;
      } else if (key == "fortran_order") {
        if (have_fortran_order) return Error("duplicate key 'fortran_order'");
        GC_ASSIGN_OR_RETURN(fields.fortran_order, ParseBool());
        have_fortran_order = true;
      } else if (key == "shape") {
        if (have_shape) return Error("duplicate key 'shape'");
        GC_ASSIGN_OR_RETURN(fields.shape, ParseShape());
        have_shape = true;
      } else {
        return Error(absl::StrCat("unexpected key '", key, "'"));
      }
      SkipSpace();
      if (Consume(',')) continue;
      SkipSpace();
      if (Consume('}')) break;
      return Error("expected ',' or '}'");
    }
    SkipSpace();
    if (pos_ != text_.size()) return Error("unexpected text after the dict");
    if (!have_descr) return Error("missing key 'descr'");
    if (!have_fortran_order) return Error("missing key 'fortran_order'");
    if (!have_shape) return Error("missing key 'shape'");
    return fields;
  }

 private:
  char Peek() const { return pos_ < text_.size() ? text_[pos_] : '\0'; }

  bool Consume(char c) {
    if (Peek() != c) return false;
    ++pos_;
    return true;
  }

  bool ConsumeWord(absl::string_view word) {
    if (text_.substr(pos_, word.size()) != word) return false;
    pos_ += word.size();
    return true;
  }

  void SkipSpace() {
    while (pos_ < text_.size() && absl::ascii_isspace(static_cast<unsigned char>(text_[pos_]))) {
      ++pos_;
    }
  }

  absl::Status Error(absl::string_view what) const {
    return absl::InvalidArgumentError(
        absl::StrCat("malformed .npy header at offset ", pos_, ": ", what));
  }

  absl::StatusOr<std::string> ParseString() {
    const char quote = Peek();
    if (quote != '\'' && quote != '"') return Error("expected a quoted string");
    ++pos_;
    const size_t end = text_.find(quote, pos_);
    if (end == absl::string_view::npos) return Error("unterminated string");
    std::string value(text_.substr(pos_, end - pos_));
    if (value.find('\\') != std::string::npos) return Error("escapes in strings are not supported");
    pos_ = end + 1;
    return value;
  }

  absl::StatusOr<bool> ParseBool() {
    if (ConsumeWord("True")) return true;
    if (ConsumeWord("False")) return false;
    return Error("expected True or False for 'fortran_order'");
  }

  // "()", "(3,)", "(2, 3)" and "(2, 3,)"; Python 2 files may write "3L".
  absl::StatusOr<Shape> ParseShape() {
    if (!Consume('(')) return Error("expected a tuple for 'shape'");
    Shape shape;
    while (true) {
      SkipSpace();
      if (Consume(')')) break;
      GC_ASSIGN_OR_RETURN(const int64_t extent, ParseExtent());
      shape.push_back(extent);
      SkipSpace();
      if (Consume(',')) continue;
      // "(3)" is an integer in Python, not a tuple.
      if (shape.size() == 1) return Error("a 1-tuple needs a trailing comma, as in (3,)");
      if (Consume(')')) break;
      return Error("expected ',' or ')' in 'shape'");
    }
    return shape;
  }

  absl::StatusOr<int64_t> ParseExtent() {
    if (Peek() == '-') return Error("negative extent in 'shape'");
    if (!absl::ascii_isdigit(static_cast<unsigned char>(Peek()))) {
      return Error("expected an integer in 'shape'");
    }
    int64_t value = 0;
    while (absl::ascii_isdigit(static_cast<unsigned char>(Peek()))) {
      const int digit = text_[pos_] - '0';
      if (value > (std::numeric_limits<int64_t>::max() - digit) / 10) {
        return Error("extent in 'shape' overflows int64");
      }
      value = value * 10 + digit;
      ++pos_;
    }
    Consume('L');
    return value;
  }

  absl::string_view text_;
  size_t pos_ = 0;
};

// What a 'descr' says: the dtype and the byte order of its elements.
struct Descr {
  v1::DType dtype = v1::DTYPE_UNSPECIFIED;
  bool big_endian = false;
};

absl::StatusOr<Descr> ParseDescr(absl::string_view descr) {
  // '|' (not applicable) and '=' (native) both mean little-endian on this host.
  if (descr.size() == 3 && absl::string_view("<|=>").find(descr[0]) != absl::string_view::npos) {
    const bool big_endian = descr[0] == '>';
    if (descr.substr(1) == "f4") return Descr{v1::FLOAT32, big_endian};
    if (descr.substr(1) == "f8") return Descr{v1::FLOAT64, big_endian};
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unsupported dtype '", descr, "' (", kSupportedDescrs,
                   "): gpucompute computes in float32 or float64; convert with "
                   "arr.astype(np.float32) or arr.astype(np.float64)"));
}

absl::string_view DescrOf(v1::DType dtype) { return dtype == v1::FLOAT32 ? "<f4" : "<f8"; }

// What the prelude and header say about the data that follows.
struct Header {
  v1::DType dtype = v1::DTYPE_UNSPECIFIED;
  Shape shape;
  size_t data_offset = 0;
  uint64_t data_bytes = 0;
  bool big_endian = false;
  bool fortran_order = false;
};

// DATA_LOSS when a file of `file_bytes` ends inside the header.
absl::Status CheckHeaderSize(const Prelude& prelude, uint64_t file_bytes) {
  if (file_bytes < prelude.DataOffset()) {
    return absl::DataLossError(absl::StrCat("truncated .npy header: needs ", prelude.DataOffset(),
                                            " bytes, found ", file_bytes));
  }
  return absl::OkStatus();
}

// DATA_LOSS or INVALID_ARGUMENT when `available` bytes of data are not what the
// header declares.
absl::Status CheckDataSize(const Header& header, uint64_t available) {
  if (available < header.data_bytes) {
    return absl::DataLossError(absl::StrCat("truncated .npy data: ", DTypeName(header.dtype), " ",
                                            ShapeToString(header.shape), " needs ",
                                            header.data_bytes, " bytes, found ", available));
  }
  if (available > header.data_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(".npy file has ", available - header.data_bytes, " bytes after the data (",
                     DTypeName(header.dtype), " ", ShapeToString(header.shape), " needs ",
                     header.data_bytes, ")"));
  }
  return absl::OkStatus();
}

// `header_text` is the header after the prelude, exactly prelude.header_bytes
// long, of a file of `file_bytes` (at least prelude.DataOffset()).
absl::StatusOr<Header> ParseHeader(const Prelude& prelude, absl::string_view header_text,
                                   uint64_t file_bytes) {
  GC_ASSIGN_OR_RETURN(HeaderParser::Fields fields, HeaderParser(header_text).Parse());
  GC_ASSIGN_OR_RETURN(const Descr descr, ParseDescr(fields.descr));
  if (fields.shape.size() > kNpyMaxRank) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", fields.shape.size(), " exceeds the limit of ", kNpyMaxRank));
  }
  GC_ASSIGN_OR_RETURN(const uint64_t data_bytes, ByteCount(descr.dtype, fields.shape));
  Header header{.dtype = descr.dtype,
                .shape = std::move(fields.shape),
                .data_offset = prelude.DataOffset(),
                .data_bytes = data_bytes,
                .big_endian = descr.big_endian,
                .fortran_order = fields.fortran_order};
  GC_RETURN_IF_ERROR(CheckDataSize(header, file_bytes - header.data_offset));
  return header;
}

uint32_t ByteSwapped(uint32_t value) { return __builtin_bswap32(value); }
uint64_t ByteSwapped(uint64_t value) { return __builtin_bswap64(value); }

// Reverses the bytes of every element in place: one pass, no second buffer.
template <typename Element>
void SwapBytes(std::string& data) {
  for (size_t offset = 0; offset < data.size(); offset += sizeof(Element)) {
    Element value;
    std::memcpy(&value, data.data() + offset, sizeof(Element));
    value = ByteSwapped(value);
    std::memcpy(data.data() + offset, &value, sizeof(Element));
  }
}

// Fortran order (first axis fastest) and C order (last axis fastest) are the
// same bytes when at most one axis has more than one element.
bool LayoutsCoincide(std::span<const int64_t> shape) {
  return std::count_if(shape.begin(), shape.end(), [](int64_t extent) { return extent > 1; }) <= 1;
}

// Gathers Fortran-ordered data into C order: a strided pass into a second
// buffer as large as the data, so reading takes twice the array's memory.
template <typename Element>
std::string FortranToC(absl::string_view data, std::span<const int64_t> shape) {
  const size_t rank = shape.size();
  // How far one step along each axis moves in the Fortran-ordered input, in elements.
  std::vector<uint64_t> input_stride(rank);
  uint64_t stride = 1;
  for (size_t axis = 0; axis < rank; ++axis) {
    input_stride[axis] = stride;
    stride *= static_cast<uint64_t>(shape[axis]);
  }
  std::string out(data.size(), '\0');
  std::vector<int64_t> index(rank, 0);  // of the output element, in C order
  uint64_t from = 0;
  for (size_t to = 0; to < out.size(); to += sizeof(Element)) {
    std::memcpy(out.data() + to, data.data() + from * sizeof(Element), sizeof(Element));
    for (size_t axis = rank; axis-- > 0;) {
      from += input_stride[axis];
      if (++index[axis] < shape[axis]) break;
      from -= input_stride[axis] * static_cast<uint64_t>(shape[axis]);
      index[axis] = 0;
    }
  }
  return out;
}

template <typename Element>
void ToLittleEndianCOrder(const Header& header, std::string& data) {
  if (header.big_endian) SwapBytes<Element>(data);
  if (header.fortran_order && !LayoutsCoincide(header.shape)) {
    data = FortranToC<Element>(data, header.shape);
  }
}

// Brings `data`, laid out as `header` says, to the little-endian C order that
// NpyArray holds.
void ToLittleEndianCOrder(const Header& header, std::string& data) {
  if (header.dtype == v1::FLOAT32) {
    ToLittleEndianCOrder<uint32_t>(header, data);
  } else {
    ToLittleEndianCOrder<uint64_t>(header, data);
  }
}

absl::StatusOr<std::string> SerializeHeader(v1::DType dtype, std::span<const int64_t> shape,
                                            uint64_t data_bytes) {
  GC_ASSIGN_OR_RETURN(const uint64_t expected, ByteCount(dtype, shape));
  if (expected != data_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(DTypeName(dtype), " ", ShapeToString(shape),
                                                   " needs ", expected, " bytes, got ",
                                                   data_bytes));
  }
  if (shape.size() > kNpyMaxRank) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", shape.size(), " exceeds the limit of ", kNpyMaxRank));
  }
  std::string dict =
      absl::StrCat("{'descr': '", DescrOf(dtype),
                   "', 'fortran_order': False, 'shape': ", ShapeToString(shape), ", }");
  // Pads dict + '\n' so that the data starts at a multiple of kHeaderAlignment.
  const auto padded_header_bytes = [&dict](size_t prelude_bytes) {
    const size_t unpadded = prelude_bytes + dict.size() + 1;
    return dict.size() + 1 + (kHeaderAlignment - unpadded % kHeaderAlignment) % kHeaderAlignment;
  };
  // Version 1.0 stores the header length in 2 bytes; 2.0 in 4.
  const bool version1 = padded_header_bytes(10) <= std::numeric_limits<uint16_t>::max();
  const size_t prelude_bytes = version1 ? 10 : 12;
  const size_t header_bytes = padded_header_bytes(prelude_bytes);
  const size_t padding = header_bytes - dict.size() - 1;

  std::string out(kMagic);
  out.push_back(static_cast<char>(version1 ? 1 : 2));
  out.push_back('\0');
  for (size_t i = 0; i < prelude_bytes - 8; ++i) {
    out.push_back(static_cast<char>((header_bytes >> (8 * i)) & 0xff));
  }
  out += dict;
  out.append(padding, ' ');
  out.push_back('\n');
  return out;
}

// For failed file operations; `errno` says why when the C library set it.
absl::Status FileError(const std::string& path, absl::string_view action) {
  const int error = errno;
  if (error == 0) return absl::DataLossError(absl::StrCat("cannot ", action, " ", path));
  const std::string message =
      absl::StrCat("cannot ", action, " ", path, ": ", std::strerror(error));
  if (error == ENOENT) return absl::NotFoundError(message);
  if (error == EACCES || error == EPERM) return absl::PermissionDeniedError(message);
  return absl::UnavailableError(message);
}

// The same failure, its message prefixed with the path.
absl::Status WithPath(const absl::Status& status, const std::string& path) {
  if (status.ok()) return status;
  return WithContext(status, path);
}

template <typename T>
absl::StatusOr<T> WithPath(absl::StatusOr<T> value, const std::string& path) {
  if (value.ok()) return value;
  return WithPath(value.status(), path);
}

// The header of a whole .npy file held in memory.
absl::StatusOr<Header> ParseFileHeader(absl::string_view file_bytes) {
  GC_ASSIGN_OR_RETURN(const Prelude prelude, ParsePrelude(file_bytes));
  GC_RETURN_IF_ERROR(CheckHeaderSize(prelude, file_bytes.size()));
  return ParseHeader(prelude, file_bytes.substr(prelude.prelude_bytes, prelude.header_bytes),
                     file_bytes.size());
}

}  // namespace

absl::StatusOr<NpyArray> ParseNpy(absl::string_view file_bytes) {
  GC_ASSIGN_OR_RETURN(Header header, ParseFileHeader(file_bytes));
  std::string data(file_bytes.substr(header.data_offset));
  ToLittleEndianCOrder(header, data);
  return NpyArray{header.dtype, std::move(header.shape), std::move(data)};
}

absl::StatusOr<NpyLayout> ParseNpyLayout(absl::string_view file_bytes) {
  GC_ASSIGN_OR_RETURN(Header header, ParseFileHeader(file_bytes));
  const bool in_place =
      !header.big_endian && (!header.fortran_order || LayoutsCoincide(header.shape));
  return NpyLayout{header.dtype, std::move(header.shape), header.data_offset, in_place};
}

absl::StatusOr<std::string> NpyHeader(v1::DType dtype, std::span<const int64_t> shape) {
  GC_ASSIGN_OR_RETURN(const uint64_t bytes, ByteCount(dtype, shape));
  return SerializeHeader(dtype, shape, bytes);
}

absl::StatusOr<std::string> SerializeNpy(v1::DType dtype, std::span<const int64_t> shape,
                                         absl::string_view data) {
  GC_ASSIGN_OR_RETURN(std::string out, SerializeHeader(dtype, shape, data.size()));
  out.append(data.data(), data.size());
  return out;
}

absl::StatusOr<NpyArray> ReadNpyFile(const std::string& path) {
  std::error_code error;
  if (std::filesystem::is_directory(path, error)) {
    return absl::InvalidArgumentError(absl::StrCat(path, " is a directory, not a .npy file"));
  }
  errno = 0;
  std::ifstream file(path, std::ios::binary | std::ios::ate);
  if (!file) return FileError(path, "open");
  const uint64_t file_size = static_cast<uint64_t>(file.tellg());
  file.seekg(0);

  // Read the prelude, then the header, then the data straight into the array.
  std::string head(std::min<uint64_t>(file_size, kMaxPreludeBytes), '\0');
  if (!file.read(head.data(), static_cast<std::streamsize>(head.size()))) {
    return FileError(path, "read");
  }
  GC_ASSIGN_OR_RETURN(const Prelude prelude, WithPath(ParsePrelude(head), path));
  GC_RETURN_IF_ERROR(WithPath(CheckHeaderSize(prelude, file_size), path));
  std::string header_text(prelude.header_bytes, '\0');
  file.seekg(static_cast<std::streamoff>(prelude.prelude_bytes));
  if (!file.read(header_text.data(), static_cast<std::streamsize>(header_text.size()))) {
    return FileError(path, "read");
  }
  GC_ASSIGN_OR_RETURN(Header header,
                      WithPath(ParseHeader(prelude, header_text, file_size), path));
  std::string data(header.data_bytes, '\0');
  if (!file.read(data.data(), static_cast<std::streamsize>(data.size()))) {
    return FileError(path, "read");
  }
  ToLittleEndianCOrder(header, data);
  return NpyArray{header.dtype, std::move(header.shape), std::move(data)};
}

absl::Status WriteNpyFile(const std::string& path, v1::DType dtype, std::span<const int64_t> shape,
                          absl::string_view data) {
  GC_ASSIGN_OR_RETURN(const std::string header,
                      WithPath(SerializeHeader(dtype, shape, data.size()), path));
  errno = 0;
  std::ofstream file(path, std::ios::binary | std::ios::trunc);
  if (!file) return FileError(path, "create");
  file.write(header.data(), static_cast<std::streamsize>(header.size()));
  file.write(data.data(), static_cast<std::streamsize>(data.size()));
  file.close();
  if (!file) return FileError(path, "write");
  return absl::OkStatus();
}

}  // namespace gpucompute::client
