// out = factors * values with NumPy broadcasting.
//
// Axes that are contiguous in both operands are merged first, so the seed case,
// factors (M, O) over values (D, M, O), becomes a (D, M*O) walk whose inner
// loop is a plain vectorized a[i] * b[i]. Anything else falls back to the
// strided inner loop. Work is split over output element ranges, so one long
// inner axis is shared by all threads as well as many short ones.
#include <array>

#include "common/status_macros.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/shape_rules.h"

namespace gpucompute::cpu {
namespace {

// The output iteration space after merging axes; outermost axis first.
struct Walk {
  int rank = 0;
  std::array<int64_t, kMaxRank> extents{};
  std::array<int64_t, kMaxRank> a_strides{};  // in elements; 0 on broadcast axes
  std::array<int64_t, kMaxRank> b_strides{};
};

// Drops size-1 axes and merges an axis into the next inner one when both
// operands step through them as one contiguous run.
Walk MergeAxes(const Shape& out, const std::vector<int64_t>& a_strides,
               const std::vector<int64_t>& b_strides) {
  Walk walk;
  for (size_t axis = 0; axis < out.size(); ++axis) {
    if (out[axis] == 1) continue;
    walk.extents[walk.rank] = out[axis];
    walk.a_strides[walk.rank] = a_strides[axis];
    walk.b_strides[walk.rank] = b_strides[axis];
    ++walk.rank;
  }
  if (walk.rank == 0) {  // a single element
    walk.rank = 1;
    walk.extents[0] = 1;
    return walk;
  }
  int merged = 0;
  for (int axis = 1; axis < walk.rank; ++axis) {
    const int64_t extent = walk.extents[axis];
    const bool contiguous = walk.a_strides[merged] == walk.a_strides[axis] * extent &&
                            walk.b_strides[merged] == walk.b_strides[axis] * extent;
    if (contiguous) {
      walk.extents[merged] *= extent;
      walk.a_strides[merged] = walk.a_strides[axis];
      walk.b_strides[merged] = walk.b_strides[axis];
    } else {
      ++merged;
      walk.extents[merged] = extent;
      walk.a_strides[merged] = walk.a_strides[axis];
      walk.b_strides[merged] = walk.b_strides[axis];
    }
  }
  walk.rank = merged + 1;
  return walk;
}

// One run along the innermost axis. The unit-stride cases are separate loops
// so the compiler vectorizes them; `a` or `b` with stride 0 is a broadcast scalar.
template <typename T>
void MultiplyRun(const T* a, int64_t a_stride, const T* b, int64_t b_stride, T* out,
                 int64_t count) {
  if (a_stride == 1 && b_stride == 1) {
    for (int64_t i = 0; i < count; ++i) out[i] = a[i] * b[i];
  } else if (a_stride == 0 && b_stride == 1) {
    const T scale = a[0];
    for (int64_t i = 0; i < count; ++i) out[i] = scale * b[i];
  } else if (a_stride == 1 && b_stride == 0) {
    const T scale = b[0];
    for (int64_t i = 0; i < count; ++i) out[i] = a[i] * scale;
  } else {
    for (int64_t i = 0; i < count; ++i) out[i] = a[i * a_stride] * b[i * b_stride];
  }
}

// Output elements [begin, end) of the walk.
template <typename T>
void MultiplyRange(const Walk& walk, const T* a, const T* b, T* out, int64_t begin, int64_t end) {
  const int inner_axis = walk.rank - 1;
  const int64_t inner = walk.extents[inner_axis];
  // Multi-index of `begin` over the outer axes, and the operand offsets there.
  std::array<int64_t, kMaxRank> index{};
  int64_t a_offset = 0;
  int64_t b_offset = 0;
  int64_t outer = begin / inner;
  for (int axis = inner_axis - 1; axis >= 0; --axis) {
    index[axis] = outer % walk.extents[axis];
    outer /= walk.extents[axis];
    a_offset += index[axis] * walk.a_strides[axis];
    b_offset += index[axis] * walk.b_strides[axis];
  }
  int64_t position = begin;
  int64_t inner_begin = begin % inner;
  while (position < end) {
    const int64_t count = std::min(inner - inner_begin, end - position);
    MultiplyRun(a + a_offset + inner_begin * walk.a_strides[inner_axis], walk.a_strides[inner_axis],
                b + b_offset + inner_begin * walk.b_strides[inner_axis], walk.b_strides[inner_axis],
                out + position, count);
    position += count;
    inner_begin = 0;
    // Next outer multi-index (odometer).
    for (int axis = inner_axis - 1; axis >= 0; --axis) {
      a_offset += walk.a_strides[axis];
      b_offset += walk.b_strides[axis];
      if (++index[axis] < walk.extents[axis]) break;
      a_offset -= walk.a_strides[axis] * walk.extents[axis];
      b_offset -= walk.b_strides[axis] * walk.extents[axis];
      index[axis] = 0;
    }
  }
}

template <typename T>
absl::Status Run(ThreadPool& pool, const Walk& walk, const Array& factors, const Array& values,
                 Array& out, const OpContext& ctx) {
  const T* a = factors.data_as<T>();
  const T* b = values.data_as<T>();
  T* result = out.data_as<T>();
  return pool.ParallelFor(out.size(), GrainFor(1), ctx, [&](int64_t begin, int64_t end) {
    MultiplyRange(walk, a, b, result, begin, end);
  });
}

}  // namespace

absl::Status DiscountProduct(ThreadPool& pool, const Array& factors, const Array& values,
                             Array& out, const OpContext& ctx) {
  GC_RETURN_IF_ERROR(CheckDType(values, "values", factors.dtype()));
  GC_RETURN_IF_ERROR(CheckDType(out, "out", factors.dtype()));
  GC_ASSIGN_OR_RETURN(const Shape shape,
                      BroadcastShapes(factors.shape(), values.shape(), "factors", "values"));
  GC_RETURN_IF_ERROR(CheckShape(out, "out", shape));
  if (out.size() == 0) return absl::OkStatus();

  const Walk walk = MergeAxes(shape, BroadcastStrides(factors.shape(), shape),
                              BroadcastStrides(values.shape(), shape));
  if (factors.dtype() == DType::kFloat32) {
    return Run<float>(pool, walk, factors, values, out, ctx);
  }
  return Run<double>(pool, walk, factors, values, out, ctx);
}

}  // namespace gpucompute::cpu
