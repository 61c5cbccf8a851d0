#!/bin/sh
# Before any wheel is built in a CUDA image (cibuildwheel's before-all, run from the read-only mount of
# ci/): the image must hold the toolkit the plan names, and a GCC that toolkit's nvcc accepts. Images
# drift (ameli/manylinux-cuda#8 once shipped the wrong CUDA; a base image's default toolset moves), and
# failing here is one clear line instead of an error deep inside nvcc.
#
# usage: check_image.sh CUDA GCC_MAX     e.g. check_image.sh 12.9 14
set -u
cuda=$1
gcc_max=$2
# the image's toolkit (wheelci.cibw.CONTAINER_CUDA_HOME), not $CUDA_HOME: with --arch-list that names the
# narrowing root a later before-all step makes (narrowing.sh)
nvcc=/usr/local/cuda/bin/nvcc
cxx=${CUDAHOSTCXX:-g++}

if ! "$nvcc" --version 2>/dev/null | grep -qF "release $cuda,"; then
    echo "build image does not have CUDA $cuda:"
    "$nvcc" --version 2>&1 || true
    exit 1
fi
gcc=$("$cxx" -dumpversion 2>/dev/null | cut -d. -f1)
case $gcc in
    '' | *[!0-9]*)
        echo "build image has no working host compiler ($cxx -dumpversion gave '${gcc}')"
        exit 1 ;;
esac
if [ "$gcc" -gt "$gcc_max" ]; then
    echo "build image GCC $gcc is above what nvcc $cuda accepts ($gcc_max)"
    exit 1
fi
