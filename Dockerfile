# gpucompute-server and gpucompute-cli in a CUDA runtime image.
#
#   docker build -t gpucompute:latest .
#   docker run --gpus all -p 50051:50051 -p 9464:9464 gpucompute:latest
#   docker run -p 50051:50051 gpucompute:latest --backend=cpu   # no GPU
#
# Arguments after the image name are appended to the server's flags
# (--backend, --threads, --grace_period, --buffer_quota_bytes, ...).
# scripts/container_test.sh builds this file with buildah against local
# stand-in base images and runs the result on the CPU backend.

# The base image carries libcudart only; the CUDA libraries the server loads
# beyond it (libcufft) are copied from the build stage into
# /usr/local/lib/gpucompute, which is smaller than the runtime base (cuBLAS,
# cuSPARSE, NPP, ... that the server never loads).
ARG BASE_BUILD_IMAGE=nvidia/cuda:13.0.0-devel-ubuntu24.04
ARG BASE_RUNTIME_IMAGE=nvidia/cuda:13.0.0-base-ubuntu24.04

# ---------------------------------------------------------------------- build
FROM ${BASE_BUILD_IMAGE} AS build
ARG DEBIAN_FRONTEND=noninteractive
RUN apt-get update \
 && apt-get install -y --no-install-recommends \
      ca-certificates cmake make g++ pkg-config \
      libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler \
      libabsl-dev prometheus-cpp-dev libfftw3-dev \
 && rm -rf /var/lib/apt/lists/*

WORKDIR /src
COPY . .

# Ahead-of-time GPU targets (the top-level CMakeLists.txt has the same default).
ARG CUDA_ARCHITECTURES=80-real;86-real;89-real;90
# OFF: a CPU-only image (no nvcc needed). REQUIRE_CUDA=1 fails the build when
# the CUDA backend is not configured instead of silently building CPU-only.
ARG ENABLE_CUDA=ON
ARG REQUIRE_CUDA=1
ARG GIT_COMMIT=unknown
# Parallel compile jobs; empty means one per CPU.
ARG BUILD_JOBS=
RUN cmake -S . -B /build \
      -DCMAKE_BUILD_TYPE=Release \
      -DBUILD_TESTING=OFF \
      "-DGPUCOMPUTE_ENABLE_CUDA=${ENABLE_CUDA}" \
      "-DCMAKE_CUDA_ARCHITECTURES=${CUDA_ARCHITECTURES}" \
      "-DGPUCOMPUTE_GIT_COMMIT=${GIT_COMMIT}" \
      > /tmp/configure.log 2>&1 \
      || { cat /tmp/configure.log; exit 1; } \
 && cat /tmp/configure.log \
 && if [ "${REQUIRE_CUDA}" = 1 ] && ! grep -q "gpucompute: CUDA backend ON" /tmp/configure.log; then \
      echo "CUDA backend not configured (nvcc missing?); --build-arg ENABLE_CUDA=OFF --build-arg REQUIRE_CUDA=0 builds a CPU-only image" >&2; \
      exit 1; \
    fi \
 && cmake --build /build --parallel "${BUILD_JOBS:-$(nproc)}" --target gpucompute-server gpucompute-cli \
 && for b in gpucompute-server gpucompute-cli; do \
      f=$(find /build -type f -name "$b" -perm -u+x | head -n 1); \
      test -n "$f" || { echo "$b was not built" >&2; exit 1; }; \
      install -D -m 0755 -s "$f" "/opt/gpucompute/bin/$b"; \
    done \
 && sh deploy/docker/runtime-packages.sh /opt/gpucompute/bin/* > /opt/gpucompute/runtime-packages.txt \
 && echo "runtime packages:" $(cat /opt/gpucompute/runtime-packages.txt) \
 && mkdir -p /opt/gpucompute/lib \
 && ldd /opt/gpucompute/bin/* | awk '$3 ~ /^\/usr\/local\/cuda/ && $1 !~ /^libcudart/ { print $3 }' \
      | sort -u | xargs -r cp -L -t /opt/gpucompute/lib \
 && echo "CUDA libraries carried:" $(ls /opt/gpucompute/lib)

# ---------------------------------------------------------------------- runtime
FROM ${BASE_RUNTIME_IMAGE} AS runtime
ARG DEBIAN_FRONTEND=noninteractive
COPY --from=build /opt/gpucompute/runtime-packages.txt /tmp/runtime-packages.txt
RUN apt-get update \
 && xargs -a /tmp/runtime-packages.txt apt-get install -y --no-install-recommends \
 && apt-get clean \
 && rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin /var/log/apt /var/log/dpkg.log /tmp/runtime-packages.txt \
 && groupadd --system --gid 10001 gpucompute \
 && useradd --system --uid 10001 --gid 10001 --home-dir /nonexistent --no-create-home \
      --shell /usr/sbin/nologin gpucompute

COPY --from=build /opt/gpucompute/bin/ /usr/local/bin/
COPY --from=build /opt/gpucompute/lib/ /usr/local/lib/gpucompute/
RUN echo /usr/local/lib/gpucompute > /etc/ld.so.conf.d/gpucompute.conf && ldconfig
# Every library resolves, except the driver's libcuda.so.1, which the NVIDIA
# container toolkit mounts when the container gets a GPU.
RUN if ldd /usr/local/bin/gpucompute-server /usr/local/bin/gpucompute-cli \
        | grep "not found" | grep -v "libcuda.so"; then \
      echo "unresolved shared libraries" >&2; exit 1; \
    fi

ENV NVIDIA_VISIBLE_DEVICES=all \
    NVIDIA_DRIVER_CAPABILITIES=compute,utility \
    CUDA_CACHE_PATH=/tmp/cuda-cache
USER 10001:10001
WORKDIR /tmp
EXPOSE 50051 9464
HEALTHCHECK --interval=15s --timeout=5s --start-period=120s --retries=3 \
  CMD ["gpucompute-cli", "--target=localhost:50051", "health"]
ENTRYPOINT ["gpucompute-server", "--address=0.0.0.0:50051", "--metrics_address=0.0.0.0:9464"]
