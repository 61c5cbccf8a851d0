/* Shadows glibc's <sys/single_threaded.h> (2.32+) for host builds (see ../glibc_compat.h).
 * libstdc++ reads __libc_single_threaded to skip atomics in reference counts when a process has one
 * thread; a constant "not single-threaded" keeps the atomics, which are always correct, and leaves no
 * reference to a glibc 2.32 symbol. A definition, not a macro: nvcc compiles its preprocessed output
 * again, which must stay valid C++. */
#ifndef CI_GLIBC_COMPAT_SINGLE_THREADED
#define CI_GLIBC_COMPAT_SINGLE_THREADED
static const char __libc_single_threaded = 0;
#endif
