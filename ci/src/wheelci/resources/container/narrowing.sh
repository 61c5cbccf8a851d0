#!/bin/sh
# --arch-list's nvcc for a setuptools build in the container: `narrowing.sh VIEW ARCH_LIST [LAUNCHER]` makes VIEW
# a CUDA root of links to the image's, whose bin/nvcc runs resources/nvcc_targets.py (then LAUNCHER, then the
# image's nvcc). cpp_extension's one-file path runs CUDA_HOME's nvcc, so CUDA_HOME is pointed here
# (wheelci.cibw.environment); its ninja path gets the same chain as PYTORCH_NVCC.
set -e
view=$1 arch=$2 launcher=${3:-}
cuda=/usr/local/cuda
narrow=/opt/cuda-wheel-ci/wheelci/resources/nvcc_targets.py
mkdir -p "$view/bin"
for entry in "$cuda"/*; do [ "${entry##*/}" = bin ] || ln -sfn "$entry" "$view/${entry##*/}"; done
for entry in "$cuda"/bin/*; do [ "${entry##*/}" = nvcc ] || ln -sfn "$entry" "$view/bin/${entry##*/}"; done
rm -f "$view/bin/nvcc"
printf '#!/bin/sh\nexec python -I -S %s %s -- %s %s/bin/nvcc "$@"\n' "$narrow" "$arch" "$launcher" "$cuda" > "$view/bin/nvcc"
chmod 755 "$view/bin/nvcc"
# ccache knows a compiler by its size and mtime (torch's own wrapper puts ccache in front of CUDA_HOME's nvcc):
# the mtime is made from the script's text and the nvcc it runs, so a new container's script is the same compiler
sum=$({ cat "$view/bin/nvcc"; stat -L -c '%s %Y' "$cuda/bin/nvcc"; } | cksum | cut -d' ' -f1)
touch -d "@$((946684800 + sum % 100000000))" "$view/bin/nvcc"
