"""The compile stage's two engines: the host toolchain and cibuildwheel in containers."""
