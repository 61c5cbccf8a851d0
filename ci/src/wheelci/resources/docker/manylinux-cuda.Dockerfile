# A manylinux build image with a CUDA toolkit, cuDNN, ccache and the newest GCC that toolkit's nvcc accepts.
#
# Why it exists: public CUDA manylinux images miss some rows of wheelci/config/matrix.toml. The sharp case is CUDA 11.8
# for torch >= 2.7: torch is cxx11-ABI manylinux_2_28 from 2.7 on, and the only public 11.8 image
# (sameli/manylinux2014_x86_64_cuda_11.8) has a devtoolset that cannot emit the cxx11 ABI. This image is
# manylinux_2_28 + CUDA 11.8 + gcc-toolset-11 (nvcc 11.8 rejects GCC > 11) + cuDNN 9.
#
# Build it through the matrix, which supplies every argument:   python -m ci.image build --cuda 11.8
ARG BASE=quay.io/pypa/manylinux_2_28_x86_64
FROM ${BASE}

ARG CUDA_VERSION
ARG CUDA_PKG
ARG GCC_TOOLSET
ARG CUDNN_PKG
ARG CUDA_REPO=https://developer.download.nvidia.com/compute/cuda/repos/rhel8/x86_64/cuda-rhel8.repo

LABEL org.opencontainers.image.description="manylinux_2_28 + CUDA ${CUDA_VERSION} + gcc-toolset-${GCC_TOOLSET} + cuDNN + ccache (cibuildwheel build image)"

# NVIDIA's RHEL 8 repository serves AlmaLinux 8 (manylinux_2_28's base); EPEL has ccache.
RUN dnf install -y -q dnf-plugins-core epel-release \
 && dnf config-manager --add-repo "${CUDA_REPO}" \
 && dnf install -y -q \
      "cuda-compiler-${CUDA_PKG}" "cuda-libraries-devel-${CUDA_PKG}" "cuda-cudart-devel-${CUDA_PKG}" \
      "gcc-toolset-${GCC_TOOLSET}-gcc" "gcc-toolset-${GCC_TOOLSET}-gcc-c++" \
      "${CUDNN_PKG}" ccache \
 && dnf clean all \
 && rm -rf /var/cache/dnf

# gcc-toolset-N before the image's default toolset, for the build and for nvcc's host compiler.
ENV CUDA_HOME=/usr/local/cuda \
    CUDAHOSTCXX=/opt/rh/gcc-toolset-${GCC_TOOLSET}/root/usr/bin/g++ \
    CC=/opt/rh/gcc-toolset-${GCC_TOOLSET}/root/usr/bin/gcc \
    CXX=/opt/rh/gcc-toolset-${GCC_TOOLSET}/root/usr/bin/g++ \
    PATH=/usr/local/cuda/bin:/opt/rh/gcc-toolset-${GCC_TOOLSET}/root/usr/bin:${PATH} \
    CCACHE_DIR=/ccache

# Fail the image build, not a wheel build later, when the toolkit or compiler is not what was asked for
# (ameli/manylinux-cuda#8: an image once shipped the wrong CUDA).
RUN nvcc --version | grep -q "release ${CUDA_VERSION%.*}," \
 && test "$(g++ -dumpversion | cut -d. -f1)" = "${GCC_TOOLSET}" \
 && ldconfig -p | grep -q "libcudnn.so.9 " \
 && ccache --version >/dev/null
