#!/bin/sh
# The build's compile cache is ccache (with the host's cache mounted): take it from the image or its
# package manager, else install a pass-through shim, so a missing ccache never breaks a build. Then the
# one-word CXX a setuptools build compiles C++ through (wheelci.compile.launch): ccache, then c++, in
# the directory $1 (default: where wheelci.cibw.CONTAINER_CXX names it).
set -e
shims="${1:-/usr/local/lib/wheelci-ccache}"
command -v ccache >/dev/null || yum install -y -q ccache 2>/dev/null || dnf install -y -q ccache 2>/dev/null || {
  printf '#!/bin/sh\nexec "$@"\n' > /usr/local/bin/ccache && chmod +x /usr/local/bin/ccache
}
mkdir -p "$shims"
printf '#!/bin/sh\nexec ccache c++ "$@"\n' > "$shims/c++"
chmod +x "$shims/c++"
