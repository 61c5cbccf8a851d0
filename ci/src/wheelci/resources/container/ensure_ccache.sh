#!/bin/sh
# The build's compile cache is ccache (with the host's cache mounted): take it from the image or its
# package manager, else install a pass-through shim, so a missing ccache never breaks a build. With a
# directory ($1), also the one-word cache the compilers go through there (wheelci.cibw.CONTAINER_LAUNCHER:
# ccache, which sccache_server.py turns to sccache when a remote store answers; nvcc-cache, nvcc's, alike) and the one-word CXX a
# setuptools build compiles C++ through (wheelci.compile.launch, wheelci.cibw.CONTAINER_CXX): the cache, then c++.
command -v ccache >/dev/null || yum install -y -q ccache 2>/dev/null || dnf install -y -q ccache 2>/dev/null \
  || { printf '#!/bin/sh\nexec "$@"\n' > /usr/local/bin/ccache && chmod +x /usr/local/bin/ccache; } \
  || { echo "build image has no ccache, and a pass-through one cannot be written to /usr/local/bin"; exit 1; }
[ -z "$1" ] && exit 0
mkdir -p "$1" && printf '#!/bin/sh\nexec ccache "$@"\n' > "$1/cache" && chmod +x "$1/cache" \
  && cp "$1/cache" "$1/nvcc-cache" \
  && printf '#!/bin/sh\nexec %s c++ "$@"\n' "$1/cache" > "$1/c++" && chmod +x "$1/c++" \
  || { echo "cannot write the compiler scripts $1/cache, $1/nvcc-cache and $1/c++"; exit 1; }
