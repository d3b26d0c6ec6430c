// The index arithmetic of the short-rows path (normalize_short.cuh), host and device,
// so that the CPU tests check it too (gpu_kernel_variants_test, NormalizeShortRowsLayout).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace gpucompute::cuda {

struct ShortRowsPolicy {
  static constexpr int kThreads = 256;
  static constexpr int kMinBlocksPerSm = 3;  // <= 80 registers (no spills; 4 spilled): 48 KiB of loads in flight an SM
  static constexpr int kVectorsPerLane = 4;  // 16-byte loads in flight per lane
  static constexpr int64_t kMaxCols = 32;    // a row spans at most 2 of a warp's loads
};

// Where the rows lie on the input's 16-byte grid (host and device; in and out share
// the grid's phase, LaunchShortRows makes sure).
struct ShortRowsLayout {
  int64_t head = 0;       // elements before the first 16-byte boundary
  int64_t first_row = 0;  // rows [first_row, end_row) lie wholly on whole vectors;
  int64_t end_row = 0;    // the others (at most a few at each end) are edge rows
  int64_t tile_rows = 0;  // rows per warp tile: their vectors fit kVectorsPerLane a lane
  int64_t tiles = 0;
  __host__ __device__ int64_t EdgeRows(int64_t rows) const { return first_row + rows - end_row; }
  __host__ __device__ int64_t EdgeRow(int64_t e) const { return e < first_row ? e : end_row + (e - first_row); }
};

// `misalign_elements`: the input's address modulo 16, in elements.
template <int V>
__host__ __device__ inline ShortRowsLayout ShortRowsLayoutFor(int misalign_elements, int64_t rows, int64_t cols) {
  ShortRowsLayout l;
  const int64_t n = rows * cols;
  l.head = (V - misalign_elements) % V;
  const int64_t grid_end = n > l.head ? l.head + (n - l.head) / V * V : l.head;
  l.first_row = (l.head + cols - 1) / cols;
  if (l.first_row > rows) l.first_row = rows;
  l.end_row = grid_end / cols;
  if (l.end_row < l.first_row) l.end_row = l.first_row;
  if (cols < V) l.first_row = l.end_row = rows;  // rows shorter than a vector: all edge rows
  // A tile starting up to V - 1 elements into its first vector still fits.
  l.tile_rows = (32 * ShortRowsPolicy::kVectorsPerLane * V - (V - 1)) / cols;
  l.tiles = (l.end_row - l.first_row + l.tile_rows - 1) / l.tile_rows;
  return l;
}

// A warp tile: rows [row0, row0 + rows), on the input's vectors [first_vector,
// first_vector + vectors), the first `skip` elements of which are the previous tile's.
struct ShortRowsTile {
  int64_t row0;
  int rows;
  int64_t first_vector;
  int skip;
  int vectors;
};
template <int V>
__host__ __device__ inline ShortRowsTile ShortRowsTileAt(const ShortRowsLayout& l, int64_t tile, int64_t cols) {
  ShortRowsTile t;
  t.row0 = l.first_row + tile * l.tile_rows;
  const int64_t left = l.end_row - t.row0;
  t.rows = static_cast<int>(left < l.tile_rows ? left : l.tile_rows);
  const int64_t start = t.row0 * cols - l.head;  // from the first vector's first element
  t.first_vector = start / V;
  t.skip = static_cast<int>(start - t.first_vector * V);
  t.vectors = static_cast<int>((t.skip + t.rows * cols + V - 1) / V);
  return t;
}

// An element's row within its tile and its column, stepped along the flat array.
struct RowPos {
  int row, col;
  __host__ __device__ RowPos Plus(int rows, int cols_more, int cols) const {
    RowPos a{row + rows, col + cols_more};
    if (a.col >= cols) {
      a.col -= cols;
      ++a.row;
    }
    return a;
  }
};

// Element 0 of lane `lane`'s vector in a tile's first load (row -1 and below: the
// previous tile's elements).
template <int V>
__host__ __device__ inline RowPos LaneFirst(int lane, int skip, int cols) {
  const int w = lane * V - skip + V * cols;  // >= 1: the division stays unsigned
  return {w / cols - V, w % cols};
}

// Within a warp's 32 vectors of one load (element e of the load is lane e / V's), the
// row holding the last element of the lane's vector (`last_col`: its column): the lane
// where it starts (below 0: a previous load's) and where it ends (32 or more: the next
// load's).
template <int V>
__host__ __device__ inline int RowStartLane(int lane, int last_col) {
  return (lane * V + V - 1 - last_col + 32 * V) / V - 32;  // floor division
}
template <int V>
__host__ __device__ inline int RowEndLane(int lane, int last_col, int cols) {
  return (lane * V + V - 1 - last_col + cols - 1) / V;
}

}  // namespace gpucompute::cuda
